//! `airlock run`: one command in a fresh sandbox whose only way out is the
//! proxy, with everything recorded.
//!
//! Long (about 900 lines) because it is the whole pipeline of
//! docs/architecture.md's "airlock run" list in four steps (plan, spawn,
//! wire, release and finish) with the helpers each needs; the next split is
//! one module per step under `commands/run/`.
//!
//! Order matters: the sandbox is created first (its network namespace, with
//! the proxy's listening sockets inside), then the proxy starts serving those
//! sockets from the host's namespace and the audit session begins, and only
//! then is the command released to run. A connection the command makes can
//! therefore never race past the proxy: it waits in the listener's backlog.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use airlock_auditor::{SessionEnd, SessionInfo, SessionMode, SessionRecorder};
use airlock_policy::Policy;
use airlock_proxy::{
    CertificateAuthority, EventSink, PinnedHost, Proxy, ProxyConfig, ResolvedCredential,
};
use airlock_shim::pty::WindowSize;
use airlock_shim::{
    CA_BUNDLE_PATH, Limits, NetworkHandles, ObserveSpec, Sandbox, SandboxSpec, UserSpec,
};
use anyhow::{Context, bail};
use rustls::pki_types::CertificateDer;

use crate::audit_sink::{Attribute, AuditSink, Tee};
use crate::cli::{AuditOptions, UpstreamOptions, parse_duration};
use crate::notices::DenialNotices;
use crate::observe::{self, Terminal, TerminalReaders};
use crate::terminal::PtyRelay;
use crate::{EXIT_RUN_FAILED, audit, one_line, policy_file, secrets};

/// Host secrets hidden when the command runs as uid 0 (root-owned files stay
/// readable by ownership even without capabilities). Not exhaustive: use
/// `--user` for untrusted code when airlock runs as root.
const ROOT_ONLY_SECRETS: [&str; 9] = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/var/lib/docker",
];
/// Files up to this size are recorded with their content by default.
const DEFAULT_MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Default size of the sandbox's private /tmp.
const DEFAULT_TMP_BYTES: u64 = 512 * 1024 * 1024;
/// Variables that name the session's CA bundle for common clients.
const CA_VARIABLES: [&str; 6] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];
/// System CA bundles, first found wins, combined with the session CA.
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
];

#[derive(clap::Args)]
#[command(trailing_var_arg = true)]
pub struct RunArgs {
    /// The policy (TOML). Default: deny all network access.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Read-write directory, mounted at the same path and used as the working directory [default: .].
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Also make PATH visible read-only. Repeatable.
    #[arg(long = "ro", value_name = "PATH")]
    ro: Vec<PathBuf>,
    /// Also make PATH visible read-write. Repeatable.
    #[arg(long = "rw", value_name = "PATH")]
    rw: Vec<PathBuf>,
    /// Hide PATH inside the sandbox. Repeatable.
    #[arg(long = "hide", value_name = "PATH")]
    hide: Vec<PathBuf>,
    /// Memory limit, e.g. 512M or 2G.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    memory: Option<u64>,
    /// Maximum number of processes.
    #[arg(long, value_name = "N")]
    pids: Option<u64>,
    /// CPU limit in cores, e.g. 0.5 or 2.
    #[arg(long, value_name = "N")]
    cpus: Option<f64>,
    /// Kill the whole sandbox after this long, e.g. 30s or 5m (exit status 124).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Size of the private /tmp [default: 512M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    tmp_size: Option<u64>,
    /// Set KEY=VALUE in the sandbox's environment. Repeatable.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Pass KEY from airlock's environment. Repeatable.
    #[arg(long = "pass-env", value_name = "KEY")]
    pass_env: Vec<String>,
    /// Let the command create AF_UNIX sockets. Off by default: a host daemon's
    /// socket file is reachable through the read-only filesystem, bypassing the
    /// proxy. socketpair(2) always works.
    #[arg(long)]
    allow_unix_sockets: bool,
    /// Run as UID[:GID] (root only).
    #[arg(long, value_name = "UID[:GID]", value_parser = parse_user)]
    user: Option<UserSpec>,
    #[command(flatten)]
    upstream: UpstreamOptions,
    /// Use this persistent CA instead of a fresh one for the session.
    #[arg(long, value_name = "DIR")]
    ca_dir: Option<PathBuf>,
    #[command(flatten)]
    audit: AuditOptions,
    /// Record written files up to this size with their content (larger ones by hash) [default: 1M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    audit_max_file: Option<u64>,
    /// Do not record the session (say so explicitly; never the default).
    #[arg(long, conflicts_with_all = ["audit_db", "audit_key", "audit_sync", "audit_max_file"])]
    no_audit: bool,
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

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    match run_sandboxed(args) {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("airlock: {}", one_line(&e));
            Ok(ExitCode::from(EXIT_RUN_FAILED))
        }
    }
}

