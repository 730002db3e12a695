//! `airlock audit files SESSION --undo`: put the host directories a session
//! could write back as they were before it, from its signed record.
//!
//! The record says, for every path the session touched, what it held at
//! the end (the session's writes, replayed in order) and what it held
//! before the session (the first `original` record of the path; none means
//! the path did not exist). Undo first proves the record (chain and
//! signatures, by a trusted key, session finished), then checks that the
//! disk still holds the session's end state (a later change would be lost
//! silently otherwise), then makes every touched path hold its original
//! again: created paths removed, deleted ones re-created, renamed ones
//! moved back (the bytes on disk, when they are still there unchanged),
//! changed ones rewritten from the recorded content, modes set.
//!
//! It refuses, naming each path, where the disk changed since the session
//! ended, and where an original's content is not on record (past the size
//! cap, past the record budget, redacted, or missed) and the disk no longer
//! holds it: a half-undone workspace that looks undone would be worse than
//! none. `force` goes ahead anyway, overwriting the later changes and
//! leaving the unrestorable files as the session left them, listed.

use crate::FileChange;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::restore::{create_parents, write_file};
use crate::{
    AuditError, AuditEvent, EventKind, FileOp, OsText, RecordStore, SessionId, StoredEvent,
    TrustAnchor, WritableDir, chain,
};

/// What to undo, and how.
#[derive(Debug)]
pub struct UndoOptions<'a> {
    /// The key the record must be signed with.
    pub trust: &'a TrustAnchor,
    /// Go ahead despite later changes and unrestorable files.
    pub force: bool,
    /// Put the workspace back here instead of where the session had it.
    pub to: Option<&'a Path>,
}

/// Why undo did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UndoError {
    #[error(
        "no trusted key to verify session {0} with: pass --audit-key FILE (the audit key or its public key)"
    )]
    NoTrustedKey(SessionId),
    #[error("the record does not prove what to undo: {0}; check it with `airlock audit verify`")]
    NotVerified(String),
    #[error(
        "session {0} was recorded without the workspace's original files (airlock before undo existed, or a proxy or sidecar session): it cannot be undone; `airlock audit files {0} --restore DIR` gives its end state"
    )]
    NotUndoable(SessionId),
    #[error("--to {}: not a directory; give the directory to put the workspace back in", .0.display())]
    BadTarget(PathBuf),
    #[error(transparent)]
    Audit(#[from] AuditError),
}

/// What the record says one path held.
#[derive(Debug, Clone, PartialEq)]
enum State {
    Absent,
    /// A regular file (or, for records that cannot tell, a symlink: both
    /// are compared by the hash of their content or target).
    File(Content),
    Symlink(Content),
    Dir {
        mode: Option<u32>,
    },
    /// Some other object (FIFO, socket, device) or one whose original was
    /// missed: nothing to compare or restore.
    Unknown,
}

#[derive(Debug, Clone, PartialEq)]
struct Content {
    sha256: Option<String>,
    size: Option<u64>,
    /// The stored blob, when the record kept the content.
    stored: Option<String>,
    mode: Option<u32>,
    /// Why the content is not kept, when it is not.
    why_not_kept: Option<&'static str>,
}

impl Content {
    fn of(ev: &AuditEvent) -> Self {
        let AuditEvent::File(FileChange {
            op,
            size,
            sha256,
            stored_content,
            content_over_cap,
            content_over_budget,
            mode,
            ..
        }) = ev
        else {
            return Self::unknown();
        };
        let empty = *op == FileOp::Truncate && *size == Some(0) && sha256.is_none();
        let sha256 = match empty {
            true => Some(chain::sha256_hex(b"")),
            false => sha256.clone(),
        };
        // A blob that differs from the content's hash was redacted: it is
        // not what the file held.
        let stored = stored_content
            .clone()
            .filter(|s| Some(s) == sha256.as_ref());
        let why_not_kept = match () {
            _ if stored.is_some() || empty => None,
            _ if stored_content.is_some() => Some("its content was redacted in the record"),
            _ if *content_over_budget => {
                Some("content past the record budget (--audit-max-session)")
            }
            _ if *content_over_cap => Some("content past the size cap (--audit-max-file)"),
            _ => Some("content not on record"),
        };
        Self {
            sha256,
            size: if empty { Some(0) } else { *size },
            stored,
            mode: mode.map(|m| m & 0o7777),
            why_not_kept,
        }
    }

    fn unknown() -> Self {
        Self {
            sha256: None,
            size: None,
            stored: None,
            mode: None,
            why_not_kept: Some("content not on record"),
        }
    }
}

