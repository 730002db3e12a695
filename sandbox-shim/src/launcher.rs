//! Session mode, inside the sandbox: init itself is the launcher, and from
//! the go on it alone reads the control channel. For each [`Message::Exec`]
//! it forks a holder (`holder.rs`) that runs the step's command; it kills or
//! signals a step on request, and reaps holders and orphans as they end.
//! When it ends, the sandbox is over.
//!
//! Why init: the session's control path must be out of the steps' reach,
//! and a step runs with the same uid as airlock's helpers, so kill(2) would
//! let it stop or kill any of them. PID 1 of a namespace is the one process
//! that signals from inside cannot touch, SIGKILL and SIGSTOP included
//! (pid_namespaces(7)); ptrace(2) and /proc/1/mem need capabilities the
//! steps do not have. When observed, the observer also drops every signal a
//! step sends to init or a holder (`observer/mod.rs`), since a traced
//! init would otherwise be stopped by SIGSTOP. A holder (the one per-step
//! helper that stays in a step's reach, unobserved) that a step stops or
//! kills holds nothing: a step's kill ends the holder with its processes,
//! and the step is reported as killed (`kill_step`).
//!
//! When observed, init asks to be traced before any step exists: every
//! step process descends from it, so the observer's PTRACE_O_TRACEFORK
//! follows them all without a second attach. It installs no seccomp filter
//! (it is airlock's code and runs no step's); each command installs its own.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::channel::{self, ChannelError, DecodeError, Failure, Message};
use crate::plan::Plan;
use crate::procfs;
use crate::step::StepId;
use crate::step_command::StepCommand;
use crate::sys::{self, Forked};

/// Init's process name in session mode (prctl(2) PR_SET_NAME; 15 bytes at
/// most).
const NAME: &std::ffi::CStr = c"airlock:init";

/// How often a holder that has ended but is not yet reapable is retried: a
/// traced child is reported to its tracer (the observer) first, and to us
/// only once the tracer has seen it go (ptrace(2), "Death under ptrace").
const REAP_RETRY: Duration = Duration::from_millis(5);

/// How often the holders are checked for a stop while steps run.
const WATCH_HOLDERS: Duration = Duration::from_millis(200);

/// Rounds of "find every live descendant, SIGKILL it" before giving up on
/// a step that keeps forking (each round catches the children made before
/// the last; a process with SIGKILL pending can fork no more).
const KILL_ROUNDS: usize = 500;

/// Why the launcher could not start serving steps (airlock hears the text).
#[derive(Debug, thiserror::Error)]
enum LauncherError {
    #[error("observer channel missing")]
    ObserverMissing,
    #[error("pidfd_open: {0}")]
    Pidfd(#[source] std::io::Error),
    #[error("ask to be traced: {0}")]
    Channel(#[source] ChannelError),
    #[error(
        "the auditor could not trace the session (ptrace(2) was refused: inside a container, allow ptrace; or pass --no-audit to run without a record)"
    )]
    NotTraced,
}

/// A live holder.
struct Holder {
    pid: Pid,
    /// Readable once the holder has ended.
    pidfd: OwnedFd,
    /// Ended, waiting for the tracer to let us reap it.
    ended: bool,
    /// What the holder tells the launcher ([`crate::holder::Report`]): its
    /// command's pid, then that the step's last event is sent. None at EOF.
    reports: Option<OwnedFd>,
    /// The command's pid, which is also its process group's id.
    command: Option<Pid>,
    /// The holder has sent the step's last event (its exit, or why it failed).
    reported: bool,
    /// Airlock asked for the step to be killed: the holder was killed too,
    /// and its end is the step's (by SIGKILL).
    killed: bool,
    /// Reaped, with its wait status (None: it vanished, ECHILD).
    reaped: Option<Option<i32>>,
}

struct Launcher<'a> {
    plan: &'a Plan,
    chan: &'a OwnedFd,
    steps: HashMap<StepId, Holder>,
    /// Readable when a child ended: a holder, or an orphan whose holder
    /// went first (as PID 1, every orphan of the sandbox is ours to reap).
    children: sys::ChildSignals,
}