/// The session, in the order of `docs/architecture.md` ("`airlock run`"):
/// plan, spawn (with the audit store opening alongside), wire the proxy and
/// the terminal, then release, wait and finish.
fn run_sandboxed(args: RunArgs) -> anyhow::Result<ExitCode> {
    let plan = Plan::new(args)?;
    let spawned = plan.spawn()?;
    let wired = spawned.wire()?;
    wired.release_and_finish()
}

/// The audit store of a recorded session, both paths absolute.
struct AuditPaths {
    db: PathBuf,
    key: PathBuf,
}

/// What the proxy needs, resolved up front; it is built once the sandbox
/// has handed over its sockets.
struct ProxyPlan {
    policy: Policy,
    credentials: Vec<ResolvedCredential>,
    ca: CertificateAuthority,
    pins: Vec<PinnedHost>,
    upstream_roots: Vec<CertificateDer<'static>>,
    audit_sync: bool,
    worker_threads: usize,
}

impl ProxyPlan {
    fn into_proxy(self, events: Arc<dyn EventSink>) -> anyhow::Result<Proxy> {
        let mut config = ProxyConfig::new(self.policy, Arc::new(self.ca), events);
        config.credentials = self.credentials;
        config.pins = self.pins;
        config.upstream_roots = self.upstream_roots;
        config.audit_sync = self.audit_sync;
        config.worker_threads = self.worker_threads;
        Ok(Proxy::new(config)?)
    }
}

/// Step 1 (plan): every path canonicalised, every grant, secret and limit
/// resolved before anything forks.
struct Plan {
    proxy: ProxyPlan,
    audit: Option<AuditPaths>,
    limits_record: serde_json::Value,
    max_file_bytes: u64,
    pty_size: Option<WindowSize>,
    spec: SandboxSpec,
    /// Pipes for the command's output when there is no pty (step 8).
    terminal: Option<Terminal>,
}

impl Plan {
    fn new(args: RunArgs) -> anyhow::Result<Plan> {
        airlock_shim::check_prerequisites()?;
        let policy = match &args.policy {
            Some(path) => policy_file::load(path)?,
            None => Policy::deny_all(),
        };
        let credentials = secrets::resolve_all(policy.credentials())?;
        let worker_threads = crate::serve::worker_threads()?;
        let ca = match &args.ca_dir {
            Some(dir) => CertificateAuthority::load(dir)?,
            None => CertificateAuthority::ephemeral()?,
        };
        let workspace = workspace(&args)?;
        let env = sandbox_env(&args, &credentials)?;
        let audit = audit_paths(&args, &workspace)?;
        let hide = hidden_paths(&args, &workspace, audit.as_ref())?;
        let limits = limits(&args);
        let limits_record = limits_record(&limits);
        let max_file_bytes = args.audit_max_file.unwrap_or(DEFAULT_MAX_FILE_BYTES);
        let pty_size =
            crate::terminal::wanted(args.tty, args.no_tty).then(crate::terminal::initial_size);
        let spec = SandboxSpec {
            command: args.command.clone(),
            workspace,
            ro: args.ro.clone(),
            rw: args.rw.clone(),
            hide,
            limits,
            env,
            user: args.user,
            ca_bundle_pem: Some(ca_bundle(&ca)),
            hostname: "airlock".into(),
            allow_unix_sockets: args.allow_unix_sockets,
            observe: audit.as_ref().map(|_| ObserveSpec { max_file_bytes }),
            stdio: None,
            terminal: pty_size.is_some(),
            session: false,
        };
        let terminal = output_pipes(pty_size.is_some(), audit.is_some())?;
        let upstream_roots = args.upstream.roots()?;
        let proxy = ProxyPlan {
            policy,
            credentials,
            ca,
            pins: args.upstream.resolve,
            upstream_roots,
            audit_sync: args.audit.audit_sync,
            worker_threads,
        };
        Ok(Plan {
            proxy,
            audit,
            limits_record,
            max_file_bytes,
            pty_size,
            spec,
            terminal,
        })
    }

