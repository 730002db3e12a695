//! Extended attributes of a file, read from our side through an O_PATH
//! handle of the object. f*xattr(2) refuse O_PATH descriptors (EBADF), so
//! the handle is named by its magic link, /proc/self/fd/N: a lookup that
//! ends in a magic link lands on the object itself and goes no further, so
//! a symlink's own attributes are read, never its target's. An O_PATH
//! handle opens nothing: a FIFO's attributes are read without blocking.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use super::acl;
use super::files::FileRecord;
use crate::capture;
use airlock_record::Xattr;

use crate::observation::{ExecSeq, FileOp};

/// XATTR_SIZE_MAX and XATTR_LIST_MAX (include/uapi/linux/limits.h): no
/// value and no list of names is longer.
const MAX: usize = 65536;

fn magic(obj: &File) -> String {
    format!("/proc/self/fd/{}", obj.as_raw_fd())
}

/// The value of attribute `name` of `obj` now; None when it has none (or
/// it cannot be read).
pub(super) fn value(obj: &File, name: &[u8]) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; MAX];
    let n = rustix::fs::getxattr(magic(obj), name, &mut buf[..]).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// Every attribute of `obj` that we can read, by name.
pub(super) fn all(obj: &File) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut names = vec![0u8; MAX];
    let Ok(n) = rustix::fs::listxattr(magic(obj), &mut names[..]) else {
        return out;
    };
    for raw in names[..n].split(|b| *b == 0).filter(|n| !n.is_empty()) {
        if let Some(v) = value(obj, raw) {
            out.insert(raw.to_vec(), v);
        }
    }
    out
}

/// The record of a successful set or remove of attribute `name` on `obj`
/// (named `path`): the attribute as the kernel holds it after the call
/// (absent: removed, or an ACL the kernel folded into the mode).
pub(super) fn record(
    exec: Option<ExecSeq>,
    path: Vec<u8>,
    obj: &File,
    name: Vec<u8>,
    max_content: u64,
) -> Option<FileRecord> {
    let meta = obj.metadata().ok()?;
    let now = value(obj, &name);
    Some(described(exec, path, &meta, name, now, max_content))
}

/// The record of attribute `name` of the file `path` (whose metadata is
/// `meta`) holding `now`: for an ACL, with the mode the file has and the
/// ACL's entries, readable. A directory's path ends in '/', as in its
/// other records.
pub(super) fn described(
    exec: Option<ExecSeq>,
    path: Vec<u8>,
    meta: &std::fs::Metadata,
    name: Vec<u8>,
    now: Option<Vec<u8>>,
    max_content: u64,
) -> FileRecord {
    let is_acl = acl::is_acl(&name);
    let path = match meta.is_dir() {
        true => super::name::dir_form(&path),
        false => path,
    };
    FileRecord {
        mode: is_acl.then_some(meta.mode() & MODE_BITS),
        inode: Some((meta.dev(), meta.ino())),
        xattr: Some(Xattr {
            removed: now.is_none(),
            acl: now.as_deref().filter(|_| is_acl).and_then(acl::describe),
            name: name.into(),
        }),
        captured: now
            .map(|v| capture::bytes(v, max_content))
            .unwrap_or_default(),
        ..FileRecord::now(exec, path, FileOp::Xattr)
    }
}

/// Permission bits, with setuid, setgid and sticky: what chmod(2) sets.
pub(super) const MODE_BITS: u32 = 0o7777;
