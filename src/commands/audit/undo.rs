//! `airlock audit files SESSION --undo` and `--diff PATH`: the workspace put
//! back as it was before the session, and one file's before and after.
//! The work is `airlock_auditor::undo`; this prints it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use airlock_auditor::undo::{self, BeforeAfter, Done, Held, UndoError, UndoOptions};
use airlock_auditor::{EventKind, OsText, RecordStore, SessionId, diff, escape, humanize};
use anyhow::{Result, anyhow};

use super::{USAGE, default_trust};

/// Exit status when undo refused or could not finish: nothing wrong with the
/// command line, but the workspace is not (all) back.
use crate::exit::REFUSED;

pub(super) fn run(
    store: &dyn RecordStore,
    id: &SessionId,
    audit_key: Option<PathBuf>,
    force: bool,
    to: Option<&Path>,
) -> Result<ExitCode> {
    let trust = match default_trust(audit_key) {
        Ok(t) => t,
        Err(e) => return Ok(fail(USAGE, &e.to_string())),
    };
    let opts = UndoOptions {
        trust: &trust,
        force,
        to,
    };
    let report = match undo::undo(store, id, &opts) {
        Ok(r) => r,
        Err(e @ UndoError::NotVerified(_)) => return Ok(fail(REFUSED, &e.to_string())),
        Err(e @ UndoError::Audit(_)) => return Err(e.into()),
        Err(e) => return Ok(fail(USAGE, &e.to_string())),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "verified: {}", escape::text(&report.verified))?;
    for (path, why) in &report.changed {
        writeln!(
            out,
            "changed since the session  {}: {}",
            path.escaped(),
            escape::text(why)
        )?;
    }
    for (path, why) in &report.unrestorable {
        writeln!(
            out,
            "cannot be restored         {}: {}",
            path.escaped(),
            escape::text(why)
        )?;
    }
    for path in &report.outside {
        writeln!(
            out,
            "not on the host            {} (the sandbox's own, gone with it)",
            path.escaped()
        )?;
    }
    if !report.applied {
        let mut why = Vec::new();
        if !report.changed.is_empty() {
            why.push(format!(
                "{} path(s) changed since the session ended",
                report.changed.len()
            ));
        }
        if !report.unrestorable.is_empty() {
            why.push(format!(
                "{} file(s) cannot be restored",
                report.unrestorable.len()
            ));
        }
        return Ok(fail(
            REFUSED,
            &format!(
                "undo refused, nothing was changed: {} (listed above); --force goes ahead, overwriting later changes and leaving unrestorable files as the session left them",
                why.join(", ")
            ),
        ));
    }
    for done in &report.done {
        let line = match done {
            Done::Removed { path } => format!("removed    {}", path.escaped()),
            Done::Restored { path, bytes } => {
                format!("restored   {} ({})", path.escaped(), humanize::size(*bytes))
            }
            Done::MovedBack { path, from } => {
                format!("moved back {} <- {}", path.escaped(), from.escaped())
            }
            Done::Recreated { path } => format!("recreated  {}", path.escaped()),
            Done::Mode { path, mode } => format!("mode       {} {mode:o}", path.escaped()),
            Done::Unchanged { path } => format!("unchanged  {}", path.escaped()),
            Done::Attribute {
                path,
                name,
                removed,
            } => format!(
                "xattr      {} {}{}",
                path.escaped(),
                name.escaped(),
                if *removed { " removed" } else { "" }
            ),
        };
        writeln!(out, "{line}")?;
    }
    for (path, why) in &report.failed {
        writeln!(out, "failed     {}: {}", path.escaped(), escape::text(why))?;
    }
    let left = report.unrestorable.len();
    if !report.failed.is_empty() || left > 0 {
        return Ok(fail(
            REFUSED,
            &format!(
                "undo incomplete: {} step(s) failed, {left} file(s) left as the session left them (listed above)",
                report.failed.len()
            ),
        ));
    }
    writeln!(out, "undone: {} change(s)", report.done.len())?;
    Ok(ExitCode::SUCCESS)
}

fn fail(code: u8, line: &str) -> ExitCode {
    eprintln!("airlock: {line}");
    ExitCode::from(code)
}

/// What `path` held before the session, and what the session left there.
pub(super) fn diff(store: &dyn RecordStore, id: &SessionId, path: &OsText) -> Result<ExitCode> {
    let events = store.events(id, Some(&[EventKind::File]))?;
    let BeforeAfter { before, after } = undo::before_and_after(&events, path);
    // The name in its printed form (escaped once, here).
    let shown = path.escaped();
    let plain = shown.trim_end_matches('/');
    if before == Held::Absent && after == Held::Absent {
        return Ok(fail(
            USAGE,
            &format!(
                "session {id} recorded nothing at {shown}; `airlock audit files {id}` lists the paths it did"
            ),
        ));
    }
    let mut out = std::io::stdout().lock();
    let (old, old_name) = side(store, &mut out, plain, &before, "before the session")?;
    let (new, new_name) = side(store, &mut out, plain, &after, "after the session")?;
    match diff::unified(&old, &new, &old_name, &new_name) {
        Some(text) if text.is_empty() => writeln!(
            out,
            "{plain} holds the same content before and after the session"
        )?,
        Some(text) => {
            for line in text.lines() {
                writeln!(out, "{}", escape::text(line))?;
            }
        }
        None => writeln!(
            out,
            "binary content: {} -> {} ({} -> {}); no line diff",
            escape::text(&old_name),
            escape::text(&new_name),
            humanize::size(old.len() as u64),
            humanize::size(new.len() as u64)
        )?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The bytes of one side of a diff and its header name; a side whose bytes
/// are not on record is shown empty, with a note saying why. `path` is
/// already in its printed form.
fn side(
    store: &dyn RecordStore,
    out: &mut impl Write,
    path: &str,
    held: &Held,
    when: &str,
) -> Result<(Vec<u8>, String)> {
    let note = |out: &mut dyn Write, why: &str| {
        writeln!(out, "note: what {path} held {when} is not shown: {why}")
    };
    Ok(match held {
        Held::Content {
            stored: Some(sha), ..
        } => {
            let data = store.content(sha)?.ok_or_else(|| {
                anyhow!("the stored content {sha} is missing; run `airlock audit verify`")
            })?;
            (data, format!("{path} ({when})"))
        }
        Held::Content {
            why_not_kept,
            sha256,
            ..
        } => {
            note(
                out,
                &format!(
                    "{} (sha256 {})",
                    why_not_kept.unwrap_or("content not on record"),
                    sha256.as_deref().unwrap_or("unknown")
                ),
            )?;
            (Vec::new(), format!("{path} ({when}, not on record)"))
        }
        Held::Absent => (
            Vec::new(),
            format!("/dev/null ({path} did not exist {when})"),
        ),
        Held::Directory => (Vec::new(), format!("{path}/ (a directory {when})")),
        Held::Unknown => {
            note(
                out,
                "it is not on record (its original was missed, or a gVisor session, which records none)",
            )?;
            (Vec::new(), format!("{path} ({when}, not on record)"))
        }
    })
}
