//! The file syscalls the seccomp filter stops at: what each one means,
//! decoded at its seccomp stop (before it runs), and what is recorded once
//! its syscall-exit stop says it succeeded. A failed syscall is not recorded.
//!
//! Opens are recorded from the descriptor the kernel returned (its
//! /proc/PID/fd link is the kernel's name for the file). The other calls
//! take paths, which are read from the tracee's memory at the seccomp stop
//! and resolved in its view by `resolve` (see there for the one race left).

use nix::unistd::Pid;
use std::fs::File;
use std::os::unix::fs::MetadataExt;

use super::files::{FileKey, FileRecord, Files, Opened};
use super::name;
use super::originals::Original;
use super::resolve::{self, Resolved, Viewer};
use super::xattrs;
use crate::observation::{ExecSeq, FileOp};
use crate::procfs;

const AT_FDCWD: i32 = libc::AT_FDCWD;

fn arg_i32(v: u64) -> i32 {
    v as u32 as i32
}

/// A traced syscall between its seccomp stop and its exit.
#[derive(Debug)]
pub(super) enum Call {
    /// open/openat/openat2/creat for writing; `existed` before it ran.
    Open {
        existed: bool,
    },
    Truncate {
        path: Resolved,
    },
    Ftruncate,
    Rename {
        from: Vec<u8>,
        to: Vec<u8>,
    },
    Delete {
        path: Vec<u8>,
        dir: bool,
    },
    Mkdir {
        path: Vec<u8>,
        mode: u32,
    },
    Link {
        from: Vec<u8>,
        to: Vec<u8>,
    },
    Symlink {
        path: Resolved,
    },
    Chmod {
        path: Vec<u8>,
        mode: u32,
    },
    Fchmod {
        fd: i32,
        mode: u32,
    },
    /// The setxattr(2) and removexattr(2) families.
    Xattr {
        target: XattrTarget,
        name: Vec<u8>,
    },
}

/// The file an xattr call is about.
#[derive(Debug)]
pub(super) enum XattrTarget {
    /// A path, resolved as the call resolves it (setxattr follows a symlink
    /// in the last position, lsetxattr and AT_SYMLINK_NOFOLLOW do not).
    Path(Resolved),
    /// A descriptor of the caller (fsetxattr, or AT_EMPTY_PATH with an
    /// empty path); `AT_FDCWD` for its working directory.
    Fd(i32),
}

/// What the seccomp stop decoded: the call, and the paths whose tracked
/// content the syscall is about to destroy or move (captured first, under
/// the name they were written as).
pub(super) struct Entry {
    pub call: Call,
    pub destroys: Vec<Vec<u8>>,
    /// The inode a truncating open is about to empty.
    pub truncates: Option<FileKey>,
    /// What the call is about to change, for the originals of files that
    /// existed before the session.
    pub originals: Vec<Original>,
}

struct Args {
    viewer: Viewer,
    args: [u64; 6],
    /// /proc/<tid>/mem, opened on first use.
    mem: std::cell::OnceCell<Option<File>>,
}

impl Args {
    fn mem(&self) -> Option<&File> {
        self.mem
            .get_or_init(|| procfs::open_mem(self.viewer.tid))
            .as_ref()
    }

    fn string(&self, i: usize) -> Option<Vec<u8>> {
        procfs::read_cstr(self.mem()?, self.args[i])
    }

    fn resolve(&self, dirfd: i32, i: usize, follow: bool) -> Option<Resolved> {
        resolve::resolve(self.viewer, dirfd, &self.string(i)?, follow)
    }

    fn path(&self, dirfd: i32, i: usize, follow: bool) -> Option<Vec<u8>> {
        self.resolve(dirfd, i, follow).map(|r| r.path)
    }

    fn dirfd(&self, i: usize) -> i32 {
        arg_i32(self.args[i])
    }

    /// An xattr call's name argument (a C string; never a path).
    fn xattr_name(&self, i: usize) -> Option<Vec<u8>> {
        self.string(i)
    }

