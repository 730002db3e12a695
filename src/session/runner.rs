//! Where a live session's steps run: in the namespace sandbox (its
//! launcher forks one holder per step), or under `--isolation gvisor` as a
//! `runsc exec` into the session's runsc container. Both take the same
//! requests and say a step's end the same way (`Live::on_event`).

use std::sync::Arc;
use std::time::Duration;

use airlock_shim::{StepControl, StepId, StepRequest, StepStdio};

use crate::launch::GvisorSession;

/// How long a killed step's end may take to be confirmed (see
/// `steps::serve`) in the namespace sandbox: its init kills a step's
/// processes in milliseconds.
const NAMESPACES_KILL_CONFIRMED_WITHIN: Duration = Duration::from_secs(1);
/// The same under gVisor: the kill is a few `runsc ps`/`runsc kill` calls,
/// tens of milliseconds each, on a machine that may be busy (still
/// inside the client's `ANSWER_GRACE`).
const GVISOR_KILL_CONFIRMED_WITHIN: Duration = Duration::from_secs(2);

/// The session's way of running steps.
pub(super) enum StepRunner {
    Namespaces(StepControl),
    Gvisor {
        session: Arc<GvisorSession>,
        /// The namespace sandbox's own step channel, unused but kept open:
        /// its init holds the network namespace while it is.
        _holder: StepControl,
    },
}

impl StepRunner {
    /// Hand the step over; its end arrives as a step event.
    pub(super) fn exec(&self, request: &StepRequest, stdio: StepStdio) -> anyhow::Result<()> {
        match self {
            Self::Namespaces(control) => Ok(control.exec(request, stdio)?),
            Self::Gvisor { session, .. } => session.exec(request, stdio),
        }
    }

    /// SIGKILL the step's whole tree; the session lives on.
    pub(super) fn kill(&self, step: StepId) -> anyhow::Result<()> {
        match self {
            Self::Namespaces(control) => Ok(control.kill(step)?),
            Self::Gvisor { session, .. } => {
                session.kill(step);
                Ok(())
            }
        }
    }

    /// Forward a signal to the step (Ctrl-C).
    pub(super) fn signal(&self, step: StepId, signal: i32) -> anyhow::Result<()> {
        match self {
            Self::Namespaces(control) => Ok(control.signal(step, signal)?),
            Self::Gvisor { session, .. } => {
                session.signal(step, signal);
                Ok(())
            }
        }
    }

    pub(super) fn kill_confirmed_within(&self) -> Duration {
        match self {
            Self::Namespaces(_) => NAMESPACES_KILL_CONFIRMED_WITHIN,
            Self::Gvisor { .. } => GVISOR_KILL_CONFIRMED_WITHIN,
        }
    }
}
