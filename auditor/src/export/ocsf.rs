//! OCSF (Open Cybersecurity Schema Framework) events for a SIEM: one JSON
//! object per recorded event, each in the OCSF class that fits its kind
//! (docs/ocsf.md has the table). Every event carries the session, its
//! labels, the node, the verdict, the rule and the exec that caused it, and
//! a `metadata.uid` (session id and seq) that a SIEM deduplicates on.
//!
//! Only what the store holds is rendered, so secrets are scrubbed as in every
//! other export: the proxy and the recorder's redactor replaced them before
//! anything was stored. Bodies, file contents and terminal output are left
//! out (HAR, `files --restore` and asciicast carry them).

mod cursor;
mod envelope;
mod mcp;
mod network;
mod stream;
mod system;

use std::collections::HashMap;

use serde_json::Value;

use crate::{AuditEvent, Exec, ExecId, SessionSummary, StoredEvent};

pub use cursor::{Cursor, CursorError};
pub use envelope::OCSF_VERSION;
pub use stream::OcsfStream;

/// What an exec was, for the events it caused: OCSF names the process
/// behind an event, not just its id.
#[derive(Debug, Clone)]
struct ExecInfo {
    pid: i32,
    path: String,
    cmd_line: String,
}

/// One session's events as OCSF: the session's summary, and the execs seen
/// so far (an event names the exec that caused it; the exec's own record
/// came earlier).
#[derive(Debug)]
pub struct SessionMapper {
    summary: SessionSummary,
    execs: HashMap<ExecId, ExecInfo>,
}

impl SessionMapper {
    pub fn new(summary: SessionSummary) -> Self {
        Self {
            summary,
            execs: HashMap::new(),
        }
    }

    pub fn summary(&self) -> &SessionSummary {
        &self.summary
    }

    /// Learns what `ev` tells about execs, without mapping it: for the
    /// events before where a resumed export starts.
    pub fn learn(&mut self, ev: &StoredEvent) {
        if let AuditEvent::Exec(exec) = &ev.event {
            self.execs.insert(exec.exec_id.clone(), exec_info(exec));
        }
    }

    /// The OCSF event for `ev`, or None for a kind that has no place in a
    /// SIEM (terminal output and resizes).
    pub fn event(&mut self, ev: &StoredEvent) -> Option<Value> {
        self.learn(ev);
        let cx = envelope::Context {
            summary: &self.summary,
            execs: &self.execs,
            ev,
        };
        match &ev.event {
            AuditEvent::Http(http) => Some(network::http(&cx, http)),
            AuditEvent::Dns(dns) => Some(network::dns(&cx, dns)),
            AuditEvent::Tcp(tcp) => Some(network::tcp(&cx, tcp)),
            AuditEvent::ApprovalRequested(a) => Some(network::approval_requested(&cx, a)),
            AuditEvent::ApprovalDecided(a) => Some(network::approval_decided(&cx, a)),
            AuditEvent::Exec(exec) => Some(system::exec(&cx, exec)),
            AuditEvent::Exit(exit) => Some(system::exit(&cx, exit)),
            AuditEvent::File(file) => Some(system::file(&cx, file)),
            AuditEvent::Untraced(u) => Some(system::untraced(&cx, u)),
            AuditEvent::StepStart(step) => Some(system::step_start(&cx, step)),
            AuditEvent::StepEnd(step) => Some(system::step_end(&cx, step)),
            AuditEvent::Note(note) => Some(envelope::note(&cx, note)),
            AuditEvent::McpCall(call) => Some(mcp::call(&cx, call)),
            AuditEvent::Output(_) | AuditEvent::Resize(_) => None,
        }
    }
}

fn exec_info(exec: &Exec) -> ExecInfo {
    ExecInfo {
        pid: exec.pid,
        path: exec.path.text_or_escaped().into_owned(),
        cmd_line: command_line(exec.argv.iter().map(|a| a.text_or_escaped())),
    }
}

/// argv as one line, each argument that needs it in single quotes, as a
/// shell would take it back.
fn command_line<S: AsRef<str>>(argv: impl Iterator<Item = S>) -> String {
    argv.map(|a| {
        let a = a.as_ref();
        let plain = !a.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
        if plain {
            a.to_owned()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    })
    .collect::<Vec<_>>()
    .join(" ")
}

/// Writes `events` of one session as OCSF JSON lines (the one-shot export).
pub fn write(
    summary: &SessionSummary,
    events: &[StoredEvent],
    out: &mut dyn std::io::Write,
) -> Result<(), crate::AuditError> {
    let mut mapper = SessionMapper::new(summary.clone());
    for ev in events {
        if let Some(value) = mapper.event(ev) {
            serde_json::to_writer(&mut *out, &value)?;
            out.write_all(b"\n")
                .map_err(crate::AuditError::io("cannot write OCSF export"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