/// The sandbox path without a directory's trailing '/'. Every path undo
/// handles goes through here and [`host_path`], so a change of the
/// recorded path type stays local.
fn plain(path: &OsText) -> OsText {
    let bytes = path.as_bytes();
    let end = bytes.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    match &bytes[..end] {
        b"" => OsText::from("/"),
        p => OsText::from(p),
    }
}

/// `path` is `dir` or below it.
fn is_under(path: &OsText, dir: &OsText) -> bool {
    *dir == "/"
        || path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with(b"/"))
}

/// The state an `original` record describes.
fn original_state(ev: &AuditEvent) -> State {
    let AuditEvent::File(FileChange {
        path,
        size,
        sha256,
        mode,
        ..
    }) = ev
    else {
        return State::Unknown;
    };
    // A missed original has no mode (nor hash, nor size).
    if mode.is_none() {
        return State::Unknown;
    }
    let _ = (size, sha256);
    match mode.map(|m| m & libc::S_IFMT) {
        Some(libc::S_IFDIR) => State::Dir {
            mode: mode.map(|m| m & 0o7777),
        },
        Some(libc::S_IFLNK) => State::Symlink(Content::of(ev)),
        Some(libc::S_IFREG) => State::File(Content::of(ev)),
        _ if path.ends_with("/") => State::Dir { mode: None },
        _ => State::Unknown,
    }
}

/// Every touched path: what it held before the session, and at its end.
#[derive(Debug, Default)]
struct Story {
    before: BTreeMap<OsText, State>,
    end: BTreeMap<OsText, State>,
    /// Paths whose extended attributes the session changed.
    xattrs: BTreeSet<OsText>,
    /// The extended attributes each file that existed had before the
    /// session (its `original` records that name an attribute).
    xattrs_before: BTreeMap<OsText, BTreeMap<OsText, Content>>,
}

impl Story {
    fn of(events: &[StoredEvent]) -> Self {
        let mut s = Self::default();
        for ev in events {
            let AuditEvent::File(FileChange {
                path,
                op,
                rename_to,
                mode,
                xattr,
                ..
            }) = &ev.event
            else {
                continue;
            };
            let p = plain(path);
            // A path the session changed, deleted or renamed away whose
            // first record is none of its own creation and no `original`
            // was there before with its state not on record (a gVisor
            // session records no original; a record may have lost one):
            // unknown, never taken for "did not exist", which would make
            // undo remove a file the session found.
            if matches!(
                op,
                FileOp::Modify | FileOp::Truncate | FileOp::Delete | FileOp::Chmod | FileOp::Rename
            ) && !s.before.contains_key(&p)
                && !s.end.contains_key(&p)
            {
                s.before.insert(p.clone(), State::Unknown);
                s.end.insert(p.clone(), State::Unknown);
            }
            match op {
                FileOp::Original if xattr.is_some() => {
                    let name = xattr.as_ref().map(|x| x.name.clone()).unwrap_or_default();
                    s.xattrs_before
                        .entry(p)
                        .or_default()
                        .entry(name)
                        .or_insert_with(|| Content::of(&ev.event));
                }
                FileOp::Original => {
                    let state = original_state(&ev.event);
                    s.before.entry(p.clone()).or_insert_with(|| state.clone());
                    s.end.entry(p).or_insert(state);
                }
                // mkdir records the mode asked for, before the umask: not
                // what the directory got.
                FileOp::Create if path.ends_with("/") => {
                    s.end.insert(p, State::Dir { mode: None });
                }
                FileOp::Create | FileOp::Modify | FileOp::Truncate => {
                    let mut c = Content::of(&ev.event);
                    if c.mode.is_none()
                        && let Some(State::File(old)) = s.end.get(&p)
                    {
                        c.mode = old.mode;
                    }
                    s.end.insert(p, State::File(c));
                }
                FileOp::Rename => {
                    if let Some(to) = rename_to {
                        s.rename(&p, &plain(to));
                    }
                }
                FileOp::Delete => {
                    for below in s.below(&p) {
                        s.end.insert(below, State::Absent);
                    }
                    s.end.insert(p, State::Absent);
                }
                FileOp::Chmod => match s.end.get_mut(&p) {
                    Some(State::File(c)) => c.mode = mode.map(|m| m & 0o7777),
                    Some(State::Dir { mode: m }) => *m = mode.map(|m| m & 0o7777),
                    _ => {}
                },
                FileOp::Xattr => {
                    s.xattrs.insert(p);
                }
                FileOp::Image => {}
            }
        }
        s
    }

