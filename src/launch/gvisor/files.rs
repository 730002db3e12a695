//! File operations under gVisor, as they happen. gVisor's trace points say
//! *that* a process wrote (an `openat` for writing and its `close`), renamed,
//! removed or made a directory (the raw `rename*`, `unlink*`, `rmdir`,
//! `mkdir*` points), but the raw points carry only pointers, never paths,
//! and the sentry's own view of a file is not the host's. So each such point
//! makes airlock look at the host side of the writable mounts (the workspace
//! and `--rw` grants, bound into gVisor at the same paths) and record what
//! changed since it last looked: a new file or directory (create), new
//! content (modify), the same inode under a new name (rename), a name gone
//! (delete). The end-of-session reconcile stays the backstop; what these
//! records already hold, it does not repeat (`Recorded`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::CStr;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use airlock_auditor::{AuditEvent, ExecId, FileChange, FileOp, OsText};
use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, Statx, StatxFlags};

/// How many names the writable mounts may hold for airlock to follow them
/// as they change; past it only the reconcile at the end records files.
const MAX_ENTRIES: usize = 200_000;

/// What one name in a writable mount was when last looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    dev: u64,
    ino: u64,
    /// Birth time: a name that vanished and an inode with its number that
    /// appeared elsewhere are the same file (a rename) only if born at the
    /// same moment; a freed inode number is soon given to a new file.
    btime: (i64, u32),
    dir: bool,
    size: u64,
    mtime: (i64, u32),
    mode: u32,
}

impl Entry {
    fn of(st: &Statx) -> Self {
        let mode = u32::from(st.stx_mode);
        Self {
            dev: (u64::from(st.stx_dev_major) << 32) | u64::from(st.stx_dev_minor),
            ino: st.stx_ino,
            btime: (st.stx_btime.tv_sec, st.stx_btime.tv_nsec),
            dir: FileType::from_raw_mode(mode) == FileType::Directory,
            size: st.stx_size,
            mtime: (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
            mode,
        }
    }

    /// The key a rename keeps: the same inode, born at the same time, of
    /// the same type.
    fn identity(&self) -> (u64, u64, (i64, u32), bool) {
        (self.dev, self.ino, self.btime, self.dir)
    }
}

fn statx(dir: impl AsFd, name: &CStr, flags: AtFlags) -> Option<Entry> {
    let mask = StatxFlags::BASIC_STATS | StatxFlags::BTIME;
    rustix::fs::statx(dir, name, flags | AtFlags::SYMLINK_NOFOLLOW, mask)
        .ok()
        .map(|st| Entry::of(&st))
}

/// The writable mounts' names, as last seen.
pub(super) struct Tree {
    roots: Vec<PathBuf>,
    entries: BTreeMap<Vec<u8>, Entry>,
    /// False once the mounts held more than `MAX_ENTRIES` names.
    followed: bool,
    max_content: u64,
    /// Files and symlinks whose content (a link's: its target) a look
    /// could not read (renamed or replaced between its stat and its read):
    /// the next look records it, under whatever name they have by then.
    uncaptured: HashSet<Vec<u8>>,
}

impl Tree {
    /// Looks at `roots` (canonical host paths, which are also their paths
    /// inside gVisor) before the command runs.
    pub(super) fn scan(roots: Vec<PathBuf>, max_content: u64) -> Self {
        let mut tree = Self {
            roots,
            entries: BTreeMap::new(),
            followed: true,
            max_content,
            uncaptured: HashSet::new(),
        };
        match tree.walk() {
            Some(entries) => tree.entries = entries,
            None => tree.followed = false,
        }
        tree
    }

    pub(super) fn followed(&self) -> bool {
        self.followed
    }

    /// Looks again and returns what changed since the last look, as records
    /// attributed to `exec`.
    pub(super) fn changes(&mut self, exec: Option<ExecId>) -> Vec<FileChange> {
        if !self.followed {
            return Vec::new();
        }
        let Some(now) = self.walk() else {
            self.followed = false;
            return Vec::new();
        };
        self.diff(now, exec)
    }