    /// Steps 2, 3 and 5 (spawn, network, mounts) in the shim, while the
    /// audit store opens: the two are independent until the command is
    /// released (step 6), and both take milliseconds.
    fn spawn(self) -> anyhow::Result<Spawned> {
        let Plan {
            proxy,
            audit,
            limits_record,
            max_file_bytes,
            pty_size,
            mut spec,
            terminal,
        } = self;
        let beginning = audit.map(|AuditPaths { db, key }| {
            let info = SessionInfo {
                // The same cap for the observer and the record.
                max_file_bytes,
                terminal: pty_size.map(|s| (s.cols, s.rows)),
                ..audit::session_info(&proxy.policy, SessionMode::Run, limits_record)
            };
            let credentials = proxy.credentials.clone();
            std::thread::spawn(move || audit::begin(&db, Some(&key), info, &credentials))
        });
        let readers = terminal.map(|terminal| {
            let (stdio, readers) = terminal.split();
            spec.stdio = Some(stdio);
            readers
        });
        let sandbox = Sandbox::spawn(spec);
        let recorder = match beginning {
            Some(thread) => Some(
                thread
                    .join()
                    .map_err(|_| anyhow::anyhow!("opening the audit database panicked"))??,
            ),
            None => None,
        };
        let mut sandbox = sandbox?;
        let recording = record(&mut sandbox, readers, recorder.as_ref());
        for notice in sandbox.notices() {
            eprintln!("airlock: {notice}");
        }
        let network = sandbox
            .take_network()
            .context("the sandbox did not hand over its network sockets")?;
        Ok(Spawned {
            proxy,
            pty_size,
            sandbox,
            recorder,
            recording,
            network,
        })
    }
}

/// The threads that record the command's output (without a pty) and what
/// the observer saw; they end when the sandbox does.
fn record(
    sandbox: &mut Sandbox,
    readers: Option<TerminalReaders>,
    recorder: Option<&SessionRecorder>,
) -> Vec<JoinHandle<()>> {
    let mut threads = match readers {
        Some(readers) => readers.record(recorder),
        None => Vec::new(),
    };
    if let (Some(observations), Some(recorder)) = (sandbox.take_observations(), recorder) {
        threads.push(observe::record_observations(observations, recorder.clone()));
    }
    threads
}

/// A spawned sandbox, its command not yet released.
struct Spawned {
    proxy: ProxyPlan,
    pty_size: Option<WindowSize>,
    sandbox: Sandbox,
    recorder: Option<SessionRecorder>,
    recording: Vec<JoinHandle<()>>,
    network: NetworkHandles,
}