    /// Touched paths strictly below `dir`.
    fn below(&self, dir: &OsText) -> Vec<OsText> {
        let prefix = dir.with_suffix(b"/");
        self.end
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.strip_prefix(&prefix).is_some())
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn rename(&mut self, from: &OsText, to: &OsText) {
        let mut moved: Vec<(OsText, State)> = self
            .below(from)
            .into_iter()
            .map(|old| {
                let state = self.end.insert(old.clone(), State::Absent);
                (
                    to.with_suffix(&old.as_bytes()[from.as_bytes().len()..]),
                    state.unwrap_or(State::Unknown),
                )
            })
            .collect();
        let top = self.end.insert(from.clone(), State::Absent);
        moved.push((to.clone(), top.unwrap_or(State::Unknown)));
        // What `to` held is gone (replaced), and so is what was below it.
        for below in self.below(to) {
            self.end.insert(below, State::Absent);
        }
        for (path, state) in moved {
            self.end.insert(path, state);
        }
    }

    fn paths(&self) -> BTreeSet<OsText> {
        self.before.keys().chain(self.end.keys()).cloned().collect()
    }

    fn before(&self, path: &OsText) -> State {
        self.before.get(path).cloned().unwrap_or(State::Absent)
    }
}

/// What the record says a path held at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// Nothing: the path did not exist (before) or was gone (after).
    Absent,
    /// A file (or a symlink, whose content is its target).
    Content {
        /// The stored blob, when the record kept the bytes.
        stored: Option<String>,
        sha256: Option<String>,
        size: Option<u64>,
        /// Why the bytes are not kept, when they are not.
        why_not_kept: Option<&'static str>,
    },
    Directory,
    /// Not known (a missed original, a device node).
    Unknown,
}

/// What `path` held before the session and what the session left there,
/// following renames (an editor's write-then-rename included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeforeAfter {
    pub before: Held,
    pub after: Held,
}

/// [`BeforeAfter`] of `path`, from a session's file events.
pub fn before_and_after(events: &[StoredEvent], path: &OsText) -> BeforeAfter {
    let story = Story::of(events);
    let p = plain(path);
    let held = |s: Option<State>| match s {
        None | Some(State::Absent) => Held::Absent,
        Some(State::File(c) | State::Symlink(c)) => Held::Content {
            stored: c.stored,
            sha256: c.sha256,
            size: c.size,
            why_not_kept: c.why_not_kept,
        },
        Some(State::Dir { .. }) => Held::Directory,
        Some(State::Unknown) => Held::Unknown,
    };
    BeforeAfter {
        before: held(story.before.get(&p).cloned()),
        after: held(story.end.get(&p).cloned()),
    }
}

/// Where a sandbox path is on the host: through the directory the session
/// recorded for it, the workspace's replaced by `to`.
fn host_path(dirs: &[WritableDir], to: Option<&Path>, path: &OsText) -> Option<(usize, PathBuf)> {
    let (i, dir) = dirs
        .iter()
        .enumerate()
        .filter(|(_, d)| is_under(path, &d.sandbox))
        .max_by_key(|(_, d)| d.sandbox.as_bytes().len())?;
    let rest = &path.as_bytes()[dir.sandbox.as_bytes().len().min(path.as_bytes().len())..];
    let start = rest.iter().position(|&b| b != b'/').unwrap_or(rest.len());
    let rest = std::ffi::OsStr::from_bytes(&rest[start..]);
    let base = match (to, dir.workspace) {
        (Some(to), true) => to.to_path_buf(),
        _ => dir.host.as_path().to_path_buf(),
    };
    Some((
        i,
        if rest.is_empty() {
            base
        } else {
            base.join(rest)
        },
    ))
}

/// What is on disk at a path now.
#[derive(Debug, Clone, PartialEq)]
enum Disk {
    Absent,
    File { sha256: String, mode: u32 },
    Symlink { sha256: String },
    Dir { mode: u32 },
    Other,
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut f = fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn disk(path: &Path) -> Disk {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return Disk::Absent;
    };
    let mode = meta.mode() & 0o7777;
    let ft = meta.file_type();
    if ft.is_symlink() {
        match fs::read_link(path) {
            Ok(t) => Disk::Symlink {
                sha256: chain::sha256_hex(t.as_os_str().as_bytes()),
            },
            Err(_) => Disk::Other,
        }
    } else if ft.is_file() {
        match sha256_file(path) {
            Ok(sha256) => Disk::File { sha256, mode },
            Err(_) => Disk::Other,
        }
    } else if ft.is_dir() {
        Disk::Dir { mode }
    } else {
        Disk::Other
    }
}