    /// What changed between the last look and `now`, which becomes the
    /// last look.
    fn diff(&mut self, now: BTreeMap<Vec<u8>, Entry>, exec: Option<ExecId>) -> Vec<FileChange> {
        let mut out = Vec::new();
        // A vanished name whose inode is now elsewhere was renamed.
        let mut gone: HashMap<_, Vec<u8>> = self
            .entries
            .iter()
            .filter(|(path, _)| !now.contains_key(*path))
            .map(|(path, e)| (e.identity(), path.clone()))
            .collect();
        let mut renamed_dirs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for (path, e) in &now {
            let under_renamed = renamed_dirs
                .iter()
                .any(|(_, to)| path.starts_with(to) && path.get(to.len()) == Some(&b'/'));
            match self.entries.get(path) {
                None => match gone.remove(&e.identity()) {
                    Some(from) => {
                        if e.dir {
                            renamed_dirs.push((from.clone(), path.clone()));
                        }
                        // What a renamed directory held moved with it: its
                        // rename says so.
                        if !under_renamed {
                            // A file's hash and mode under its new name:
                            // all the record holds of a file there before
                            // the session (`Recorded::note`).
                            let captured = fingerprint(path, e);
                            out.push(change(&from, FileOp::Rename, exec.clone(), |c| {
                                c.rename_to = Some(OsText::from(path.clone()));
                                if let Some((size, sha256)) = captured {
                                    c.size = Some(size);
                                    c.sha256 = Some(sha256);
                                    c.mode = (FileType::from_raw_mode(e.mode) != FileType::Symlink)
                                        .then_some(e.mode & 0o7777);
                                }
                            }));
                        }
                        // Content written before the rename, since the last look.
                        let before = self.entries.get(&from);
                        if !e.dir
                            && (before.is_some_and(|b| b.size != e.size || b.mtime != e.mtime)
                                || self.uncaptured.contains(&from))
                        {
                            out.push(self.file(path, e, FileOp::Modify, exec.clone()));
                        }
                    }
                    None => out.push(self.file(path, e, FileOp::Create, exec.clone())),
                },
                Some(before)
                    if !e.dir
                        && (before.ino != e.ino
                            || before.size != e.size
                            || before.mtime != e.mtime
                            || self.uncaptured.contains(path)) =>
                {
                    out.push(self.file(path, e, FileOp::Modify, exec.clone()));
                }
                Some(before) if before.mode != e.mode => {
                    out.push(change(path, FileOp::Chmod, exec.clone(), |c| {
                        c.mode = Some(e.mode & 0o7777);
                    }));
                }
                Some(_) => {}
            }
        }
        let mut deleted: Vec<Vec<u8>> = gone.into_values().collect();
        // What a directory held goes before the directory.
        deleted.sort_by(|a, b| b.cmp(a));
        for path in deleted {
            // What a renamed directory held moved with it.
            let moved = renamed_dirs
                .iter()
                .any(|(from, _)| path.starts_with(from) && path.get(from.len()) == Some(&b'/'));
            if !moved {
                let dir = self.entries.get(&path).is_some_and(|e| e.dir);
                out.push(change(
                    &with_slash(&path, dir),
                    FileOp::Delete,
                    exec.clone(),
                    |_| {},
                ));
            }
        }
        // A file or symlink recorded without a hash was not readable as
        // the inode looked at: it changed name or content since.
        self.uncaptured = out
            .iter()
            .filter(|c| matches!(c.op, FileOp::Create | FileOp::Modify) && c.sha256.is_none())
            .map(|c| c.path.as_bytes().to_vec())
            .filter(|path| {
                now.get(path).is_some_and(|e| {
                    matches!(
                        FileType::from_raw_mode(e.mode),
                        FileType::RegularFile | FileType::Symlink
                    )
                })
            })
            .collect();
        self.entries = now;
        out
    }

    /// A created or modified name: a directory by its mode, a file with
    /// its size, hash and (up to the cap) content, read through a
    /// descriptor that never follows a symlink.
    fn file(&self, path: &[u8], e: &Entry, op: FileOp, exec: Option<ExecId>) -> FileChange {
        if e.dir {
            return change(&with_slash(path, true), op, exec, |c| {
                c.mode = Some(e.mode & 0o7777);
            });
        }
        if FileType::from_raw_mode(e.mode) == FileType::Symlink {
            // A symlink's content is its target, as the namespace sandbox
            // records it: never what it points at.
            let target = link_target(path);
            // No mode: a symlink's is always 777 (the reconcile's rule).
            return change(path, op, exec, |c| {
                if let Some(target) = target {
                    c.size = Some(target.len() as u64);
                    c.sha256 = Some(hex(
                        ring::digest::digest(&ring::digest::SHA256, &target).as_ref()
                    ));
                    c.content = Some(target);
                }
            });
        }
        if FileType::from_raw_mode(e.mode) != FileType::RegularFile {
            return change(path, op, exec, |c| c.mode = Some(e.mode & 0o7777));
        }
        let captured = capture(path, e, self.max_content);
        change(path, op, exec, |c| {
            c.mode = Some(e.mode & 0o7777);
            if let Some((size, sha256, content)) = captured {
                c.size = Some(size);
                c.sha256 = Some(sha256);
                c.content = content;
            }
        })
    }

