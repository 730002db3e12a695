//! Steps 4 and 8 of bringing a sandbox up (docs/architecture.md, "`airlock
//! run`"): the proxy serves the sandbox's sockets, decisions go to the record
//! and to the caller; and what stops a sandbox from outside (signals, a
//! failing audit store).

use std::ffi::OsString;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use airlock_auditor::SessionRecorder;
use airlock_proxy::approvals::{FindSender, Sender};
use airlock_proxy::{EventSink, Proxy};
use airlock_shim::pty::WindowSize;
use airlock_shim::{ExecSeq, NetworkHandles, Sandbox, Starting};
use anyhow::Context;

use super::gvisor::{GvisorRun, Recorded};
use super::plan::ProxyPlan;
use super::withheld::Withheld;
use crate::approvals::ApprovalSocket;
use crate::audit_sink::{Attribute, AuditSink, Tee};
use crate::exit;
use crate::notices::DenialNotices;
use crate::observe::TerminalReaders;
use crate::ship::LiveShipper;
use crate::terminal::PtyRelay;

/// A spawned sandbox, still setting itself up; its command not yet released.
pub(crate) struct Spawned {
    pub(super) env: Vec<(OsString, OsString)>,
    pub(super) withheld: Withheld,
    pub(super) proxy: ProxyPlan,
    pub(super) pty_size: Option<WindowSize>,
    pub(super) sandbox: Starting,
    pub(super) recorder: Option<SessionRecorder>,
    /// `--audit-ship`, and whether decisions wait for it.
    pub(super) shipper: Option<(LiveShipper, bool)>,
    /// The command's output pipes (without a pty), recorded once it is ready.
    pub(super) readers: Option<TerminalReaders>,
    /// `--isolation gvisor`: what runsc runs once the go is given.
    pub(super) gvisor: Option<GvisorRun>,
}

impl Spawned {
    /// Which exec (and live-session step) owns a sandbox socket; None
    /// without an observer (`--no-audit`).
    pub(crate) fn attributor(&self) -> Option<airlock_shim::Attributor> {
        self.sandbox.attributor()
    }

    pub(crate) fn policy(&self) -> &airlock_policy::Policy {
        &self.proxy.policy
    }