/// Why the disk is not what the session left, if it is not.
fn differs(end: &State, now: &Disk) -> Option<String> {
    let mode_differs = |want: Option<u32>, have: u32| {
        want.filter(|w| *w != have)
            .map(|w| format!("mode {have:o}, the session left {w:o}"))
    };
    match (end, now) {
        (State::Unknown, _) => None,
        (State::Absent, Disk::Absent) => None,
        (State::Absent, _) => Some("exists, and the session left nothing there".into()),
        (_, Disk::Absent) => Some("is gone, and the session left it there".into()),
        (State::Dir { mode }, Disk::Dir { mode: have }) => mode_differs(*mode, *have),
        (State::Dir { .. }, _) => Some("is no longer a directory".into()),
        (State::File(c) | State::Symlink(c), Disk::File { sha256, mode }) => {
            match c.sha256.as_ref().is_some_and(|s| s != sha256) {
                true => Some("its content changed since the session ended".into()),
                false => mode_differs(c.mode, *mode),
            }
        }
        (State::File(c) | State::Symlink(c), Disk::Symlink { sha256 }) => c
            .sha256
            .as_ref()
            .is_some_and(|s| s != sha256)
            .then(|| "its target changed since the session ended".into()),
        (State::File(_) | State::Symlink(_), _) => Some("is no longer a file".into()),
    }
}

/// One thing undo did.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Done {
    Removed {
        path: OsText,
    },
    Restored {
        path: OsText,
        bytes: u64,
    },
    MovedBack {
        path: OsText,
        from: OsText,
    },
    Recreated {
        path: OsText,
    },
    Mode {
        path: OsText,
        mode: u32,
    },
    /// An extended attribute set back to its value before the session, or
    /// removed (the file did not have it).
    Attribute {
        path: OsText,
        name: OsText,
        removed: bool,
    },
    Unchanged {
        path: OsText,
    },
}

/// What undo found, and did.
#[derive(Debug, Default, Serialize)]
pub struct UndoReport {
    /// The verification it relied on, in one line.
    pub verified: String,
    /// (path, why): the disk changed there since the session ended.
    pub changed: Vec<(OsText, String)>,
    /// (path, why): the original cannot be put back.
    pub unrestorable: Vec<(OsText, String)>,
    /// Touched paths in no host directory (the sandbox's own /tmp, /dev/shm):
    /// gone with the sandbox, nothing to undo.
    pub outside: Vec<OsText>,
    /// Whether anything was changed on disk.
    pub applied: bool,
    pub done: Vec<Done>,
    /// (path, why): a step that failed while applying.
    pub failed: Vec<(OsText, String)>,
}

/// One touched path, mapped to the host.
#[derive(Debug)]
struct Item {
    path: OsText,
    dir: usize,
    host: PathBuf,
    before: State,
    now: Disk,
}

impl Item {
    fn depth(&self) -> usize {
        self.path.as_bytes().iter().filter(|&&b| b == b'/').count()
    }

    /// The original file's content is already on disk here.
    fn holds_original(&self) -> bool {
        match (&self.before, &self.now) {
            (State::File(c), Disk::File { sha256, .. }) => c.sha256.as_ref() == Some(sha256),
            (State::Symlink(c), Disk::Symlink { sha256 }) => c.sha256.as_ref() == Some(sha256),
            _ => false,
        }
    }
}

