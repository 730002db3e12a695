//! Noticing that the policy file (or a base file it `extends`) changed, by polling its metadata once a
//! second: no inotify dependency, and it works for Kubernetes ConfigMap
//! volumes, whose updates swap a symlink (an inotify watch on the old file
//! would miss them; `metadata` follows the link). See inotify(7) on why
//! symlink swaps are easy to miss.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What identifies one version of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode: meta.ino(),
    })
}

/// Remembers the version in force and the one seen on the last poll.
pub(crate) struct FileWatch {
    path: PathBuf,
    in_force: Option<Stamp>,
    last_seen: Option<Stamp>,
}

impl FileWatch {
    pub(crate) fn new(path: &Path) -> Self {
        let now = stamp(path);
        Self {
            path: path.to_owned(),
            in_force: now.clone(),
            last_seen: now,
        }
    }

    /// True when the file differs from the version in force and has not
    /// changed since the previous call. A vanished file is not a change: the
    /// policy in force stays until a new file appears.
    pub(crate) fn changed(&mut self) -> bool {
        let now = stamp(&self.path);
        let settled = now.is_some() && now == self.last_seen;
        self.last_seen = now.clone();
        if !settled || now == self.in_force {
            return false;
        }
        self.in_force = now;
        true
    }
}

/// Watches every file of a layered policy: the top file and each base it
/// extends. The set follows the policy in force (`follow`), so a base added
/// to `extends` is watched once the reload that added it succeeded.
pub(crate) struct ChainWatch {
    files: Vec<FileWatch>,
}

impl ChainWatch {
    pub(crate) fn new(paths: &[PathBuf]) -> Self {
        Self {
            files: paths.iter().map(|p| FileWatch::new(p)).collect(),
        }
    }

    /// True when any file changed (see [`FileWatch::changed`]). Polls every
    /// file, so that each one's stamps stay current.
    pub(crate) fn changed(&mut self) -> bool {
        self.files
            .iter_mut()
            .fold(false, |any, file| file.changed() | any)
    }

    /// Watch exactly `paths` from now on, keeping what is known about files
    /// already watched (a new file is taken as in force as it is now).
    pub(crate) fn follow(&mut self, paths: &[PathBuf]) {
        let mut old = std::mem::take(&mut self.files);
        self.files = paths
            .iter()
            .map(|path| match old.iter().position(|f| &f.path == path) {
                Some(i) => old.swap_remove(i),
                None => FileWatch::new(path),
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_to_any_file_of_the_chain_is_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("policy.toml");
        let base = dir.path().join("base.toml");
        std::fs::write(&top, "a").unwrap();
        std::fs::write(&base, "b").unwrap();
        let mut watch = ChainWatch::new(&[base.clone(), top.clone()]);
        assert!(!watch.changed());
        std::fs::write(&base, "bb").unwrap();
        assert!(!watch.changed(), "reloaded before the file settled");
        assert!(watch.changed());
        assert!(!watch.changed());
        let other = dir.path().join("other.toml");
        std::fs::write(&other, "o").unwrap();
        watch.follow(&[other.clone(), top.clone()]);
        std::fs::write(&base, "bbb").unwrap();
        assert!(!watch.changed());
        assert!(
            !watch.changed(),
            "a file no longer in the chain is not watched"
        );
        std::fs::write(&other, "oo").unwrap();
        assert!(!watch.changed());
        assert!(watch.changed());
    }

    #[test]
    fn a_settled_rewrite_is_a_change_and_a_missing_file_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, "a").unwrap();
        let mut watch = FileWatch::new(&path);
        assert!(!watch.changed());
        std::fs::write(&path, "bb").unwrap();
        assert!(!watch.changed(), "reloaded before the file settled");
        assert!(watch.changed());
        assert!(!watch.changed());
        std::fs::remove_file(&path).unwrap();
        assert!(!watch.changed());
        assert!(!watch.changed());
        std::fs::write(&path, "ccc").unwrap();
        assert!(!watch.changed());
        assert!(watch.changed());
    }

    #[test]
    fn a_file_caught_between_truncate_and_write_is_not_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, "version = 1").unwrap();
        let mut watch = FileWatch::new(&path);
        // Truncated (as by `>`), polled, then written: only the final
        // version, once settled, is a change.
        std::fs::write(&path, "").unwrap();
        assert!(!watch.changed());
        std::fs::write(&path, "version = 1\ndefault = \"allow\"").unwrap();
        assert!(!watch.changed());
        assert!(watch.changed());
    }
}
