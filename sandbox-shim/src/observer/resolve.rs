//! Resolving a path argument of a stopped tracee the way the kernel does for
//! it (path_resolution(7)), not lexically: one component at a time from its
//! own cwd, root or directory descriptor (proc_pid_cwd(5), proc_pid_root(5),
//! proc_pid_fd(5), opened from our side, which follows them as the magic
//! links they are), with `..` taken from the directory actually reached,
//! symbolic links expanded (absolute ones from the tracee's root), and
//! /proc magic links (`/proc/self/cwd`, `/dev/fd/N` -> `/proc/self/fd/N`)
//! followed to the object they stand for.
//!
//! Limit: the path string itself was read from the tracee's memory at the
//! seccomp stop; another thread of the tracee may change it before the
//! kernel reads it (seccomp_unotify(2) "Design goals" describes the same race
//! for notifications). Records that come from a descriptor the kernel
//! returned (open, exec) do not depend on this.

use nix::unistd::Pid;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;

use nix::fcntl::{AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{Mode, fstatat};

/// The most symbolic links one lookup follows (ELOOP in path_resolution(7)).
const MAX_LINKS: usize = 40;
/// procfs's magic number (statfs(2)).
const PROC_SUPER_MAGIC: i64 = 0x9fa0;
/// Inode number of a procfs root directory.
const PROC_ROOT_INO: u64 = 1;

/// The thread whose view we resolve in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Viewer {
    /// Host thread and process ids (for /proc/<tid>/...).
    pub tid: Pid,
    pub tgid: Pid,
}

impl Viewer {
    /// Its id in its own PID namespace (what `self` and `thread-self` mean
    /// in the sandbox's /proc): the last NSpid field (proc_pid_status(5)).
    fn ns_id(pid: Pid) -> Option<i32> {
        crate::procfs::status(pid).map(|s| s.ns_pid)
    }
}

/// Where a path leads: the directory holding the last component, and that
/// component; with `name` empty, `parent` is the object itself (a path that
/// ends in `.`, `..` or a followed magic link).
#[derive(Debug)]
pub(super) struct Resolved {
    pub parent: File,
    pub name: Vec<u8>,
    /// The full path in the sandbox (the kernel's name for `parent`, plus `name`).
    pub path: Vec<u8>,
}

impl Resolved {
    /// O_PATH handle of the object itself (the symlink itself when the last
    /// component is one).
    pub(super) fn open(&self) -> Option<File> {
        if self.name.is_empty() {
            return self.parent.try_clone().ok();
        }
        open_path(&self.parent, &self.name, OFlag::O_NOFOLLOW)
    }
}

fn open_path(dir: &File, name: &[u8], extra: OFlag) -> Option<File> {
    openat(
        dir.as_fd(),
        OsStr::from_bytes(name),
        OFlag::O_PATH | OFlag::O_CLOEXEC | extra,
        Mode::empty(),
    )
    .ok()
    .map(|fd: OwnedFd| File::from(fd))
}

fn same_inode(a: &File, b: &File) -> bool {
    match (a.metadata(), b.metadata()) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

fn is_proc(dir: &File) -> bool {
    nix::sys::statfs::fstatfs(dir)
        .map(|s| s.filesystem_type().0 == PROC_SUPER_MAGIC)
        .unwrap_or(false)
}

/// The kernel's name of what `fd` refers to, as seen by its own mount
/// namespace (d_path of the descriptor, proc_pid_fd(5)).
pub(super) fn name_of(fd: &impl AsRawFd) -> Option<Vec<u8>> {
    let target = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    Some(target.into_os_string().into_vec())
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if name.is_empty() {
        dir.to_vec()
    } else {
        super::name::join(dir, name)
    }
}

fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = Vec<u8>> + '_ {
    path.split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(<[u8]>::to_vec)
}

/// A quick look at what `path` names for `viewer`, through its cwd, root or
/// directory descriptor seen as /proc magic links from our side: one
/// stat(2), for hints only (whether an open creates its file, which tracked
/// file a truncating open is about to destroy). Unlike [`resolve`], a
/// symlink met on the way with an absolute target resolves against our root.
pub(super) fn quick_stat(
    viewer: Viewer,
    dirfd: i32,
    path: &[u8],
    follow: bool,
) -> Option<std::fs::Metadata> {
    let tid = viewer.tid;
    let base = if path.starts_with(b"/") {
        format!("/proc/{tid}/root")
    } else if dirfd == libc::AT_FDCWD {
        format!("/proc/{tid}/cwd")
    } else {
        format!("/proc/{tid}/fd/{dirfd}")
    };
    let mut full = base.into_bytes();
    full.push(b'/');
    full.extend_from_slice(path);
    let full = std::path::Path::new(OsStr::from_bytes(&full));
    if follow {
        std::fs::metadata(full).ok()
    } else {
        std::fs::symlink_metadata(full).ok()
    }
}

