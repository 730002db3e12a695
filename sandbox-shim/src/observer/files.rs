//! Bookkeeping of written files, keyed by the inode the kernel wrote (device
//! and inode number), never by a name alone.
//!
//! A file opened for writing is tracked from the successful open until no
//! process of the sandbox holds it open for writing any more: then its
//! content is captured, through a read-only descriptor of that very inode
//! opened when the write-open returned. Who holds it is learnt from
//! /proc/PID/fd (proc_pid_fd(5): the link's mode says whether the descriptor
//! is writable), checked when a holder stops at a traced syscall, execs, or
//! exits; a child forked by a holder is a holder too until checked. Names
//! follow renames and links, so the record names the file as it is called
//! when captured, with every name it had.

use nix::unistd::Pid;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::mpsc::Sender;
use std::time::SystemTime;

use super::originals::{Original, Originals};
use super::view::View;
use super::writable::Mounts;
use super::xattrs::MODE_BITS;
use super::{name, reconcile};
use crate::capture::{self, Captured};
use airlock_record::{AuditEvent, FileChange, FileIdentity, OsText, Xattr};

use crate::observation::{ExecSeq, FileOp};

/// (device, inode number).
pub(super) type FileKey = (u64, u64);

/// Most read-only descriptors we keep open at once; past it, a file is
/// captured through its name (and the reconcile checks it).
const MAX_READERS: usize = 512;

#[derive(Debug)]
struct Tracked {
    exec: Option<ExecSeq>,
    /// Its current name.
    name: Vec<u8>,
    /// Every name it had, oldest first.
    names: Vec<Vec<u8>>,
    op: FileOp,
    seq: u64,
    holders: HashSet<Pid>,
    reader: Option<File>,
}

/// A descriptor of a written file that we opened ourselves: read-only when
/// we could (our own open file description, so reading it never moves the
/// writer's file offset), else an O_PATH handle that still names the inode.
#[derive(Debug)]
pub(super) struct Opened {
    pub file: File,
    pub readable: bool,
}

/// A record about to be emitted.
#[derive(Debug)]
pub(super) struct FileRecord {
    pub exec_id: Option<ExecSeq>,
    pub path: Vec<u8>,
    pub op: FileOp,
    pub captured: Captured,
    pub rename_to: Option<Vec<u8>>,
    pub mode: Option<u32>,
    pub inode: Option<FileKey>,
    pub names: Vec<Vec<u8>>,
    pub reconciled: bool,
    /// For `FileOp::Xattr`: which attribute.
    pub xattr: Option<Xattr>,
}

impl FileRecord {
    pub(super) fn now(exec_id: Option<ExecSeq>, path: Vec<u8>, op: FileOp) -> Self {
        Self {
            exec_id,
            path,
            op,
            captured: Captured::default(),
            rename_to: None,
            mode: None,
            inode: None,
            names: Vec::new(),
            reconciled: false,
            xattr: None,
        }
    }
}

pub(super) struct Files {
    tracked: HashMap<FileKey, Tracked>,
    /// Ordered, so a directory's entries are one range away.
    by_name: BTreeMap<Vec<u8>, FileKey>,
    held_by: HashMap<Pid, HashSet<FileKey>>,
    /// What the record says each path holds now.
    view: View,
    pub mounts: Mounts,
    /// What pre-existing files held before the session changed them.
    originals: Originals,
    max_content: u64,
    seq: u64,
    readers: usize,
    tx: Sender<AuditEvent>,
}

fn key_of(meta: &std::fs::Metadata) -> FileKey {
    (meta.dev(), meta.ino())
}