/// Init's life in session mode, from the go; never returns.
pub(crate) fn run(plan: &Plan, chan: &OwnedFd, observe: Option<&OwnedFd>) -> ! {
    let _ = nix::sys::prctl::set_name(NAME);
    if plan.observe.is_some()
        && let Err(error) = be_traced(observe)
    {
        let failure = Failure::Setup(error.to_string()).fitted();
        let _ = channel::send(chan, &Message::Failed(failure));
        sys::exit_now(125);
    }
    let children = match sys::ChildSignals::open() {
        Ok(children) => children,
        Err(e) => {
            let failure = Failure::Setup(format!("signalfd for SIGCHLD: {e}")).fitted();
            let _ = channel::send(chan, &Message::Failed(failure));
            sys::exit_now(125);
        }
    };
    let mut launcher = Launcher {
        plan,
        chan,
        steps: HashMap::new(),
        children,
    };
    let code = launcher.serve();
    // What airlock hears of the end of the sandbox (as of a command's).
    let _ = channel::send(chan, &Message::Exit(code << 8));
    sys::exit_now(code)
}

/// Ask the observer to trace us, as `airlock run`'s command does, and wait
/// for its answer: no step may start untraced.
fn be_traced(observe: Option<&OwnedFd>) -> Result<(), LauncherError> {
    let obs = observe.ok_or(LauncherError::ObserverMissing)?;
    let me = sys::pidfd_open(Pid::this()).map_err(LauncherError::Pidfd)?;
    channel::send(obs, &Message::TraceMe(me)).map_err(LauncherError::Channel)?;
    match channel::recv(obs) {
        Ok(Some(Message::Traced)) => Ok(()),
        _ => Err(LauncherError::NotTraced),
    }
}

/// What became ready in one poll.
enum Ready {
    Channel,
    Ended(StepId),
    Report(StepId),
    Children,
}

