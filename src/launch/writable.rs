//! What the sandbox can write (the workspace and every `--rw` grant), and
//! the refusal of a file airlock trusts at start that lies inside it: the
//! audit database, the policy and the bases it extends, and the files
//! credentials are read from. A sandbox that can rewrite its policy decides
//! its own next session (and, since the policy is watched, this one).

use std::path::{Path, PathBuf};

use airlock_policy::{Policy, TemplatePart};
use anyhow::bail;

/// The paths the sandbox can write, canonical where they exist.
pub(crate) struct Writable(Vec<PathBuf>);

impl Writable {
    pub(crate) fn new(workspace: &Path, rw: &[PathBuf]) -> Self {
        let paths = std::iter::once(workspace)
            .chain(rw.iter().map(PathBuf::as_path))
            .map(|p| p.canonicalize().unwrap_or_else(|_| p.to_owned()))
            .collect();
        Self(paths)
    }

    /// The writable path that holds `path`, if any. Both spellings count:
    /// the path as named (a symbolic link the sandbox could replace) and
    /// where it leads.
    pub(crate) fn holding(&self, path: &Path) -> Option<&Path> {
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let named = match (absolute.parent(), absolute.file_name()) {
            (Some(dir), Some(name)) => dir
                .canonicalize()
                .unwrap_or_else(|_| dir.to_owned())
                .join(name),
            _ => absolute.clone(),
        };
        let target = absolute.canonicalize().ok();
        self.0
            .iter()
            .find(|w| named.starts_with(w) || target.as_ref().is_some_and(|t| t.starts_with(w)))
            .map(PathBuf::as_path)
    }

    /// The audit database must be out of the sandbox's reach.
    pub(crate) fn refuse_audit_db(&self, db: &Path) -> anyhow::Result<()> {
        let dir = db
            .parent()
            .map(|p| p.canonicalize().unwrap_or_else(|_| p.to_owned()))
            .unwrap_or_default();
        if let Some(writable) = self.0.iter().find(|w| dir.starts_with(w)) {
            bail!(
                "the audit database {} is inside {}, which the sandbox can write (and so could move or delete the record): pass --audit-db (or set AIRLOCK_AUDIT_DB) with a path outside it",
                db.display(),
                writable.display()
            );
        }
        Ok(())
    }

    /// The policy's files and its credentials' `${file:...}` sources must be
    /// out of the sandbox's reach.
    pub(crate) fn refuse_policy(&self, policy: &Policy) -> anyhow::Result<()> {
        for file in policy.files() {
            if let Some(writable) = self.holding(Path::new(file)) {
                bail!(
                    "the policy file {} is inside {}, which the sandbox can write (and so could rewrite its own policy): move it outside (for example to ~/.config/airlock/) and name the new path in --policy (or in `extends`)",
                    shown(Path::new(file)),
                    writable.display()
                );
            }
        }
        for cred in policy.credentials() {
            for part in &cred.value.parts {
                let TemplatePart::File(file) = part else {
                    continue;
                };
                if let Some(writable) = self.holding(Path::new(file)) {
                    bail!(
                        "credential {}: its file {} is inside {}, which the sandbox can write (and so could read or replace the secret): move the file outside it and name that path in ${{file:...}}",
                        cred.name,
                        shown(Path::new(file)),
                        writable.display()
                    );
                }
            }
        }
        Ok(())
    }
}

/// A path as the user wrote it, absolute so that it is unambiguous, and
/// where it leads when that is elsewhere.
fn shown(path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    match absolute.canonicalize() {
        Ok(target) if target != absolute => {
            format!("{} (a link to {})", absolute.display(), target.display())
        }
        _ => absolute.display().to_string(),
    }
}
