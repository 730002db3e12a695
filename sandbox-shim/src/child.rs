//! The three processes on the sandbox side:
//! - supervisor: in the host PID namespace; joins the cgroup, creates the
//!   namespaces, forks init, and kills it when airlock dies (EOF on the channel);
//! - init: PID 1 of the new PID namespace; sets up network and mounts, hands the
//!   sockets over, waits for the go, forks the command and reaps orphans;
//! - command: drops identity/capabilities, installs seccomp and execs.
//!   When init exits the kernel kills everything left in the namespace
//!   (see pid_namespaces(7)).

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, unshare};
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;
use nix::unistd::{AccessFlags, Gid, Uid, access};

use crate::cgroup::Cgroup;
use crate::channel::{self, Failure, Message};
use crate::netns;
use crate::plan::{Identity, Plan};
use crate::sys::{self, Forked};

/// Prefix of error texts that mean "user namespaces are unavailable".
pub const USERNS_ERROR: &str = "userns:";

fn write_id_maps(uid_map: &str, gid_map: &str, deny_setgroups: bool) -> Result<(), String> {
    if deny_setgroups {
        std::fs::write("/proc/self/setgroups", "deny")
            .map_err(|e| format!("write /proc/self/setgroups: {e}"))?;
    }
    std::fs::write("/proc/self/uid_map", uid_map)
        .map_err(|e| format!("write /proc/self/uid_map: {e}"))?;
    std::fs::write("/proc/self/gid_map", gid_map)
        .map_err(|e| format!("write /proc/self/gid_map: {e}"))
}

/// Tell airlock why setup failed (fitted to one message: the text is all
/// airlock will hear of it).
fn report(chan: &OwnedFd, msg: String) {
    let failure = match msg.strip_prefix(USERNS_ERROR) {
        Some(detail) => Failure::UserNamespaces(detail.to_string()),
        None => Failure::Setup(msg),
    };
    let _ = channel::send(chan, &Message::Failed(failure.fitted()));
}

/// Entry point of the forked supervisor; never returns.
///
/// `observe` is the sandbox end of the observer channel (when observing): the
/// command asks over it to be traced before it execs.
pub fn supervisor(
    plan: &Plan,
    cgroup: Option<&Cgroup>,
    chan: OwnedFd,
    observe: Option<OwnedFd>,
) -> ! {
    let code = match run_supervisor(plan, cgroup, &chan, observe) {
        Ok(code) => code,
        Err(msg) => {
            report(&chan, msg);
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
) -> Result<i32, String> {
    sys::ignore_terminal_signals();
    if let Some(cg) = cgroup {
        cg.join_self().map_err(|e| e.to_string())?;
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
        (nix::errno::Errno::EPERM | nix::errno::Errno::ENOSPC, Identity::Unprivileged { .. }) => {
            format!("{USERNS_ERROR}unshare(CLONE_NEWUSER) failed with {e}")
        }
        _ => format!("unshare namespaces: {e}"),
    })?;
    if let Identity::Unprivileged { uid, gid } = plan.identity {
        // Root inside maps to us outside: setup runs as uid 0 of the new
        // namespace (so `nft` keeps CAP_NET_ADMIN); the command later moves
        // into a nested namespace where it is the invoking uid again.
        write_id_maps(&format!("0 {uid} 1"), &format!("0 {gid} 1"), true)?;
    }
    let init_pid = match sys::fork().map_err(|e| format!("fork init: {e}"))? {
        Forked::Child => init(plan, chan, observe.as_ref()),
        Forked::Parent(pid) => pid,
    };
    // Only init and the command use it; the observer sees EOF once they are gone.
    drop(observe);
    channel::send(chan, &Message::InitPid(init_pid))
        .map_err(|e| format!("report init pid: {e}"))?;
    let pidfd = sys::pidfd_open(init_pid).map_err(|e| format!("pidfd_open: {e}"))?;
    loop {
        let mut fds = [
            PollFd::new(chan.as_fd(), PollFlags::empty()),
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("poll: {e}")),
        }
        let hup = fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR));
        let init_done = fds[1].revents().is_some_and(|r| !r.is_empty());
        if init_done {
            let status = sys::wait_any(init_pid, false)
                .ok()
                .flatten()
                .map(|(_, s)| s)
                .unwrap_or(libc::SIGKILL);
            let _ = channel::send(chan, &Message::InitDied(status));
            return Ok(0);
        }
        if hup {
            // airlock is gone (even kill -9): take the whole sandbox down and
            // leave no cgroup behind.
            sys::kill(init_pid, libc::SIGKILL);
            let _ = sys::wait_any(init_pid, false);
            if let Some(cg) = cgroup {
                cg.leave_self();
                cg.remove();
            }
            return Ok(137);
        }
    }
}

