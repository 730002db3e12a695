//! A directory laid out and updated as the kubelet lays out and updates a
//! ConfigMap volume (its `AtomicWriter`, pkg/volume/util/atomic_writer.go):
//! each version in a hidden timestamped directory, `..data` a symlink to
//! the current one, each key a symlink through `..data`. An update writes
//! the new version beside the old, points a fresh `..data_tmp` at it and
//! renames that over `..data` (one atomic step), then removes the old
//! version. A reader of `KEY` sees the old file or the new one, never a
//! mix, and its inode changes at the swap while `KEY` itself is untouched.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// One ConfigMap volume's directory.
#[derive(Debug)]
pub struct ConfigMapDir {
    dir: PathBuf,
    versions: AtomicU32,
}

impl ConfigMapDir {
    /// Lays out `data` (key, content) in `dir` (created), as the kubelet
    /// does when the pod starts.
    pub fn new(dir: &Path, data: &[(&str, &str)]) -> Self {
        std::fs::create_dir_all(dir).expect("the ConfigMap's directory");
        let volume = Self {
            dir: dir.to_owned(),
            versions: AtomicU32::new(0),
        };
        let version = volume.write_version(data);
        symlink(&version, dir.join("..data")).expect("..data");
        for (key, _) in data {
            symlink(Path::new("..data").join(key), dir.join(key)).expect("the key's link");
        }
        volume
    }

    /// The path the pod reads `key` at.
    pub fn path(&self, key: &str) -> PathBuf {
        self.dir.join(key)
    }

    /// The directory the volume is mounted from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Swaps in `data` (the same keys) as the kubelet does after
    /// `kubectl apply` of a changed ConfigMap.
    pub fn update(&self, data: &[(&str, &str)]) {
        let old = std::fs::read_link(self.dir.join("..data")).expect("..data is a link");
        let version = self.write_version(data);
        let tmp = self.dir.join("..data_tmp");
        symlink(&version, &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("the swap of ..data");
        std::fs::remove_dir_all(self.dir.join(old)).expect("the old version removed");
    }

    /// A new timestamped version directory holding `data`; its name,
    /// relative to the volume (as the kubelet's links are).
    fn write_version(&self, data: &[(&str, &str)]) -> PathBuf {
        let n = self.versions.fetch_add(1, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let name = PathBuf::from(format!("..{}.{:09}_{n}", now.as_secs(), now.subsec_nanos()));
        let path = self.dir.join(&name);
        std::fs::create_dir(&path).expect("a version directory");
        for (key, text) in data {
            std::fs::write(path.join(key), text).expect("a key's file");
        }
        name
    }
}
