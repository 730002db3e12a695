//! The record's one event type, tagged by `kind`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::*;

/// One thing that happened inside (or at the edge of) the sandbox.
///
/// Serialized with an internal `kind` tag whose values are exactly
/// `exec | exit | file | dns | tcp | http | output | note | resize |
/// step_start | step_end | approval_requested | approval_decided |
/// untraced | mcp_call` (see
/// [`EventKind`]). Callers must pass already-redacted values (e.g.
/// `"[secret:GITHUB_TOKEN]"`); the recorder's redactor scrubs
/// registered secrets again as a second line of defence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum AuditEvent {
    Exec(Exec),
    Exit(Exit),
    File(FileChange),
    Dns(DnsQuery),
    Tcp(TcpConnection),
    Http(HttpExchange),
    /// Terminal output, for asciicast export.
    Output(Output),
    /// A session-level note from airlock itself (e.g. "policy reloaded").
    Note(Note),
    /// A task in the sandbox that the observer did not trace, so nothing it
    /// ran is on record: airlock killed its process when it found it.
    Untraced(Untraced),
    /// The command's terminal got a new window size (the caller resized
    /// theirs), for asciicast export.
    Resize(Resize),
    #[serde(rename = "approval_requested")]
    /// A request an `[[ask]]` rule held for a person's decision. Recorded
    /// before anyone is asked, so no one can be asked off the record.
    ApprovalRequested(ApprovalRequested),
    #[serde(rename = "approval_decided")]
    /// The end of a held request's wait: a person's decision, or none in time.
    ApprovalDecided(ApprovalDecided),
    #[serde(rename = "step_start")]
    /// A live session (`airlock session exec`) began a step: one command
    /// run in the session's sandbox, with the caller's label (an agent's
    /// tool-call id or turn number; untrusted text, like everything the
    /// caller chooses).
    StepStart(StepStart),
    #[serde(rename = "step_end")]
    /// A step's command ended. Processes it left in the background may
    /// still run; their events stay the step's (they are in its exec tree).
    StepEnd(StepEnd),
    #[serde(rename = "mcp_call")]
    /// One JSON-RPC message to an MCP server a policy grants with `mcp`:
    /// a tool call and its verdict, or a `tools/list` answer in full.
    McpCall(McpCall),
}

impl AuditEvent {
    pub fn kind(&self) -> EventKind {
        match self {
            Self::Exec(Exec { .. }) => EventKind::Exec,
            Self::Exit(Exit { .. }) => EventKind::Exit,
            Self::File(FileChange { .. }) => EventKind::File,
            Self::Dns(DnsQuery { .. }) => EventKind::Dns,
            Self::Tcp(TcpConnection { .. }) => EventKind::Tcp,
            Self::Http(HttpExchange { .. }) => EventKind::Http,
            Self::Output(Output { .. }) => EventKind::Output,
            Self::Note(Note { .. }) => EventKind::Note,
            Self::Untraced(Untraced { .. }) => EventKind::Untraced,
            Self::Resize(Resize { .. }) => EventKind::Resize,
            Self::StepStart(StepStart { .. }) => EventKind::StepStart,
            Self::StepEnd(StepEnd { .. }) => EventKind::StepEnd,
            Self::ApprovalRequested(ApprovalRequested { .. }) => EventKind::ApprovalRequested,
            Self::ApprovalDecided(ApprovalDecided { .. }) => EventKind::ApprovalDecided,
            Self::McpCall(McpCall { .. }) => EventKind::McpCall,
        }
    }

    pub fn exec_id(&self) -> Option<&ExecId> {
        match self {
            Self::Exec(Exec { exec_id, .. }) | Self::Exit(Exit { exec_id, .. }) => Some(exec_id),
            Self::File(FileChange { exec_id, .. })
            | Self::Dns(DnsQuery { exec_id, .. })
            | Self::Tcp(TcpConnection { exec_id, .. })
            | Self::Http(HttpExchange { exec_id, .. })
            | Self::ApprovalRequested(ApprovalRequested { exec_id, .. })
            | Self::ApprovalDecided(ApprovalDecided { exec_id, .. })
            | Self::McpCall(McpCall { exec_id, .. })
            | Self::Untraced(Untraced { exec_id, .. }) => exec_id.as_ref(),
            Self::Output(Output { .. })
            | Self::Note(Note { .. })
            | Self::Resize(Resize { .. })
            | Self::StepStart(StepStart { .. })
            | Self::StepEnd(StepEnd { .. }) => None,
        }
    }

    /// The step the event names itself, in a live session. Other events
    /// belong to the step of their exec (the timeline's steps).
    pub fn step(&self) -> Option<StepNo> {
        match self {
            Self::Exec(Exec { step, .. }) | Self::Output(Output { step, .. }) => *step,
            Self::StepStart(StepStart { step, .. }) | Self::StepEnd(StepEnd { step, .. }) => {
                Some(*step)
            }
            Self::Exit(Exit { .. })
            | Self::File(FileChange { .. })
            | Self::Dns(DnsQuery { .. })
            | Self::Tcp(TcpConnection { .. })
            | Self::Http(HttpExchange { .. })
            | Self::ApprovalRequested(ApprovalRequested { .. })
            | Self::ApprovalDecided(ApprovalDecided { .. })
            | Self::McpCall(McpCall { .. })
            | Self::Note(Note { .. })
            | Self::Untraced(Untraced { .. })
            | Self::Resize(Resize { .. }) => None,
        }
    }
}

/// The `kind` column. Names are part of the on-disk and JSONL formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    Exec,
    Exit,
    File,
    Dns,
    Tcp,
    Http,
    Output,
    Note,
    Resize,
    StepStart,
    StepEnd,
    ApprovalRequested,
    ApprovalDecided,
    Untraced,
    McpCall,
}

impl EventKind {
    pub const ALL: [Self; 15] = [
        Self::Exec,
        Self::Exit,
        Self::File,
        Self::Dns,
        Self::Tcp,
        Self::Http,
        Self::Output,
        Self::Note,
        Self::Resize,
        Self::StepStart,
        Self::StepEnd,
        Self::ApprovalRequested,
        Self::ApprovalDecided,
        Self::Untraced,
        Self::McpCall,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exec => "exec",
            Self::Exit => "exit",
            Self::File => "file",
            Self::Dns => "dns",
            Self::Tcp => "tcp",
            Self::Http => "http",
            Self::Output => "output",
            Self::Note => "note",
            Self::Resize => "resize",
            Self::StepStart => "step_start",
            Self::StepEnd => "step_end",
            Self::ApprovalRequested => "approval_requested",
            Self::ApprovalDecided => "approval_decided",
            Self::Untraced => "untraced",
            Self::McpCall => "mcp_call",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(text.trim()))
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
