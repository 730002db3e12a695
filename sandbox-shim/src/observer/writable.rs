//! Every place the sandbox can write, held open for the observer's lifetime.
//!
//! The list is not what airlock meant to make writable but what the kernel
//! says is: every read-write mount in the sandbox's mount table
//! (/proc/<init>/mountinfo, proc_pid_mountinfo(5)) whose filesystem stores
//! files. Each mount's root is opened at start; an open descriptor keeps a
//! mount alive and readable after its namespace is gone (the mount is only
//! detached, as with umount2(2) MNT_DETACH), so files can be captured and the
//! mounts reconciled after every process of the sandbox has died.

use nix::unistd::Pid;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};

/// Filesystems that are kernel interfaces, not storage: writing to them
/// stores no file a responder would need back.
const NOT_STORAGE: [&str; 15] = [
    "proc",
    "sysfs",
    "devpts",
    "cgroup",
    "cgroup2",
    "mqueue",
    "securityfs",
    "debugfs",
    "tracefs",
    "bpf",
    "fusectl",
    "configfs",
    "pstore",
    "binfmt_misc",
    "nsfs",
];

/// One writable mount.
#[derive(Debug)]
pub(super) struct Mount {
    /// Where the sandbox sees it.
    pub point: Vec<u8>,
    /// Its root directory (O_PATH).
    pub root: File,
}

#[derive(Debug, Default)]
pub(super) struct Mounts {
    /// Longest mount point first, so the first match is the innermost mount.
    mounts: Vec<Mount>,
    /// Every mount point in the sandbox (writable or not): a walk of one
    /// mount must not descend into what another mount covers.
    points: Vec<Vec<u8>>,
}

/// One line of mountinfo: (mount point, read-write, filesystem type). A
/// line is bytes: a mount point need not be UTF-8.
fn parse_line(line: &[u8]) -> Option<(Vec<u8>, bool, &[u8])> {
    let sep = line.windows(3).position(|w| w == b" - ")?;
    let (before, after) = (&line[..sep], &line[sep + 3..]);
    let fields: Vec<&[u8]> = before.split(|&b| b == b' ').collect();
    let point = unescape(fields.get(4)?);
    let rw = fields.get(5)?.split(|&b| b == b',').any(|o| o == b"rw");
    let fstype = after.split(|&b| b == b' ').next()?;
    Some((point, rw, fstype))
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\'
            && let Some(digits) = field.get(i + 1..i + 4)
            && let Some(v) = octal(digits)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(field[i]);
        i += 1;
    }
    out
}

fn octal(digits: &[u8]) -> Option<u8> {
    digits.iter().try_fold(0u8, |v, &d| {
        (b'0'..=b'7')
            .contains(&d)
            .then(|| v.checked_mul(8)?.checked_add(d - b'0'))
            .flatten()
    })
}

/// `path` (absolute) is `base` or below it.
pub(super) fn is_under(path: &[u8], base: &[u8]) -> bool {
    base == b"/" || path == base || (path.starts_with(base) && path.get(base.len()) == Some(&b'/'))
}

fn open_beneath(dir: &File, relative: &[u8], flags: OFlag, resolve: ResolveFlag) -> Option<File> {
    let relative = OsStr::from_bytes(if relative.is_empty() { b"." } else { relative });
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(resolve);
    openat2(dir, relative, how)
        .ok()
        .map(|fd: OwnedFd| File::from(fd))
}

fn trim_leading_slashes(path: &[u8]) -> &[u8] {
    let start = path.iter().position(|&b| b != b'/').unwrap_or(path.len());
    &path[start..]
}

impl Mounts {
    /// The writable mounts of the sandbox whose init is `init` (host pid).
    pub(super) fn open(init: Pid) -> Self {
        let Ok(text) = std::fs::read(format!("/proc/{init}/mountinfo")) else {
            return Self::default();
        };
        let Ok(root) = File::open(format!("/proc/{init}/root")) else {
            return Self::default();
        };
        let mut out = Self::default();
        for line in text.split(|&b| b == b'\n') {
            let Some((point, rw, fstype)) = parse_line(line) else {
                continue;
            };
            out.points.push(point.clone());
            if !rw || NOT_STORAGE.iter().any(|n| n.as_bytes() == fstype) {
                continue;
            }
            // The mount point as the sandbox resolves it: inside its root.
            let Some(dir) = open_beneath(
                &root,
                trim_leading_slashes(&point),
                OFlag::O_PATH | OFlag::O_DIRECTORY,
                ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            ) else {
                continue;
            };
            // A later line for the same point is a mount on top: it wins.
            out.mounts.retain(|m| m.point != point);
            out.mounts.push(Mount { point, root: dir });
        }
        out.mounts.sort_by_key(|m| std::cmp::Reverse(m.point.len()));
        out
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Mount> {
        self.mounts.iter()
    }

    /// The innermost writable mount holding `path`, and the path below it.
    pub(super) fn find<'p>(&self, path: &'p [u8]) -> Option<(&Mount, &'p [u8])> {
        let m = self.mounts.iter().find(|m| is_under(path, &m.point))?;
        let rest = trim_leading_slashes(&path[m.point.len().min(path.len())..]);
        Some((m, rest))
    }

    pub(super) fn contains(&self, path: &[u8]) -> bool {
        self.find(path).is_some()
    }

    /// Mount points strictly below `point` (other mounts a walk must skip).
    pub(super) fn covered_below<'a>(&'a self, point: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
        self.points
            .iter()
            .map(Vec::as_slice)
            .filter(move |p| *p != point && is_under(p, point))
    }

    /// O_PATH handle of the file named `path` right now, following no
    /// symlink and crossing no mount: the name as the record has it.
    pub(super) fn lookup(&self, path: &[u8]) -> Option<File> {
        let (mount, rest) = self.find(path)?;
        open_beneath(
            &mount.root,
            rest,
            OFlag::O_PATH | OFlag::O_NOFOLLOW,
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_XDEV,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_read() {
        let line =
            b"36 35 98:0 /mnt1 /mnt\\040two\xff rw,noatime master:1 - ext3 /dev/root rw,errors=continue";
        let (point, rw, fstype) = parse_line(line).unwrap();
        assert_eq!(point, b"/mnt two\xff");
        assert!(rw);
        assert_eq!(fstype, b"ext3");
        let ro = b"40 35 0:5 / /proc ro,nosuid - proc proc rw";
        assert!(!parse_line(ro).unwrap().1);
    }

    #[test]
    fn paths_under_a_mount() {
        assert!(is_under(b"/tmp/x", b"/tmp"));
        assert!(is_under(b"/tmp", b"/tmp"));
        assert!(!is_under(b"/tmpx", b"/tmp"));
        assert!(is_under(b"/anything", b"/"));
    }
}
