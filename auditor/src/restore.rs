//! Rebuilds the files a session wrote, as they were when it ended, by
//! replaying its file events in seq order into a directory.

use crate::FileChange;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::{AuditError, AuditEvent, FileOp, OsText, RecordStore, SessionId, StoredEvent, chain};

#[derive(Debug, Clone, PartialEq)]
enum Data {
    /// Content is in the store under this SHA-256.
    Stored(String),
    /// Truncated to zero bytes without a captured content.
    Empty,
    /// Only the hash is known (content not captured or over the size cap).
    HashOnly {
        sha256: Option<String>,
        size: Option<u64>,
        /// Because the session's record budget was spent.
        over_budget: bool,
    },
    /// Only its attributes (mode, extended attributes) are on record.
    AttributesOnly,
}

#[derive(Debug, Clone, PartialEq)]
struct FileState {
    data: Data,
    mode: Option<u32>,
    /// Extended attributes by name: the value's data, or None if removed.
    xattrs: BTreeMap<OsText, Option<Data>>,
}

impl FileState {
    fn attributes_only() -> Self {
        Self {
            data: Data::AttributesOnly,
            mode: None,
            xattrs: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RestoreReport {
    /// (original path, bytes written)
    pub restored: Vec<(OsText, u64)>,
    /// (original path, sha256, size): known only by hash, not restored.
    pub hash_only: Vec<(OsText, Option<String>, Option<u64>)>,
    /// Those of `hash_only` whose content was not kept because the session's
    /// record budget (`--audit-max-session`) was spent.
    pub over_budget: BTreeSet<OsText>,
    /// Paths that existed during the session and were deleted by its end.
    pub deleted: Vec<OsText>,
    /// (original path, why it was not restored).
    pub refused: Vec<(OsText, String)>,
    /// (original path, attribute name): extended attributes set on restored files.
    pub xattrs: Vec<(OsText, OsText)>,
    /// (original path, attribute name, why): recorded extended attributes
    /// of restored files that could not be set.
    pub xattrs_refused: Vec<(OsText, OsText, String)>,
}

/// Where `audit files --restore` puts executed images that had no path on
/// disk (memfd, deleted), one file per exec.
pub const EXEC_IMAGES: &str = ".airlock-exec-images";

/// The state of every written path at the end of the session.
fn final_state(events: &[StoredEvent]) -> (BTreeMap<OsText, FileState>, BTreeSet<OsText>) {
    let mut files: BTreeMap<OsText, FileState> = BTreeMap::new();
    let mut deleted = BTreeSet::new();
    // What files held before the session: not its writes, but what a file
    // it moves without writing it takes along to its new name.
    let mut originals: BTreeMap<OsText, FileState> = BTreeMap::new();
    for ev in events {
        let AuditEvent::File(FileChange {
            exec_id,
            path,
            op,
            size,
            sha256,
            rename_to,
            mode,
            stored_content,
            content_over_budget,
            xattr,
            ..
        }) = &ev.event
        else {
            continue;
        };
        let data_from_event = || match stored_content {
            Some(sha) => Data::Stored(sha.clone()),
            None if *op == FileOp::Truncate && *size == Some(0) => Data::Empty,
            None => Data::HashOnly {
                sha256: sha256.clone(),
                size: *size,
                over_budget: *content_over_budget,
            },
        };
        match op {
            FileOp::Create | FileOp::Modify | FileOp::Truncate => {
                // New content keeps the file's mode and attributes.
                let old = files.remove(path);
                files.insert(
                    path.clone(),
                    FileState {
                        data: data_from_event(),
                        mode: mode.or(old.as_ref().and_then(|f| f.mode)),
                        xattrs: old.map(|f| f.xattrs).unwrap_or_default(),
                    },
                );
                deleted.remove(path);
            }
            FileOp::Rename => {
                let moved = files.remove(path).or_else(|| originals.remove(path));
                if let Some(to) = rename_to {
                    // A directory moves with everything below it.
                    let below: Vec<OsText> = files
                        .keys()
                        .filter(|p| p.strip_prefix(path).is_some_and(|r| r.starts_with(b"/")))
                        .cloned()
                        .collect();
                    for old in below {
                        if let Some(state) = files.remove(&old) {
                            let new = to.with_suffix(&old.as_bytes()[path.as_bytes().len()..]);
                            deleted.remove(&new);
                            files.insert(new, state);
                        }
                    }
                    let state = match moved {
                        // A rename event that carries content describes the
                        // destination after the move; trust it over history.
                        Some(s) if stored_content.is_none() => s,
                        Some(s) => FileState {
                            data: data_from_event(),
                            mode: mode.or(s.mode),
                            xattrs: s.xattrs,
                        },
                        None => FileState {
                            data: data_from_event(),
                            mode: *mode,
                            xattrs: BTreeMap::new(),
                        },
                    };
                    files.insert(to.clone(), state);
                    deleted.remove(to);
                }
            }
            FileOp::Delete => {
                // A directory ("d/") goes with everything below it.
                let gone: Vec<OsText> = files
                    .keys()
                    .filter(|p| {
                        *p == path || (path.ends_with("/") && p.strip_prefix(path).is_some())
                    })
                    .cloned()
                    .collect();
                for p in gone {
                    files.remove(&p);
                    deleted.insert(p);
                }
            }
            FileOp::Image => {
                // An executed image with no path on disk: kept apart, by exec.
                let id = exec_id.as_ref().map(|e| e.as_str()).unwrap_or("unknown");
                files.insert(
                    format!("/{EXEC_IMAGES}/exec{id}").into(),
                    FileState {
                        data: data_from_event(),
                        mode: Some(0o755),
                        xattrs: BTreeMap::new(),
                    },
                );
            }
            FileOp::Chmod => {
                let f = files
                    .entry(path.clone())
                    .or_insert_with(FileState::attributes_only);
                f.mode = *mode;
            }
            FileOp::Xattr => {
                let f = files
                    .entry(path.clone())
                    .or_insert_with(FileState::attributes_only);
                if let Some(x) = xattr {
                    let value = (!x.removed).then(data_from_event);
                    f.xattrs.insert(x.name.clone(), value);
                }
                if mode.is_some() {
                    f.mode = *mode;
                }
            }
            // What a file held before the session: the end state is the
            // session's writes (`undo` goes back to these), and a rename's.
            FileOp::Original => {
                originals.insert(
                    path.clone(),
                    FileState {
                        data: data_from_event(),
                        // The permission bits: the original's mode is st_mode.
                        mode: mode.map(|m| m & 0o7777),
                        xattrs: BTreeMap::new(),
                    },
                );
            }
        }
    }
    (files, deleted)
}

/// Why a recorded path is not restored under the restore directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    #[error("path contains '..'")]
    ParentDir,
    #[error("path has a prefix")]
    Prefix,
    #[error("path is empty or the root directory")]
    Empty,
}

/// Maps an absolute sandbox path to a path relative to the restore
/// directory, refusing anything that could escape it.
pub fn relative_path(path: &OsText) -> Result<PathBuf, PathError> {
    let mut out = PathBuf::new();
    for c in path.as_path().components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(p) => out.push(p),
            Component::ParentDir => return Err(PathError::ParentDir),
            Component::Prefix(_) => return Err(PathError::Prefix),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(PathError::Empty);
    }
    Ok(out)
}

/// Why one file could not be written under the restore directory.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    #[error("{} is a symlink", .0.display())]
    Symlink(PathBuf),
    #[error("{} exists and is not a directory", .0.display())]
    NotDirectory(PathBuf),
    #[error("cannot create {}: {source}", .path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot chmod {}: {source}", .path.display())]
    Chmod {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Refuses to write through a symlink anywhere under `dir` (a pre-existing
/// link could point outside it).
pub(crate) fn create_parents(dir: &Path, rel: &Path) -> Result<(), WriteError> {
    let mut cur = dir.to_path_buf();
    let parents: Vec<_> = rel
        .parent()
        .map(|p| p.components().collect())
        .unwrap_or_default();
    for c in parents {
        cur.push(c);
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => return Err(WriteError::Symlink(cur)),
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(WriteError::NotDirectory(cur)),
            Err(_) => fs::create_dir(&cur).map_err(|source| WriteError::CreateDir {
                path: cur.clone(),
                source,
            })?,
        }
    }
    Ok(())
}

pub(crate) fn write_file(dest: &Path, data: &[u8], mode: Option<u32>) -> Result<(), WriteError> {
    let write = |source| WriteError::Write {
        path: dest.to_path_buf(),
        source,
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        // O_NOFOLLOW: never write through a symlink at the final component
        // (see open(2)).
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(dest)
        .map_err(write)?;
    f.write_all(data).map_err(write)?;
    if let Some(m) = mode {
        // Permission bits only: never recreate setuid/setgid/sticky bits.
        fs::set_permissions(dest, fs::Permissions::from_mode(m & 0o777)).map_err(|source| {
            WriteError::Chmod {
                path: dest.to_path_buf(),
                source,
            }
        })?;
    }
    Ok(())
}

/// Restores the session's files under `dir` (created if missing).
pub fn restore(
    store: &dyn RecordStore,
    session: &SessionId,
    dir: &Path,
) -> Result<RestoreReport, AuditError> {
    let events = store.events(session, Some(&[crate::EventKind::File]))?;
    let (files, deleted) = final_state(&events);
    fs::create_dir_all(dir).map_err(AuditError::io(format!(
        "cannot create restore directory {}",
        dir.display()
    )))?;
    let mut report = RestoreReport {
        deleted: deleted.into_iter().collect(),
        ..RestoreReport::default()
    };
    for (path, state) in files {
        if state.data == Data::AttributesOnly {
            report.refused.push((
                path.clone(),
                "only its mode or extended attributes are on record, not its content".into(),
            ));
            not_set(&mut report, &path, &state);
            continue;
        }
        if matches!(state.data, Data::HashOnly { .. }) {
            not_set(&mut report, &path, &state);
        }
        let rel = match relative_path(&path) {
            Ok(r) => r,
            Err(why) => {
                report.refused.push((path, why.to_string()));
                continue;
            }
        };
        let data = match &state.data {
            Data::Empty | Data::AttributesOnly => Vec::new(),
            Data::Stored(sha) => match store.content(sha)? {
                Some(d) if chain::sha256_hex(&d) == *sha => d,
                Some(_) => {
                    report.refused.push((
                        path,
                        "stored content was altered; run `airlock audit verify`".into(),
                    ));
                    continue;
                }
                None => {
                    report.refused.push((
                        path,
                        "stored content is missing; run `airlock audit verify`".into(),
                    ));
                    continue;
                }
            },
            Data::HashOnly {
                sha256,
                size,
                over_budget,
            } => {
                if *over_budget {
                    report.over_budget.insert(path.clone());
                }
                report.hash_only.push((path, sha256.clone(), *size));
                continue;
            }
        };
        let dest = dir.join(&rel);
        let result = create_parents(dir, &rel).and_then(|()| write_file(&dest, &data, state.mode));
        match result {
            Ok(()) => report.restored.push((path.clone(), data.len() as u64)),
            Err(why) => {
                report.refused.push((path, why.to_string()));
                continue;
            }
        }
        if state.xattrs.is_empty() {
            continue;
        }
        let mut wanted = Vec::new();
        for (name, value) in &state.xattrs {
            let value = match value {
                None => None,
                Some(Data::Stored(sha)) => match stored(store, sha)? {
                    Ok(v) => Some(v),
                    Err(why) => {
                        report
                            .xattrs_refused
                            .push((path.clone(), name.clone(), why.into()));
                        continue;
                    }
                },
                Some(Data::Empty) => Some(Vec::new()),
                Some(Data::HashOnly { .. } | Data::AttributesOnly) => {
                    report.xattrs_refused.push((
                        path.clone(),
                        name.clone(),
                        "its value is known by hash only (over the cap or the budget)".into(),
                    ));
                    continue;
                }
            };
            wanted.push((name.clone(), value));
        }
        for (name, outcome) in set_xattrs(&dest, &wanted, state.mode) {
            match outcome {
                Ok(()) => report.xattrs.push((path.clone(), name)),
                Err(e) => report
                    .xattrs_refused
                    .push((path.clone(), name, e.to_string())),
            }
        }
    }
    Ok(report)
}

/// The extended attributes of a file that is not restored are not set
/// either: say so, one by one.
fn not_set(report: &mut RestoreReport, path: &OsText, state: &FileState) {
    for name in state.xattrs.keys() {
        report.xattrs_refused.push((
            path.clone(),
            name.clone(),
            "the file itself is not restored".into(),
        ));
    }
}

/// A stored attribute value `sha`, checked against its hash; Err says why not.
fn stored(store: &dyn RecordStore, sha: &str) -> Result<Result<Vec<u8>, &'static str>, AuditError> {
    Ok(match store.content(sha)? {
        Some(d) if chain::sha256_hex(&d) == sha => Ok(d),
        Some(_) => Err("stored content was altered; run `airlock audit verify`"),
        None => Err("stored content is missing; run `airlock audit verify`"),
    })
}

/// Give the file at `dest` (never through a symlink there) the extended
/// attributes `wanted` (name, value; None: remove it), then `mode` again:
/// an ACL sets the mode's bits, and a chmod recorded after the ACL changed
/// the ACL's mask, which setting the final mode last restores. What the
/// kernel refuses (security.* and trusted.* need privileges; a filesystem
/// may not support them) is returned with its error, never dropped.
pub fn set_xattrs(
    dest: &Path,
    wanted: &[(OsText, Option<Vec<u8>>)],
    mode: Option<u32>,
) -> Vec<(OsText, std::io::Result<()>)> {
    let mut out = Vec::new();
    for (name, value) in wanted {
        let done = match value {
            Some(v) => {
                rustix::fs::lsetxattr(dest, name.as_bytes(), v, rustix::fs::XattrFlags::empty())
            }
            None => match rustix::fs::lremovexattr(dest, name.as_bytes()) {
                Err(rustix::io::Errno::NODATA) => Ok(()),
                other => other,
            },
        };
        out.push((name.clone(), done.map_err(std::io::Error::from)));
    }
    if let Some(m) = mode {
        // Permission bits only, as write_file.
        if let Err(e) = fs::set_permissions(dest, fs::Permissions::from_mode(m & 0o777)) {
            out.push(("(the mode)".into(), Err(e)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::relative_path;
    use crate::OsText;

    fn rel(p: &str) -> Result<std::path::PathBuf, super::PathError> {
        relative_path(&OsText::from(p))
    }

    #[test]
    fn escapes_are_refused() {
        assert_eq!(rel("/work/a.txt").ok(), Some("work/a.txt".into()));
        assert!(rel("/work/../../etc/passwd").is_err());
        assert!(rel("/").is_err());
        assert!(rel("../x").is_err());
    }
}
