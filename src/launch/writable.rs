//! What the sandbox can write (the workspace and every `--rw` grant), and
//! the refusal of a file airlock trusts at start that lies inside it: the
//! audit database, the policy and the bases it extends, and the files
//! credentials are read from. A sandbox that can rewrite its policy decides
//! its own next session (and, since the policy is watched, this one).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use airlock_policy::{Policy, TemplatePart};
use airlock_shim::FileId;
use anyhow::bail;

/// The paths the sandbox can write, canonical where they exist, each with
/// the identity (device and inode) of the directory or file it names: a
/// bind mount of a directory names the same inode under another path.
pub(crate) struct Writable(Vec<(PathBuf, Option<FileId>)>);

/// How the sandbox could reach a file airlock trusts.
pub(crate) enum Reach<'a> {
    /// The path as named is in this writable path.
    Named(&'a Path),
    /// Where it leads is: a link's target, or a directory on the way that
    /// is this writable path under another name (a bind mount). Hiding
    /// the named path's directory would not cover it.
    Leads(&'a Path),
    /// The file has this many names, and any other could be in a writable
    /// path: finding them would mean searching every filesystem.
    HardLinked(u64),
}

impl Writable {
    pub(crate) fn new(workspace: &Path, rw: &[PathBuf]) -> Self {
        let paths = std::iter::once(workspace)
            .chain(rw.iter().map(PathBuf::as_path))
            .map(|p| {
                let path = p.canonicalize().unwrap_or_else(|_| p.to_owned());
                let id = FileId::of(&path);
                (path, id)
            })
            .collect();
        Self(paths)
    }

    /// How the sandbox could reach `path`, if it could. Every spelling
    /// counts: the path as named (a symbolic link the sandbox could
    /// replace), where it leads, any directory on the way that is a
    /// writable path under another name (a bind mount), and other names of
    /// the same file (hard links).
    pub(crate) fn reach(&self, path: &Path) -> Option<Reach<'_>> {
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let named = match (absolute.parent(), absolute.file_name()) {
            (Some(dir), Some(name)) => dir
                .canonicalize()
                .unwrap_or_else(|_| dir.to_owned())
                .join(name),
            _ => absolute.clone(),
        };
        let target = absolute
            .canonicalize()
            .ok()
            .or_else(|| dangling_target(&absolute))
            .unwrap_or_else(|| named.clone());
        let inside = |p: &Path| self.0.iter().find(|(w, _)| p.starts_with(w));
        if target != named
            && let Some((writable, _)) = inside(&target)
        {
            return Some(Reach::Leads(writable));
        }
        // Each directory on the way, by identity: one that is a writable
        // path under another name.
        for ancestor in target.ancestors() {
            let Some(id) = FileId::of(ancestor) else {
                continue;
            };
            if let Some((writable, _)) = self
                .0
                .iter()
                .find(|(w, wid)| *wid == Some(id) && w.as_path() != ancestor)
            {
                return Some(Reach::Leads(writable));
            }
        }
        if let Ok(m) = std::fs::metadata(&target)
            && m.is_file()
            && m.nlink() > 1
        {
            return Some(Reach::HardLinked(m.nlink()));
        }
        inside(&named).map(|(writable, _)| Reach::Named(writable))
    }

    /// The audit database must be out of the sandbox's reach: it could move
    /// or delete the record.
    pub(crate) fn refuse_audit_db(&self, db: &Path) -> anyhow::Result<()> {
        match self.reach(db) {
            Some(Reach::Named(writable) | Reach::Leads(writable)) => bail!(
                "the audit database {} is inside {}, which the sandbox can write (and so could move or delete the record): pass --audit-db (or set AIRLOCK_AUDIT_DB) with a path outside it",
                shown(db),
                writable.display()
            ),
            Some(Reach::HardLinked(names)) => bail!(
                "the audit database {} has {names} names (hard links), and the sandbox could write it through one: pass --audit-db (or set AIRLOCK_AUDIT_DB) with a file of its own",
                shown(db)
            ),
            None => Ok(()),
        }
    }

    /// A secret airlock reads at start (the signing key, the CA's private
    /// key, the central store's password) must be out of the sandbox's
    /// reach: with the first it could sign a record of its own making, with
    /// the second impersonate any host to whatever trusts the CA, with the
    /// third rewrite the fleet's record. Named inside a writable path it is
    /// hidden with its directory (a workspace that is home holds the
    /// default key); reached another way, no hide covers it.
    pub(crate) fn refuse_secret_file(&self, file: &Path, secret: SecretFile) -> anyhow::Result<()> {
        let SecretFile { what, outside, own } = secret;
        match self.reach(file) {
            Some(Reach::Named(_)) | None => Ok(()),
            Some(Reach::Leads(writable)) => bail!(
                "{what} {} is inside {}, which the sandbox can write (and so could read or replace it): {outside}",
                shown(file),
                writable.display()
            ),
            Some(Reach::HardLinked(names)) => bail!(
                "{what} {} has {names} names (hard links), and the sandbox could read it through one: {own}",
                shown(file)
            ),
        }
    }

    /// The policy's files and its credentials' `${file:...}` sources must be
    /// out of the sandbox's reach.
    pub(crate) fn refuse_policy(&self, policy: &Policy) -> anyhow::Result<()> {
        for file in policy.files() {
            match self.reach(Path::new(file)) {
                Some(Reach::Named(writable) | Reach::Leads(writable)) => bail!(
                    "the policy file {} is inside {}, which the sandbox can write (and so could rewrite its own policy): move it outside (for example to ~/.config/airlock/) and name the new path in --policy (or in `extends`)",
                    shown(Path::new(file)),
                    writable.display()
                ),
                Some(Reach::HardLinked(names)) => bail!(
                    "the policy file {} has {names} names (hard links), and the sandbox could rewrite it through one: copy it to a file of its own and name that in --policy (or in `extends`)",
                    shown(Path::new(file))
                ),
                None => {}
            }
        }
        for cred in policy.credentials() {
            for part in &cred.value.parts {
                let TemplatePart::File(file) = part else {
                    continue;
                };
                match self.reach(Path::new(file)) {
                    Some(Reach::Named(writable) | Reach::Leads(writable)) => bail!(
                        "credential {}: its file {} is inside {}, which the sandbox can write (and so could read or replace the secret): move the file outside it and name that path in ${{file:...}}",
                        cred.name,
                        shown(Path::new(file)),
                        writable.display()
                    ),
                    Some(Reach::HardLinked(names)) => bail!(
                        "credential {}: its file {} has {names} names (hard links), and the sandbox could read it through one: copy it to a file of its own and name that path in ${{file:...}}",
                        cred.name,
                        shown(Path::new(file))
                    ),
                    None => {}
                }
            }
        }
        Ok(())
    }
}

