//! The process that keeps one live session: `airlock session start` runs it
//! detached (its own session, see setsid(2)) and returns once it prints the
//! session's id. It brings the sandbox up as `airlock run` does (`launch`),
//! then serves the control socket until it is told to stop, the session is
//! idle too long, its `--timeout` passes, its audit store fails, or it is
//! killed; the sandbox never outlives it.

use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use airlock_auditor::SessionEnd;
use airlock_shim::Outcome;
use anyhow::Context;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use super::denials::DenialLog;
use super::kill_reasons::KillReasons;
use super::live::Live;
use super::options::ServeOptions;
use super::protocol::{self, NOT_ANSWERING, Pids, Reply, Request, SessionInfo};
use super::registry::Registry;
use super::runner::StepRunner;
use super::steps;
use crate::finish::Finish;
use crate::launch::{GvisorSession, Stop, Wired};

/// How often the idle timeout is checked.
const IDLE_CHECK: Duration = Duration::from_millis(500);

/// Run the session's server; never returns to a shell that waits for it.
pub(crate) fn serve(options: ServeOptions) -> ExitCode {
    // Detached from the caller's terminal and process group, so closing the
    // shell that started it does not end it.
    let _ = nix::unistd::setsid();
    match serve_session(options) {
        Ok(code) => code,
        Err(e) => could_not_serve(&e),
    }
}

/// Say why the server could not keep the session, on the stderr that
/// `airlock session start` relays until the session is ready; exit 125.
pub(crate) fn could_not_serve(e: &anyhow::Error) -> ExitCode {
    eprintln!("airlock: {}", crate::one_line(e));
    ExitCode::from(crate::exit::RUN_FAILED)
}

/// What every connection handler may see; `Live` once the sandbox is up.
struct Shared {
    id: String,
    name: Option<String>,
    started: SystemTime,
    policy: String,
    workspace: String,
    /// Changed by `set_idle_timeout`; the idle watch reads it each time.
    idle_timeout: Mutex<Option<Duration>>,
    live: Mutex<Option<Arc<Live>>>,
    stops: mpsc::UnboundedSender<StopWaiter>,
}

