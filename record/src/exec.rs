//! What ran: execs, their exits, and tasks the observer did not trace.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::{ExecId, OsText, StepNo};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exec {
    pub exec_id: ExecId,
    #[serde(default)]
    pub parent_exec_id: Option<ExecId>,
    pub pid: i32,
    pub ppid: i32,
    pub uid: u32,
    pub path: OsText,
    pub argv: Vec<OsText>,
    pub cwd: OsText,
    #[serde(default)]
    pub env_names: Vec<OsText>,
    /// Keyed by names that are UTF-8 (a JSON object's keys are text):
    /// a variable whose name is not keeps only its name in `env_names`.
    #[serde(default)]
    pub env_values_nonsecret: BTreeMap<String, OsText>,
    /// In a live session, the step whose exec tree this exec is in (the
    /// observer knows: it descends from the step's first process). Left
    /// out when absent, so records made before steps existed verify
    /// unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepNo>,
    /// What the kernel executed, beyond `path` (empty for records made
    /// before 2026-11-25).
    #[serde(default, flatten)]
    pub image: ExecImage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exit {
    pub exec_id: ExecId,
    /// Exit code when the process exited normally.
    #[serde(default)]
    pub status: Option<i32>,
    /// Signal number when the process was killed by a signal.
    #[serde(default)]
    pub signal: Option<i32>,
}

/// A task in the sandbox that the observer did not trace, so nothing it
/// ran is on record: airlock killed its process when it found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Untraced {
    /// The exec responsible for it (its parent's; a thread's own
    /// process's), when that one was traced.
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    /// Its pid (a thread's tid) inside the sandbox.
    pub pid: i32,
    /// Its parent's pid inside the sandbox; 0 for a parent outside it.
    pub ppid: i32,
    pub uid: u32,
    /// Its name (/proc/PID/comm), as it set it.
    pub comm: OsText,
}

/// A file an exec involved besides its image (a `#!` script, the program
/// ld.so loads), as the process resolved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecFile {
    pub path: OsText,
    #[serde(default)]
    pub sha256: Option<String>,
}

/// What an exec ran, as the kernel saw it after the exec succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExecImage {
    /// SHA-256 of the executed image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// "file", "memfd" (memfd_create(2)) or "deleted": images of the last
    /// two kinds also have a file record with op "image" holding their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// For `#!` scripts: the script the interpreter (the image) was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<ExecFile>,
    /// When the image is the dynamic loader run directly: the program it loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded: Option<ExecFile>,
}