impl Launcher<'_> {
    /// Serve until airlock is gone; the exit code.
    fn serve(&mut self) -> i32 {
        loop {
            let Ok(ready) = self.poll() else {
                return 125;
            };
            self.reap_ended();
            for r in ready {
                match r {
                    Ready::Channel => match channel::recv(self.chan) {
                        Ok(Some(msg)) => self.handle(msg),
                        // airlock is gone: so is the session.
                        Ok(None) => return 0,
                        // Answered, so the caller does not wait for it in vain.
                        Err(ChannelError::Malformed(e @ DecodeError::ExecFds { step, .. })) => {
                            self.fail(step, e.to_string());
                        }
                        Err(ChannelError::Malformed(_)) => {}
                        Err(_) => return 125,
                    },
                    Ready::Ended(step) => {
                        if let Some(h) = self.steps.get_mut(&step) {
                            h.ended = true;
                        }
                    }
                    Ready::Report(step) => self.read_report(step),
                    Ready::Children => self.children.drain(),
                }
            }
            self.reap_ended();
            self.reap_orphans();
            self.continue_stopped_holders();
        }
    }

    /// Wait for the channel, a holder's end or a command pid.
    fn poll(&self) -> Result<Vec<Ready>, Errno> {
        let mut fds = vec![
            PollFd::new(self.chan.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.children.as_fd(), PollFlags::POLLIN),
        ];
        let mut what = vec![Ready::Channel, Ready::Children];
        for (step, h) in &self.steps {
            if !h.ended {
                fds.push(PollFd::new(h.pidfd.as_fd(), PollFlags::POLLIN));
                what.push(Ready::Ended(*step));
            }
            if let Some(pipe) = &h.reports {
                fds.push(PollFd::new(pipe.as_fd(), PollFlags::POLLIN));
                what.push(Ready::Report(*step));
            }
        }
        let every =
            |d: Duration| PollTimeout::try_from(d.as_millis() as i32).unwrap_or(PollTimeout::MAX);
        let timeout = if self.steps.values().any(|h| h.ended && h.reaped.is_none()) {
            every(REAP_RETRY)
        } else if self.steps.is_empty() {
            PollTimeout::NONE
        } else {
            every(WATCH_HOLDERS)
        };
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(Errno::EINTR) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        }
        Ok(fds
            .iter()
            .zip(what)
            .filter(|(fd, _)| fd.revents().is_some_and(|r| !r.is_empty()))
            .map(|(_, w)| w)
            .collect())
    }

    /// Reap the holders that have ended (once their tracer let go of them).
    /// A holder that went without sending its step's last event (a step can
    /// kill its own holder) gets one sent for it, and its command's process
    /// group goes with it: no caller waits in vain, and no step runs on
    /// after it was reported ended.
    fn reap_ended(&mut self) {
        for h in self
            .steps
            .values_mut()
            .filter(|h| h.ended && h.reaped.is_none())
        {
            match sys::wait_any(Some(h.pid), true) {
                Ok(Some((_, status))) => h.reaped = Some(Some(status)),
                Ok(None) => {}
                Err(_) => h.reaped = Some(None),
            }
        }
        let gone: Vec<StepId> = self
            .steps
            .iter()
            .filter(|(_, h)| h.reaped.is_some())
            .map(|(step, _)| *step)
            .collect();
        for step in gone {
            // The holder is gone: what it wrote can be read without waiting.
            while self.steps.get(&step).is_some_and(|h| h.reports.is_some()) {
                self.read_report(step);
            }
            let Some(holder) = self.steps.remove(&step) else {
                continue;
            };
            if holder.reported {
                continue;
            }
            if holder.killed {
                // Its end is the step's: killed on airlock's word.
                let _ = channel::send(self.chan, &Message::StepExit(step, libc::SIGKILL));
                continue;
            }
            let how = match holder
                .reaped
                .flatten()
                .map(crate::outcome::ExitKind::from_raw)
            {
                Some(crate::outcome::ExitKind::Signaled(sig)) => {
                    format!("was killed by signal {sig}")
                }
                Some(crate::outcome::ExitKind::Exited(code)) => format!("exited with {code}"),
                None => "vanished".to_string(),
            };
            // Its command, if still running, is ours now (the orphan of a
            // dead subreaper): never a group whose leader was reaped, whose
            // number may be another's by now.
            let orphan = holder.command.filter(|pid| {
                procfs::stat(*pid).is_some_and(|st| st.ppid == Pid::from_raw(1) && !st.is_dead())
            });
            if let Some(pgid) = orphan {
                sys::kill_group(pgid, libc::SIGKILL);
            }
            let text = format!(
                "the holder of {step} {how} before its command's end was reported (a step's processes can signal their own holder); its command's process group was killed"
            );
            self.fail(step, text);
        }
    }

    fn handle(&mut self, msg: Message) {
        match msg {
            Message::Exec {
                step,
                request,
                stdio,
            } => self.exec(step, request, stdio),
            Message::KillStep(step) => self.kill_step(step),
            Message::SignalStep(step, signal) => self.signal(step, signal),
            // Nothing else is meant for the launcher.
            _ => {}
        }
    }

    /// Kill the step: everything its holder started, then the holder, which
    /// may have been stopped by the step's own processes and would then
    /// never report. The step's end is reported when the holder is reaped.
    fn kill_step(&mut self, step: StepId) {
        // A kill right after the exec: wait until the holder has forked the
        // command, so that the command is among those killed.
        self.await_command(step);
        let Some(h) = self.steps.get_mut(&step) else {
            return;
        };
        kill_descendants(h.pid);
        h.killed = true;
        sys::kill(h.pid, libc::SIGKILL);
    }

    /// A holder that a step stopped (SIGSTOP cannot be ignored, and
    /// unobserved nobody drops it) is let go on: its step's end must still
    /// be reported.
    fn continue_stopped_holders(&self) {
        for h in self.steps.values().filter(|h| !h.ended) {
            if procfs::stat(h.pid).is_some_and(|st| st.state == 'T') {
                sys::kill(h.pid, libc::SIGCONT);
            }
        }
    }

    /// Reap whatever else ended: orphans of steps whose holder went first.
    /// Holders are left to [`Launcher::reap_ended`], which knows their step.
    fn reap_orphans(&mut self) {
        loop {
            let Ok(Some((pid, status))) = sys::wait_any(None, true) else {
                return;
            };
            if let Some(h) = self.steps.values_mut().find(|h| h.pid == pid) {
                h.ended = true;
                h.reaped = Some(Some(status));
            }
        }
    }

    fn fail(&self, step: StepId, message: String) {
        let _ = channel::send(self.chan, &channel::step_failed(step, message));
    }

    fn exec(&mut self, step: StepId, memfd: OwnedFd, stdio: Option<[OwnedFd; 3]>) {
        if self.steps.contains_key(&step) {
            let text = format!("{step} is still running: give each step a new number");
            return self.fail(step, text);
        }
        let command = match StepCommand::read(self.plan, step, memfd, stdio.is_some()) {
            Ok(command) => command,
            Err(e) => return self.fail(step, e.to_string()),
        };
        let (pipe_read, pipe_write) = match nix::unistd::pipe2(OFlag::O_CLOEXEC) {
            Ok(pair) => pair,
            Err(e) => return self.fail(step, format!("pipe for {step}: {e}")),
        };
        let pid = match sys::fork() {
            Ok(Forked::Child) => {
                crate::holder::run(self.plan, self.chan, &command, stdio, pipe_write)
            }
            Ok(Forked::Parent(pid)) => pid,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                let text = format!(
                    "{step} could not start: the sandbox's process limit is reached (--pids); end what runs in the background, or start the session with a higher --pids"
                );
                return self.fail(step, text);
            }
            Err(e) => return self.fail(step, format!("fork the holder of {step}: {e}")),
        };
        // The holder and its command hold the only copies now.
        drop(stdio);
        drop(pipe_write);
        let pidfd = match sys::pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) => {
                // Without it we would never notice the holder's end: stop
                // the step rather than lose track of it.
                kill_descendants(pid);
                sys::kill(pid, libc::SIGKILL);
                let _ = sys::wait_any(Some(pid), false);
                return self.fail(step, format!("pidfd_open for {step}: {e}"));
            }
        };
        self.steps.insert(
            step,
            Holder {
                pid,
                pidfd,
                ended: false,
                reports: Some(pipe_read),
                command: None,
                reported: false,
                killed: false,
                reaped: None,
            },
        );
    }

    /// Read what the holder has written (blocking until it writes or ends).
    fn read_report(&mut self, step: StepId) {
        let Some(h) = self.steps.get_mut(&step) else {
            return;
        };
        let Some(pipe) = &h.reports else {
            return;
        };
        let mut buf = [0u8; crate::holder::Report::MAX_LEN];
        match nix::unistd::read(pipe, &mut buf) {
            Ok(0) | Err(_) => h.reports = None,
            Ok(n) => {
                for report in crate::holder::Report::parse(&buf[..n]) {
                    match report {
                        crate::holder::Report::Command(pid) => h.command = Some(pid),
                        crate::holder::Report::Done => h.reported = true,
                    }
                }
            }
        }
    }

    /// Until the holder has said its command's pid (or ended without one).
    fn await_command(&mut self, step: StepId) {
        while self
            .steps
            .get(&step)
            .is_some_and(|h| h.command.is_none() && !h.reported && h.reports.is_some())
        {
            self.read_report(step);
        }
    }

    /// kill(2) the step command's process group (the command leads its own
    /// session, so its pid is the group's id).
    fn signal(&mut self, step: StepId, signal: i32) {
        // A signal can come before the pid was read: the holder writes it
        // right after forking, so wait for it here.
        self.await_command(step);
        let Some(pgid) = self.steps.get(&step).and_then(|h| h.command) else {
            return;
        };
        if let Ok(signal) = Signal::try_from(signal) {
            // ESRCH: the command has not made its own group yet (it calls
            // setsid(2) right after the fork); then it alone is the target.
            if nix::sys::signal::killpg(pgid, signal) == Err(Errno::ESRCH) {
                let _ = nix::sys::signal::kill(pgid, signal);
            }
        }
    }
}

/// SIGKILL every live descendant of `root` (not `root` itself), round after
/// round until none is left: /proc/[0-9]*/stat gives every process's parent.
/// The holder stays to reap them and report its command's end.
pub(crate) fn kill_descendants(root: Pid) {
    for _ in 0..KILL_ROUNDS {
        let victims = descendants(root);
        if victims.is_empty() {
            return;
        }
        for pid in victims {
            sys::kill(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The live descendants of `root`, from one scan of /proc.
fn descendants(root: Pid) -> Vec<Pid> {
    let mut children: HashMap<Pid, Vec<(Pid, procfs::Stat)>> = HashMap::new();
    for pid in procfs::processes() {
        if let Some(st) = procfs::stat(pid) {
            children.entry(st.ppid).or_default().push((pid, st));
        }
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for (pid, st) in children.remove(&parent).unwrap_or_default() {
            if !st.is_dead() {
                out.push(pid);
            }
            queue.push(pid);
        }
    }
    out
}
