//! The end-of-session backstop: once every process of the sandbox is gone,
//! walk every writable mount and compare what is on disk with what the
//! record says. A file whose ctime is later than the session's start
//! changed during the session (ctime is the one inode time a program cannot
//! set, see inode(7)); unless the record already holds exactly its content,
//! it is recorded now with its final content and mode. Its mode and its
//! extended attributes are compared too: a mode other than the last one on
//! record is recorded as a chmod, each attribute the record does not hold
//! with that value as an xattr record (and one on record that is gone as
//! removed). A changed directory's attributes are compared the same way
//! (its mode only when the record has one: a directory's ctime also moves
//! when an entry is added). A recorded file that is gone is recorded as
//! deleted. So the end state is complete whatever path the
//! writes took (an mmap, a descriptor passed over a socket, a syscall the
//! filter does not stop at); the per-syscall records still say who wrote
//! what, and when.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::{OFlag, openat, readlinkat};
use nix::sys::stat::Mode;

use super::files::FileRecord;
use super::name;
use super::view::{Known, View};
use super::writable::{Mounts, is_under};
use super::xattrs::{self, MODE_BITS};
use crate::capture::{self, Captured};
use crate::observation::FileOp;

fn ctime(meta: &std::fs::Metadata) -> SystemTime {
    let secs = u64::try_from(meta.ctime()).unwrap_or(0);
    let nanos = u32::try_from(meta.ctime_nsec()).unwrap_or(0);
    UNIX_EPOCH + Duration::new(secs, nanos)
}

/// `name` in `dir`, never through a symlink.
pub(super) fn open_at(dir: &File, name: &OsStr, flags: OFlag) -> Option<File> {
    openat(
        dir.as_fd(),
        name,
        flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()
    .map(|fd: OwnedFd| File::from(fd))
}

struct Walk<'a> {
    since: SystemTime,
    view: &'a View,
    max_content: u64,
    seen: HashSet<Vec<u8>>,
    out: Vec<FileRecord>,
}

impl Walk<'_> {
    fn entry(&mut self, dir: &File, name: &OsStr, path: Vec<u8>, meta: &std::fs::Metadata) {
        let changed = ctime(meta) >= self.since;
        let recorded = self.view.get(&path);
        self.seen.insert(path.clone());
        if !changed {
            return;
        }
        let ft = meta.file_type();
        let captured = if ft.is_file() {
            match open_at(dir, name, OFlag::O_PATH) {
                Some(h) => capture::capture(&h, self.max_content),
                None => return,
            }
        } else if ft.is_symlink() {
            match readlinkat(dir.as_fd(), name) {
                Ok(target) => Captured {
                    size: Some(target.as_bytes().len() as u64),
                    content: Some(target.as_bytes().to_vec()),
                    sha256: None,
                },
                Err(_) => return,
            }
        } else {
            // A FIFO, socket or device node: only that it exists.
            Captured {
                size: None,
                ..Captured::default()
            }
        };
        let known = recorded.cloned().unwrap_or_default();
        let same = match &known.content {
            Some(hash) => ft.is_file() && *hash == captured.sha256 || !ft.is_file(),
            None => false,
        };
        let mode = meta.mode() & MODE_BITS;
        if !same {
            let op = if recorded.is_some() {
                FileOp::Modify
            } else {
                FileOp::Create
            };
            self.out.push(FileRecord {
                captured,
                inode: Some((meta.dev(), meta.ino())),
                // A symlink's own mode means nothing (symlink(7)).
                mode: (!ft.is_symlink()).then_some(mode),
                reconciled: true,
                ..FileRecord::now(None, path.clone(), op)
            });
        } else if !ft.is_symlink() && known.mode.is_some_and(|m| m != mode) {
            self.chmod(&path, meta);
        }
        if let Some(obj) = open_at(dir, name, OFlag::O_PATH) {
            self.xattrs(&obj, path, meta, &known);
        }
    }

    /// A directory that changed: its attributes against the record's.
    fn directory(&mut self, obj: &File, path: Vec<u8>, meta: &std::fs::Metadata) {
        if ctime(meta) < self.since {
            return;
        }
        let known = self.view.get(&path).cloned().unwrap_or_default();
        if known.mode.is_some_and(|m| m != meta.mode() & MODE_BITS) {
            self.chmod(&path, meta);
        }
        self.xattrs(obj, path, meta, &known);
    }

    fn chmod(&mut self, path: &[u8], meta: &std::fs::Metadata) {
        self.out.push(FileRecord {
            mode: Some(meta.mode() & MODE_BITS),
            inode: Some((meta.dev(), meta.ino())),
            reconciled: true,
            ..FileRecord::now(None, path.to_vec(), FileOp::Chmod)
        });
    }

    /// Each attribute on disk that the record does not hold with that
    /// value, and each recorded one that is gone.
    fn xattrs(&mut self, obj: &File, path: Vec<u8>, meta: &std::fs::Metadata, known: &Known) {
        let on_disk = xattrs::all(obj);
        let mut found = Vec::new();
        for (name, value) in on_disk.iter() {
            let sha = Some(capture::sha256(value));
            if known.xattrs.get(name) != Some(&sha) {
                found.push((name.clone(), Some(value.clone())));
            }
        }
        for (name, value) in &known.xattrs {
            if value.is_some() && !on_disk.contains_key(name) {
                found.push((name.clone(), None));
            }
        }
        for (name, now) in found {
            let record = xattrs::described(None, path.clone(), meta, name, now, self.max_content);
            self.out.push(FileRecord {
                reconciled: true,
                ..record
            });
        }
    }
}

/// Findings of the reconcile of every writable mount, in path order.
pub(super) fn run(
    mounts: &Mounts,
    since: SystemTime,
    view: &View,
    max_content: u64,
) -> Vec<FileRecord> {
    let mut walk = Walk {
        since,
        view,
        max_content,
        seen: HashSet::new(),
        out: Vec::new(),
    };
    let mut walked: Vec<&[u8]> = Vec::new();
    for mount in mounts.iter() {
        let covered: Vec<&[u8]> = mounts.covered_below(&mount.point).collect();
        let Ok(root) = File::open(format!("/proc/self/fd/{}", mount.root.as_raw_fd())) else {
            continue;
        };
        walked.push(&mount.point);
        let mut stack = vec![(root, mount.point.clone())];
        while let Some((dir, path)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let child = name::join(&path, name.as_bytes());
                if covered.iter().any(|c| is_under(&child, c)) {
                    continue;
                }
                let Ok(meta) = entry.metadata() else { continue };
                if meta.is_dir() {
                    if let Some(sub) = open_at(&dir, &name, OFlag::O_RDONLY | OFlag::O_DIRECTORY) {
                        walk.seen.insert(name::dir_form(&child));
                        walk.directory(&sub, name::dir_form(&child), &meta);
                        stack.push((sub, child));
                    }
                    continue;
                }
                walk.entry(&dir, &name, child, &meta);
            }
        }
    }
    let mut out = std::mem::take(&mut walk.out);
    // Recorded, under a walked mount, and gone.
    let mut gone: Vec<&Vec<u8>> = view
        .paths()
        .filter(|p| !walk.seen.contains(*p))
        .filter(|p| {
            let plain = name::trim_slashes(p);
            mounts
                .find(plain)
                .is_some_and(|(m, _)| walked.contains(&m.point.as_slice()) && plain != m.point)
        })
        .collect();
    gone.sort();
    for path in gone {
        out.push(FileRecord {
            reconciled: true,
            ..FileRecord::now(None, path.clone(), FileOp::Delete)
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}