impl Spawned {
    /// Steps 4 and 8 (proxy, terminal): the proxy serves the sandbox's
    /// sockets from the host's namespace, decisions go to the record (each
    /// connection attributed to the exec that made it) and to the caller as
    /// notices; the pty relay starts before the command is released.
    fn wire(self) -> anyhow::Result<Wired> {
        let Spawned {
            proxy: plan,
            pty_size,
            mut sandbox,
            recorder,
            recording,
            network,
        } = self;
        let attribute: Option<Attribute> = sandbox.attributor().map(|a| {
            Arc::new(move |peer, udp| a.exec_for_peer(peer, udp).map(observe::exec_id)) as Attribute
        });
        let notices: Arc<dyn EventSink> = Arc::new(DenialNotices::new(&plan.policy));
        let events: Arc<dyn EventSink> = match &recorder {
            Some(r) => Arc::new(Tee(vec![
                AuditSink::attributed(r.clone(), attribute),
                notices,
            ])),
            None => notices,
        };
        let proxy = plan.into_proxy(events)?;
        let pty = match (sandbox.take_terminal(), pty_size) {
            (Some(master), Some(size)) => Some(PtyRelay::start(master, size, recorder.clone())?),
            _ => None,
        };
        let runtime = crate::serve::runtime("airlock-proxy")?;
        let stopped_for = Arc::new(std::sync::Mutex::new(None::<Stop>));
        {
            let _guard = runtime.enter();
            serve_network(&runtime, &proxy, network)?;
            runtime.spawn(watch(
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
            recording,
            proxy,
            pty,
            runtime,
            stopped_for,
        })
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
struct Wired {
    sandbox: Sandbox,
    recorder: Option<SessionRecorder>,
    recording: Vec<JoinHandle<()>>,
    proxy: Proxy,
    pty: Option<PtyRelay>,
    runtime: tokio::runtime::Runtime,
    stopped_for: Arc<std::sync::Mutex<Option<Stop>>>,
}

impl Wired {
    /// Steps 6, 7 and 9: the go, the command, the wait; then the record is
    /// completed and airlock's exit status chosen.
    fn release_and_finish(self) -> anyhow::Result<ExitCode> {
        let Wired {
            mut sandbox,
            recorder,
            recording,
            proxy,
            pty,
            runtime,
            stopped_for,
        } = self;
        sandbox.release()?;
        let outcome = sandbox.wait()?;
        // The caller's terminal is restored before airlock says anything more.
        if let Some(pty) = pty {
            pty.finish();
        }
        proxy.stop_connections();
        runtime.shutdown_timeout(Duration::from_secs(1));
        // Everything the command wrote and did is recorded before the session ends.
        for thread in recording {
            let _ = thread.join();
        }
        let stopped = stopped_for.lock().ok().and_then(|s| s.clone());
        conclude(recorder, &outcome, stopped)
    }
}

/// The session's end record, what airlock says last, and its exit status.
fn conclude(
    recorder: Option<SessionRecorder>,
    outcome: &airlock_shim::Outcome,
    stopped: Option<Stop>,
) -> anyhow::Result<ExitCode> {
    let finished = match recorder {
        Some(recorder) => finish(recorder, outcome, stopped.as_ref().map(Stop::describe)),
        None => Ok(()),
    };
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
        u8::try_from(outcome.exit_code()).unwrap_or(EXIT_RUN_FAILED),
    ))
}

/// With a pty the relay records the output; otherwise pipes carry it,
/// when recording or when the caller's terminal must stay outside.
fn output_pipes(pty: bool, audited: bool) -> anyhow::Result<Option<Terminal>> {
    Ok(match pty {
        false if audited || crate::terminal::caller_has_one() => Some(Terminal::new()?),
        _ => None,
    })
}

fn workspace(args: &RunArgs) -> anyhow::Result<PathBuf> {
    let workspace = match &args.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("finding the current directory")?,
    };
    workspace
        .canonicalize()
        .with_context(|| format!("--workspace {}: no such directory", workspace.display()))
}

/// The audit store's paths, unless `--no-audit`; refused when the sandbox
/// could write them.
fn audit_paths(args: &RunArgs, workspace: &Path) -> anyhow::Result<Option<AuditPaths>> {
    if args.no_audit {
        return Ok(None);
    }
    let db = args.audit.db()?;
    let key = args.audit.key()?;
    // Absolute, so that their directories are hidden from the sandbox: a
    // bare "audit.key" has the parent "", which names nothing to hide.
    let db = std::path::absolute(&db)
        .with_context(|| format!("--audit-db {}: cannot make it absolute", db.display()))?;
    let key = std::path::absolute(&key)
        .with_context(|| format!("--audit-key {}: cannot make it absolute", key.display()))?;
    refuse_if_writable_inside(&db, workspace, &args.rw)?;
    Ok(Some(AuditPaths { db, key }))
}

/// What the sandbox must not see: `--hide`, the CA and audit directories
/// and, for a command that keeps uid 0, the usual host secrets.
fn hidden_paths(
    args: &RunArgs,
    workspace: &Path,
    audit: Option<&AuditPaths>,
) -> anyhow::Result<Vec<PathBuf>> {
    let (db, key) = audit.map(|a| (a.db.parent(), a.key.parent())).unzip();
    refuse_hidden_workspace(
        workspace,
        &[
            (db.flatten(), "holds the audit database", "--audit-db"),
            (key.flatten(), "holds the audit signing key", "--audit-key"),
            (
                args.ca_dir.as_deref(),
                "holds the CA's private key",
                "--ca-dir",
            ),
        ],
    )?;
    let mut hide = args.hide.clone();
    hide.extend(args.ca_dir.iter().cloned());
    if let Some(AuditPaths { db, key }) = audit {
        hide.extend(
            [db.clone(), key.clone()]
                .into_iter()
                .filter_map(|p| p.parent().map(Path::to_owned)),
        );
    }
    if nix::unistd::geteuid().is_root() && args.user.is_none() {
        // The command keeps uid 0 (without capabilities), so root-only files
        // stay readable by ownership; hide the usual host secrets.
        hide.extend(ROOT_ONLY_SECRETS.iter().map(PathBuf::from));
    }
    hide.retain(|p| p.exists());
    Ok(hide)
}

