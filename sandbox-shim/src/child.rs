//! The three processes on the sandbox side:
//! - supervisor: in the host PID namespace; joins the cgroup, creates the
//!   namespaces, forks init, and kills it when airlock dies (EOF on the channel);
//! - init: PID 1 of the new PID namespace; sets up network and mounts, hands the
//!   sockets over, waits for the go, forks the command and reaps orphans (in
//!   session mode it serves the steps itself, `launcher.rs`, and its end
//!   ends the sandbox);
//! - command: drops identity/capabilities, installs seccomp and execs
//!   (in `command.rs`).
//!   When init exits the kernel kills everything left in the namespace
//!   (see pid_namespaces(7)).

use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::Signal;

use crate::cgroup::Cgroup;
use crate::channel::{self, ChannelError, Failure, Message};
use crate::error::ShimError;
use crate::idmap::{IdMapError, write_id_maps};
use crate::mounts::MountError;
use crate::netns::{self, NetError};
use crate::plan::{Identity, Plan};
use crate::sys::{self, Forked};

/// Why the supervisor or init could not set the sandbox up. Airlock hears of
/// it as a [`Failure`] (see [`SetupError::failure`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    /// The kernel refused an unprivileged user namespace (unshare(2): EPERM
    /// when disabled by sysctl or AppArmor, ENOSPC at user.max_user_namespaces).
    #[error("unshare(CLONE_NEWUSER) failed with {0}")]
    UserNamespaces(#[source] Errno),
    #[error("unshare namespaces: {0}")]
    Unshare(#[source] Errno),
    #[error(transparent)]
    IdMap(#[from] IdMapError),
    #[error(transparent)]
    JoinCgroup(ShimError),
    #[error("fork {what}: {source}")]
    Fork {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("pidfd_open: {0}")]
    PidfdOpen(#[source] std::io::Error),
    #[error("poll: {0}")]
    Poll(#[source] Errno),
    #[error("sethostname: {0}")]
    Hostname(#[source] Errno),
    #[error(transparent)]
    Network(#[from] NetError),
    #[error(transparent)]
    Mounts(#[from] MountError),
    #[error("allocate a pseudo-terminal: {0}")]
    Terminal(#[source] std::io::Error),
    #[error("hide airlock's command line from the sandbox: {source}")]
    CommandLine {
        #[source]
        source: std::io::Error,
    },
    /// A message to airlock could not be sent.
    #[error("{step}: {source}")]
    Channel {
        step: &'static str,
        #[source]
        source: ChannelError,
    },
}

impl SetupError {
    /// What airlock is told: a user-namespace refusal is its own case (it
    /// has its own remedy), everything else is a setup failure with its text.
    pub(crate) fn failure(&self) -> Failure {
        match self {
            Self::UserNamespaces(_) => Failure::UserNamespaces(self.to_string()),
            _ => Failure::Setup(self.to_string()),
        }
    }
}

/// `map_err` for a message to airlock during `step`.
fn channel_err(step: &'static str) -> impl FnOnce(ChannelError) -> SetupError {
    move |source| SetupError::Channel { step, source }
}

/// Tell airlock why setup failed (fitted to one message: the text is all
/// airlock will hear of it).
fn report(chan: &OwnedFd, error: &SetupError) {
    let _ = channel::send(chan, &Message::Failed(error.failure().fitted()));
}

/// Entry point of the forked supervisor; never returns.
///
/// `observe` is the sandbox end of the observer channel (when observing): the
/// command asks over it to be traced before it execs.
pub(crate) fn supervisor(
    plan: &Plan,
    cgroup: Option<&Cgroup>,
    chan: OwnedFd,
    observe: Option<OwnedFd>,
) -> ! {
    let code = match run_supervisor(plan, cgroup, &chan, observe) {
        Ok(code) => code,
        Err(error) => {
            report(&chan, &error);
            125
        }
    };
    sys::exit_now(code)
}

fn run_supervisor(
    plan: &Plan,
    cgroup: Option<&Cgroup>,
    chan: &OwnedFd,
    observe: Option<OwnedFd>,
) -> Result<i32, SetupError> {
    sys::ignore_terminal_signals();
    if let Some(cg) = cgroup {
        cg.join_self().map_err(SetupError::JoinCgroup)?;
    }
    // The supervisor only enters the new PID (and user) namespace's parent
    // side; it stays in the host mount and cgroup namespaces so it can still
    // remove the cgroup if airlock dies. Init creates the rest.
    let mut flags = CloneFlags::CLONE_NEWPID;
    if let Identity::Unprivileged { .. } = plan.identity {
        // The user namespace is created first and owns the PID namespace (see unshare(2)).
        flags |= CloneFlags::CLONE_NEWUSER;
    }
    unshare(flags).map_err(|e| match (e, plan.identity) {
        (Errno::EPERM | Errno::ENOSPC, Identity::Unprivileged { .. }) => {
            SetupError::UserNamespaces(e)
        }
        _ => SetupError::Unshare(e),
    })?;
    if let Identity::Unprivileged { uid, gid } = plan.identity {
        // Root inside maps to us outside: setup runs as uid 0 of the new
        // namespace (so loading the capture rules has CAP_NET_ADMIN); the command later moves
        // into a nested namespace where it is the invoking uid again.
        write_id_maps(&format!("0 {uid} 1"), &format!("0 {gid} 1"), true)?;
    }
    let init_pid = match sys::fork().map_err(|source| SetupError::Fork {
        what: "init",
        source,
    })? {
        Forked::Child => init(plan, chan, observe.as_ref()),
        Forked::Parent(pid) => pid,
    };
    // Only init and the command use it; the observer sees EOF once they are gone.
    drop(observe);
    channel::send(chan, &Message::InitPid(init_pid)).map_err(channel_err("report init pid"))?;
    let pidfd = sys::pidfd_open(init_pid).map_err(SetupError::PidfdOpen)?;
    loop {
        let mut fds = [
            PollFd::new(chan.as_fd(), PollFlags::empty()),
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(SetupError::Poll(e)),
        }
        let hup = fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR));
        let init_done = fds[1].revents().is_some_and(|r| !r.is_empty());
        if init_done {
            let status = sys::wait_any(Some(init_pid), false)
                .ok()
                .flatten()
                .map(|(_, s)| s)
                .unwrap_or(libc::SIGKILL);
            // Init also ends when airlock dies: the observer's tracees die
            // with it (PTRACE_O_EXITKILL), the command among them, and init
            // follows, possibly before airlock's end of the channel is
            // closed. Only airlock's answer says it is alive and will remove
            // the cgroup; without it, nobody but us is left to.
            let answered =
                !hup && channel::send(chan, &Message::InitDied(status)).is_ok() && awaits_bye(chan);
            if !answered {
                remove_cgroup(cgroup);
                return Ok(137);
            }
            return Ok(0);
        }
        if hup {
            // airlock is gone (even kill -9): take the whole sandbox down and
            // leave no cgroup behind.
            sys::kill(init_pid, libc::SIGKILL);
            let _ = sys::wait_any(Some(init_pid), false);
            remove_cgroup(cgroup);
            return Ok(137);
        }
    }
}

/// Wait for airlock's [`Message::Bye`]; false when the channel ends instead.
fn awaits_bye(chan: &OwnedFd) -> bool {
    loop {
        match channel::recv(chan) {
            Ok(Some(Message::Bye)) => return true,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return false,
        }
    }
}

/// Leave the cgroup, kill whatever is still in it, and remove it.
fn remove_cgroup(cgroup: Option<&Cgroup>) {
    if let Some(cg) = cgroup {
        cg.leave_self();
        cg.kill_all();
        cg.remove();
    }
}

/// PID 1 of the sandbox; never returns.
fn init(plan: &Plan, chan: &OwnedFd, observe: Option<&OwnedFd>) -> ! {
    // Die with the supervisor (single-threaded, so the thread caveat of
    // PR_SET_PDEATHSIG in prctl(2) does not apply).
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    // Every process of the sandbox can read PID 1's command line, and the
    // step holders forked from it share it: it must not show airlock's own
    // arguments (paths, labels, the store's address).
    if let Err(source) = sys::overwrite_command_line(b"airlock:init") {
        report(chan, &SetupError::CommandLine { source });
        sys::exit_now(125);
    }
    let terminal = match init_setup(plan, chan) {
        Ok(terminal) => terminal,
        Err(error) => {
            report(chan, &error);
            sys::exit_now(125);
        }
    };
    match channel::recv(chan) {
        Ok(Some(Message::Go)) => {}
        _ => sys::exit_now(125),
    }
    if plan.session {
        // Init serves the steps itself: as PID 1 it is out of their reach
        // (see launcher.rs).
        crate::launcher::run(plan, chan, observe);
    }
    // The command's signals are held until it has its own dispositions
    // (see fork_signals_held).
    let cmd_pid = match sys::fork_signals_held() {
        Ok(Forked::Child) => {
            let launch = crate::command::Launch::of_plan(plan, observe, terminal.as_ref());
            crate::command::run(plan, &launch)
        }
        Ok(Forked::Parent(pid)) => pid,
        Err(source) => {
            report(
                chan,
                &SetupError::Fork {
                    what: "command",
                    source,
                },
            );
            sys::exit_now(125);
        }
    };
    // Only the command's session holds the terminal: when it and its
    // children are gone, airlock's relay sees the hangup.
    drop(terminal);
    // Reap everything; report when the command itself ends.
    loop {
        match sys::wait_any(None, false) {
            Ok(Some((pid, status))) if pid == cmd_pid => {
                // The observer (the command's tracer) reaped it first, so
                // everything it did is already seen; what is still running
                // dies with us, and the observer then reconciles the
                // writable mounts it holds open.
                let _ = channel::send(chan, &Message::Exit(status));
                sys::exit_now(0);
            }
            Ok(_) => {}
            Err(_) => sys::exit_now(125),
        }
    }
}

/// Namespaces, network, mounts; with `plan.terminal` also the command's
/// pty, whose master goes to airlock and whose slave is returned for the
/// command.
fn init_setup(plan: &Plan, chan: &OwnedFd) -> Result<Option<OwnedFd>, SetupError> {
    // All owned by the user namespace when unprivileged (see user_namespaces(7)).
    unshare(
        CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS
            | CloneFlags::CLONE_NEWCGROUP,
    )
    .map_err(SetupError::Unshare)?;
    nix::unistd::sethostname(&plan.hostname).map_err(SetupError::Hostname)?;
    let sockets = netns::setup()?;
    let network = Message::Network {
        transparent: sockets.transparent.into(),
        dns_udp: sockets.dns_udp.into(),
        dns_tcp: sockets.dns_tcp.into(),
    };
    channel::send(chan, &network).map_err(channel_err("hand over sockets"))?;
    drop(network);
    crate::mounts::setup(plan)?;
    // After the mounts: the pty must come from the sandbox's devpts instance.
    let terminal = if plan.terminal {
        let (master, slave) = crate::pty::allocate().map_err(SetupError::Terminal)?;
        channel::send(chan, &Message::Terminal(master))
            .map_err(channel_err("hand over the terminal"))?;
        Some(slave)
    } else {
        None
    };
    channel::send(chan, &Message::Ready).map_err(channel_err("report ready"))?;
    Ok(terminal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_namespace_refusal_is_its_own_failure() {
        let e = SetupError::UserNamespaces(Errno::EPERM);
        assert_eq!(
            e.failure(),
            Failure::UserNamespaces(
                "unshare(CLONE_NEWUSER) failed with EPERM: Operation not permitted".into()
            )
        );
        assert_eq!(
            SetupError::Unshare(Errno::EPERM).failure(),
            Failure::Setup("unshare namespaces: EPERM: Operation not permitted".into())
        );
        let e = SetupError::Channel {
            step: "report ready",
            source: ChannelError::TooLong { len: 5000 },
        };
        assert_eq!(
            e.failure(),
            Failure::Setup(
                "report ready: control message of 5000 bytes exceeds the channel's 4096-byte limit"
                    .into()
            )
        );
    }
}
