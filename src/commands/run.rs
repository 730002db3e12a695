//! `airlock run`: one command in a fresh sandbox whose only way out is the
//! proxy, with everything recorded. The sandbox comes up through `launch`
//! (plan, spawn, wire); this module releases the command, waits for it and
//! finishes the record.

use std::ffi::OsString;
use std::process::ExitCode;

use airlock_auditor::{SessionEnd, SessionRecorder};
use airlock_shim::{Outcome, Sandbox};
use anyhow::Context;

use crate::finish::{Finish, Quiet};
use crate::launch::{GvisorRun, Plan, Purpose, SandboxArgs, Stop, Wired, store_failure};
use crate::{exit, one_line};

#[derive(clap::Args)]
#[command(trailing_var_arg = true)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// Run the command on a pseudo-terminal even when stdin or stdout is not a
    /// terminal [default: when both are].
    #[arg(short = 't', long, conflicts_with = "no_tty")]
    tty: bool,
    /// Never run the command on a pseudo-terminal: it gets pipes, as when
    /// airlock's stdin is not a terminal.
    #[arg(long)]
    no_tty: bool,
    /// The command and its arguments.
    #[arg(required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

pub(crate) fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    match run_sandboxed(args) {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("airlock: {}", one_line(&e));
            Ok(ExitCode::from(exit::RUN_FAILED))
        }
    }
}

/// The session, in the order of `docs/architecture.md` ("`airlock run`"):
/// plan, spawn (with the audit store opening alongside), wire the proxy and
/// the terminal, then release, wait and finish.
fn run_sandboxed(args: RunArgs) -> anyhow::Result<ExitCode> {
    // gVisor runs the command on pipes: a pseudo-terminal asked for with
    // -t is refused in the plan, one airlock would choose is not offered.
    let pty = match args.sandbox.isolation {
        airlock_auditor::Isolation::Namespaces => crate::terminal::wanted(args.tty, args.no_tty),
        airlock_auditor::Isolation::Gvisor => args.tty,
    };
    let pty_size = pty.then(crate::terminal::initial_size);
    let purpose = Purpose::Run {
        command: args.command,
        pty_size,
    };
    let plan = Plan::new(&args.sandbox, purpose)?;
    let spawned = plan.spawn()?;
    let wired = spawned.wire(None, None, None)?;
    release_and_finish(wired)
}

/// Steps 6, 7 and 9: the go, the command, the wait; then the record is
/// completed and airlock's exit status chosen.
fn release_and_finish(wired: Wired) -> anyhow::Result<ExitCode> {
    let Wired {
        sandbox,
        recorder,
        shipper,
        recording,
        proxy,
        pty,
        runtime,
        stopped_for,
        gvisor,
        ..
    } = wired;
    let outcome = run_command(sandbox, gvisor, recorder.as_ref());
    // Everything the command wrote and did is recorded before the session
    // ends; the caller's terminal is restored before airlock says anything
    // more.
    let quiet = Finish::new(recorder, proxy, pty, recording)
        .shipping(shipper)
        .stop(runtime);
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => return Err(record_failure(quiet, error)),
    };
    let stopped = stopped_for.lock().ok().and_then(|s| s.clone());
    conclude(quiet, &outcome, stopped)
}

/// Steps 6 and 7: the go, and the command until it ends.
fn run_command(
    mut sandbox: Sandbox,
    gvisor: Option<GvisorRun>,
    recorder: Option<&SessionRecorder>,
) -> anyhow::Result<Outcome> {
    match gvisor {
        None => {
            sandbox.release()?;
            Ok(sandbox.wait()?)
        }
        // The sandbox runs nothing: runsc runs the command in its network
        // namespace; then the sandbox ends, reconciling its writable mounts.
        Some(run) => {
            let _steps = sandbox.start_session()?;
            let outcome = run.run(sandbox.pid(), recorder);
            sandbox.kill();
            sandbox.wait_session(drop)?;
            outcome
        }
    }
}

/// airlock lost sight of the command: the record still ends, saying so,
/// rather than reading as a session that crashed or is still running.
fn record_failure(quiet: Quiet, error: anyhow::Error) -> anyhow::Error {
    let end = SessionEnd {
        exit_status: None,
        signal: None,
        reason: Some(format!("airlock failed: {error:#}")),
    };
    match quiet.finish(end) {
        Ok(()) => error,
        Err(e) => error.context(format!("and the record could not be ended: {e}")),
    }
}

/// The session's end record, what airlock says last, and its exit status.
fn conclude(quiet: Quiet, outcome: &Outcome, stopped: Option<Stop>) -> anyhow::Result<ExitCode> {
    let finished = finish(quiet, outcome, stopped.as_ref().map(Stop::describe));
    if let Some(stop) = stopped {
        // After an audit failure the end record cannot be written either;
        // say what failed instead of that it failed twice.
        match (&stop, finished) {
            (Stop::AuditFailed, Err(e)) => eprintln!("{} ({})", stop.describe(), store_failure(&e)),
            (_, Err(e)) => return Err(e),
            (_, Ok(())) => eprintln!("{}", stop.describe()),
        }
        return Ok(ExitCode::from(stop.exit_code()));
    }
    finished?;
    if let Some(message) = outcome.message() {
        eprintln!("{message}");
    }
    Ok(ExitCode::from(
        u8::try_from(outcome.exit_code()).unwrap_or(exit::RUN_FAILED),
    ))
}

fn finish(quiet: Quiet, outcome: &Outcome, stopped: Option<String>) -> anyhow::Result<()> {
    let (exit_status, signal) = match outcome.status {
        airlock_shim::ExitKind::Exited(code) => (Some(code), None),
        airlock_shim::ExitKind::Signaled(sig) => (None, Some(sig)),
    };
    let reason = stopped.or_else(|| outcome.message());
    quiet
        .finish(SessionEnd {
            exit_status,
            signal,
            reason,
        })
        .context("finishing the audit session")
}
