//! A session that takes steps: what every step handler shares (the shim's
//! step control, the record, the session's environment, its refusals), the
//! counts `ls` and the idle timeout read, and where the sandbox's word on
//! each running step is delivered.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use airlock_auditor::{AuditEvent, Note, SessionRecorder, StepNo, StepStart};
use airlock_shim::{ExitKind, StepEvent, StepId};
use anyhow::{Context, bail};
use tokio::sync::{Notify, oneshot};

use super::denials::DenialLog;
use super::kill_reasons::KillReasons;
use super::kills::Kills;
use super::protocol::{ExecRequest, ExitReport};
use super::runner::StepRunner;
use crate::launch::{StepLabels, Withheld};

/// A session that takes steps.
pub(super) struct Live {
    pub control: StepRunner,
    pub recorder: Option<SessionRecorder>,
    env: Vec<(OsString, OsString)>,
    withheld: Withheld,
    pub(super) init: i32,
    waiting: Mutex<Waiting>,
    pub(super) counts: Mutex<Counts>,
    pub(super) stopping: AtomicBool,
    /// The sandbox failed to confirm a step's end once (see
    /// `runner::StepRunner::kill_confirmed_within`): `ls` says so.
    pub(super) not_answering: AtomicBool,
    pub(super) activity: Notify,
    /// What the policy refused, for each step's report and `denials`.
    pub denials: Arc<DenialLog>,
    /// Each step's label, for approvers of the requests it sends.
    labels: StepLabels,
    /// The running steps a `kill` request can end.
    pub(super) kills: Kills,
    /// Why a step was killed, for its report.
    pub(super) kill_reasons: KillReasons,
}

/// A step just begun: its number, and where the sandbox's word on it arrives.
pub(super) struct NewStep {
    pub step: StepId,
    pub end: oneshot::Receiver<StepEnd>,
    /// A terminal step's pty master.
    pub terminal: Option<oneshot::Receiver<OwnedFd>>,
}

#[derive(Debug)]
pub(super) struct Counts {
    pub(super) next: u64,
    pub(super) total: u64,
    pub(super) running: u64,
    pub(super) last_activity: Instant,
}

impl Live {
    pub(super) fn new(
        control: StepRunner,
        recorder: Option<SessionRecorder>,
        env: Vec<(OsString, OsString)>,
        withheld: Withheld,
        init: i32,
        denials: Arc<DenialLog>,
        labels: StepLabels,
    ) -> Self {
        Self {
            control,
            recorder,
            env,
            withheld,
            init,
            waiting: Mutex::new(Waiting::default()),
            counts: Mutex::new(Counts {
                next: 1,
                total: 0,
                running: 0,
                last_activity: Instant::now(),
            }),
            stopping: AtomicBool::new(false),
            not_answering: AtomicBool::new(false),
            activity: Notify::new(),
            denials,
            labels,
            kills: Kills::default(),
            kill_reasons: KillReasons::default(),
        }
    }

    /// Where the session's limits are kept, to say which one killed a step.
    pub(super) fn with_kill_reasons(mut self, kill_reasons: KillReasons) -> Self {
        self.kill_reasons = kill_reasons;
        self
    }

    /// The sandbox did not confirm `step`'s end after its kill: say so in
    /// `ls`, and in the record.
    pub(super) fn not_answering(&self, step: StepId) {
        self.not_answering.store(true, Ordering::SeqCst);
        if let Some(recorder) = &self.recorder {
            let _ = recorder.record(AuditEvent::Note(Note {
                text: format!(
                    "the session is not answering: the sandbox did not confirm the end of step {} after it was killed",
                    step.0
                ), policy: None }));
        }
    }

    /// The sandbox confirmed a step's end: it answers (again).
    pub(super) fn answering(&self) {
        self.not_answering.store(false, Ordering::SeqCst);
    }

    pub(super) fn waiting(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session's environment with the step's additions; a credential's
    /// secret never enters, as for `airlock run --env`.
    pub(super) fn step_env(
        &self,
        extra: &[(String, String)],
    ) -> anyhow::Result<Vec<(OsString, OsString)>> {
        let mut env = self.env.clone();
        for (key, value) in extra {
            if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
                bail!("invalid --env {key:?}: expected KEY=VALUE without NUL bytes");
            }
            self.withheld.refuse_in(key, value)?;
            env.retain(|(k, _)| k != key.as_str());
            env.push((key.into(), value.into()));
        }
        Ok(env)
    }