/// Undo session `id`.
pub fn undo(
    store: &dyn RecordStore,
    id: &SessionId,
    opts: &UndoOptions<'_>,
) -> Result<UndoReport, UndoError> {
    if matches!(opts.trust, TrustAnchor::None) {
        return Err(UndoError::NoTrustedKey(id.clone()));
    }
    let check = store.verify(id, opts.trust)?;
    if !check.is_intact() || check.key_trust != crate::KeyTrust::Trusted {
        return Err(UndoError::NotVerified(check.summary()));
    }
    if let Some(to) = opts.to
        && !to.is_dir()
    {
        return Err(UndoError::BadTarget(to.to_path_buf()));
    }
    let summary = store.session(id)?;
    let dirs = summary.info.writable_dirs;
    if dirs.is_empty() {
        return Err(UndoError::NotUndoable(id.clone()));
    }
    let events = store.events(id, Some(&[EventKind::File]))?;
    let story = Story::of(&events);
    let mut report = UndoReport {
        verified: check.summary(),
        ..UndoReport::default()
    };
    let mut items = Vec::new();
    for path in story.paths() {
        let Some((dir, host)) = host_path(&dirs, opts.to, &path) else {
            report.outside.push(path);
            continue;
        };
        let end = story.end.get(&path).cloned().unwrap_or(State::Unknown);
        let now = disk(&host);
        if let Some(why) = differs(&end, &now) {
            report.changed.push((path.clone(), why));
        }
        items.push(Item {
            before: story.before(&path),
            path,
            dir,
            host,
            now,
        });
    }
    let moves = plan_moves(&items);
    let unknown = Unknown::of(summary.info.isolation);
    for item in &items {
        let why = match (&item.before, story.end.get(&item.path)) {
            (State::Unknown, _) => Some(unknown.before),
            // A file the session found, renamed here: removing it as
            // created would lose it.
            (State::Absent, Some(State::Unknown)) => Some(unknown.moved_here),
            (State::File(c) | State::Symlink(c), _)
                if c.stored.is_none()
                    && !item.holds_original()
                    && !moves.contains_key(&item.path) =>
            {
                c.why_not_kept
            }
            _ if story.xattrs.contains(&item.path)
                && story
                    .xattrs_before
                    .get(&item.path)
                    .is_some_and(|before| before.values().any(|c| c.stored.is_none())) =>
            {
                Some("the value an extended attribute had before the session is not on record")
            }
            _ => None,
        };
        if let Some(why) = why {
            report
                .unrestorable
                .push((item.path.clone(), why.to_string()));
        }
    }
    if (!report.changed.is_empty() || !report.unrestorable.is_empty()) && !opts.force {
        return Ok(report);
    }
    let skip: BTreeSet<OsText> = report.unrestorable.iter().map(|(p, _)| p.clone()).collect();
    report.applied = true;
    let sources = Sources {
        store,
        dirs: &dirs,
        to: opts.to,
        story: &story,
    };
    apply(sources, &items, &moves, &skip, &mut report);
    Ok(report)
}

/// Why a path whose state before the session is unknown cannot be put
/// back, in the words of the isolation that recorded it.
struct Unknown {
    before: &'static str,
    moved_here: &'static str,
}

impl Unknown {
    fn of(isolation: crate::Isolation) -> Self {
        match isolation {
            crate::Isolation::Gvisor => Self {
                before: "it was there before the session, and a gVisor session records no original of it; put it back from a backup, or `--force` to undo the rest",
                moved_here: "it holds a file that was there before the session, moved here, and a gVisor session records no original of it; put it back from a backup, or `--force` to undo the rest",
            },
            crate::Isolation::Namespaces => Self {
                before: "what it held before the session is not on record",
                moved_here: "it holds a file that was there before the session, moved here, whose state before is not on record",
            },
        }
    }
}

/// Files to move back rather than rewrite: the original's bytes are on disk,
/// unchanged, at a path undo would otherwise remove or replace (a rename),
/// within the same host directory. (destination path -> source item index)
fn plan_moves(items: &[Item]) -> BTreeMap<OsText, usize> {
    let mut sources: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        if let Disk::File { sha256, .. } = &item.now
            && !item.holds_original()
        {
            sources.entry(sha256.as_str()).or_default().push(i);
        }
    }
    let mut out = BTreeMap::new();
    for item in items {
        let State::File(c) = &item.before else {
            continue;
        };
        if item.holds_original() {
            continue;
        }
        let Some(candidates) = c.sha256.as_deref().and_then(|s| sources.get_mut(s)) else {
            continue;
        };
        if let Some(pos) = candidates.iter().position(|&i| items[i].dir == item.dir) {
            out.insert(item.path.clone(), candidates.remove(pos));
        }
    }
    out
}

/// `host` relative to the root of its host directory.
fn relative(root: &Path, host: &Path) -> PathBuf {
    host.strip_prefix(root).unwrap_or(host).to_path_buf()
}

/// Never act through a symlink between the host directory and `host`.
fn parents_are_real(root: &Path, host: &Path) -> bool {
    let rel = relative(root, host);
    let mut cur = root.to_path_buf();
    let parents: Vec<_> = rel
        .parent()
        .map(|p| p.components().collect())
        .unwrap_or_default();
    for c in parents {
        cur.push(c);
        if fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink()) {
            return false;
        }
    }
    true
}

/// What applying an undo reads: the store, where each directory is on the
/// host (`to` for the workspace, when given) and the session's story.
#[derive(Clone, Copy)]
struct Sources<'a> {
    store: &'a dyn RecordStore,
    dirs: &'a [WritableDir],
    to: Option<&'a Path>,
    story: &'a Story,
}