/// Resolve `path` as `viewer` would, relative to its descriptor `dirfd`
/// (`AT_FDCWD` for its cwd). With `follow_last`, a symbolic link in the last
/// position is followed too (open(2) without O_NOFOLLOW, truncate(2),
/// chmod(2)); without it, the link itself is named (unlink(2), rename(2)).
pub(super) fn resolve(
    viewer: Viewer,
    dirfd: i32,
    path: &[u8],
    follow_last: bool,
) -> Option<Resolved> {
    let tid = viewer.tid;
    let root = File::open(format!("/proc/{tid}/root")).ok()?;
    let mut dir = if path.starts_with(b"/") {
        root.try_clone().ok()?
    } else if dirfd == libc::AT_FDCWD {
        File::open(format!("/proc/{tid}/cwd")).ok()?
    } else {
        File::open(format!("/proc/{tid}/fd/{dirfd}")).ok()?
    };
    let mut todo: Vec<Vec<u8>> = components(path).rev().collect();
    let mut links = 0;
    let mut last_name: Vec<u8> = Vec::new();
    while let Some(part) = todo.pop() {
        let is_last = todo.is_empty();
        if part == b".." {
            if !same_inode(&dir, &root) {
                dir = open_path(&dir, b"..", OFlag::O_DIRECTORY)?;
            }
            last_name.clear();
            continue;
        }
        let Some(stat) = fstatat(
            dir.as_fd(),
            OsStr::from_bytes(&part),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .ok() else {
            // Does not exist (yet): only the last component may be missing.
            if is_last {
                last_name = part;
                break;
            }
            return None;
        };
        let is_link = stat.st_mode & libc::S_IFMT == libc::S_IFLNK;
        if is_link && (!is_last || follow_last) {
            links += 1;
            if links > MAX_LINKS {
                return None;
            }
            if is_proc(&dir) {
                if let Some(expanded) = proc_self(viewer, &dir, &part) {
                    todo.extend(components(&expanded).rev());
                    continue;
                }
                let target = readlinkat(dir.as_fd(), OsStr::from_bytes(&part)).ok()?;
                let target = target.as_bytes();
                if !target.starts_with(b"/") && !target.contains(&b':') {
                    todo.extend(components(target).rev());
                    continue;
                }
                // A magic link (cwd, root, exe, fd/N): the kernel follows it
                // to the object itself, whatever its name says.
                let object = open_path(&dir, &part, OFlag::empty())?;
                if is_last {
                    return Some(Resolved {
                        path: name_of(&object)?,
                        parent: object,
                        name: Vec::new(),
                    });
                }
                dir = object;
                continue;
            }
            let target = readlinkat(dir.as_fd(), OsStr::from_bytes(&part)).ok()?;
            let target = target.as_bytes();
            if target.starts_with(b"/") {
                dir = root.try_clone().ok()?;
            }
            todo.extend(components(target).rev());
            if todo.is_empty() {
                // A link to "/" (or to "."): the directory itself.
                last_name.clear();
                break;
            }
            continue;
        }
        if is_last {
            last_name = part;
            break;
        }
        dir = open_path(&dir, &part, OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY)?;
    }
    let dir_name = name_of(&dir)?;
    Some(Resolved {
        path: join(&dir_name, &last_name),
        parent: dir,
        name: last_name,
    })
}

/// `self` and `thread-self` at the root of the sandbox's /proc mean the
/// viewer's own ids there, not ours (we are not in its PID namespace).
fn proc_self(viewer: Viewer, dir: &File, part: &[u8]) -> Option<Vec<u8>> {
    if dir.metadata().ok()?.ino() != PROC_ROOT_INO {
        return None;
    }
    let ns_tgid = Viewer::ns_id(viewer.tgid)?;
    match part {
        b"self" => Some(ns_tgid.to_string().into_bytes()),
        b"thread-self" => {
            Some(format!("{ns_tgid}/task/{}", Viewer::ns_id(viewer.tid)?).into_bytes())
        }
        _ => None,
    }
}