    /// Steps 4 and 8 (proxy, terminal): the proxy and its threads are built
    /// while the sandbox sets itself up; once it is ready, the proxy serves
    /// the sandbox's sockets from the host's namespace, decisions go to the record (each
    /// connection attributed to the exec that made it) and to the caller as
    /// notices, and to `listener` when given (a live session's refusals);
    /// the pty relay starts before the command is released. Held requests
    /// are decided on an approvals socket; `session` names them to
    /// approvers (default: the audit session's id).
    /// `labels`: a live session's step labels, to name the step that sent
    /// a held request.
    pub(crate) fn wire(
        self,
        listener: Option<Arc<dyn EventSink>>,
        session: Option<String>,
        labels: Option<StepLabels>,
    ) -> anyhow::Result<Wired> {
        let Self {
            env,
            withheld,
            proxy: plan,
            pty_size,
            sandbox: starting,
            recorder,
            shipper,
            readers,
            gvisor,
        } = self;
        let attribute: Option<Attribute> = starting.attributor().map(|a| {
            Arc::new(move |peer, udp| a.exec_for_peer(peer, udp).map(ExecSeq::id)) as Attribute
        });
        let notices: Arc<dyn EventSink> = Arc::new(DenialNotices::new(&plan.policy));
        let mut sinks: Vec<Arc<dyn EventSink>> = Vec::new();
        if let Some(r) = &recorder {
            // First: a failing record refuses the traffic (fail closed).
            let gate = shipper
                .as_ref()
                .filter(|(_, required)| *required)
                .map(|(shipper, _)| shipper.gate(r.session_id().clone()));
            sinks.push(Arc::new(
                AuditSink::new(r.clone()).attributed(attribute).gated(gate),
            ));
        }
        sinks.push(notices);
        sinks.extend(listener);
        let events: Arc<dyn EventSink> = match sinks.len() {
            1 => sinks.remove(0),
            _ => Arc::new(Tee(sinks)),
        };
        let session = session
            .or_else(|| recorder.as_ref().map(|r| r.session_id().to_string()))
            .unwrap_or_else(|| format!("unrecorded-{}", std::process::id()));
        let find_sender = starting.attributor().map(|a| sender_finder(a, labels));
        let proxy = plan.into_proxy(events, session, find_sender)?;
        let runtime = crate::serve::runtime("airlock-proxy")?;
        let mut sandbox = starting.ready()?;
        let already = gvisor.as_ref().map(GvisorRun::recorded);
        let recording = record(&mut sandbox, readers, recorder.as_ref(), already);
        for notice in sandbox.notices() {
            eprintln!("airlock: {notice}");
        }
        let network = sandbox
            .take_network()
            .context("the sandbox did not hand over its network sockets")?;
        let pty = match (sandbox.take_terminal(), pty_size) {
            (Some(master), Some(size)) => Some(PtyRelay::start(master, size, recorder.clone())?),
            _ => None,
        };
        let stopped_for = Arc::new(std::sync::Mutex::new(None::<Stop>));
        let approval_socket;
        {
            let _guard = runtime.enter();
            serve_network(&runtime, &proxy, network)?;
            approval_socket = ApprovalSocket::serve(proxy.approvals())?;
            // Installed now, not when the task first runs: a SIGTERM that
            // arrives once the command is released must find airlock's
            // handler, never the default action that would leave the
            // record unfinished.
            let signals = StopSignals::install().context("installing signal handlers")?;
            runtime.spawn(watch(
                signals,
                proxy.clone(),
                recorder.clone(),
                sandbox.pid(),
                stopped_for.clone(),
            ));
            if let Some(pty) = &pty {
                runtime.spawn(pty.forward_resizes()?);
            }
        }
        Ok(Wired {
            sandbox,
            recorder,
            shipper: shipper.map(|(shipper, _)| shipper),
            recording,
            proxy,
            pty,
            runtime,
            stopped_for,
            env,
            withheld,
            approval_socket,
            gvisor,
        })
    }
}

/// The threads that record the command's output (without a pty) and what
/// the observer saw; they end when the sandbox does.
fn record(
    sandbox: &mut Sandbox,
    readers: Option<TerminalReaders>,
    recorder: Option<&SessionRecorder>,
    already: Option<Recorded>,
) -> Vec<JoinHandle<()>> {
    let mut threads = match readers {
        Some(readers) => readers.record(recorder),
        None => Vec::new(),
    };
    if let (Some(observations), Some(recorder)) = (sandbox.take_observations(), recorder) {
        threads.push(crate::observe::record_observations(
            observations,
            recorder.clone(),
            already,
        ));
    }
    threads
}

/// Which command sent a held request, for its approver: the process that
/// owns the connection's sandbox-side socket.
fn sender_finder(attributor: airlock_shim::Attributor, labels: Option<StepLabels>) -> FindSender {
    Arc::new(move |peer| {
        let step = attributor.step_for_peer(peer, false).map(|step| step.0);
        Some(Sender {
            command: attributor.command_of_peer(peer, false)?,
            exec: attributor
                .exec_for_peer(peer, false)
                .map(|exec| exec.id().to_string()),
            step,
            label: step.zip(labels.as_ref()).and_then(|(step, l)| l.get(step)),
        })
    })
}

/// A live session's step labels by step number, filled as steps begin.
#[derive(Clone, Default)]
pub(crate) struct StepLabels(Arc<std::sync::Mutex<std::collections::HashMap<u64, String>>>);

impl StepLabels {
    pub(crate) fn insert(&self, step: u64, label: String) {
        if let Ok(mut labels) = self.0.lock() {
            labels.insert(step, label);
        }
    }

    fn get(&self, step: u64) -> Option<String> {
        self.0.lock().ok()?.get(&step).cloned()
    }
}

