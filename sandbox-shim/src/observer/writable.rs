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
use std::fs::File;
use std::os::fd::OwnedFd;

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
    pub point: String,
    /// Its root directory (O_PATH).
    pub root: File,
}

#[derive(Debug, Default)]
pub(super) struct Mounts {
    /// Longest mount point first, so the first match is the innermost mount.
    mounts: Vec<Mount>,
    /// Every mount point in the sandbox (writable or not): a walk of one
    /// mount must not descend into what another mount covers.
    points: Vec<String>,
}

/// One line of mountinfo: (mount point, read-write, filesystem type).
fn parse_line(line: &str) -> Option<(String, bool, &str)> {
    let (before, after) = line.split_once(" - ")?;
    let fields: Vec<&str> = before.split(' ').collect();
    let point = unescape(fields.get(4)?);
    let rw = fields.get(5)?.split(',').any(|o| o == "rw");
    let fstype = after.split(' ').next()?;
    Some((point, rw, fstype))
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(digits) = bytes.get(i + 1..i + 4)
            && let Ok(v) = u8::from_str_radix(&String::from_utf8_lossy(digits), 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` (absolute) is `base` or below it.
pub(super) fn is_under(path: &str, base: &str) -> bool {
    base == "/"
        || path == base
        || (path.starts_with(base) && path.as_bytes().get(base.len()) == Some(&b'/'))
}

fn open_beneath(dir: &File, relative: &str, flags: OFlag, resolve: ResolveFlag) -> Option<File> {
    let relative = if relative.is_empty() { "." } else { relative };
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(resolve);
    openat2(dir, relative, how)
        .ok()
        .map(|fd: OwnedFd| File::from(fd))
}

impl Mounts {
    /// The writable mounts of the sandbox whose init is `init` (host pid).
    pub(super) fn open(init: Pid) -> Mounts {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{init}/mountinfo")) else {
            return Mounts::default();
        };
        let Ok(root) = File::open(format!("/proc/{init}/root")) else {
            return Mounts::default();
        };
        let mut out = Mounts::default();
        for line in text.lines() {
            let Some((point, rw, fstype)) = parse_line(line) else {
                continue;
            };
            out.points.push(point.clone());
            if !rw || NOT_STORAGE.contains(&fstype) {
                continue;
            }
            // The mount point as the sandbox resolves it: inside its root.
            let Some(dir) = open_beneath(
                &root,
                point.trim_start_matches('/'),
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
    pub(super) fn find<'p>(&self, path: &'p str) -> Option<(&Mount, &'p str)> {
        let m = self.mounts.iter().find(|m| is_under(path, &m.point))?;
        let rest = path[m.point.len().min(path.len())..].trim_start_matches('/');
        Some((m, rest))
    }

    pub(super) fn contains(&self, path: &str) -> bool {
        self.find(path).is_some()
    }

    /// Mount points strictly below `point` (other mounts a walk must skip).
    pub(super) fn covered_below<'a>(&'a self, point: &'a str) -> impl Iterator<Item = &'a str> {
        self.points
            .iter()
            .map(String::as_str)
            .filter(move |p| *p != point && is_under(p, point))
    }

    /// O_PATH handle of the file named `path` right now, following no
    /// symlink and crossing no mount: the name as the record has it.
    pub(super) fn lookup(&self, path: &str) -> Option<File> {
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
            "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 - ext3 /dev/root rw,errors=continue";
        let (point, rw, fstype) = parse_line(line).unwrap();
        assert_eq!(point, "/mnt two");
        assert!(rw);
        assert_eq!(fstype, "ext3");
        let ro = "40 35 0:5 / /proc ro,nosuid - proc proc rw";
        assert!(!parse_line(ro).unwrap().1);
    }

    #[test]
    fn paths_under_a_mount() {
        assert!(is_under("/tmp/x", "/tmp"));
        assert!(is_under("/tmp", "/tmp"));
        assert!(!is_under("/tmpx", "/tmp"));
        assert!(is_under("/anything", "/"));
    }
}