fn apply(
    sources: Sources<'_>,
    items: &[Item],
    moves: &BTreeMap<OsText, usize>,
    skip: &BTreeSet<OsText>,
    report: &mut UndoReport,
) {
    let Sources {
        store,
        dirs,
        to,
        story,
    } = sources;
    let root = |i: usize| match (to, dirs[i].workspace) {
        (Some(to), true) => to.to_path_buf(),
        _ => dirs[i].host.as_path().to_path_buf(),
    };
    let fail = |report: &mut UndoReport, path: &OsText, why: String| {
        report.failed.push((path.clone(), why));
    };
    // 1. Files to move back leave for a staging directory first, so a
    // swap (a <-> b) never overwrites what it still needs.
    let mut staged: BTreeMap<OsText, PathBuf> = BTreeMap::new();
    for (n, (dest, &src)) in moves.iter().enumerate() {
        let item = &items[src];
        let stage = root(item.dir).join(format!(".airlock-undo-{}", std::process::id()));
        if !stage.exists()
            && let Err(e) = fs::DirBuilder::new().mode(0o700).create(&stage)
        {
            fail(
                report,
                &item.path,
                format!("cannot create {}: {e}", stage.display()),
            );
            continue;
        }
        let parked = stage.join(n.to_string());
        match parents_are_real(&root(item.dir), &item.host).then(|| fs::rename(&item.host, &parked))
        {
            Some(Ok(())) => {
                staged.insert(dest.clone(), parked);
            }
            Some(Err(e)) => fail(report, &item.path, format!("cannot move it: {e}")),
            None => fail(report, &item.path, "a parent directory is a symlink".into()),
        }
    }
    // 2. What must go, deepest first.
    let mut order: Vec<&Item> = items.iter().filter(|i| !skip.contains(&i.path)).collect();
    order.sort_by_key(|i| std::cmp::Reverse(i.depth()));
    for item in &order {
        let now = disk(&item.host);
        let keep = match (&item.before, &now) {
            (_, Disk::Absent) => true,
            (State::Dir { .. }, Disk::Dir { .. }) => true,
            (State::File(_), Disk::File { .. }) => true,
            (State::Symlink(_), Disk::Symlink { .. }) => item.holds_original(),
            _ => false,
        };
        if keep {
            continue;
        }
        if !parents_are_real(&root(item.dir), &item.host) {
            fail(report, &item.path, "a parent directory is a symlink".into());
            continue;
        }
        let result = match now {
            Disk::Dir { .. } => fs::remove_dir(&item.host),
            _ => fs::remove_file(&item.host),
        };
        match result {
            Ok(()) => report.done.push(Done::Removed {
                path: item.path.clone(),
            }),
            Err(e) => fail(report, &item.path, format!("cannot remove it: {e}")),
        }
    }
    // 3. What must be there again, shallowest first.
    order.reverse();
    let mut dir_modes = Vec::new();
    for item in &order {
        if matches!(item.before, State::Absent | State::Unknown) {
            continue;
        }
        let base = root(item.dir);
        let rel = relative(&base, &item.host);
        if !rel.as_os_str().is_empty()
            && let Err(e) = create_parents(&base, &rel)
        {
            fail(report, &item.path, e.to_string());
            continue;
        }
        match &item.before {
            State::Absent | State::Unknown => {}
            State::Dir { mode } => {
                if !item.host.is_dir() {
                    match fs::create_dir(&item.host) {
                        Ok(()) => report.done.push(Done::Recreated {
                            path: item.path.clone(),
                        }),
                        Err(e) => {
                            fail(report, &item.path, format!("cannot create it: {e}"));
                            continue;
                        }
                    }
                }
                if story.xattrs.contains(&item.path) {
                    put_back_xattrs(store, story, report, item);
                }
                if let Some(m) = mode {
                    dir_modes.push((item, *m));
                }
            }
            State::Symlink(c) => {
                if item.holds_original() {
                    continue;
                }
                match read_blob(store, c) {
                    Ok(target) => {
                        let target = std::ffi::OsStr::from_bytes(&target);
                        match std::os::unix::fs::symlink(target, &item.host) {
                            Ok(()) => report.done.push(Done::Recreated {
                                path: item.path.clone(),
                            }),
                            Err(e) => fail(report, &item.path, format!("cannot link it: {e}")),
                        }
                    }
                    Err(why) => fail(report, &item.path, why),
                }
            }
            State::File(c) => {
                let done = if let Some(parked) = staged.get(&item.path) {
                    fs::rename(parked, &item.host)
                        .map(|()| Done::MovedBack {
                            path: item.path.clone(),
                            from: items[moves[&item.path]].path.clone(),
                        })
                        .map_err(|e| format!("cannot move it back: {e}"))
                } else if matches!(disk(&item.host), Disk::File { ref sha256, .. } if c.sha256.as_ref() == Some(sha256))
                {
                    Ok(Done::Unchanged {
                        path: item.path.clone(),
                    })
                } else {
                    read_blob(store, c).and_then(|data| {
                        write_file(&item.host, &data, None)
                            .map(|()| Done::Restored {
                                path: item.path.clone(),
                                bytes: data.len() as u64,
                            })
                            .map_err(|e| e.to_string())
                    })
                };
                match done {
                    Ok(Done::Unchanged { .. }) => {}
                    Ok(d) => report.done.push(d),
                    Err(why) => {
                        fail(report, &item.path, why);
                        continue;
                    }
                }
                if story.xattrs.contains(&item.path) {
                    put_back_xattrs(store, story, report, item);
                }
                if let Some(m) = c.mode {
                    set_attributes(report, &item.path, &item.host, m);
                }
            }
        }
    }
    // A directory's mode last: a read-only one must not stop what goes in.
    for (item, m) in dir_modes.into_iter().rev() {
        set_attributes(report, &item.path, &item.host, m);
    }
    for i in 0..dirs.len() {
        let _ = fs::remove_dir(root(i).join(format!(".airlock-undo-{}", std::process::id())));
    }
}

