//! What a file that existed before the session held before the session
//! changed it: taken once per inode, at the seccomp stop of the first call
//! about to change it (a write-open, a truncate, either end of a rename, an
//! unlink, a chmod, a link), while the caller waits and before the kernel
//! runs the call. So every modification has a real before, and undo knows
//! what to put back.
//!
//! Nothing is scanned at the start: a workspace of any size costs nothing
//! until the session touches a file, and then one capture of that file.
//! A directory about to be renamed is the one exception: everything below
//! it is taken at once (its names are about to change, and undo needs what
//! each one held under its old name).
//!
//! An inode the session created (an open that created it, mkdir, symlink)
//! has no original. One opened for writing whose original was not taken
//! at the entry (a sibling thread changed the path string between our read
//! and the kernel's) is recorded as missed, with no hash: undo then refuses
//! it by name rather than guess. A regular file made by mknod(2), which the
//! filter does not stop at, would be taken as an original when first
//! written (empty).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

use nix::fcntl::{OFlag, readlinkat};

use super::files::{FileKey, FileRecord};
use super::reconcile::open_at;
use super::{acl, name, xattrs};
use crate::capture::{self, Captured};
use airlock_record::Xattr;

use crate::observation::{ExecSeq, FileOp};

/// What a call about to change files named, for their originals.
#[derive(Debug)]
pub(super) enum Original {
    /// An object we already hold a handle of (O_PATH, not following a
    /// final symlink), with its name in the sandbox.
    Handle { path: Vec<u8>, file: File },
    /// An object to look up by its name in the sandbox (no symlink
    /// followed); with `tree`, a directory's whole subtree too.
    Named { path: Vec<u8>, tree: bool },
}

#[derive(Debug, Default)]
pub(super) struct Originals {
    /// Inodes whose original is on record (or recorded as missed).
    kept: HashSet<FileKey>,
    /// Inodes the session created: they have no original.
    created: HashSet<FileKey>,
}

fn key_of(meta: &std::fs::Metadata) -> FileKey {
    (meta.dev(), meta.ino())
}

/// `path` as the record names it: a directory's ends in '/'.
fn named(path: &[u8], is_dir: bool) -> Vec<u8> {
    match is_dir {
        true => name::dir_form(path),
        false => name::trim_slashes(path).to_vec(),
    }
}

impl Originals {
    /// Is the original of this inode still to be taken?
    pub(super) fn wanted(&self, key: FileKey) -> bool {
        !self.kept.contains(&key) && !self.created.contains(&key)
    }

    /// The session made this inode.
    pub(super) fn created(&mut self, key: FileKey) {
        self.created.insert(key);
    }

    /// The records of what `handle` (O_PATH, a final symlink not followed),
    /// named `path`, holds now, if its original is still to be taken: its
    /// content and mode, then each of its extended attributes (one record
    /// each, op `original` with the attribute, its value as content), so
    /// that undo can put them back too.
    pub(super) fn take(
        &mut self,
        exec: Option<ExecSeq>,
        path: &[u8],
        handle: &File,
        max_content: u64,
    ) -> Vec<FileRecord> {
        let Some(file) = self.take_file(exec, path, handle, max_content) else {
            return Vec::new();
        };
        let (named, inode) = (file.path.clone(), file.inode);
        let attributes = xattrs::all(handle)
            .into_iter()
            .map(|(name, value)| FileRecord {
                xattr: Some(Xattr {
                    acl: acl::is_acl(&name).then(|| acl::describe(&value)).flatten(),
                    name: name.into(),
                    removed: false,
                }),
                captured: capture::bytes(value, max_content),
                inode,
                ..FileRecord::now(exec, named.clone(), FileOp::Original)
            });
        std::iter::once(file).chain(attributes).collect()
    }

    fn take_file(
        &mut self,
        exec: Option<ExecSeq>,
        path: &[u8],
        handle: &File,
        max_content: u64,
    ) -> Option<FileRecord> {
        let meta = handle.metadata().ok()?;
        let key = key_of(&meta);
        if !self.wanted(key) {
            return None;
        }
        self.kept.insert(key);
        let ft = meta.file_type();
        let captured = if ft.is_file() {
            capture::capture(handle, max_content)
        } else if ft.is_symlink() {
            // readlinkat(2) with an empty path reads the link an O_PATH
            // descriptor names.
            let target = readlinkat(handle.as_fd(), OsStr::new("")).ok()?;
            let target = target.as_bytes().to_vec();
            Captured {
                size: Some(target.len() as u64),
                sha256: Some(capture::sha256_hex(&target)),
                content: (target.len() as u64 <= max_content).then_some(target),
            }
        } else {
            Captured::default()
        };
        Some(FileRecord {
            captured,
            mode: Some(meta.mode()),
            inode: Some(key),
            ..FileRecord::now(exec, named(path, ft.is_dir()), FileOp::Original)
        })
    }

    /// The originals of everything below the directory `dir` (named
    /// `path`), deepest last.
    pub(super) fn take_tree(
        &mut self,
        exec: Option<ExecSeq>,
        path: &[u8],
        dir: &File,
        max_content: u64,
    ) -> Vec<FileRecord> {
        let mut out = Vec::new();
        let Ok(root) = File::open(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
            return out;
        };
        let mut stack = vec![(root, name::trim_slashes(path).to_vec())];
        while let Some((dir, path)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let child = name::join(&path, name.as_bytes());
                let Some(handle) = open_at(&dir, &name, OFlag::O_PATH) else {
                    continue;
                };
                out.extend(self.take(exec, &child, &handle, max_content));
                if handle.metadata().is_ok_and(|m| m.is_dir())
                    && let Some(sub) = open_at(&dir, &name, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
                {
                    stack.push((sub, child));
                }
            }
        }
        out
    }

    /// `key`, opened for writing at `path`, changed without its original
    /// taken first: on record as missed (no size, no hash), once.
    pub(super) fn missed(
        &mut self,
        exec: Option<ExecSeq>,
        path: &[u8],
        key: FileKey,
    ) -> Option<FileRecord> {
        if !self.wanted(key) {
            return None;
        }
        self.kept.insert(key);
        Some(FileRecord {
            inode: Some(key),
            ..FileRecord::now(exec, path.to_vec(), FileOp::Original)
        })
    }
}
