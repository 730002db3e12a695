//! Rebuilds the files a session wrote, as they were when it ended, by
//! replaying its file events in seq order into a directory.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::{AuditError, AuditEvent, AuditStore, FileOp, SessionId, StoredEvent, chain};

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
}

#[derive(Debug, Clone, PartialEq)]
struct FileState {
    data: Data,
    mode: Option<u32>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RestoreReport {
    /// (original path, bytes written)
    pub restored: Vec<(String, u64)>,
    /// (original path, sha256, size): known only by hash, not restored.
    pub hash_only: Vec<(String, Option<String>, Option<u64>)>,
    /// Those of `hash_only` whose content was not kept because the session's
    /// record budget (`--audit-max-session`) was spent.
    pub over_budget: BTreeSet<String>,
    /// Paths that existed during the session and were deleted by its end.
    pub deleted: Vec<String>,
    /// (original path, why it was not restored).
    pub refused: Vec<(String, String)>,
}

/// Where `audit files --restore` puts executed images that had no path on
/// disk (memfd, deleted), one file per exec.
pub const EXEC_IMAGES: &str = ".airlock-exec-images";

/// The state of every written path at the end of the session.
fn final_state(events: &[StoredEvent]) -> (BTreeMap<String, FileState>, BTreeSet<String>) {
    let mut files: BTreeMap<String, FileState> = BTreeMap::new();
    let mut deleted = BTreeSet::new();
    for ev in events {
        let AuditEvent::File {
            exec_id,
            path,
            op,
            size,
            sha256,
            rename_to,
            mode,
            stored_content,
            content_over_budget,
            ..
        } = &ev.event
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
                let old_mode = files.get(path).and_then(|f| f.mode);
                files.insert(
                    path.clone(),
                    FileState {
                        data: data_from_event(),
                        mode: mode.or(old_mode),
                    },
                );
                deleted.remove(path);
            }
            FileOp::Rename => {
                let moved = files.remove(path);
                if let Some(to) = rename_to {
                    // A directory moves with everything below it.
                    let below: Vec<String> = files
                        .keys()
                        .filter(|p| {
                            p.strip_prefix(path.as_str())
                                .is_some_and(|r| r.starts_with('/'))
                        })
                        .cloned()
                        .collect();
                    for old in below {
                        if let Some(state) = files.remove(&old) {
                            let new = format!("{to}{}", &old[path.len()..]);
                            deleted.remove(&new);
                            files.insert(new, state);
                        }
                    }
                    let state = match moved {
                        // A rename event that carries content describes the
                        // destination after the move; trust it over history.
                        Some(s) if stored_content.is_none() => s,
                        _ => FileState {
                            data: data_from_event(),
                            mode: *mode,
                        },
                    };
                    files.insert(to.clone(), state);
                    deleted.remove(to);
                }
            }
            FileOp::Delete => {
                // A directory ("d/") goes with everything below it.
                let gone: Vec<String> = files
                    .keys()
                    .filter(|p| *p == path || (path.ends_with('/') && p.starts_with(path.as_str())))
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
                    format!("/{EXEC_IMAGES}/exec{id}"),
                    FileState {
                        data: data_from_event(),
                        mode: Some(0o755),
                    },
                );
            }
            FileOp::Chmod => {
                if let Some(f) = files.get_mut(path) {
                    f.mode = *mode;
                }
            }
            // What a file held before the session: the end state is the
            // session's writes (`undo` goes back to these).
            FileOp::Original => {}
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
pub fn relative_path(path: &str) -> Result<PathBuf, PathError> {
    let mut out = PathBuf::new();
    for c in Path::new(path).components() {
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
    store: &AuditStore,
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
        let rel = match relative_path(&path) {
            Ok(r) => r,
            Err(why) => {
                report.refused.push((path, why.to_string()));
                continue;
            }
        };
        let data = match &state.data {
            Data::Empty => Vec::new(),
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
        let result =
            create_parents(dir, &rel).and_then(|()| write_file(&dir.join(&rel), &data, state.mode));
        match result {
            Ok(()) => report.restored.push((path, data.len() as u64)),
            Err(why) => report.refused.push((path, why.to_string())),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::relative_path;

    #[test]
    fn escapes_are_refused() {
        assert_eq!(relative_path("/work/a.txt").ok(), Some("work/a.txt".into()));
        assert!(relative_path("/work/../../etc/passwd").is_err());
        assert!(relative_path("/").is_err());
        assert!(relative_path("../x").is_err());
    }
}