/// The proxy's front doors on the sandbox's sockets (transparent TCP and DNS).
fn serve_network(
    runtime: &tokio::runtime::Runtime,
    proxy: &Proxy,
    network: NetworkHandles,
) -> anyhow::Result<()> {
    let transparent = to_tokio_listener(network.transparent)?;
    let dns_tcp = to_tokio_listener(network.dns_tcp)?;
    network.dns_udp.set_nonblocking(true)?;
    let dns_udp = tokio::net::UdpSocket::from_std(network.dns_udp)?;
    let p = proxy.clone();
    runtime.spawn(async move { p.serve_transparent(transparent).await });
    let p = proxy.clone();
    runtime.spawn(async move { p.serve_dns_udp(dns_udp).await });
    let p = proxy.clone();
    runtime.spawn(async move { p.serve_dns_tcp(dns_tcp).await });
    Ok(())
}

/// Everything in place; the command waits for the go. Fields in the order
/// they came to be, so an error path drops them in the reverse order.
pub(crate) struct Wired {
    pub sandbox: Sandbox,
    pub recorder: Option<SessionRecorder>,
    pub shipper: Option<LiveShipper>,
    pub recording: Vec<JoinHandle<()>>,
    pub proxy: Proxy,
    pub pty: Option<PtyRelay>,
    pub runtime: tokio::runtime::Runtime,
    pub stopped_for: Arc<std::sync::Mutex<Option<Stop>>>,
    /// The environment commands start with, and the secrets that must
    /// never join it (a session's steps add variables).
    pub env: Vec<(OsString, OsString)>,
    pub withheld: Withheld,
    /// Where approvers decide on held requests; removed when dropped.
    pub approval_socket: ApprovalSocket,
    /// `--isolation gvisor`: the command runsc runs (the sandbox runs none).
    pub gvisor: Option<GvisorRun>,
}

/// Why airlock stopped the sandbox itself.
#[derive(Debug, Clone)]
pub(crate) enum Stop {
    Signal(i32, &'static str),
    AuditFailed,
}

/// Stop the sandbox when airlock is told to stop, or when recording fails.
/// Ctrl-C reaches the command directly (same process group); airlock only
/// steps in at the second one, so it can still flush the record.
async fn watch(
    signals: StopSignals,
    proxy: Proxy,
    recorder: Option<SessionRecorder>,
    init_pid: i32,
    stopped_for: Arc<std::sync::Mutex<Option<Stop>>>,
) {
    let StopSignals {
        mut term,
        mut hup,
        mut int,
    } = signals;
    let mut interrupts = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let reason = loop {
        tokio::select! {
            _ = term.recv() => break Stop::Signal(15, "SIGTERM"),
            _ = hup.recv() => break Stop::Signal(1, "SIGHUP"),
            _ = int.recv() => {
                interrupts += 1;
                if interrupts > 1 {
                    break Stop::Signal(2, "SIGINT");
                }
            }
            _ = tick.tick() => {
                let recorder_failed = recorder.as_ref().is_some_and(|r| !r.healthy());
                if proxy.audit_failed() || recorder_failed {
                    break Stop::AuditFailed;
                }
            }
        }
    };
    if let Ok(mut slot) = stopped_for.lock() {
        *slot = Some(reason);
    }
    // Killing the sandbox's init ends its whole pid namespace (pid_namespaces(7)).
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(init_pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// The signals that stop a sandbox from outside.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Needs the runtime entered.
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            int: signal(SignalKind::interrupt())?,
        })
    }
}

impl Stop {
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Signal(_, name) => format!("airlock: stopped the sandbox on {name}"),
            Self::AuditFailed => "airlock: the audit store failed, so the session was stopped rather than run unaudited: free disk space or fix the audit database's permissions, then run again".into(),
        }
    }

    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Self::Signal(n, _) => 128 + *n as u8,
            Self::AuditFailed => exit::RUN_FAILED,
        }
    }
}

/// The store's own words for why it failed, without the advice around them.
pub(crate) fn store_failure(e: &anyhow::Error) -> String {
    match e.downcast_ref::<airlock_auditor::AuditError>() {
        Some(airlock_auditor::AuditError::WriterFailed(reason)) => reason.clone(),
        _ => e.root_cause().to_string(),
    }
}

fn to_tokio_listener(listener: std::net::TcpListener) -> anyhow::Result<tokio::net::TcpListener> {
    crate::serve::widen_backlog(&listener)?;
    listener.set_nonblocking(true)?;
    Ok(tokio::net::TcpListener::from_std(listener)?)
}