/// A secret file airlock reads at start, named for its refusal.
pub(crate) struct SecretFile {
    /// What it is.
    pub what: &'static str,
    /// The fix for one inside a writable path.
    pub outside: &'static str,
    /// The fix for one with other names.
    pub own: &'static str,
}

impl SecretFile {
    pub(crate) const AUDIT_KEY: Self = Self {
        what: "the audit signing key",
        outside: "pass --audit-key with a path outside it",
        own: "pass --audit-key with a file of its own",
    };
    pub(crate) const CA_KEY: Self = Self {
        what: "the CA's private key",
        outside: "make a CA outside it (`airlock ca init --dir DIR`) and pass --ca-dir DIR",
        own: "make a CA of its own (`airlock ca init --dir DIR`) and pass --ca-dir DIR",
    };
    pub(crate) const STORE_PASSWORD: Self = Self {
        what: "the central audit store's password file",
        outside: "name a file outside it in AIRLOCK_AUDIT_DB_PASSWORD_FILE",
        own: "copy it to a file of its own and name that in AIRLOCK_AUDIT_DB_PASSWORD_FILE",
    };
}

/// Where a link that leads to nothing yet would have its file made (SQLite
/// and the key loader create the file a dangling link names), its
/// directory canonical; None when `path` is no link.
fn dangling_target(path: &Path) -> Option<PathBuf> {
    let mut at = path.to_owned();
    // The kernel's own limit on links followed in one lookup.
    for _ in 0..40 {
        let Ok(next) = std::fs::read_link(&at) else {
            break;
        };
        at = at.parent().unwrap_or(Path::new("/")).join(next);
    }
    if at == path {
        return None;
    }
    let name = at.file_name()?;
    Some(
        at.parent()?
            .canonicalize()
            .map_or(at.clone(), |dir| dir.join(name)),
    )
}

/// A path as the user wrote it, absolute so that it is unambiguous, and
/// where it leads when that is elsewhere.
fn shown(path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    match absolute
        .canonicalize()
        .ok()
        .or_else(|| dangling_target(&absolute))
    {
        Some(target) if target != absolute => {
            format!("{} (a link to {})", absolute.display(), target.display())
        }
        _ => absolute.display().to_string(),
    }
}
