//! A live session's steps, what commands printed, and airlock's own notes.

use serde::{Deserialize, Serialize};

use crate::StepNo;
use crate::codec::b64;

/// Terminal output, for asciicast export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Output {
    pub stream: OutputStream,
    #[serde(with = "b64")]
    pub data: Vec<u8>,
    /// In a live session, the step whose stdout or stderr this is. Left
    /// out when absent (as for `Exec::step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepNo>,
}

/// A session-level note from airlock itself (e.g. "policy reloaded").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Note {
    pub text: String,
}

/// The command's terminal got a new window size (the caller resized
/// theirs), for asciicast export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resize {
    pub cols: u16,
    pub rows: u16,
}

/// A live session (`airlock session exec`) began a step: one command
/// run in the session's sandbox, with the caller's label (an agent's
/// tool-call id or turn number; untrusted text, like everything the
/// caller chooses).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepStart {
    pub step: StepNo,
    #[serde(default)]
    pub label: Option<String>,
    pub command: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// The command ran on a pty.
    #[serde(default)]
    pub tty: bool,
}

/// A step's command ended. Processes it left in the background may
/// still run; their events stay the step's (they are in its exec tree).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEnd {
    pub step: StepNo,
    /// Exit code when the command exited normally.
    #[serde(default)]
    pub exit_status: Option<i32>,
    /// Signal number when the command was killed by a signal.
    #[serde(default)]
    pub signal: Option<i32>,
    /// The step's own timeout killed it.
    #[serde(default)]
    pub timed_out: bool,
    /// From the step's start to its end.
    pub duration_ms: f64,
    /// Why airlock ended it, if it did (e.g. "killed: the client
    /// disconnected").
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    Stdout,
    Stderr,
}