/// Put back what the record says a file's attributes were: its mode
/// (permission bits; never setuid, setgid or sticky, as restore). The
/// recorded extended attributes go here too, once they are on record.
fn set_attributes(report: &mut UndoReport, path: &OsText, host: &Path, mode: u32) {
    let have = fs::symlink_metadata(host).map(|m| m.mode() & 0o7777).ok();
    let want = mode & 0o777;
    if have == Some(want) {
        return;
    }
    match fs::set_permissions(host, fs::Permissions::from_mode(want)) {
        Ok(()) => report.done.push(Done::Mode {
            path: path.clone(),
            mode: want,
        }),
        Err(e) => report
            .failed
            .push((path.clone(), format!("cannot set its mode: {e}"))),
    }
}

/// Give a file that existed before the session the extended attributes it
/// had then: each recorded one set to its value, every other one it has now
/// removed (set before its mode, which an ACL changes).
fn put_back_xattrs(store: &dyn RecordStore, story: &Story, report: &mut UndoReport, item: &Item) {
    let before = story.xattrs_before.get(&item.path);
    let mut wanted: Vec<(OsText, Option<Vec<u8>>)> = Vec::new();
    for (name, c) in before.into_iter().flatten() {
        match read_blob(store, c) {
            Ok(value) => wanted.push((name.clone(), Some(value))),
            Err(why) => report.failed.push((item.path.clone(), why)),
        }
    }
    let mut names = vec![0u8; 65536];
    if let Ok(n) = rustix::fs::llistxattr(&item.host, &mut names[..]) {
        for name in names[..n].split(|&b| b == 0).filter(|n| !n.is_empty()) {
            let name = OsText::from(name);
            if before.is_none_or(|b| !b.contains_key(&name)) {
                wanted.push((name, None));
            }
        }
    }
    for ((name, value), (_, done)) in wanted
        .iter()
        .zip(crate::restore::set_xattrs(&item.host, &wanted, None))
    {
        match done {
            Ok(()) => report.done.push(Done::Attribute {
                path: item.path.clone(),
                name: name.clone(),
                removed: value.is_none(),
            }),
            Err(e) => report.failed.push((
                item.path.clone(),
                format!("cannot put back its attribute {name}: {e}"),
            )),
        }
    }
}

