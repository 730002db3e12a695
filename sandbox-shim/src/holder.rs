//! A step's holder, forked by the launcher: named after its step (so the
//! observer can tag the step's processes), a child subreaper (so whatever
//! the step leaves behind stays in its subtree, prctl(2)
//! PR_SET_CHILD_SUBREAPER), it opens the step's pseudo-terminal when asked,
//! forks the command, reports the command's end, and reaps the rest of the
//! step until nothing is left.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;

use crate::channel::{self, Message};
use crate::command::{Launch, Tracing};
use crate::plan::Plan;
use crate::step::{self, StepId};
use crate::step_command::StepCommand;
use crate::sys::{self, Forked};

/// What a holder tells the launcher over its pipe (the launcher's own
/// business, so not the control channel): its command's pid right after
/// the fork, and that the step's last event has been sent to airlock.
/// Each is one write(2) of at most PIPE_BUF bytes, so it arrives whole
/// (pipe(7)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Report {
    Command(nix::unistd::Pid),
    Done,
}

impl Report {
    const COMMAND: u8 = b'P';
    const DONE: u8 = b'D';
    /// Both reports together.
    pub(crate) const MAX_LEN: usize = 6;

    fn bytes(self) -> Vec<u8> {
        match self {
            Self::Command(pid) => [&[Self::COMMAND][..], &pid.as_raw().to_le_bytes()].concat(),
            Self::Done => vec![Self::DONE],
        }
    }

    /// The reports in what one read returned (anything else ends it).
    pub(crate) fn parse(mut bytes: &[u8]) -> Vec<Self> {
        let mut out = Vec::new();
        loop {
            match bytes {
                [Self::COMMAND, a, b, c, d, rest @ ..] => {
                    let pid = i32::from_le_bytes([*a, *b, *c, *d]);
                    out.push(Self::Command(nix::unistd::Pid::from_raw(pid)));
                    bytes = rest;
                }
                [Self::DONE, rest @ ..] => {
                    out.push(Self::Done);
                    bytes = rest;
                }
                _ => return out,
            }
        }
    }

    fn send(self, reports: &OwnedFd) {
        let _ = nix::unistd::write(reports, &self.bytes());
    }
}

/// The holder process; never returns.
///
/// `stdio` is the command's 0, 1, 2 (None for a terminal step);
/// `reports` is the pipe to the launcher.
pub(crate) fn run(
    plan: &Plan,
    chan: &OwnedFd,
    command: &StepCommand,
    stdio: Option<[OwnedFd; 3]>,
    reports: OwnedFd,
) -> ! {
    let step = command.step;
    let to = Airlock {
        chan,
        reports: &reports,
        step,
    };
    // Nothing of the launcher's other steps (their pipes, pidfds) stays
    // open here: a step's pipes must reach EOF when its own processes close them.
    let mut keep = vec![chan.as_raw_fd(), reports.as_raw_fd()];
    keep.extend(stdio.iter().flatten().map(AsRawFd::as_raw_fd));
    if let Err(e) = sys::close_fds_except_all(&keep) {
        to.fail(format!("close descriptors: {e}"));
    }
    // Before the fork below: the observer reads this name when it first
    // sees the command.
    let name = step::holder_name(step);
    let set = std::ffi::CString::new(name)
        .map_err(|_| Errno::EINVAL)
        .and_then(|n| nix::sys::prctl::set_name(&n));
    if let Err(e) = set {
        to.fail(format!("name the holder of {step}: {e}"));
    }
    // Out of its step's reach as far as a disposition goes: only SIGKILL
    // and SIGSTOP remain (dropped by the observer when there is one, and
    // answered by init when not).
    sys::ignore_signals_from_processes();
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        to.fail(format!("make the holder of {step} a subreaper: {e}"));
    }
    let slave = command.terminal.map(|size| to.open_terminal(size));
    let pid = match sys::fork_signals_held() {
        Ok(Forked::Child) => {
            if let Some(fds) = &stdio
                && crate::stdio::install(fds).is_err()
            {
                sys::exit_now(125);
            }
            // The command keeps its stdio (and the pty slave) and nothing else.
            let keep: Vec<_> = slave.iter().map(AsRawFd::as_raw_fd).collect();
            if sys::close_fds_except_all(&keep).is_err() {
                sys::exit_now(125);
            }
            let launch = Launch {
                argv: &command.argv,
                envp: &command.envp,
                search_path: &command.search_path,
                cwd: Some(&command.cwd),
                terminal: slave.as_ref(),
                own_session: true,
                tracing: Tracing::Inherited,
            };
            crate::command::run(plan, &launch)
        }
        Ok(Forked::Parent(pid)) => pid,
        Err(e) => to.fail(format!("fork the command of {step}: {e}")),
    };
    Report::Command(pid).send(&reports);
    // Only the step's processes hold these now: EOF and the pty's hangup
    // come when they are done with them.
    drop(stdio);
    drop(slave);
    loop {
        match sys::wait_any(None, false) {
            Ok(Some((p, status))) if p == pid => {
                let _ = channel::send(chan, &Message::StepExit(step, status));
                Report::Done.send(&reports);
            }
            Ok(_) => {}
            // ECHILD: the command and everything it left behind are gone.
            Err(_) => sys::exit_now(0),
        }
    }
}

/// Where a holder reports to: airlock over the control channel, and the
/// launcher over its pipe.
struct Airlock<'a> {
    chan: &'a OwnedFd,
    reports: &'a OwnedFd,
    step: StepId,
}

impl Airlock<'_> {
    /// A new pty of the sandbox's devpts with the asked size; its master
    /// goes to airlock before the command exists. The slave is returned for
    /// the command.
    fn open_terminal(&self, size: crate::pty::WindowSize) -> OwnedFd {
        let (master, slave) = match crate::pty::allocate() {
            Ok(pair) => pair,
            Err(e) => self.fail(format!("allocate a pseudo-terminal: {e}")),
        };
        if let Err(e) = crate::pty::set_window_size(&master, size) {
            self.fail(format!("set the terminal's window size: {e}"));
        }
        if let Err(e) = channel::send(self.chan, &Message::StepTerminal(self.step, master)) {
            self.fail(format!("hand over the terminal: {e}"));
        }
        slave
    }

    /// Tell airlock the step could not start, and end the holder.
    fn fail(&self, text: String) -> ! {
        let _ = channel::send(self.chan, &channel::step_failed(self.step, text));
        Report::Done.send(self.reports);
        sys::exit_now(125)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_reports_read_back_alone_or_together() {
        let pid = nix::unistd::Pid::from_raw(4242);
        let both = [Report::Command(pid).bytes(), Report::Done.bytes()].concat();
        assert_eq!(both.len(), Report::MAX_LEN);
        assert_eq!(Report::parse(&both), [Report::Command(pid), Report::Done]);
        assert_eq!(Report::parse(&Report::Done.bytes()), [Report::Done]);
        assert_eq!(Report::parse(b"P12"), []);
        assert_eq!(Report::parse(b"Dx"), [Report::Done]);
    }
}
