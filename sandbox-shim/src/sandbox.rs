//! The handle airlock holds on one sandbox: spawn, hand-over of the network
//! sockets, release, wait (with timeout), kill, cleanup; in session mode,
//! the start of the session and its step events.
//!
//! Over 500 lines because both modes share one handle and one wait loop
//! (`finish`): a session's step events arrive on the same channel, between
//! the same setup and teardown, as `airlock run`'s exit.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, channel as mpsc_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::unistd::Pid;

use crate::attribution::Attributor;
use crate::cgroup::Cgroup;
use crate::channel::{self, ChannelError, DecodeError, Failure, Message};
use crate::child;
use crate::error::ShimError;
use crate::observation::ObserveSpec;
use crate::observer::{self, SharedState};
use crate::outcome::{ExitKind, Outcome, human_bytes};
use crate::plan::{Identity, Plan};
use crate::prereq;
use crate::spec::{SandboxSpec, TRANSPARENT_ADDR};
use crate::stdio;
use crate::step::{StepControl, StepEvent};
use crate::sys::{self, Forked};
use airlock_record::AuditEvent;

/// How long setup (namespaces, capture rules, mounts) may take before we give up.
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);

/// Sockets created inside the sandbox's network namespace, served by the proxy
/// from the host namespace. They stay bound to the sandbox namespace, so
/// SO_ORIGINAL_DST on accepted connections reports the sandbox's destination.
#[derive(Debug)]
pub struct NetworkHandles {
    /// Every outbound TCP connection (any address, any port) lands here.
    pub transparent: TcpListener,
    /// DNS over UDP, 127.0.0.53:53 inside (all UDP/53 is redirected here).
    pub dns_udp: UdpSocket,
    /// DNS over TCP, same address (all TCP/53 is redirected here).
    pub dns_tcp: TcpListener,
    /// The listener's own address inside the sandbox.
    pub transparent_addr: SocketAddr,
}

/// A sandbox whose command runs after [`Sandbox::release`].
///
/// Dropping it without [`Sandbox::wait`] kills the whole tree and removes its cgroup.
#[derive(Debug)]
pub struct Sandbox {
    supervisor: Pid,
    init: Pid,
    /// Shared with the [`StepControl`]s of a session.
    chan: Arc<OwnedFd>,
    session: bool,
    network: Option<NetworkHandles>,
    cgroup: Option<Cgroup>,
    notices: Vec<String>,
    released_at: Option<Instant>,
    memory_limit: Option<u64>,
    timeout: Option<Duration>,
    finished: bool,
    observations: Option<Receiver<AuditEvent>>,
    observer: Option<JoinHandle<()>>,
    /// Some when observing: made at the fork, told init's pid once setup
    /// reports it.
    attributor: Option<Attributor>,
    terminal: Option<OwnedFd>,
}

/// A sandbox forked and setting itself up (namespaces, capture rules,
/// mounts); [`Starting::ready`] waits for it. What does not depend on the
/// sandbox (the proxy, its threads) can be built meanwhile, on a CPU the
/// setup leaves idle.
///
/// Dropping it kills the sandbox, as dropping a [`Sandbox`] does.
#[derive(Debug)]
pub struct Starting {
    sandbox: Sandbox,
    /// The observer's settings and its end of the observer channel.
    observe: Option<(ObserveSpec, OwnedFd)>,
    terminal: bool,
}

/// How long [`Sandbox::wait`] waits for the observer to report the last
/// records: the end-of-session reconcile walks every writable mount, which
/// for a large workspace takes a while; past this, a stuck observer is left
/// behind rather than hanging airlock.
const OBSERVER_JOIN_TIMEOUT: Duration = Duration::from_secs(120);

