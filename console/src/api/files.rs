//! Files written: every version, its content, and diffs between versions.

use airlock_record::FileChange;
use std::collections::HashMap;

use airlock_record::{AuditEvent, EventKind, FileOp, OsText, SessionId, Xattr};
use http::Response;
use serde::Serialize;
use serde_json::json;
use similar::{ChangeTag, TextDiff};

use super::{Params, resolve};
use crate::ConsoleError;
use crate::render;
use crate::respond::{self, Body};
use crate::server::State;

#[derive(Debug, Serialize)]
struct Version {
    seq: u64,
    ts_us: i64,
    op: &'static str,
    size: Option<u64>,
    sha256: Option<String>,
    /// The stored blob's SHA-256: what `content/…` serves. `None` when the
    /// record kept only the hash (over the cap) or nothing at all.
    content: Option<String>,
    over_cap: bool,
    /// Hash only because the session's record budget was spent.
    over_budget: bool,
    exec_id: Option<String>,
    /// In its printed form, as `path`.
    rename_to: Option<String>,
    /// On the version a rename brought to this path (op "rename"): where it
    /// came from. Its content is what the source last held on record, so
    /// an editor's write-then-rename diffs like a write in place.
    #[serde(skip_serializing_if = "Option::is_none")]
    renamed_from: Option<String>,
    /// The mode on record (a chmod's, an ACL's, a version's).
    mode: Option<u32>,
    /// For op `xattr`: the attribute; `content` is then its value.
    xattr: Option<Attribute>,
}

/// An extended attribute as the page shows it: its name printed as the CLI
/// prints it (see [`OsText`]).
#[derive(Debug, Serialize)]
struct Attribute {
    name: String,
    removed: bool,
    acl: Option<String>,
}

impl From<Xattr> for Attribute {
    fn from(x: Xattr) -> Self {
        Self {
            name: x.name.to_string(),
            removed: x.removed,
            acl: x.acl,
        }
    }
}

#[derive(Debug, Serialize)]
struct File {
    /// In its printed form (see [`OsText`]), as the CLI prints it: two
    /// different names never look the same.
    path: String,
    versions: Vec<Version>,
}

/// What a path last held on record: (stored, sha256, size, over_cap,
/// over_budget), carried along renames.
type Held = (Option<String>, Option<String>, Option<u64>, bool, bool);

pub(super) fn list(state: &State, id: &str) -> Result<Response<Body>, ConsoleError> {
    let id = resolve(state, id)?;
    let mut files: Vec<File> = Vec::new();
    let mut by_path: HashMap<OsText, usize> = HashMap::new();
    let mut held: HashMap<OsText, Held> = HashMap::new();
    let mut file_at = |files: &mut Vec<File>, path: &OsText| -> usize {
        *by_path.entry(path.clone()).or_insert_with(|| {
            files.push(File {
                path: path.to_string(),
                versions: Vec::new(),
            });
            files.len() - 1
        })
    };
    for ev in state.store.events(&id, Some(&[EventKind::File]))? {
        let AuditEvent::File(FileChange {
            exec_id,
            path,
            op,
            size,
            sha256,
            rename_to,
            stored_content,
            content_over_cap,
            content_over_budget,
            mode,
            xattr,
            ..
        }) = ev.event
        else {
            continue;
        };
        let exec_id = exec_id.map(|e| e.as_str().to_owned());
        if op.carries_content() {
            held.insert(
                path.clone(),
                (
                    stored_content.clone(),
                    sha256.clone(),
                    size,
                    content_over_cap,
                    content_over_budget,
                ),
            );
        }
        if let (FileOp::Rename, Some(to)) = (op, &rename_to) {
            let carried = held.remove(&path);
            let j = file_at(&mut files, to);
            let (content, sha256, size, over_cap, over_budget) =
                carried.clone().unwrap_or((None, None, None, false, false));
            files[j].versions.push(Version {
                seq: ev.seq.get(),
                ts_us: ev.ts_us,
                op: op.as_str(),
                size,
                sha256,
                content,
                over_cap,
                over_budget,
                exec_id: exec_id.clone(),
                rename_to: None,
                renamed_from: Some(path.to_string()),
                mode,
                xattr: None,
            });
            match carried {
                Some(c) => held.insert(to.clone(), c),
                None => held.remove(to),
            };
        }
        let i = file_at(&mut files, &path);
        files[i].versions.push(Version {
            seq: ev.seq.get(),
            ts_us: ev.ts_us,
            op: op.as_str(),
            size,
            sha256,
            content: stored_content,
            over_cap: content_over_cap,
            over_budget: content_over_budget,
            exec_id,
            rename_to: rename_to.map(|to| to.to_string()),
            renamed_from: None,
            mode,
            xattr: xattr.map(Attribute::from),
        });
    }
    Ok(respond::json(&json!({ "files": files })))
}

/// A content blob the session recorded (only that session's: the URL
/// names both, and a blob of another session is not found here).
fn blob(state: &State, id: &SessionId, sha: &str) -> Result<Vec<u8>, ConsoleError> {
    let recorded_here = state
        .store
        .events(id, Some(&[EventKind::File]))?
        .iter()
        .any(
            |ev| matches!(&ev.event, AuditEvent::File(FileChange { stored_content: Some(s), .. }) if s == sha),
        );
    let missing = || ConsoleError::NotFound(format!("session {id} recorded no content {sha}"));
    if !recorded_here {
        return Err(missing());
    }
    state.store.content(sha)?.ok_or_else(missing)
}

pub(super) fn content(
    state: &State,
    id: &str,
    sha: &str,
    params: &Params,
) -> Result<Response<Body>, ConsoleError> {
    let id = resolve(state, id)?;
    let data = blob(state, &id, sha)?;
    if params.get("view").is_some() {
        return Ok(respond::json(&render::bytes(Some(&data), false)));
    }
    let short: String = sha.chars().take(16).collect();
    Ok(respond::download(
        data,
        &format!("airlock-{id}-{short}.bin"),
    ))
}

#[derive(Debug, Serialize)]
struct Line {
    op: &'static str,
    text: String,
}

/// `from` is a blob or `empty` (a file the session created).
pub(super) fn diff(
    state: &State,
    id: &str,
    params: &Params,
) -> Result<Response<Body>, ConsoleError> {
    let id = resolve(state, id)?;
    let (Some(from), Some(to)) = (params.get("from"), params.get("to")) else {
        return Err(ConsoleError::BadRequest(
            "diff needs from=SHA (or from=empty) and to=SHA".into(),
        ));
    };
    let old = if from == "empty" {
        Vec::new()
    } else {
        blob(state, &id, from)?
    };
    let new = blob(state, &id, to)?;
    let (Ok(old), Ok(new)) = (std::str::from_utf8(&old), std::str::from_utf8(&new)) else {
        return Ok(respond::json(&json!({ "lines": [], "binary": true })));
    };
    let lines: Vec<Line> = TextDiff::from_lines(old, new)
        .iter_all_changes()
        .map(|change| Line {
            op: match change.tag() {
                ChangeTag::Equal => " ",
                ChangeTag::Insert => "+",
                ChangeTag::Delete => "-",
            },
            text: change.value().trim_end_matches('\n').to_owned(),
        })
        .collect();
    Ok(respond::json(&json!({ "lines": lines, "binary": false })))
}
