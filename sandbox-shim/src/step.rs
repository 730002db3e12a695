//! Live sessions: a sandbox spawned with `SandboxSpec::session` runs nothing
//! until [`crate::Sandbox::start_session`]; then each [`StepRequest`] runs one
//! command in it, any number of times, concurrently. Inside, a launcher
//! process (`launcher.rs`) forks one holder per step, which runs the step's
//! command and reaps everything the command leaves behind.
//!
//! This module is the caller's side: the types the binary uses, and the
//! handle ([`StepControl`]) that sends requests over the control channel.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use crate::channel::{self, Message};
use crate::error::ShimError;
use crate::outcome::ExitKind;
use crate::pty::WindowSize;

/// One step of a session: its number, chosen by the caller (1, 2, 3...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepId(pub u64);

impl std::fmt::Display for StepId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "step#{}", self.0)
    }
}

/// What one step runs.
#[derive(Debug)]
pub struct StepRequest {
    pub step: StepId,
    /// argv; argv[0] is resolved via the PATH of `env`. Must not be empty.
    pub argv: Vec<OsString>,
    /// The whole environment of this command (nothing is inherited).
    pub env: Vec<(OsString, OsString)>,
    /// The working directory inside the sandbox (relative: to the
    /// workspace). None: the workspace.
    pub cwd: Option<PathBuf>,
    /// Some: run on a new pseudo-terminal of the sandbox's devpts with this
    /// window size; its master comes back as [`StepEvent::Terminal`].
    pub terminal: Option<WindowSize>,
}

/// The command's stdin, stdout and stderr.
#[derive(Debug)]
pub enum StepStdio {
    /// The command's 0, 1 and 2 (e.g. pipes). The sandbox gets the only
    /// copies: [`StepControl::exec`] takes them.
    Pipes([OwnedFd; 3]),
    /// The step's pseudo-terminal (the request's `terminal` must be Some).
    Terminal,
}

/// What the sandbox says about a step, as it happens.
#[derive(Debug)]
pub enum StepEvent {
    /// The step's pty master (only for `terminal: Some`), before the command runs.
    Terminal { step: StepId, master: OwnedFd },
    /// The step's command (its first process) ended: its wait status.
    Exited { step: StepId, status: ExitKind },
    /// The step could not be started at all (e.g. fork failed); the text says why.
    Failed { step: StepId, message: String },
}

/// Why a step request was refused before anything ran.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StepError {
    #[error("{step}: empty command: pass the program to run")]
    EmptyCommand { step: StepId },
    #[error(
        "{step}: step numbers above {MAX_STEP} do not fit the holder's process name: number steps from 1"
    )]
    NumberTooLarge { step: StepId },
    #[error(
        "{step}: a terminal step takes StepStdio::Terminal and a step without one takes StepStdio::Pipes: pass the matching pair"
    )]
    StdioMismatch { step: StepId },
    #[error("{step}: {what} contains a NUL byte: remove it")]
    Nul { step: StepId, what: &'static str },
    #[error("{step}: environment variable name {name:?} is empty or contains '=': fix the name")]
    EnvName { step: StepId, name: String },
    #[error(
        "{step}: the request takes {len} bytes, more than the {max}-byte limit: pass a shorter command line or environment"
    )]
    TooLarge {
        step: StepId,
        len: usize,
        max: usize,
    },
}

/// Prefix of a holder's process name (prctl(2) PR_SET_NAME): `airlock:s<N>`
/// names the holder of step N. The observer reads it back
/// ([`step_of_holder_name`]) to tag the step's processes; the kernel keeps
/// 15 bytes of a name, hence [`MAX_STEP`].
const HOLDER_PREFIX: &str = "airlock:s";

/// The largest step number whose holder name fits 15 bytes.
pub(crate) const MAX_STEP: u64 = 999_999;

/// The process name of step `step`'s holder.
pub(crate) fn holder_name(step: StepId) -> String {
    format!("{HOLDER_PREFIX}{}", step.0)
}

/// The step whose holder has this process name (/proc/PID/comm, with or
/// without its newline), if it is one.
pub(crate) fn step_of_holder_name(comm: &str) -> Option<StepId> {
    let digits = comm.trim_end_matches('\n').strip_prefix(HOLDER_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n <= MAX_STEP).map(StepId)
}

/// The handle for running steps in a live session (from
/// [`crate::Sandbox::start_session`]). Cheap to clone; any thread may use it.
#[derive(Debug, Clone)]
pub struct StepControl {
    chan: Arc<OwnedFd>,
}

impl StepControl {
    pub(crate) fn new(chan: Arc<OwnedFd>) -> Self {
        Self { chan }
    }

    /// Run `request` in the sandbox. Returns once the request is handed over;
    /// what becomes of it arrives as [`StepEvent`]s through
    /// [`crate::Sandbox::wait_session`].
    pub fn exec(&self, request: &StepRequest, stdio: StepStdio) -> Result<(), ShimError> {
        let step = request.step;
        let stdio = match (stdio, request.terminal) {
            (StepStdio::Pipes(fds), None) => Some(fds),
            (StepStdio::Terminal, Some(_)) => None,
            _ => return Err(StepError::StdioMismatch { step }.into()),
        };
        let memfd = channel::request::to_memfd(request)?;
        self.send(
            &Message::Exec {
                step,
                request: memfd,
                stdio,
            },
            "hand a step to the sandbox",
        )
    }

    /// SIGKILL the step's whole tree (its command and everything it started,
    /// background processes included); the sandbox and other steps live on.
    pub fn kill(&self, step: StepId) -> Result<(), ShimError> {
        self.send(&Message::KillStep(step), "ask the sandbox to kill a step")
    }

    /// Send `signal` to the step command's process group (Ctrl-C forwarding).
    pub fn signal(&self, step: StepId, signal: i32) -> Result<(), ShimError> {
        self.send(
            &Message::SignalStep(step, signal),
            "ask the sandbox to signal a step",
        )
    }

    fn send(&self, msg: &Message, context: &'static str) -> Result<(), ShimError> {
        channel::send(&self.chan, msg).map_err(|e| ShimError::io(context, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_name_reads_back_as_its_step_and_fits_the_kernels_15_bytes() {
        for n in [0, 1, 42, MAX_STEP] {
            let name = holder_name(StepId(n));
            assert!(name.len() <= 15, "{name}");
            assert_eq!(step_of_holder_name(&name), Some(StepId(n)));
            assert_eq!(step_of_holder_name(&format!("{name}\n")), Some(StepId(n)));
        }
    }

    #[test]
    fn other_process_names_are_no_step() {
        for comm in [
            "sh",
            "airlock:s",
            "airlock:s-1",
            "airlock:s1x",
            "airlock:s+1",
            "xairlock:s1",
            "airlock:s1000000",
        ] {
            assert_eq!(step_of_holder_name(comm), None, "{comm}");
        }
    }
}