    /// Every name under the roots, or None past `MAX_ENTRIES`.
    fn walk(&self) -> Option<BTreeMap<Vec<u8>, Entry>> {
        let mut entries = BTreeMap::new();
        for root in &self.roots {
            let Ok(fd) = rustix::fs::open(
                root,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            let Some(st) = statx(&fd, c"", AtFlags::EMPTY_PATH) else {
                continue;
            };
            let prefix = root.as_os_str().as_encoded_bytes().to_vec();
            walk_dir(fd, st.dev, &prefix, &mut entries)?;
        }
        Some(entries)
    }
}

/// One directory's names, recursively, never through a symlink and never
/// onto another filesystem mounted under it.
fn walk_dir(
    dir: OwnedFd,
    dev: u64,
    prefix: &[u8],
    entries: &mut BTreeMap<Vec<u8>, Entry>,
) -> Option<()> {
    let Ok(listing) = Dir::read_from(&dir) else {
        return Some(());
    };
    let names: Vec<Vec<u8>> = listing
        .filter_map(Result::ok)
        .map(|d| d.file_name().to_bytes().to_vec())
        .filter(|n| n != b"." && n != b"..")
        .collect();
    for name in names {
        let Ok(cname) = std::ffi::CString::new(name.clone()) else {
            continue;
        };
        let Some(entry) = statx(&dir, cname.as_c_str(), AtFlags::empty()) else {
            continue;
        };
        let mut path = prefix.to_vec();
        path.push(b'/');
        path.extend_from_slice(&name);
        entries.insert(path.clone(), entry);
        if entries.len() > MAX_ENTRIES {
            return None;
        }
        if entry.dir
            && entry.dev == dev
            && let Ok(sub) = open_dir(&dir, cname.as_c_str())
        {
            walk_dir(sub, dev, &path, entries)?;
        }
    }
    Some(())
}

fn open_dir(dir: impl AsFd, name: &CStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The directory holding `path` and its last component, opened from `/`
/// one component at a time without following a symlink.
fn parent(path: &[u8]) -> Option<(OwnedFd, std::ffi::CString)> {
    let mut dir = open_dir(CWD, c"/").ok()?;
    let parts: Vec<&[u8]> = path
        .split(|b| *b == b'/')
        .filter(|p| !p.is_empty())
        .collect();
    let (last, parents) = parts.split_last()?;
    for part in parents {
        let name = std::ffi::CString::new(part.to_vec()).ok()?;
        dir = open_dir(&dir, name.as_c_str()).ok()?;
    }
    Some((dir, std::ffi::CString::new(last.to_vec()).ok()?))
}

/// What the symlink at `path` names.
fn link_target(path: &[u8]) -> Option<Vec<u8>> {
    let (dir, name) = parent(path)?;
    rustix::fs::readlinkat(&dir, name.as_c_str(), Vec::new())
        .ok()
        .map(|t| t.into_bytes())
}

/// A renamed file's size and hash (a symlink's: its target's text).
fn fingerprint(path: &[u8], e: &Entry) -> Option<(u64, String)> {
    match FileType::from_raw_mode(e.mode) {
        FileType::RegularFile => capture(path, e, 0).map(|(size, sha, _)| (size, sha)),
        FileType::Symlink => link_target(path).map(|t| {
            let sha = hex(ring::digest::digest(&ring::digest::SHA256, &t).as_ref());
            (t.len() as u64, sha)
        }),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Size, SHA-256 and content (when at most `max_content` bytes) of the
/// regular file at `path`, opened component by component from `/` without
/// following a symlink, and only if it is still the inode looked at.
fn capture(path: &[u8], e: &Entry, max_content: u64) -> Option<(u64, String, Option<Vec<u8>>)> {
    let (dir, name) = parent(path)?;
    let fd = rustix::fs::openat(
        &dir,
        name.as_c_str(),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let now = statx(&fd, c"", AtFlags::EMPTY_PATH)?;
    if now.identity() != e.identity() || FileType::from_raw_mode(now.mode) != FileType::RegularFile
    {
        return None;
    }
    let mut file = std::fs::File::from(fd);
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    let mut content = Vec::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        digest.update(&buf[..n]);
        size += n as u64;
        if size <= max_content {
            content.extend_from_slice(&buf[..n]);
        }
    }
    let sha256 = hex(digest.finish().as_ref());
    Some((size, sha256, (size <= max_content).then_some(content)))
}

fn with_slash(path: &[u8], dir: bool) -> Vec<u8> {
    let mut p = path.to_vec();
    if dir && !p.ends_with(b"/") {
        p.push(b'/');
    }
    p
}

fn change(
    path: &[u8],
    op: FileOp,
    exec_id: Option<ExecId>,
    fill: impl FnOnce(&mut FileChange),
) -> FileChange {
    let mut c = FileChange::new(OsText::from(path.to_vec()), op);
    c.exec_id = exec_id;
    fill(&mut c);
    c
}

/// What the trace points put on record for each path (its hash and mode),
/// so the end-of-session reconcile does not record the same file twice.
#[derive(Clone, Default)]
pub(crate) struct Recorded(Arc<Mutex<HashMap<Vec<u8>, Kept>>>);

/// A file's SHA-256 and mode as last recorded.
type Kept = (Option<String>, Option<u32>);

impl Recorded {
    pub(super) fn note(&self, c: &FileChange) {
        let Ok(mut map) = self.0.lock() else { return };
        let path = c.path.as_bytes().to_vec();
        match c.op {
            FileOp::Create | FileOp::Modify => {
                map.insert(path, (c.sha256.clone(), c.mode));
            }
            FileOp::Chmod => {
                if let Some(entry) = map.get_mut(&path) {
                    entry.1 = c.mode;
                }
            }
            FileOp::Delete => {
                map.remove(&path);
            }
            FileOp::Rename => {
                // The new name holds what the record holds for the old one
                // (restore replays it so), not the hash the rename saw: a
                // file whose content was never captured, or that changed
                // unseen, is not on record by that hash. Only a file the
                // session never wrote (there before it) is on record by the
                // rename's hash alone, as under the ptrace observer.
                let moved = map.remove(&path);
                let seen = c.sha256.clone().map(|sha| (Some(sha), c.mode));
                if let (Some(to), Some(v)) = (&c.rename_to, moved.or(seen)) {
                    map.insert(to.as_bytes().to_vec(), v);
                }
            }
            _ => {}
        }
    }

    /// True for a reconcile record that says only what the trace points
    /// already recorded: the same path, content and mode.
    pub(crate) fn explains(&self, event: &AuditEvent) -> bool {
        let AuditEvent::File(c) = event else {
            return false;
        };
        if !c.identity.reconciled || !matches!(c.op, FileOp::Create | FileOp::Modify) {
            return false;
        }
        // A symlink's record carries its target as content, hashed later
        // by the store.
        let theirs = c.sha256.clone().or_else(|| {
            c.content
                .as_ref()
                .map(|b| hex(ring::digest::digest(&ring::digest::SHA256, b).as_ref()))
        });
        let Ok(map) = self.0.lock() else { return false };
        map.get(c.path.as_bytes())
            .is_some_and(|(sha, mode)| sha.is_some() && *sha == theirs && *mode == c.mode)
    }
}

/// Which processes hold a file open for writing, by gVisor's (tgid, fd).
#[derive(Default)]
pub(super) struct WriteFds(HashSet<(i32, i64)>);

impl WriteFds {
    pub(super) fn opened(&mut self, tgid: i32, fd: i64) {
        self.0.insert((tgid, fd));
    }

    /// True when `fd` was open for writing.
    pub(super) fn closed(&mut self, tgid: i32, fd: i64) -> bool {
        self.0.remove(&(tgid, fd))
    }

    /// True when the process held any file open for writing.
    pub(super) fn exited(&mut self, tgid: i32) -> bool {
        let before = self.0.len();
        self.0.retain(|(t, _)| *t != tgid);
        self.0.len() != before
    }
}

/// The canonical host paths of the workspace and the `--rw` grants.
pub(super) fn writable_roots(workspace: &Path, rw: &[PathBuf]) -> Vec<PathBuf> {
    std::iter::once(workspace)
        .chain(rw.iter().map(PathBuf::as_path))
        .filter_map(|p| p.canonicalize().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(bytes: &[u8]) -> String {
        hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
    }

    fn named<'a>(changes: &'a [FileChange], name: &str, op: FileOp) -> Option<&'a FileChange> {
        changes
            .iter()
            .find(|c| c.op == op && c.path.as_bytes().ends_with(name.as_bytes()))
    }

    fn reconciled(path: &Path, content: &[u8]) -> AuditEvent {
        let mut c = FileChange::new(
            OsText::from(path.as_os_str().as_encoded_bytes()),
            FileOp::Create,
        );
        c.identity.reconciled = true;
        c.sha256 = Some(sha(content));
        c.mode = Some(0o644);
        AuditEvent::File(c)
    }

    /// `echo draft > notes.txt && mv notes.txt final.txt`, with the mv
    /// landing between a look's stat of notes.txt and its read: that look
    /// cannot read the content, so the next one records it under the new
    /// name, and the reconcile is not told it is on record.
    #[test]
    fn a_file_renamed_between_a_looks_stat_and_its_read_is_captured_by_the_next_look() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut tree = Tree::scan(vec![root.clone()], 1 << 20);
        std::fs::write(root.join("notes.txt"), "draft\n").unwrap();
        let recorded = Recorded::default();

        let stat = tree.walk().unwrap();
        std::fs::rename(root.join("notes.txt"), root.join("final.txt")).unwrap();
        let first = tree.diff(stat, None);
        let create = named(&first, "notes.txt", FileOp::Create).expect("notes.txt created");
        assert_eq!(create.sha256, None, "the look could not read it");
        first.iter().for_each(|c| recorded.note(c));

        let second = tree.changes(None);
        second.iter().for_each(|c| recorded.note(c));
        assert!(
            named(&second, "notes.txt", FileOp::Rename).is_some(),
            "{second:#?}"
        );
        let modify = named(&second, "final.txt", FileOp::Modify).expect("content recorded");
        assert_eq!(modify.content.as_deref(), Some(&b"draft\n"[..]));
        assert!(recorded.explains(&reconciled(&root.join("final.txt"), b"draft\n")));

        assert!(tree.changes(None).is_empty(), "recorded once");
    }

    /// The same for a symlink, whose content is its target's text.
    #[test]
    fn a_symlink_renamed_between_a_looks_stat_and_its_read_is_captured_by_the_next_look() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut tree = Tree::scan(vec![root.clone()], 1 << 20);
        std::os::unix::fs::symlink("/elsewhere/secret", root.join("p")).unwrap();
        let recorded = Recorded::default();

        let stat = tree.walk().unwrap();
        std::fs::rename(root.join("p"), root.join("q")).unwrap();
        let first = tree.diff(stat, None);
        assert_eq!(named(&first, "/p", FileOp::Create).unwrap().sha256, None);
        first.iter().for_each(|c| recorded.note(c));

        let second = tree.changes(None);
        second.iter().for_each(|c| recorded.note(c));
        let modify = named(&second, "/q", FileOp::Modify).expect("target recorded");
        assert_eq!(modify.content.as_deref(), Some(&b"/elsewhere/secret"[..]));
        let mut reconciled = FileChange::new(
            OsText::from(root.join("q").as_os_str().as_encoded_bytes()),
            FileOp::Create,
        );
        reconciled.identity.reconciled = true;
        reconciled.content = Some(b"/elsewhere/secret".to_vec());
        assert!(recorded.explains(&AuditEvent::File(reconciled)));
    }

    /// What the record holds for a renamed file is what it held for the old
    /// name, whatever hash the rename saw: the reconcile records the rest.
    #[test]
    fn a_rename_tells_the_reconcile_only_what_the_record_holds() {
        let root = Path::new("/w");
        let recorded = Recorded::default();
        let rename = |from: &str, to: &str, content: &[u8]| {
            let mut c = FileChange::new(OsText::from(format!("/w/{from}")), FileOp::Rename);
            c.rename_to = Some(OsText::from(format!("/w/{to}")));
            c.sha256 = Some(sha(content));
            c.mode = Some(0o644);
            c
        };
        // Never read: the rename's hash is not content on record.
        let mut unread = FileChange::new(OsText::from("/w/notes.txt"), FileOp::Create);
        unread.mode = Some(0o644);
        recorded.note(&unread);
        recorded.note(&rename("notes.txt", "final.txt", b"draft\n"));
        assert!(!recorded.explains(&reconciled(&root.join("final.txt"), b"draft\n")));

        // Read as "a", changed to "b" unseen (same size, same tick), renamed.
        let mut read = FileChange::new(OsText::from("/w/x"), FileOp::Create);
        read.sha256 = Some(sha(b"a\n"));
        read.mode = Some(0o644);
        recorded.note(&read);
        recorded.note(&rename("x", "y", b"b\n"));
        assert!(!recorded.explains(&reconciled(&root.join("y"), b"b\n")));
        assert!(recorded.explains(&reconciled(&root.join("y"), b"a\n")));

        // A file there before the session, renamed: on record by its hash
        // alone, as under the ptrace observer.
        recorded.note(&rename("before", "y", b"c\n"));
        assert!(recorded.explains(&reconciled(&root.join("y"), b"c\n")));
        assert!(!recorded.explains(&reconciled(&root.join("y"), b"a\n")));
    }
}
