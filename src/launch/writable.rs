//! What the sandbox can write (the workspace and every `--rw` grant), and
//! the refusal of a file airlock trusts at start that lies inside it: the
//! audit database, the policy and the bases it extends, and the files
//! credentials are read from. A sandbox that can rewrite its policy decides
//! its own next session (and, since the policy is watched, this one).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use airlock_policy::{Policy, TemplatePart};
use anyhow::bail;

/// The paths the sandbox can write, canonical where they exist, each with
/// the identity (device and inode) of the directory or file it names: a
/// bind mount of a directory names the same inode under another path.
pub(crate) struct Writable(Vec<(PathBuf, Option<FileId>)>);

/// A file's or directory's device and inode.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FileId(u64, u64);

impl FileId {
    fn of(path: &Path) -> Option<Self> {
        std::fs::metadata(path).ok().map(|m| Self(m.dev(), m.ino()))
    }
}

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

    /// The signing key must be out of the sandbox's reach: with it, the
    /// sandbox could sign a record of its own making.
    pub(crate) fn refuse_audit_key(&self, key: &Path) -> anyhow::Result<()> {
        match self.reach(key) {
            // Named there, its directory is hidden from the sandbox (a
            // workspace that is home holds the default key).
            Some(Reach::Named(_)) | None => Ok(()),
            Some(Reach::Leads(writable)) => bail!(
                "the audit signing key {} is inside {}, which the sandbox can write (and so could read or replace the key): pass --audit-key with a path outside it",
                shown(key),
                writable.display()
            ),
            Some(Reach::HardLinked(names)) => bail!(
                "the audit signing key {} has {names} names (hard links), and the sandbox could read it through one: pass --audit-key with a file of its own",
                shown(key)
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