fn unique_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}-{}-{nanos:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// What came on the control channel within the time allowed.
enum Received {
    /// Nothing yet.
    Nothing,
    /// Every helper closed its end.
    Eof,
    Message(Message),
    /// A message that does not read as one (no helper of ours sends it).
    Malformed(DecodeError),
}

/// Wait for one message, at most `timeout` (None = forever).
fn recv_within(chan: &OwnedFd, timeout: Option<Duration>) -> Result<Received, ShimError> {
    let ms = match timeout {
        None => PollTimeout::NONE,
        Some(d) => PollTimeout::try_from(d.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(PollTimeout::MAX),
    };
    let mut fds = [PollFd::new(chan.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, ms) {
        Ok(0) => return Ok(Received::Nothing),
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok(Received::Nothing),
        Err(e) => return Err(ShimError::io("poll control channel", e)),
    }
    match channel::recv(chan) {
        Ok(Some(msg)) => Ok(Received::Message(msg)),
        Ok(None) => Ok(Received::Eof),
        Err(ChannelError::Malformed(e)) => Ok(Received::Malformed(e)),
        // A supervisor that died with our last message unread resets the
        // channel instead of closing it: it is gone all the same, and the
        // sandbox must still be reaped and its session finished.
        Err(ChannelError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {
            Ok(Received::Eof)
        }
        Err(e) => Err(ShimError::io("read control channel", e)),
    }
}

impl Sandbox {
    /// Create namespaces, mounts, network, cgroup; the command does NOT exec
    /// until [`Sandbox::release`] is called.
    ///
    /// Any thread may call it: the sandbox dies when the airlock *process* dies
    /// (EOF on the control channel), not when the calling thread exits.
    pub fn spawn(spec: SandboxSpec) -> Result<Self, ShimError> {
        Self::start(spec)?.ready()
    }

    /// [`Sandbox::spawn`] in two halves: fork the supervisor and return
    /// while the sandbox sets itself up.
    pub fn start(mut spec: SandboxSpec) -> Result<Starting, ShimError> {
        let stdio = match (spec.terminal, spec.session, spec.stdio.take()) {
            // The helpers (and the command until it attaches the pty) get
            // /dev/null: no descriptor of the caller's terminal enters the sandbox.
            (true, _, _) => Some(null_stdio()?),
            // A session's helpers outlive the caller's stdio, and each step
            // brings its own.
            (false, true, None) => Some(null_stdio()?),
            (false, _, given) => given,
        };
        let mut plan = Plan::build(&spec)?;
        if let Identity::Unprivileged { .. } = plan.identity {
            prereq::check_userns()?;
        }
        let (cgroup, missing) = Cgroup::create(&spec.limits, &unique_id())?;
        let mut notices = Vec::new();
        let why = if nix::unistd::geteuid().is_root() {
            "no usable cgroup controller"
        } else {
            "cgroups unavailable as an unprivileged user"
        };
        if missing.memory {
            plan.rlimit_memory = spec.limits.memory_bytes;
            notices.push(format!(
                "{why}: --memory enforced with RLIMIT_AS instead: it caps address space, not memory, so allocations fail rather than the command being killed, and runtimes that reserve large ranges (node needs about 768M) need a higher limit"
            ));
        }
        if missing.pids {
            plan.rlimit_nproc = spec.limits.pids;
            notices.push(format!(
                "{why}: --pids enforced with RLIMIT_NPROC instead (it counts every process of your user, not only the sandbox's)"
            ));
        }
        if missing.cpus {
            notices.push(format!("{why}: --cpus is not enforced"));
        }

        let (ours, theirs) = channel::pair().map_err(|e| ShimError::io("socketpair", e))?;
        let observe_pair = match plan.observe {
            Some(_) => Some(channel::pair().map_err(|e| ShimError::io("observer socketpair", e))?),
            None => None,
        };
        let (obs_ours, obs_theirs) = match observe_pair {
            Some((a, b)) => (Some(a), Some(b)),
            None => (None, None),
        };
        let supervisor = match sys::fork().map_err(|e| ShimError::io("fork", e))? {
            Forked::Child => {
                drop(ours);
                drop(obs_ours);
                if let Some(fds) = &stdio
                    && stdio::install(fds).is_err()
                {
                    sys::exit_now(125);
                }
                let mut keep = vec![theirs.as_raw_fd()];
                keep.extend(obs_theirs.as_ref().map(|o| o.as_raw_fd()));
                if sys::close_fds_except_all(&keep).is_err() {
                    sys::exit_now(125);
                }
                child::supervisor(&plan, cgroup.as_ref(), theirs, obs_theirs)
            }
            Forked::Parent(pid) => pid,
        };
        drop(theirs);
        drop(obs_theirs);
        // The command holds the only copies now (EOF reaches the recorder when it ends).
        drop(stdio);
        let mut sandbox = Self::unstarted(supervisor, ours, &spec, cgroup, notices);
        let observe = plan.observe.zip(obs_ours);
        if observe.is_some() {
            let shared: SharedState = Arc::new(Mutex::new(observer::Shared::default()));
            sandbox.attributor = Some(Attributor::new(shared));
        }
        Ok(Starting {
            sandbox,
            observe,
            terminal: spec.terminal,
        })
    }

    /// The sandbox as the supervisor's fork leaves it: init is not known
    /// until the supervisor says (see [`Sandbox::await_ready`]).
    fn unstarted(
        supervisor: Pid,
        chan: OwnedFd,
        spec: &SandboxSpec,
        cgroup: Option<Cgroup>,
        notices: Vec<String>,
    ) -> Self {
        Self {
            supervisor,
            init: Pid::from_raw(0),
            chan: Arc::new(chan),
            session: spec.session,
            network: None,
            cgroup,
            notices,
            released_at: None,
            memory_limit: spec.limits.memory_bytes,
            timeout: spec.limits.timeout,
            finished: false,
            observations: None,
            observer: None,
            attributor: None,
            terminal: None,
        }
    }

    /// How the supervisor ended, once it closed its end of the channel
    /// during setup: it is on its way out, so wait for it briefly. A death
    /// by signal says what no message of its own could.
    fn how_the_supervisor_ended(&self) -> String {
        for _ in 0..50 {
            match sys::wait_any(Some(self.supervisor), true) {
                Ok(Some((_, s))) if libc::WIFSIGNALED(s) => {
                    return format!("killed by signal {}", libc::WTERMSIG(s));
                }
                Ok(Some((_, s))) => return format!("exit status {}", libc::WEXITSTATUS(s)),
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break,
            }
        }
        "its end is unknown".into()
    }

    /// Read setup's reports until the sandbox is ready and its init known.
    ///
    /// Two processes write to the channel during setup, and nothing orders
    /// them: the supervisor sends init's pid once its fork returns, while
    /// init, forked, goes on to set up and send Ready. Under load init can
    /// be ready first. Ready alone would leave init's pid unknown (0), and
    /// everything that goes through it would fail: the observer's backstop
    /// (whose failure ends the observer, and with it, by
    /// PTRACE_O_EXITKILL, the command before its first instruction),
    /// runsc's network namespace, the attributor.
    fn await_ready(&mut self) -> Result<(), ShimError> {
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let mut ready = false;
        while !(ready && self.init.as_raw() > 0) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ShimError::Setup(format!(
                    "no answer from the sandbox within {}s: check system load",
                    SETUP_TIMEOUT.as_secs()
                )));
            }
            let msg = match recv_within(&self.chan, Some(left))? {
                Received::Nothing => continue,
                Received::Eof => {
                    return Err(ShimError::Setup(format!(
                        "sandbox helper exited during setup ({}): see stderr above",
                        self.how_the_supervisor_ended()
                    )));
                }
                Received::Malformed(e) => return Err(ShimError::Setup(e.to_string())),
                Received::Message(msg) => msg,
            };
            match msg {
                Message::InitPid(pid) => self.init = pid,
                Message::Network {
                    transparent,
                    dns_udp,
                    dns_tcp,
                } => self.network = Some(network_handles(transparent, dns_udp, dns_tcp)?),
                Message::Terminal(master) => self.terminal = Some(master),
                Message::Ready => ready = true,
                Message::Failed(Failure::UserNamespaces(detail)) => {
                    return Err(ShimError::UserNamespacesDisabled(detail));
                }
                Message::Failed(Failure::Setup(text)) => return Err(ShimError::Setup(text)),
                // Init died during setup: let the supervisor go, so the
                // channel's end says so.
                Message::InitDied(_) => {
                    let _ = channel::send(&self.chan, &Message::Bye);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The observer's records (execs, exits, file changes), in order; Some
    /// exactly once, and only when `SandboxSpec::observe` was set. The channel
    /// disconnects once everything is reported; after [`Sandbox::wait`] has
    /// returned it holds every record.
    pub fn take_observations(&mut self) -> Option<Receiver<AuditEvent>> {
        self.observations.take()
    }

    /// Maps proxy connections to the exec that opened them (observing sandboxes only).
    pub fn attributor(&self) -> Option<Attributor> {
        self.attributor.clone()
    }

    /// The master of the command's pseudo-terminal (when
    /// `SandboxSpec::terminal` was set); Some exactly once. Read it for
    /// everything the command prints, write it for its input; set the window
    /// size on it before [`Sandbox::release`]. Reads fail with EIO once every
    /// process in the sandbox has closed the terminal.
    pub fn take_terminal(&mut self) -> Option<OwnedFd> {
        self.terminal.take()
    }

    /// The sockets for the proxy; Some exactly once.
    pub fn take_network(&mut self) -> Option<NetworkHandles> {
        self.network.take()
    }

    /// Host pid of the sandbox init (PID 1 inside).
    pub fn pid(&self) -> i32 {
        self.init.as_raw()
    }

    /// Let the command exec; the timeout starts now.
    pub fn release(&mut self) -> Result<(), ShimError> {
        if self.released_at.is_some() {
            return Err(ShimError::AlreadyReleased);
        }
        channel::send(&self.chan, &Message::Go)
            .map_err(|e| ShimError::io("release the command", e))?;
        self.released_at = Some(Instant::now());
        Ok(())
    }

    /// Session mode only: let the sandbox take steps (the go; the
    /// session's timeout starts now); returns the handle for steps.
    pub fn start_session(&mut self) -> Result<StepControl, ShimError> {
        if !self.session {
            return Err(ShimError::NotASession);
        }
        self.release()?;
        Ok(StepControl::new(self.chan.clone()))
    }

    /// Session mode only: block until the sandbox ends (its init dies:
    /// killed via [`Sandbox::pid`], the session's timeout, or airlock's
    /// death), calling `on_event` for every step event as it arrives (on
    /// this thread). Returns like [`Sandbox::wait`], or the reason when
    /// the session could not serve steps at all.
    pub fn wait_session(self, on_event: impl FnMut(StepEvent)) -> Result<Outcome, ShimError> {
        if !self.session {
            return Err(ShimError::NotASession);
        }
        let (outcome, failure) = self.finish(on_event)?;
        match failure {
            Some(text) => Err(ShimError::Setup(text)),
            None => Ok(outcome),
        }
    }

    /// Block until the command ends (or the timeout kills it), reap, clean up.
    /// Releases the command first if that has not happened yet.
    pub fn wait(self) -> Result<Outcome, ShimError> {
        self.finish(drop).map(|(outcome, _)| outcome)
    }

    /// [`Sandbox::wait`], handing step events to `on_event`; also the text
    /// of a failure the sandbox reported after the go.
    fn finish(
        mut self,
        mut on_event: impl FnMut(StepEvent),
    ) -> Result<(Outcome, Option<String>), ShimError> {
        if self.released_at.is_none() {
            self.release()?;
        }
        let mut failure = None;
        let deadline = match (self.timeout, self.released_at) {
            (Some(t), Some(at)) => Some(at + t),
            _ => None,
        };
        let mut timed_out = false;
        let mut exit: Option<i32> = None;
        let mut init_status: Option<i32> = None;
        loop {
            let left = match deadline {
                Some(d) if !timed_out => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        timed_out = exit.is_none();
                        if timed_out {
                            self.kill();
                        }
                        continue;
                    }
                    Some(left)
                }
                _ => None,
            };
            match recv_within(&self.chan, left)? {
                Received::Nothing | Received::Malformed(_) => continue,
                Received::Eof => break,
                Received::Message(Message::Exit(status)) => exit = Some(status),
                Received::Message(Message::InitDied(status)) => {
                    init_status = Some(status);
                    // We are alive and remove the cgroup ourselves (see
                    // Message::Bye); the supervisor exits on it.
                    let _ = channel::send(&self.chan, &Message::Bye);
                }
                Received::Message(Message::StepTerminal(step, master)) => {
                    on_event(StepEvent::Terminal { step, master });
                }
                Received::Message(Message::StepExit(step, status)) => {
                    let status = ExitKind::from_raw(status);
                    on_event(StepEvent::Exited { step, status });
                }
                Received::Message(Message::StepFailed(step, message)) => {
                    on_event(StepEvent::Failed { step, message });
                }
                Received::Message(Message::Failed(f)) => {
                    failure = Some(match f {
                        Failure::Setup(text) | Failure::UserNamespaces(text) => text,
                    });
                }
                Received::Message(_) => {}
            }
        }
        let supervisor_status = sys::wait_any(Some(self.supervisor), false)
            .ok()
            .flatten()
            .map(|(_, s)| s);
        self.finished = true;
        self.join_observer();
        let status = exit
            .map(ExitKind::from_raw)
            .or_else(|| {
                init_status
                    .filter(|s| libc::WIFSIGNALED(*s))
                    .map(ExitKind::from_raw)
            })
            .or_else(|| {
                supervisor_status
                    .filter(|s| libc::WIFSIGNALED(*s))
                    .map(ExitKind::from_raw)
            })
            .unwrap_or(ExitKind::Signaled(libc::SIGKILL));
        let oom_killed = !timed_out
            && status == ExitKind::Signaled(libc::SIGKILL)
            && self.cgroup.as_ref().is_some_and(Cgroup::oom_killed);
        if let Some(cg) = &self.cgroup {
            cg.remove();
        }
        let outcome = Outcome {
            status,
            timed_out,
            oom_killed,
            memory_limit: self.memory_limit,
            timeout: self.timeout,
        };
        Ok((outcome, failure))
    }

    /// Give the observer a bounded time to report the last records (it ends by
    /// itself once the sandbox is gone; a stuck one is left detached).
    fn join_observer(&mut self) {
        let Some(handle) = self.observer.take() else {
            return;
        };
        let deadline = Instant::now() + OBSERVER_JOIN_TIMEOUT;
        while !handle.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if handle.is_finished() {
            let _ = handle.join();
        }
    }

    /// SIGKILL the whole tree: the supervisor's death takes init down
    /// (PR_SET_PDEATHSIG) and init's death empties the PID namespace.
    pub fn kill(&self) {
        sys::kill(self.supervisor, libc::SIGKILL);
        if let Some(cg) = &self.cgroup {
            cg.kill_all();
        }
    }

    /// One-time notices about limits enforced in a weaker way (or not at all).
    pub fn notices(&self) -> Vec<String> {
        self.notices.clone()
    }

    /// Cgroup directories of this sandbox (empty when none was needed).
    pub fn cgroup_paths(&self) -> Vec<std::path::PathBuf> {
        self.cgroup.as_ref().map(Cgroup::paths).unwrap_or_default()
    }

    /// Human form of the memory limit, e.g. "64M".
    pub fn memory_limit_display(&self) -> Option<String> {
        self.memory_limit.map(human_bytes)
    }
}

impl Starting {
    /// Which exec owns a sandbox socket; None without an observer. It
    /// attributes nothing until the sandbox is ready.
    pub fn attributor(&self) -> Option<Attributor> {
        self.sandbox.attributor()
    }

    /// Wait for setup to end, then start the observer: the sandbox is
    /// ready for its command's release.
    pub fn ready(self) -> Result<Sandbox, ShimError> {
        let Self {
            mut sandbox,
            observe,
            terminal,
        } = self;
        sandbox.await_ready()?;
        if terminal && sandbox.terminal.is_none() {
            return Err(ShimError::Setup(
                "the sandbox reported ready without handing over its terminal".into(),
            ));
        }
        if let (Some((obs, chan)), Some(attributor)) = (observe, &sandbox.attributor) {
            attributor.init_known(sandbox.init);
            let (tx, rx) = mpsc_channel();
            let cfg = observer::Config {
                init: sandbox.init,
                max_file_bytes: obs.max_file_bytes,
            };
            let handle = observer::spawn(chan, cfg, tx, attributor.shared.clone())
                .map_err(|e| ShimError::io("start the observer thread", e))?;
            sandbox.observations = Some(rx);
            sandbox.observer = Some(handle);
        }
        Ok(sandbox)
    }
}

/// /dev/null three times, for helpers that must not hold the caller's stdio.
fn null_stdio() -> Result<[OwnedFd; 3], ShimError> {
    let open = || -> Result<OwnedFd, ShimError> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map(OwnedFd::from)
            .map_err(|e| ShimError::io("open /dev/null", e))
    };
    Ok([open()?, open()?, open()?])
}

fn network_handles(t: OwnedFd, u: OwnedFd, d: OwnedFd) -> Result<NetworkHandles, ShimError> {
    let transparent_addr = TRANSPARENT_ADDR.into();
    Ok(NetworkHandles {
        transparent: TcpListener::from(t),
        dns_udp: UdpSocket::from(u),
        dns_tcp: TcpListener::from(d),
        transparent_addr,
    })
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.kill();
        let _ = sys::wait_any(Some(self.supervisor), false);
        if let Some(cg) = &self.cgroup {
            cg.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The supervisor and init both report during setup, in no set order:
    /// whichever comes first, the sandbox is ready only with init's pid.
    #[test]
    fn setup_ends_with_inits_pid_even_when_init_is_ready_first() {
        let init = Pid::from_raw(4242);
        for ready_first in [true, false] {
            let (ours, theirs) = channel::pair().unwrap();
            let mut sandbox = Sandbox::unstarted(
                Pid::from_raw(0),
                ours,
                &SandboxSpec::default(),
                None,
                Vec::new(),
            );
            // No supervisor to kill or reap when it drops.
            sandbox.finished = true;
            let (first, second) = match ready_first {
                true => (Message::Ready, Message::InitPid(init)),
                false => (Message::InitPid(init), Message::Ready),
            };
            channel::send(&theirs, &first).unwrap();
            // The second report is late, as the supervisor is when the
            // scheduler sets it aside right after its fork.
            let late = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                channel::send(&theirs, &second).unwrap();
                theirs
            });
            sandbox.await_ready().unwrap();
            assert_eq!(sandbox.pid(), init.as_raw(), "ready first: {ready_first}");
            drop(late.join());
        }
    }
}