fn limits(args: &RunArgs) -> Limits {
    Limits {
        memory_bytes: args.memory,
        pids: args.pids,
        cpus: args.cpus,
        timeout: args.timeout,
        tmp_bytes: args.tmp_size.unwrap_or(DEFAULT_TMP_BYTES),
    }
}

/// The limits as the session record shows them.
fn limits_record(limits: &Limits) -> serde_json::Value {
    serde_json::json!({
        "memory_bytes": limits.memory_bytes,
        "pids": limits.pids,
        "cpus": limits.cpus,
        "timeout_s": limits.timeout.map(|t| t.as_secs_f64()),
        "tmp_bytes": limits.tmp_bytes,
    })
}

/// Why airlock stopped the sandbox itself.
#[derive(Debug, Clone)]
enum Stop {
    Signal(i32, &'static str),
    AuditFailed,
}

/// Stop the sandbox when airlock is told to stop, or when recording fails.
/// Ctrl-C reaches the command directly (same process group); airlock only
/// steps in at the second one, so it can still flush the record.
async fn watch(
    proxy: Proxy,
    recorder: Option<SessionRecorder>,
    init_pid: i32,
    stopped_for: Arc<std::sync::Mutex<Option<Stop>>>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut hup), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
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

impl Stop {
    fn describe(&self) -> String {
        match self {
            Stop::Signal(_, name) => format!("airlock: stopped the sandbox on {name}"),
            Stop::AuditFailed => "airlock: the audit store failed, so the session was stopped rather than run unaudited: free disk space or fix the audit database's permissions, then run again".into(),
        }
    }