/// The keys below directory `dir` ("dir/" and "dir/..."), in order.
pub(super) fn under<V>(map: &BTreeMap<Vec<u8>, V>, dir: &[u8]) -> Vec<Vec<u8>> {
    let prefix = name::dir_form(dir);
    map.range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Renaming `from` to `to` renames `name` if it is `from` or below it.
pub(super) fn renamed(name: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    if name == from {
        return Some(to.to_vec());
    }
    name.strip_prefix(name::trim_slashes(from))
        .filter(|rest| rest.starts_with(b"/"))
        .map(|rest| [name::trim_slashes(to), rest].concat())
}

impl Files {
    pub(super) fn new(mounts: Mounts, max_content: u64, tx: Sender<AuditEvent>) -> Self {
        Self {
            tracked: HashMap::new(),
            by_name: BTreeMap::new(),
            held_by: HashMap::new(),
            view: View::default(),
            mounts,
            originals: Originals::default(),
            max_content,
            seq: 0,
            readers: 0,
            tx,
        }
    }

    /// Is `path` in a place the sandbox can write?
    pub(super) fn writable(&self, path: &[u8]) -> bool {
        self.mounts.contains(name::trim_slashes(path))
    }

    /// Files up to this size are recorded with their content.
    pub(super) fn max_content(&self) -> u64 {
        self.max_content
    }

    pub(super) fn emit(&mut self, r: FileRecord) {
        self.view.apply(&r);
        let _ = self.tx.send(AuditEvent::File(FileChange {
            exec_id: r.exec_id.map(ExecSeq::id),
            path: r.path.into(),
            op: r.op,
            size: r.captured.size,
            sha256: r.captured.sha256,
            content: r.captured.content,
            rename_to: r.rename_to.map(OsText::from),
            mode: r.mode,
            // The store fills these in.
            stored_content: None,
            content_over_cap: false,
            content_over_budget: false,
            identity: FileIdentity {
                dev: r.inode.map(|(dev, _)| dev),
                ino: r.inode.map(|(_, ino)| ino),
                names: r.names.into_iter().map(OsText::from).collect(),
                reconciled: r.reconciled,
            },
            xattr: r.xattr,
        }));
    }

    /// `exec` changed the file named `path` that `file` refers to: opened
    /// it for writing in process `holder` (which now holds it), or
    /// truncated it by name (no holder). `op` is Create, Modify or Truncate.
    /// A new writer ends the previous writer's record: its version is
    /// captured first.
    pub(super) fn wrote(
        &mut self,
        holder: Option<Pid>,
        exec: Option<ExecSeq>,
        path: Vec<u8>,
        file: Opened,
        op: FileOp,
    ) {
        let Ok(meta) = file.file.metadata() else {
            return;
        };
        if !meta.is_file() || !self.writable(&path) {
            return;
        }
        let key = key_of(&meta);
        if op == FileOp::Create {
            self.originals.created(key);
        } else if let Some(missed) = self.originals.missed(exec, &path, key) {
            self.emit(missed);
        }
        if self.tracked.get(&key).is_some_and(|t| t.exec != exec) {
            self.capture(key, true);
        }
        self.seq += 1;
        let seq = self.seq;
        let want_reader = self.readers < MAX_READERS;
        let entry = self.tracked.entry(key).or_insert_with(|| Tracked {
            exec,
            name: path.clone(),
            names: vec![path.clone()],
            op,
            seq,
            holders: HashSet::new(),
            reader: None,
        });
        if entry.exec != exec {
            entry.exec = exec;
            entry.op = op;
        } else if entry.op == FileOp::Modify && op == FileOp::Truncate {
            // Create stays Create; an explicit truncate outranks a plain write.
            entry.op = op;
        }
        if entry.name != path {
            entry.name = path.clone();
            if !entry.names.contains(&path) {
                entry.names.push(path.clone());
            }
        }
        if entry.reader.is_none() && want_reader && file.readable {
            entry.reader = Some(file.file);
            self.readers += 1;
        }
        let unheld = match holder {
            Some(tgid) => {
                entry.holders.insert(tgid);
                self.held_by.entry(tgid).or_default().insert(key);
                false
            }
            None => entry.holders.is_empty(),
        };
        self.by_name.insert(path, key);
        if unheld {
            // A change by name is complete when its syscall returns.
            self.capture(key, false);
        }
    }

    /// Is the original of this inode still to be taken?
    pub(super) fn wants_original(&self, key: FileKey) -> bool {
        self.originals.wanted(key)
    }

    /// The session made the object named `path` (mkdir, symlink): it has
    /// no original.
    pub(super) fn made(&mut self, path: &[u8]) {
        if let Some(h) = self.mounts.lookup(name::trim_slashes(path))
            && let Ok(meta) = h.metadata()
        {
            self.originals.created(key_of(&meta));
        }
    }

    /// Record, before a call changes it, what a file that existed before
    /// the session holds, once per inode (see `originals`).
    pub(super) fn keep_original(&mut self, exec: Option<ExecSeq>, original: Original) {
        let (path, handle, tree) = match original {
            Original::Handle { path, file } => (path, Some(file), false),
            Original::Named { path, tree } => {
                let handle = self.mounts.lookup(name::trim_slashes(&path));
                (path, handle, tree)
            }
        };
        let Some(handle) = handle else {
            return;
        };
        if !self.writable(&path) {
            return;
        }
        let max = self.max_content;
        for r in self.originals.take(exec, &path, &handle, max) {
            self.emit(r);
        }
        if tree && handle.metadata().is_ok_and(|m| m.is_dir()) {
            for r in self.originals.take_tree(exec, &path, &handle, max) {
                self.emit(r);
            }
        }
    }

    /// Is any written file still tracked?
    pub(super) fn tracking(&self) -> bool {
        !self.tracked.is_empty()
    }

    /// Capture a tracked inode's version before a truncating open empties it.
    pub(super) fn before_truncate(&mut self, key: FileKey) {
        let keep_tracking = match self.tracked.get(&key) {
            Some(t) => !t.holders.is_empty(),
            None => return,
        };
        self.capture(key, keep_tracking);
    }

    /// Capture, before a syscall destroys it (O_TRUNC, truncate, unlink, or
    /// a rename over it), the version of a tracked file named `path`.
    pub(super) fn before_destroy(&mut self, path: &[u8]) {
        let Some(key) = self.by_name.get(path).copied() else {
            return;
        };
        let keep_tracking = self
            .tracked
            .get(&key)
            .is_some_and(|t| !t.holders.is_empty());
        self.capture(key, keep_tracking);
    }

    /// Which tracked files `tgid` still holds open for writing, from its
    /// descriptor table; the others it has let go of.
    pub(super) fn check_holder(&mut self, tgid: Pid) {
        let Some(held) = self.held_by.get(&tgid) else {
            return;
        };
        if held.is_empty() {
            return;
        }
        let still = writable_descriptors(tgid);
        let released: Vec<FileKey> = held
            .iter()
            .filter(|k| !still.contains(k))
            .copied()
            .collect();
        for key in released {
            self.release(tgid, key);
        }
    }

    /// `child` was forked by `parent` and inherited its descriptors.
    pub(super) fn forked(&mut self, parent: Pid, child: Pid) {
        let Some(held) = self.held_by.get(&parent).cloned() else {
            return;
        };
        for key in &held {
            if let Some(t) = self.tracked.get_mut(key) {
                t.holders.insert(child);
            }
        }
        self.held_by.entry(child).or_default().extend(held);
    }

    /// Process `tgid` is gone: it holds nothing any more.
    pub(super) fn process_gone(&mut self, tgid: Pid) {
        for key in self.held_by.remove(&tgid).unwrap_or_default() {
            self.release(tgid, key);
        }
    }

    fn release(&mut self, tgid: Pid, key: FileKey) {
        if let Some(held) = self.held_by.get_mut(&tgid) {
            held.remove(&key);
        }
        let Some(t) = self.tracked.get_mut(&key) else {
            return;
        };
        t.holders.remove(&tgid);
        if t.holders.is_empty() {
            self.capture(key, false);
        }
    }

    /// Record the content of a tracked file now; keep tracking it (as a
    /// modification from here on) when it is still held open.
    fn capture(&mut self, key: FileKey, keep_tracking: bool) {
        let Some(mut t) = self.tracked.remove(&key) else {
            return;
        };
        // The mode comes with the content, so the record knows both (and
        // the reconcile can tell a later chmod nobody saw).
        let captured = match &t.reader {
            Some(reader) => reader
                .try_clone()
                .ok()
                .and_then(|r| r.metadata().ok().map(|m| (r, m)))
                .filter(|(_, m)| m.nlink() > 0)
                .and_then(|(r, m)| capture::read_all(r, self.max_content).map(|c| (c, m))),
            None => self
                .mounts
                .lookup(&t.name)
                .and_then(|h| h.metadata().ok().map(|m| (h, m)))
                .filter(|(_, m)| key_of(m) == key)
                .map(|(h, m)| (capture::capture(&h, self.max_content), m)),
        };
        // No content: the file has no name any more (it was deleted; its
        // last named version was captured before the unlink) or it is
        // unreadable; the reconcile has the last word on what is on disk.
        if let Some((captured, meta)) = captured {
            let names = if t.names.len() > 1 {
                t.names.clone()
            } else {
                Vec::new()
            };
            self.emit(FileRecord {
                captured,
                inode: Some(key),
                mode: Some(meta.mode() & MODE_BITS),
                names,
                ..FileRecord::now(t.exec, t.name.clone(), t.op)
            });
        }
        if keep_tracking {
            self.seq += 1;
            t.op = FileOp::Modify;
            t.seq = self.seq;
            self.tracked.insert(key, t);
        } else {
            if t.reader.is_some() {
                self.readers -= 1;
            }
            if self.by_name.get(&t.name) == Some(&key) {
                self.by_name.remove(&t.name);
            }
            for holder in &t.holders {
                if let Some(h) = self.held_by.get_mut(holder) {
                    h.remove(&key);
                }
            }
        }
    }

    /// A successful rename: tracked names follow it.
    pub(super) fn renamed(&mut self, from: &[u8], to: &[u8]) {
        let mut names = under(&self.by_name, from);
        names.push(from.to_vec());
        for old in names {
            let (Some(new), Some(key)) = (renamed(&old, from, to), self.by_name.remove(&old))
            else {
                continue;
            };
            if let Some(t) = self.tracked.get_mut(&key) {
                t.name = new.clone();
                if !t.names.contains(&new) {
                    t.names.push(new.clone());
                }
            }
            self.by_name.insert(new, key);
        }
    }

    /// A successful link(2): the inode has one more name.
    pub(super) fn linked(&mut self, from: &[u8], to: &[u8]) {
        if let Some(key) = self.by_name.get(from).copied()
            && let Some(t) = self.tracked.get_mut(&key)
        {
            t.names.push(to.to_vec());
        }
    }

    /// Content and mode of the file named `path` now (for a record made at
    /// once).
    pub(super) fn capture_named(&self, path: &[u8]) -> (Captured, Option<FileKey>, Option<u32>) {
        match self.mounts.lookup(path) {
            Some(h) => {
                let meta = h.metadata().ok();
                (
                    capture::capture(&h, self.max_content),
                    meta.as_ref().map(key_of),
                    meta.map(|m| m.mode() & MODE_BITS),
                )
            }
            None => (Captured::default(), None, None),
        }
    }

    /// The mode the file named `path` has now, and whether it is a
    /// directory (its records end in '/').
    pub(super) fn mode_of(&self, path: &[u8]) -> Option<(u32, bool)> {
        let meta = self.mounts.lookup(path)?.metadata().ok()?;
        Some((meta.mode() & MODE_BITS, meta.is_dir()))
    }

    /// The end: every process of the sandbox is gone. Capture what is still
    /// tracked, then reconcile every writable mount with the record.
    pub(super) fn finish(&mut self, since: SystemTime) {
        let mut keys: Vec<(u64, FileKey)> = self.tracked.iter().map(|(k, t)| (t.seq, *k)).collect();
        keys.sort();
        for (_, key) in keys {
            self.capture(key, false);
        }
        self.held_by.clear();
        let findings = reconcile::run(&self.mounts, since, &self.view, self.max_content);
        for r in findings {
            self.emit(r);
        }
    }
}

/// (device, inode) of every file `tgid` holds open for writing.
fn writable_descriptors(tgid: Pid) -> HashSet<FileKey> {
    let mut out = HashSet::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{tgid}/fd")) else {
        return out;
    };
    for entry in dir.flatten() {
        let path = entry.path();
        let writable =
            std::fs::symlink_metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o200 != 0);
        if writable && let Ok(meta) = std::fs::metadata(&path) {
            out.insert(key_of(&meta));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn renames_carry_names_and_directories() {
        assert_eq!(
            super::renamed(b"/ws/a", b"/ws/a", b"/ws/b").as_deref(),
            Some(&b"/ws/b"[..])
        );
        assert_eq!(
            super::renamed(b"/ws/d/f", b"/ws/d", b"/ws/e").as_deref(),
            Some(&b"/ws/e/f"[..])
        );
        assert_eq!(super::renamed(b"/ws/dx", b"/ws/d", b"/ws/e"), None);
        assert_eq!(
            super::renamed(b"/ws/d\xff/f", b"/ws/d\xff", b"/ws/e").as_deref(),
            Some(&b"/ws/e/f"[..])
        );
    }
}
