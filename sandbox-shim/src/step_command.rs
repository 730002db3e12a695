//! One step's command as the launcher reads it from the control channel
//! and its holder execs it: the request checked and every conversion done
//! before the fork. Shared by `launcher` (which reads it) and `holder`
//! (which runs it), so neither imports the other for it.

use std::ffi::{CString, OsString};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use crate::channel::request::{self, RequestError};
use crate::error::ShimError;
use crate::plan::{self, Plan};
use crate::pty::WindowSize;
use crate::step::{StepError, StepId};

/// What is wrong with a step request (the step fails with this text).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrepareError {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Step(#[from] StepError),
    #[error(transparent)]
    Plan(#[from] ShimError),
}

/// One step's command, ready to exec: every conversion done before the fork.
pub(crate) struct StepCommand {
    pub step: StepId,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub search_path: OsString,
    pub cwd: PathBuf,
    pub terminal: Option<WindowSize>,
}

impl StepCommand {
    /// Read and check the request airlock sent for `step` in `memfd`;
    /// `pipes`: whether it came with stdio (else it wants a terminal).
    pub(crate) fn read(
        plan: &Plan,
        step: StepId,
        memfd: OwnedFd,
        pipes: bool,
    ) -> Result<Self, PrepareError> {
        let request = request::from_memfd(memfd)?;
        if request.step != step {
            return Err(RequestError::StepMismatch {
                inside: request.step,
                outside: step,
            }
            .into());
        }
        if request.terminal.is_some() == pipes {
            return Err(StepError::StdioMismatch { step }.into());
        }
        let argv = plan::arguments(&request.argv)?;
        let (envp, search_path) = plan::environment(&request.env)?;
        // Relative to the workspace; an absolute one replaces it.
        let cwd = match &request.cwd {
            Some(dir) => plan.workspace.join(dir),
            None => plan.workspace.clone(),
        };
        Ok(Self {
            step,
            argv,
            envp,
            search_path,
            cwd,
            terminal: request.terminal,
        })
    }
}