    /// The target of setxattrat(2)/removexattrat(2): (dirfd, path, at_flags)
    /// in arguments 0 to 2. AT_EMPTY_PATH with an empty (or NULL) path
    /// names the descriptor itself.
    fn xattr_at(&self) -> Option<XattrTarget> {
        let flags = self.args[2];
        let path = if self.args[1] == 0 {
            Vec::new()
        } else {
            self.string(1)?
        };
        if path.is_empty() {
            return (flags & libc::AT_EMPTY_PATH as u64 != 0)
                .then(|| XattrTarget::Fd(self.dirfd(0)));
        }
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW as u64 == 0;
        resolve::resolve(self.viewer, self.dirfd(0), &path, follow).map(XattrTarget::Path)
    }

    fn xattr_path(&self, follow: bool) -> Option<XattrTarget> {
        self.resolve(AT_FDCWD, 0, follow).map(XattrTarget::Path)
    }
}

/// Decode the syscall `nr` that `viewer` stopped at; `tracking` says whether
/// any written file is still tracked (only then can an open destroy a
/// version not yet on record); `wanted` whether an inode's original is
/// still to be taken.
pub(super) fn entry(
    viewer: Viewer,
    nr: i64,
    args: [u64; 6],
    tracking: bool,
    wanted: &dyn Fn(FileKey) -> bool,
) -> Option<Entry> {
    let a = Args {
        viewer,
        args,
        mem: std::cell::OnceCell::new(),
    };
    let nr = nr as libc::c_long;
    // The open itself is recorded from the descriptor it returns; here only
    // hints are wanted, for one stat(2): did the file exist (create or
    // modify), which tracked inode does O_TRUNC empty, and is it a file
    // whose original is still to be taken (then, and only then, its path is
    // resolved properly, and that is what the original is read through).
    let open = |dirfd: i32, path_arg: usize, flags: u64| -> Option<Entry> {
        let trunc = flags & libc::O_TRUNC as u64 != 0;
        let creat = flags & libc::O_CREAT as u64 != 0;
        let excl = creat && flags & libc::O_EXCL as u64 != 0;
        let mut entry = Entry {
            call: Call::Open { existed: true },
            destroys: Vec::new(),
            truncates: None,
            originals: Vec::new(),
        };
        let follow = flags & (libc::O_NOFOLLOW | libc::O_EXCL) as u64 == 0;
        let path = a.string(path_arg);
        // The file itself, resolved as the kernel will for the tracee.
        let resolved = || {
            let r = resolve::resolve(viewer, dirfd, path.as_deref()?, follow)?;
            let file = r.open()?;
            Some((r.path, file))
        };
        let mut full = None;
        let mut found = path
            .as_ref()
            .and_then(|p| resolve::quick_stat(viewer, dirfd, p, follow));
        if found.is_none() && !excl {
            // The quick look resolves /proc/self and absolute symlinks in
            // our view, not the tracee's: before calling the file new or
            // missing (and without an original), ask the real resolution.
            full = resolved();
            found = full.as_ref().and_then(|(_, f)| f.metadata().ok());
        }
        if creat {
            entry.call = Call::Open {
                existed: found.is_some(),
            };
        }
        if trunc && tracking {
            entry.truncates = found.as_ref().map(|m| (m.dev(), m.ino()));
        }
        // O_EXCL never opens a file that exists.
        if !excl
            && let Some(meta) = &found
            && meta.is_file()
            && wanted((meta.dev(), meta.ino()))
            && let Some((path, file)) = full.or_else(resolved)
        {
            entry.originals.push(Original::Handle { path, file });
        }
        Some(entry)
    };
    let call = match nr {
        #[cfg(target_arch = "x86_64")]
        libc::SYS_open => return open(AT_FDCWD, 0, args[1]),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_creat => return open(AT_FDCWD, 0, (libc::O_CREAT | libc::O_TRUNC) as u64),
        libc::SYS_openat => return open(a.dirfd(0), 1, args[2]),
        libc::SYS_openat2 => {
            let flags = a
                .mem()
                .and_then(|m| procfs::read_u64(m, args[2]))
                .unwrap_or(0);
            let write = (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u64;
            if flags & write == 0 {
                return None;
            }
            return open(a.dirfd(0), 1, flags);
        }
        libc::SYS_truncate => {
            let path = a.resolve(AT_FDCWD, 0, true)?;
            let originals = path
                .open()
                .map(|file| Original::Handle {
                    path: path.path.clone(),
                    file,
                })
                .into_iter()
                .collect();
            return Some(Entry {
                destroys: vec![path.path.clone()],
                truncates: None,
                originals,
                call: Call::Truncate { path },
            });
        }
        libc::SYS_ftruncate => Call::Ftruncate,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_rename => Call::Rename {
            from: a.path(AT_FDCWD, 0, false)?,
            to: a.path(AT_FDCWD, 1, false)?,
        },
        libc::SYS_renameat | libc::SYS_renameat2 => Call::Rename {
            from: a.path(a.dirfd(0), 1, false)?,
            to: a.path(a.dirfd(2), 3, false)?,
        },
        #[cfg(target_arch = "x86_64")]
        libc::SYS_unlink => Call::Delete {
            path: a.path(AT_FDCWD, 0, false)?,
            dir: false,
        },
        #[cfg(target_arch = "x86_64")]
        libc::SYS_rmdir => Call::Delete {
            path: a.path(AT_FDCWD, 0, false)?,
            dir: true,
        },
        libc::SYS_unlinkat => Call::Delete {
            path: a.path(a.dirfd(0), 1, false)?,
            dir: args[2] & libc::AT_REMOVEDIR as u64 != 0,
        },
        #[cfg(target_arch = "x86_64")]
        libc::SYS_chmod => Call::Chmod {
            path: a.path(AT_FDCWD, 0, true)?,
            mode: args[1] as u32,
        },
        libc::SYS_fchmod => Call::Fchmod {
            fd: arg_i32(args[0]),
            mode: args[1] as u32,
        },
        libc::SYS_fchmodat | crate::seccomp::SYS_FCHMODAT2 => Call::Chmod {
            path: a.path(a.dirfd(0), 1, true)?,
            mode: args[2] as u32,
        },
        #[cfg(target_arch = "x86_64")]
        libc::SYS_mkdir => Call::Mkdir {
            path: a.path(AT_FDCWD, 0, false)?,
            mode: args[1] as u32,
        },
        libc::SYS_mkdirat => Call::Mkdir {
            path: a.path(a.dirfd(0), 1, false)?,
            mode: args[2] as u32,
        },
        #[cfg(target_arch = "x86_64")]
        libc::SYS_link => Call::Link {
            from: a.path(AT_FDCWD, 0, false)?,
            to: a.path(AT_FDCWD, 1, false)?,
        },
        libc::SYS_linkat => Call::Link {
            from: a.path(a.dirfd(0), 1, args[4] & libc::AT_SYMLINK_FOLLOW as u64 != 0)?,
            to: a.path(a.dirfd(2), 3, false)?,
        },
        #[cfg(target_arch = "x86_64")]
        libc::SYS_symlink => Call::Symlink {
            path: a.resolve(AT_FDCWD, 1, false)?,
        },
        libc::SYS_symlinkat => Call::Symlink {
            path: a.resolve(a.dirfd(1), 2, false)?,
        },
        libc::SYS_setxattr | libc::SYS_removexattr => Call::Xattr {
            target: a.xattr_path(true)?,
            name: a.xattr_name(1)?,
        },
        libc::SYS_lsetxattr | libc::SYS_lremovexattr => Call::Xattr {
            target: a.xattr_path(false)?,
            name: a.xattr_name(1)?,
        },
        libc::SYS_fsetxattr | libc::SYS_fremovexattr => Call::Xattr {
            target: XattrTarget::Fd(arg_i32(args[0])),
            name: a.xattr_name(1)?,
        },
        crate::seccomp::SYS_SETXATTRAT | crate::seccomp::SYS_REMOVEXATTRAT => Call::Xattr {
            target: a.xattr_at()?,
            name: a.xattr_name(3)?,
        },
        _ => return None,
    };
    let destroys = match &call {
        Call::Delete { path, .. } => vec![path.clone()],
        Call::Rename { from, to } => vec![from.clone(), to.clone()],
        _ => Vec::new(),
    };
    let named = |path: &Vec<u8>, tree: bool| Original::Named {
        path: path.clone(),
        tree,
    };
    let originals = match &call {
        // A directory about to move takes its subtree's originals with it.
        Call::Rename { from, to } => vec![named(from, true), named(to, false)],
        Call::Delete { path, .. } | Call::Chmod { path, .. } => vec![named(path, false)],
        Call::Link { from, .. } => vec![named(from, false)],
        Call::Ftruncate => fd_original(viewer.tid, arg_i32(args[0]))
            .into_iter()
            .collect(),
        Call::Fchmod { fd, .. } => fd_original(viewer.tid, *fd).into_iter().collect(),
        // An attribute is part of what the file held: its original first.
        Call::Xattr {
            target: XattrTarget::Path(resolved),
            ..
        } => resolved
            .open()
            .map(|file| Original::Handle {
                path: resolved.path.clone(),
                file,
            })
            .into_iter()
            .collect(),
        Call::Xattr {
            target: XattrTarget::Fd(fd),
            ..
        } if *fd != AT_FDCWD => fd_original(viewer.tid, *fd).into_iter().collect(),
        _ => Vec::new(),
    };
    Some(Entry {
        call,
        destroys,
        truncates: None,
        originals,
    })
}

/// The object descriptor `fd` of `tid` refers to, for its original.
fn fd_original(tid: Pid, fd: i32) -> Option<Original> {
    let path = procfs::fd_path(tid, fd)?;
    let file = nix::fcntl::open(
        format!("/proc/{tid}/fd/{fd}").as_str(),
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()
    .map(File::from)?;
    Some(Original::Handle { path, file })
}

/// Who made the call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Caller {
    pub tid: Pid,
    pub tgid: Pid,
    pub exec: Option<ExecSeq>,
}

/// The kernel's name for descriptor `fd` of `tid`, and our own descriptor of
/// the same inode (opening the magic link reopens the file itself).
fn fd_file(tid: Pid, fd: i64) -> Option<(Vec<u8>, Opened)> {
    let path = procfs::fd_path(tid, i32::try_from(fd).ok()?)?;
    let link = format!("/proc/{tid}/fd/{fd}");
    let opened = match File::open(&link) {
        Ok(file) => Opened {
            file,
            readable: true,
        },
        Err(_) => Opened {
            // Not readable by us: an O_PATH handle still names the inode.
            file: nix::fcntl::open(
                link.as_str(),
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .ok()
            .map(File::from)?,
            readable: false,
        },
    };
    Some((path, opened))
}

/// A chmod that succeeded: the mode the file has now (the kernel may drop
/// setgid, chmod(2)), so the record and the disk agree; a directory's path
/// ends in '/', as in its other records. The requested mode when the file
/// cannot be looked up any more.
fn chmod_record(files: &Files, exec: Option<ExecSeq>, path: Vec<u8>, asked: u32) -> FileRecord {
    let (mode, path) = match files.mode_of(&path) {
        Some((mode, true)) => (mode, name::dir_form(&path)),
        Some((mode, false)) => (mode, path),
        None => (asked, path),
    };
    FileRecord {
        mode: Some(mode),
        ..FileRecord::now(exec, path, FileOp::Chmod)
    }
}

/// The kernel's name for an xattr call's target, and an O_PATH handle of
/// the object itself (a FIFO is never opened, a symlink never followed).
fn xattr_object(tid: Pid, target: XattrTarget) -> Option<(Vec<u8>, File)> {
    match target {
        XattrTarget::Path(resolved) => {
            let obj = resolved.open()?;
            Some((resolved.path, obj))
        }
        XattrTarget::Fd(fd) => {
            let (link, path) = match fd {
                AT_FDCWD => (format!("/proc/{tid}/cwd"), procfs::cwd(tid)?),
                fd => (format!("/proc/{tid}/fd/{fd}"), procfs::fd_path(tid, fd)?),
            };
            let obj = nix::fcntl::open(
                link.as_str(),
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .ok()
            .map(File::from)?;
            Some((path, obj))
        }
    }
}

/// The call succeeded with `value`: record it.
pub(super) fn succeeded(files: &mut Files, who: Caller, call: Call, value: i64, args: [u64; 6]) {
    let exec = who.exec;
    let record = match call {
        Call::Open { existed } => {
            if let Some((path, file)) = fd_file(who.tid, value) {
                let op = if existed {
                    FileOp::Modify
                } else {
                    FileOp::Create
                };
                files.wrote(Some(who.tgid), exec, path, file, op);
            }
            return;
        }
        Call::Ftruncate => {
            if let Some((path, file)) = fd_file(who.tid, args[0] as i64) {
                files.wrote(Some(who.tgid), exec, path, file, FileOp::Truncate);
            }
            return;
        }
        Call::Truncate { path } => {
            if let Some(file) = path.open() {
                let opened = Opened {
                    file,
                    readable: false,
                };
                files.wrote(None, exec, path.path, opened, FileOp::Truncate);
            }
            return;
        }
        Call::Rename { from, to } => {
            if !files.writable(&from) && !files.writable(&to) {
                return;
            }
            files.renamed(&from, &to);
            FileRecord {
                rename_to: Some(to),
                ..FileRecord::now(exec, from, FileOp::Rename)
            }
        }
        Call::Delete { path, dir } => {
            let path = if dir { name::dir_form(&path) } else { path };
            FileRecord::now(exec, path, FileOp::Delete)
        }
        Call::Mkdir { path, mode } => {
            files.made(&path);
            FileRecord {
                // As made: the umask and the parent's default ACL apply.
                mode: Some(files.mode_of(&path).map_or(mode, |(m, _)| m)),
                ..FileRecord::now(exec, name::dir_form(&path), FileOp::Create)
            }
        }
        Call::Link { from, to } => {
            files.linked(&from, &to);
            let (captured, inode, mode) = files.capture_named(&to);
            FileRecord {
                captured,
                inode,
                mode,
                ..FileRecord::now(exec, to, FileOp::Create)
            }
        }
        Call::Symlink { path } => {
            files.made(&path.path);
            // The link as the kernel stored it, not the string we read.
            let target = nix::fcntl::readlinkat(
                std::os::fd::AsFd::as_fd(&path.parent),
                std::ffi::OsStr::from_bytes(&path.name),
            )
            .ok()
            .map(|t| std::os::unix::ffi::OsStrExt::as_bytes(t.as_os_str()).to_vec());
            FileRecord {
                captured: crate::capture::Captured {
                    size: target.as_ref().map(|t| t.len() as u64),
                    sha256: None,
                    content: target,
                },
                ..FileRecord::now(exec, path.path, FileOp::Create)
            }
        }
        Call::Chmod { path, mode } => chmod_record(files, exec, path, mode),
        Call::Fchmod { fd, mode } => {
            let Some(path) = procfs::fd_path(who.tid, fd) else {
                return;
            };
            chmod_record(files, exec, path, mode)
        }
        Call::Xattr { target, name } => {
            let Some((path, obj)) = xattr_object(who.tid, target) else {
                return;
            };
            let Some(record) = xattrs::record(exec, path, &obj, name, files.max_content()) else {
                return;
            };
            record
        }
    };
    if files.writable(&record.path) {
        files.emit(record);
    }
}

use std::os::unix::ffi::OsStrExt as _;