/// The recorded content, checked against its hash.
fn read_blob(store: &dyn RecordStore, c: &Content) -> Result<Vec<u8>, String> {
    let Some(sha) = &c.stored else {
        return Err(c
            .why_not_kept
            .unwrap_or("content not on record")
            .to_string());
    };
    match store.content(sha) {
        Ok(Some(d)) if chain::sha256_hex(&d) == *sha => Ok(d),
        Ok(Some(_)) => Err("stored content was altered; run `airlock audit verify`".into()),
        Ok(None) => Err("stored content is missing; run `airlock audit verify`".into()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, op: FileOp, sha: Option<&str>, rename_to: Option<&str>) -> StoredEvent {
        StoredEvent {
            seq: crate::Seq(1),
            ts_us: 0,
            kind: EventKind::File,
            exec_id: None,
            event: AuditEvent::File(FileChange {
                exec_id: None,
                path: path.into(),
                op,
                size: sha.map(|_| 1),
                sha256: sha.map(String::from),
                content: None,
                rename_to: rename_to.map(OsText::from),
                mode: (op == FileOp::Original).then_some(libc::S_IFREG | 0o644),
                stored_content: sha.map(String::from),
                content_over_cap: false,
                content_over_budget: false,
                identity: Default::default(),
                xattr: None,
            }),
        }
    }

    #[test]
    fn a_rename_over_a_file_is_told_back_to_both_originals() {
        let story = Story::of(&[
            file("/ws/a", FileOp::Original, Some("aa"), None),
            file("/ws/b", FileOp::Original, Some("bb"), None),
            file("/ws/a", FileOp::Rename, None, Some("/ws/b")),
            file("/ws/c", FileOp::Create, Some("cc"), None),
        ]);
        assert!(
            matches!(story.before(&"/ws/a".into()), State::File(c) if c.sha256.as_deref() == Some("aa"))
        );
        assert!(
            matches!(story.before(&"/ws/b".into()), State::File(c) if c.sha256.as_deref() == Some("bb"))
        );
        assert_eq!(story.before(&"/ws/c".into()), State::Absent);
        assert_eq!(story.end[&OsText::from("/ws/a")], State::Absent);
        assert!(
            matches!(&story.end[&OsText::from("/ws/b")], State::File(c) if c.sha256.as_deref() == Some("aa"))
        );
    }

    #[test]
    fn a_missed_original_is_never_taken_for_a_file_that_did_not_exist() {
        let mut missed = file("/ws/a", FileOp::Original, None, None);
        if let AuditEvent::File(FileChange { mode, .. }) = &mut missed.event {
            *mode = None;
        }
        let story = Story::of(&[missed, file("/ws/a", FileOp::Modify, Some("aa"), None)]);
        assert_eq!(story.before(&"/ws/a".into()), State::Unknown);
    }

    /// A gVisor record has no `original`: a path whose first record is a
    /// change, a delete, a rename away or a chmod was there before the
    /// session, in a state not on record; only a create says it was not.
    #[test]
    fn a_file_changed_with_no_original_is_never_taken_for_one_that_did_not_exist() {
        let story = Story::of(&[
            file("/ws/mod", FileOp::Modify, Some("mm"), None),
            file("/ws/del", FileOp::Delete, None, None),
            file("/ws/mode", FileOp::Chmod, None, None),
            file("/ws/mv", FileOp::Rename, None, Some("/ws/moved")),
            file("/ws/new", FileOp::Create, Some("nn"), None),
            file("/ws/new", FileOp::Modify, Some("n2"), None),
        ]);
        for path in ["/ws/mod", "/ws/del", "/ws/mode", "/ws/mv"] {
            assert_eq!(story.before(&path.into()), State::Unknown, "{path}");
        }
        // The file now at /ws/moved is the one found at /ws/mv.
        assert_eq!(story.before(&"/ws/moved".into()), State::Absent);
        assert_eq!(story.end[&OsText::from("/ws/moved")], State::Unknown);
        assert_eq!(story.before(&"/ws/new".into()), State::Absent);
    }

    #[test]
    fn changed_attributes_of_a_file_that_existed_are_known() {
        let mut xattr = file("/ws/a", FileOp::Xattr, Some("vv"), None);
        if let AuditEvent::File(FileChange { mode, .. }) = &mut xattr.event {
            *mode = None;
        }
        let story = Story::of(&[file("/ws/a", FileOp::Original, Some("aa"), None), xattr]);
        assert!(story.xattrs.contains(&OsText::from("/ws/a")));
    }

    #[test]
    fn names_that_are_not_utf8_map_to_the_same_bytes_on_the_host() {
        let dirs = [WritableDir {
            sandbox: "/ws".into(),
            host: "/host/ws".into(),
            workspace: true,
        }];
        let name = OsText::from(b"/ws/run\xff.sh".to_vec());
        assert_eq!(
            host_path(&dirs, None, &name).map(|(_, p)| p.into_os_string().into_encoded_bytes()),
            Some(b"/host/ws/run\xff.sh".to_vec())
        );
    }

    #[test]
    fn paths_map_to_the_innermost_host_directory() {
        let dirs = [
            WritableDir {
                sandbox: "/ws".into(),
                host: "/ws".into(),
                workspace: true,
            },
            WritableDir {
                sandbox: "/ws/cache".into(),
                host: "/elsewhere".into(),
                workspace: false,
            },
        ];
        assert_eq!(
            host_path(&dirs, None, &"/ws/cache/x".into()).map(|(_, p)| p),
            Some(PathBuf::from("/elsewhere/x"))
        );
        assert_eq!(
            host_path(&dirs, Some(Path::new("/copy")), &"/ws/a/b".into()).map(|(_, p)| p),
            Some(PathBuf::from("/copy/a/b"))
        );
        assert_eq!(host_path(&dirs, None, &"/tmp/x".into()), None);
        assert_eq!(host_path(&dirs, None, &"/wsx".into()), None);
    }
}