    fn exit_code(&self) -> u8 {
        match self {
            Stop::Signal(n, _) => 128 + *n as u8,
            Stop::AuditFailed => EXIT_RUN_FAILED,
        }
    }
}

/// The store's own words for why it failed, without the advice around them.
fn store_failure(e: &anyhow::Error) -> String {
    match e.downcast_ref::<airlock_auditor::AuditError>() {
        Some(airlock_auditor::AuditError::WriterFailed(reason)) => reason.clone(),
        _ => e.root_cause().to_string(),
    }
}

fn finish(
    recorder: SessionRecorder,
    outcome: &airlock_shim::Outcome,
    stopped: Option<String>,
) -> anyhow::Result<()> {
    let (exit_status, signal) = match outcome.status {
        airlock_shim::ExitKind::Exited(code) => (Some(code), None),
        airlock_shim::ExitKind::Signaled(sig) => (None, Some(sig)),
    };
    let reason = stopped.or_else(|| outcome.message());
    recorder
        .finish(SessionEnd {
            exit_status,
            signal,
            reason,
        })
        .context("finishing the audit session")
}

fn to_tokio_listener(listener: std::net::TcpListener) -> anyhow::Result<tokio::net::TcpListener> {
    crate::serve::widen_backlog(&listener)?;
    listener.set_nonblocking(true)?;
    Ok(tokio::net::TcpListener::from_std(listener)?)
}

/// The system roots plus the session CA, for the sandbox's trust stores.
fn ca_bundle(ca: &CertificateAuthority) -> Vec<u8> {
    let mut bundle = SYSTEM_BUNDLES
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with(b"\n") {
        bundle.push(b'\n');
    }
    bundle.extend_from_slice(ca.cert_pem().as_bytes());
    bundle
}

/// A clean environment: PATH, HOME, LANG, TERM, the CA variables, the
/// credential placeholders, and only what the caller passes explicitly.
fn sandbox_env(
    args: &RunArgs,
    credentials: &[ResolvedCredential],
) -> anyhow::Result<Vec<(OsString, OsString)>> {
    let mut env: Vec<(String, OsString)> = Vec::new();
    let mut set = |key: &str, value: OsString| {
        env.retain(|(k, _)| k != key);
        env.push((key.to_owned(), value));
    };
    set(
        "PATH",
        std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
    );
    // The caller's home is hidden; the private /tmp is writable for caches.
    set("HOME", "/tmp".into());
    for key in ["LANG", "LC_ALL", "TERM"] {
        if let Some(value) = std::env::var_os(key) {
            set(key, value);
        }
    }
    for key in CA_VARIABLES {
        set(key, CA_BUNDLE_PATH.into());
    }
    for cred in credentials {
        if let Some(ph) = &cred.placeholder {
            set(&ph.variable, ph.dummy.clone().into());
        }
    }
    let secret_sources: Vec<(&str, &str)> = credentials
        .iter()
        .flat_map(|c| c.secrets.iter().map(move |s| (c.name.as_str(), s.expose())))
        .collect();
    for key in &args.pass_env {
        let Some(value) = std::env::var_os(key) else {
            bail!("--pass-env {key}: {key} is not set in airlock's environment");
        };
        refuse_secret(key, &value.to_string_lossy(), &secret_sources)?;
        set(key, value);
    }
    for (key, value) in &args.env {
        refuse_secret(key, value, &secret_sources)?;
        set(key, value.into());
    }
    Ok(env.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

/// A credential's secret never enters the sandbox, not even when asked to.
fn refuse_secret(key: &str, value: &str, secrets: &[(&str, &str)]) -> anyhow::Result<()> {
    if let Some((name, _)) = secrets
        .iter()
        .find(|(_, s)| !s.is_empty() && value.contains(s))
    {
        bail!(
            "{key} carries the secret of credential {name}; secrets never enter the sandbox (use the credential's placeholder instead)"
        );
    }
    Ok(())
}

/// The sandbox must not be able to write the audit database.
fn refuse_if_writable_inside(db: &Path, workspace: &Path, rw: &[PathBuf]) -> anyhow::Result<()> {
    let db_dir = db
        .parent()
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.to_owned()))
        .unwrap_or_default();
    for writable in std::iter::once(workspace).chain(rw.iter().map(PathBuf::as_path)) {
        let writable = writable
            .canonicalize()
            .unwrap_or_else(|_| writable.to_owned());
        if db_dir.starts_with(&writable) {
            bail!(
                "the audit database {} is inside {}, which the sandbox can write (and so could move or delete the record): pass --audit-db (or set AIRLOCK_AUDIT_DB) with a path outside it",
                db.display(),
                writable.display()
            );
        }
    }
    Ok(())
}

/// A directory the sandbox must not see cannot be the workspace (a workspace
/// inside one is fine: it is mounted back on top of the hidden directory).
/// Each entry: the directory, why it is hidden, and the option that moves it.
fn refuse_hidden_workspace(
    workspace: &Path,
    hidden: &[(Option<&Path>, &str, &str)],
) -> anyhow::Result<()> {
    for (dir, why, option) in hidden {
        let Some(dir) = dir else { continue };
        if dir.canonicalize().is_ok_and(|dir| dir == workspace) {
            bail!(
                "the workspace {} {why}, which the sandbox must not see: use a subdirectory as the workspace, or move it with {option}",
                workspace.display()
            );
        }
    }
    Ok(())
}

fn parse_size(s: &str) -> Result<u64, String> {
    let err =
        || format!("invalid size {s:?}: use a number with an optional K, M or G suffix, e.g. 512M");
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number.parse().map_err(|_| err())?;
    let scale = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1u64,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(err()),
    };
    let bytes = number * scale as f64;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(err());
    }
    Ok(bytes as u64)
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains('\0') && !v.contains('\0') => {
            Ok((k.to_owned(), v.to_owned()))
        }
        _ => Err(format!("invalid --env {s:?}: expected KEY=VALUE")),
    }
}

fn parse_user(s: &str) -> Result<UserSpec, String> {
    let err = || format!("invalid --user {s:?}: expected UID or UID:GID (numbers)");
    let (uid, gid) = match s.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (s, None),
    };
    let uid: u32 = uid.parse().map_err(|_| err())?;
    let gid: u32 = match gid {
        Some(g) => g.parse().map_err(|_| err())?,
        None => uid,
    };
    Ok(UserSpec { uid, gid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_durations_and_users_parse() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("soon").is_err());
        assert_eq!(
            parse_user("1000"),
            Ok(UserSpec {
                uid: 1000,
                gid: 1000
            })
        );
        assert_eq!(parse_user("1000:50"), Ok(UserSpec { uid: 1000, gid: 50 }));
        assert!(parse_user("bob").is_err());
    }
}