    /// A new step: its number, recorded start, and where its end (and
    /// terminal) will be delivered.
    pub(super) fn begin_step(
        &self,
        request: &ExecRequest,
        terminal: bool,
    ) -> anyhow::Result<NewStep> {
        if self.stopping.load(Ordering::SeqCst) {
            bail!("the session is stopping: start a new one with `airlock session start`");
        }
        let step = {
            let mut counts = self.counts();
            let step = StepId(counts.next);
            counts.next += 1;
            counts.total += 1;
            counts.running += 1;
            counts.last_activity = Instant::now();
            step
        };
        if let Some(label) = &request.label {
            self.labels.insert(step.0, label.clone());
        }
        if let Some(recorder) = &self.recorder {
            let recorded = recorder.record(AuditEvent::StepStart(StepStart {
                step: StepNo(step.0),
                label: request.label.clone(),
                command: request.argv.clone(),
                cwd: request.cwd.clone(),
                tty: request.tty.is_some(),
            }));
            if let Err(e) = recorded {
                // Nothing runs unrecorded: the step does not start.
                self.counts().running -= 1;
                return Err(e).context("recording the step");
            }
        }
        let (end_tx, end) = oneshot::channel();
        let mut waiting = self.waiting();
        waiting.insert_end(step, end_tx);
        let terminal = terminal.then(|| {
            let (tx, rx) = oneshot::channel();
            waiting.insert_terminal(step, tx);
            rx
        });
        Ok(NewStep {
            step,
            end,
            terminal,
        })
    }

    /// Record the step's end and count it done.
    pub(super) fn end_step(&self, step: StepId, report: &ExitReport) {
        if let Some(recorder) = &self.recorder {
            let _ = recorder.record(AuditEvent::StepEnd(airlock_auditor::StepEnd {
                step: StepNo(step.0),
                exit_status: report.status,
                signal: report.signal,
                timed_out: report.timed_out,
                duration_ms: report.duration_ms,
                reason: report.reason.clone(),
            }));
        }
        let mut counts = self.counts();
        counts.running = counts.running.saturating_sub(1);
        counts.last_activity = Instant::now();
        drop(counts);
        self.activity.notify_one();
    }

    pub(super) fn on_event(&self, event: StepEvent) {
        let mut waiting = self.waiting();
        match event {
            StepEvent::Terminal { step, master } => waiting.terminal(step, master),
            StepEvent::Exited { step, status } => waiting.ended(step, StepEnd::Exited(status)),
            StepEvent::Failed { step, message } => waiting.ended(step, StepEnd::Failed(message)),
        }
    }
}

/// How a step's command ended, as the session learns it.
#[derive(Debug)]
pub(super) enum StepEnd {
    Exited(ExitKind),
    /// It could not be started; the text says why.
    Failed(String),
    /// The session ended first (stopped, timed out, or its store failed).
    SessionEnded(String),
}

/// Where the sandbox's word on a running step goes.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    terminal: HashMap<StepId, oneshot::Sender<OwnedFd>>,
    end: HashMap<StepId, oneshot::Sender<StepEnd>>,
}

impl Waiting {
    pub(super) fn insert_end(&mut self, step: StepId, tx: oneshot::Sender<StepEnd>) {
        self.end.insert(step, tx);
    }

    pub(super) fn insert_terminal(&mut self, step: StepId, tx: oneshot::Sender<OwnedFd>) {
        self.terminal.insert(step, tx);
    }

    pub(super) fn terminal(&mut self, step: StepId, master: OwnedFd) {
        if let Some(tx) = self.terminal.remove(&step) {
            let _ = tx.send(master);
        }
    }

    pub(super) fn ended(&mut self, step: StepId, end: StepEnd) {
        self.terminal.remove(&step);
        if let Some(tx) = self.end.remove(&step) {
            let _ = tx.send(end);
        }
    }

    /// The session is over: every step still waiting hears why.
    pub(super) fn session_ended(&mut self, why: &str) {
        self.terminal.clear();
        for (_, tx) in self.end.drain() {
            let _ = tx.send(StepEnd::SessionEnded(why.to_owned()));
        }
    }
}