impl Shared {
    fn info(&self) -> SessionInfo {
        let live = self.live.lock().ok().and_then(|l| l.clone());
        let (state, commands, running, init, audit_session) = match &live {
            Some(live) => {
                let counts = live.counts();
                let state = if live.stopping.load(Ordering::SeqCst) {
                    "stopping"
                } else if live.not_answering.load(Ordering::SeqCst) {
                    NOT_ANSWERING
                } else {
                    "ready"
                };
                (
                    state,
                    counts.total,
                    counts.running,
                    Some(live.init),
                    live.recorder.as_ref().map(|r| r.session_id().to_string()),
                )
            }
            None => ("starting", 0, 0, None, None),
        };
        SessionInfo {
            id: self.id.clone(),
            name: self.name.clone(),
            state: state.into(),
            started: self
                .started
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            commands,
            running,
            policy: self.policy.clone(),
            pids: Pids {
                server: std::process::id() as i32,
                init,
            },
            audit_session,
            workspace: Some(self.workspace.clone()),
            idle_timeout_ms: self
                .idle_timeout()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }

    fn idle_timeout(&self) -> Option<Duration> {
        *self.idle_timeout.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Who asked for a stop, told whether the record closed (or why not).
type StopWaiter = oneshot::Sender<Result<(), String>>;

/// Why the session ends.
enum Ending {
    Stopped(Vec<StopWaiter>),
    Idle(Duration),
    /// The sandbox ended by itself (its `--timeout`, a signal to airlock, a
    /// failed audit store, its init killed).
    SandboxEnded,
    /// The process given with `--stop-with-pid` ended.
    OwnerEnded(nix::unistd::Pid),
}

fn serve_session(options: ServeOptions) -> anyhow::Result<ExitCode> {
    let ServeOptions {
        id,
        name,
        idle_timeout,
        stop_with_pid,
        policy,
        sandbox: plan,
    } = options;
    let id = id.as_str();
    let registry = Registry::open()?;
    // Opened before anything else: the owner waits for `start` to print the
    // id, so it is alive now, and from now on its number cannot be reused
    // under us.
    let owner = stop_with_pid
        .map(|pid| {
            airlock_shim::pidfd_open(pid)
                .map(|fd| (pid, fd))
                .with_context(|| format!("watching process {pid} (--stop-with-pid)"))
        })
        .transpose()?;
    let control_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("airlock-control")
        .enable_all()
        .build()
        .context("starting the control runtime")?;
    let cleanup = Cleanup {
        registry: registry.clone(),
        id: id.to_owned(),
        name: name.clone(),
    };
    // Bound before the name is claimed: whoever finds the name finds a
    // socket behind it, never a gap in which the name looks abandoned.
    let listener = registry.bind(id)?;
    if let Some(name) = &name {
        control_rt.block_on(registry.claim_name(name, id))?;
    }
    let (stops_tx, mut stops_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        id: id.to_owned(),
        name,
        started: SystemTime::now(),
        policy,
        workspace: plan.workspace().display().to_string(),
        idle_timeout: Mutex::new(idle_timeout),
        live: Mutex::new(None),
        stops: stops_tx,
    });
    {
        let _guard = control_rt.enter();
        listener.set_nonblocking(true)?;
        let listener = UnixListener::from_std(listener)?;
        control_rt.spawn(accept(listener, shared.clone()));
    }

    let spawned = plan.spawn()?;
    let denials = DenialLog::new(spawned.policy().source_name(), spawned.attributor());
    let labels = crate::launch::StepLabels::default();
    let wired = spawned.wire(
        Some(denials.clone()),
        Some(id.to_owned()),
        Some(labels.clone()),
    )?;
    let Wired {
        mut sandbox,
        recorder,
        shipper,
        recording,
        proxy,
        pty,
        runtime,
        stopped_for,
        env,
        withheld,
        // Served until the session ends.
        approval_socket: _approval_socket,
        gvisor,
    } = wired;
    // Under gVisor the namespace sandbox runs no step: it holds the network
    // namespace runsc's container joins, and reconciles at the end.
    let control = sandbox.start_session()?;
    let (step_events, gvisor_events) = std::sync::mpsc::channel();
    let (runner, gvisor) = match gvisor {
        None => (StepRunner::Namespaces(control), None),
        Some(run) => {
            let session = Arc::new(GvisorSession::start(
                run,
                sandbox.pid(),
                recorder.as_ref(),
                step_events,
            )?);
            let runner = StepRunner::Gvisor {
                session: session.clone(),
                _holder: control,
            };
            (runner, Some(session))
        }
    };
    let kill_reasons = KillReasons::new(&sandbox.cgroup_paths(), sandbox.memory_limit_display());
    let live = Arc::new(
        Live::new(
            runner,
            recorder.clone(),
            env,
            withheld,
            sandbox.pid(),
            denials,
            labels,
        )
        .with_kill_reasons(kill_reasons),
    );
    let (ended_tx, ended_rx) = oneshot::channel::<Result<Outcome, airlock_shim::ShimError>>();
    let events = live.clone();
    std::thread::Builder::new()
        .name("airlock-session".into())
        .spawn(move || {
            let outcome = sandbox.wait_session(|event| events.on_event(event));
            let _ = ended_tx.send(outcome);
        })
        .context("starting the session's waiter")?;
    // Whatever ends this function (an error too): the container goes.
    let _container = gvisor.clone().map(StopOnDrop);
    if let Some(session) = &gvisor {
        let events = live.clone();
        let session = Arc::downgrade(session);
        std::thread::Builder::new()
            .name("airlock-gv-steps".into())
            .spawn(move || {
                // Ends when the session (every sender) is gone.
                for event in gvisor_events {
                    if let (airlock_shim::StepEvent::Exited { step, .. }, Some(session)) =
                        (&event, session.upgrade())
                    {
                        session.ended(*step);
                    }
                    events.on_event(event);
                }
            })
            .context("starting the session's gVisor waiter")?;
    }
    if let Ok(mut slot) = shared.live.lock() {
        *slot = Some(live.clone());
    }
    detach(&registry, id)?;

    let mut ended_rx = ended_rx;
    let ending = control_rt.block_on(async {
        tokio::select! {
            first = stops_rx.recv() => {
                let mut waiters: Vec<_> = first.into_iter().collect();
                while let Ok(more) = stops_rx.try_recv() {
                    waiters.push(more);
                }
                Ending::Stopped(waiters)
            }
            idle = idle_for(&live, &shared) => Ending::Idle(idle),
            _ = &mut ended_rx => Ending::SandboxEnded,
            pid = owner_ended(owner) => Ending::OwnerEnded(pid),
        }
    });
    live.stopping.store(true, Ordering::SeqCst);
    // From now on nobody finds it (those already connected are answered).
    cleanup.unlink();
    // The container first: every trace point is on record before the
    // namespace sandbox's reconcile, which does not repeat what they said.
    if let Some(session) = &gvisor {
        session.stop();
    }
    if !matches!(ending, Ending::SandboxEnded) {
        // Killing init ends the sandbox's whole PID namespace (pid_namespaces(7)).
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(live.init),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = control_rt.block_on(&mut ended_rx);
    }
    let stop = stopped_for.lock().ok().and_then(|s| s.clone());
    let why = match (&ending, &stop) {
        (_, Some(stop)) => stop.describe(),
        (Ending::Stopped(_), None) => "stopped by `airlock session stop`".to_owned(),
        (Ending::Idle(d), None) => format!(
            "stopped after {} idle (--idle-timeout)",
            humantime::format_duration(*d)
        ),
        (Ending::SandboxEnded, None) => "the session's sandbox ended (its --timeout)".to_owned(),
        (Ending::OwnerEnded(pid), None) => {
            format!("stopped: process {pid}, which it was started for, ended")
        }
    };
    live.waiting().session_ended(&format!(
        "session {id} ended while the command ran: {}",
        why.trim_start_matches("airlock: ")
    ));
    let quiet = Finish::new(recorder, proxy, pty, recording)
        .shipping(shipper)
        .stop(runtime);
    // The steps' last reports go out before the record closes.
    control_rt.block_on(wait_for_steps(&live));
    let finished = quiet
        .finish(SessionEnd {
            exit_status: None,
            signal: None,
            reason: Some(why.clone()),
        })
        .context("finishing the audit session");
    if let Ending::Stopped(waiters) = ending {
        let told = finished.as_ref().map(|_| ()).map_err(crate::one_line);
        for waiter in waiters {
            let _ = waiter.send(told.clone());
        }
    }
    // Give the stop answers a moment to leave. The timer is made inside
    // the runtime: made outside, it panics (no reactor), and the panic
    // could end the process before the answers left.
    control_rt.block_on(async { tokio::time::sleep(Duration::from_millis(20)).await });
    finished?;
    Ok(match stop {
        Some(Stop::AuditFailed) => ExitCode::from(crate::exit::RUN_FAILED),
        _ => ExitCode::SUCCESS,
    })
}

/// Tell `airlock session start` the id, then let go of its pipes: from now
/// on what the server says goes to its log.
fn detach(registry: &Registry, id: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{id}").context("telling the caller the session's id")?;
    stdout.flush()?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(registry.log(id))
        .context("opening the session's log")?;
    nix::unistd::dup2_stdout(&log)?;
    nix::unistd::dup2_stderr(&log)?;
    let null = std::fs::File::open("/dev/null")?;
    nix::unistd::dup2_stdin(&null)?;
    Ok(())
}

/// Resolves, with the idle timeout, when nothing has run for that long.
/// The timeout is read again whenever there is activity, and a
/// `set_idle_timeout` request is activity.
async fn idle_for(live: &Live, shared: &Shared) -> Duration {
    loop {
        let Some(idle) = shared.idle_timeout() else {
            live.activity.notified().await;
            continue;
        };
        let wait = {
            let counts = live.counts();
            let quiet = counts.last_activity.elapsed();
            if counts.running == 0 && quiet >= idle {
                return idle;
            }
            idle.saturating_sub(quiet).max(IDLE_CHECK)
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = live.activity.notified() => {}
        }
    }
}

/// Resolves with the owner's pid when it ends (never without one): its
/// pidfd turns readable then (pidfd_open(2)). Waited for by poll(2) on a
/// thread of its own, which the process's end takes with it.
async fn owner_ended(owner: Option<(nix::unistd::Pid, std::os::fd::OwnedFd)>) -> nix::unistd::Pid {
    let Some((pid, fd)) = owner else {
        return std::future::pending().await;
    };
    let (ended_tx, ended) = oneshot::channel();
    let watcher = std::thread::Builder::new()
        .name("airlock-owner".into())
        .spawn(move || {
            use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
            let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
            while let Err(nix::errno::Errno::EINTR) = poll(&mut fds, PollTimeout::NONE) {}
            let _ = ended_tx.send(());
        });
    match watcher {
        // A dropped sender (the thread failed) counts as the end too.
        Ok(_) => {
            let _ = ended.await;
        }
        // Cannot watch it: stop rather than outlive it unnoticed.
        Err(e) => eprintln!("airlock: watching process {pid}: {e}; stopping the session"),
    }
    pid
}

/// Wait (briefly) for every step to have sent its report.
async fn wait_for_steps(live: &Live) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while live.counts().running > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn accept(listener: UnixListener, shared: Arc<Shared>) {
    let owner = nix::unistd::geteuid().as_raw();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        // Only the owner (or root) may talk to the session; the socket's
        // mode says so already, the peer's credentials confirm it (unix(7),
        // SO_PEERCRED).
        let allowed = stream
            .peer_cred()
            .is_ok_and(|c| c.uid() == owner || c.uid() == 0);
        if !allowed {
            continue;
        }
        tokio::spawn(handle(stream, shared.clone()));
    }
}

async fn handle(stream: UnixStream, shared: Arc<Shared>) {
    let (reader, mut stream) = stream.into_split();
    // Buffered: the request line and, for an exec, the frames after it.
    let mut reader = tokio::io::BufReader::new(reader);
    let request: Request = match protocol::read_line(&mut reader).await {
        Ok(Some(request)) => request,
        Ok(None) => return,
        Err(e) => {
            let reply = Reply::error(format!("bad request: {e}"));
            let _ = protocol::write_line(&mut stream, &reply).await;
            return;
        }
    };
    let live = shared.live.lock().ok().and_then(|l| l.clone());
    match (request, live) {
        (Request::Info, _) => {
            let reply = Reply {
                session: Some(shared.info()),
                ..Reply::ok()
            };
            let _ = protocol::write_line(&mut stream, &reply).await;
        }
        (_, None) => {
            let reply = Reply::error(format!(
                "session {} is still starting: try again once `airlock session start` has printed its id",
                shared.id
            ));
            let _ = protocol::write_line(&mut stream, &reply).await;
        }
        (Request::Stop, Some(_)) => {
            let (tx, rx) = oneshot::channel();
            let _ = shared.stops.send(tx);
            let reply = match rx.await {
                Ok(Ok(())) => Reply {
                    session: Some(shared.info()),
                    ..Reply::ok()
                },
                Ok(Err(why)) => Reply::error(format!(
                    "the session stopped, but its record could not be closed: {why}"
                )),
                Err(_) => Reply::error("the session ended before it could confirm the stop"),
            };
            let _ = protocol::write_line(&mut stream, &reply).await;
        }
        (Request::Denials, Some(live)) => {
            let all = live.denials.all();
            let reply = Reply {
                denials: Some(all.denials),
                dropped: Some(all.dropped),
                ..Reply::ok()
            };
            let _ = protocol::write_line(&mut stream, &reply).await;
        }
        (Request::Kill { step }, Some(live)) => {
            let reply = if live.kills.fire(airlock_shim::StepId(step)) {
                Reply::ok()
            } else {
                Reply::error(format!(
                    "step {step} is not running in session {}: it ended, or never ran",
                    shared.id
                ))
            };
            let _ = protocol::write_line(&mut stream, &reply).await;
        }
        (Request::SetIdleTimeout(set), Some(live)) => {
            if let Ok(mut idle) = shared.idle_timeout.lock() {
                *idle = set.idle_timeout();
            }
            // Counted from now, and the idle watch reads the new value.
            live.counts().last_activity = Instant::now();
            live.activity.notify_one();
            let reply = Reply {
                session: Some(shared.info()),
                ..Reply::ok()
            };
            let _ = protocol::write_line(&mut stream, &reply).await;
        }
        (Request::Exec(request), Some(live)) => {
            steps::serve(live, (reader, stream), request).await;
        }
    }
}

/// Deletes a gVisor session's container when the server ends, however it
/// ends short of being killed: runsc's sandbox runs detached and would
/// otherwise outlive it.
struct StopOnDrop(Arc<GvisorSession>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Removes the socket and the name when the server ends, however it ends
/// short of being killed (then `airlock session ls` cleans up).
struct Cleanup {
    registry: Registry,
    id: String,
    name: Option<String>,
}

impl Cleanup {
    fn unlink(&self) {
        self.registry.remove(&self.id, self.name.as_deref());
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.unlink();
        let _ = std::fs::remove_file(self.registry.log(&self.id));
    }
}