/// PID 1 of the sandbox; never returns.
fn init(plan: &Plan, chan: &OwnedFd, observe: Option<&OwnedFd>) -> ! {
    // Die with the supervisor (single-threaded, so the thread caveat of
    // PR_SET_PDEATHSIG in prctl(2) does not apply).
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let terminal = match init_setup(plan, chan) {
        Ok(terminal) => terminal,
        Err(msg) => {
            report(chan, msg);
            sys::exit_now(125);
        }
    };
    match channel::recv(chan) {
        Ok(Some(Message::Go)) => {}
        _ => sys::exit_now(125),
    }
    let cmd_pid = match sys::fork() {
        Ok(Forked::Child) => command(plan, observe, terminal.as_ref()),
        Ok(Forked::Parent(pid)) => pid,
        Err(e) => {
            report(chan, format!("fork command: {e}"));
            sys::exit_now(125);
        }
    };
    // Only the command's session holds the terminal: when it and its
    // children are gone, airlock's relay sees the hangup.
    drop(terminal);
    // Reap everything; report when the command itself ends.
    loop {
        match sys::wait_any(-1, false) {
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
fn init_setup(plan: &Plan, chan: &OwnedFd) -> Result<Option<OwnedFd>, String> {
    // All owned by the user namespace when unprivileged (see user_namespaces(7)).
    unshare(
        CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS
            | CloneFlags::CLONE_NEWCGROUP,
    )
    .map_err(|e| format!("unshare namespaces: {e}"))?;
    nix::unistd::sethostname(&plan.hostname).map_err(|e| format!("sethostname: {e}"))?;
    let sockets = netns::setup(&plan.nft)?;
    let network = Message::Network {
        transparent: sockets.transparent.into(),
        dns_udp: sockets.dns_udp.into(),
        dns_tcp: sockets.dns_tcp.into(),
    };
    channel::send(chan, &network).map_err(|e| format!("hand over sockets: {e}"))?;
    drop(network);
    crate::mounts::setup(plan)?;
    // After the mounts: the pty must come from the sandbox's devpts instance.
    let terminal = if plan.terminal {
        let (master, slave) =
            crate::pty::allocate().map_err(|e| format!("allocate a pseudo-terminal: {e}"))?;
        channel::send(chan, &Message::Terminal(master))
            .map_err(|e| format!("hand over the terminal: {e}"))?;
        Some(slave)
    } else {
        None
    };
    channel::send(chan, &Message::Ready).map_err(|e| format!("report ready: {e}"))?;
    Ok(terminal)
}

/// The command process; never returns.
fn command(plan: &Plan, observe: Option<&OwnedFd>, terminal: Option<&OwnedFd>) -> ! {
    let (code, msg) = match exec_command(plan, observe, terminal) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    let line = format!("airlock: {msg}\n");
    let _ = nix::unistd::write(std::io::stderr(), line.as_bytes());
    sys::exit_now(code)
}

enum Never {}

fn setup_err(e: impl std::fmt::Display) -> (i32, String) {
    (125, format!("sandbox setup failed: {e}"))
}

fn exec_command(
    plan: &Plan,
    observe: Option<&OwnedFd>,
    terminal: Option<&OwnedFd>,
) -> Result<Never, (i32, String)> {
    sys::reset_signals();
    if let Some(slave) = terminal {
        // First, while still privileged in the sandbox: TIOCSCTTY needs the
        // new session, and the error below then reaches the terminal.
        crate::pty::attach(slave).map_err(|e| setup_err(format!("attach the terminal: {e}")))?;
    }
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if let Some(bytes) = plan.rlimit_memory {
        setrlimit(Resource::RLIMIT_AS, bytes, bytes).map_err(setup_err)?;
    }
    if let Some(n) = plan.rlimit_nproc {
        setrlimit(Resource::RLIMIT_NPROC, n, n).map_err(setup_err)?;
    }
    let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(63);
    match plan.identity {
        Identity::Root => sys::drop_all_capabilities(last_cap).map_err(setup_err)?,
        Identity::Switch(u) => {
            sys::drop_bounding_and_ambient(last_cap).map_err(setup_err)?;
            let gid = Gid::from_raw(u.gid);
            let uid = Uid::from_raw(u.uid);
            nix::unistd::setgroups(&[gid]).map_err(setup_err)?;
            nix::unistd::setresgid(gid, gid, gid).map_err(setup_err)?;
            nix::unistd::setresuid(uid, uid, uid).map_err(setup_err)?;
            sys::clear_capability_sets().map_err(setup_err)?;
        }
        Identity::Unprivileged { uid, gid } => {
            // Nested user namespace: the command is the invoking uid again and
            // holds no capability over the sandbox's namespaces.
            unshare(CloneFlags::CLONE_NEWUSER).map_err(setup_err)?;
            write_id_maps(&format!("{uid} 0 1"), &format!("{gid} 0 1"), false)
                .map_err(setup_err)?;
            sys::drop_all_capabilities(last_cap).map_err(setup_err)?;
        }
    }
    nix::sys::prctl::set_no_new_privs().map_err(setup_err)?;
    let program = resolve(&plan.argv[0], &plan.search_path)?;
    match (plan.observe, observe) {
        (None, _) => {
            sys::install_seccomp(&crate::seccomp::filter_with(false, plan.allow_unix_sockets))
                .map_err(setup_err)?
        }
        (Some(_), Some(obs)) => {
            // Be traced before anything of the command runs: the observer
            // attaches to the process behind this pidfd (the kernel names it
            // in the observer's PID namespace) and answers. The filter's
            // SECCOMP_RET_TRACE stops need the tracer, and our execve is the
            // first thing it sees.
            let me = sys::pidfd_open(std::process::id() as i32).map_err(setup_err)?;
            channel::send(obs, &Message::TraceMe(me)).map_err(setup_err)?;
            match channel::recv(obs) {
                Ok(Some(Message::Traced)) => {}
                _ => {
                    return Err(setup_err(
                        "the auditor could not trace the command (ptrace(2) was refused: inside a container, allow ptrace; or pass --no-audit to run without a record)",
                    ));
                }
            }
            sys::install_seccomp(&crate::seccomp::filter_with(true, plan.allow_unix_sockets))
                .map_err(setup_err)?;
        }
        // Fail closed: observation was asked for but there is no observer.
        (Some(_), None) => return Err(setup_err("observer channel missing")),
    }
    let err = nix::unistd::execve(&program, &plan.argv, &plan.envp).err();
    let name = plan.argv[0].to_string_lossy();
    match err {
        Some(nix::errno::Errno::ENOENT) => Err((127, format!("{name}: command not found"))),
        Some(e) => Err((126, format!("{name}: cannot execute: {e}"))),
        None => Err((126, format!("{name}: cannot execute"))),
    }
}

/// argv[0] through PATH, like execvp(3), but against the sandbox's PATH.
fn resolve(argv0: &CString, search: &OsStr) -> Result<CString, (i32, String)> {
    let bytes = argv0.as_bytes();
    if bytes.contains(&b'/') {
        return Ok(argv0.clone());
    }
    for dir in std::env::split_paths(search) {
        let candidate: PathBuf = dir.join(OsStr::from_bytes(bytes));
        if candidate.is_file() && access(candidate.as_path(), AccessFlags::X_OK).is_ok() {
            return CString::new(candidate.as_os_str().as_bytes())
                .map_err(|_| (127, "PATH entry contains a NUL byte".to_string()));
        }
    }
    Err((
        127,
        format!(
            "{}: command not found in the sandbox PATH",
            Path::new(OsStr::from_bytes(bytes)).display()
        ),
    ))
}
