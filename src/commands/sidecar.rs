//! `airlock sidecar`: guard the egress of containers that already exist, from
//! inside their network namespace, like a service-mesh sidecar.
//!
//! Order is what makes it fail closed:
//! 1. check the configuration (policy, credentials, CA) without touching anything;
//! 2. join the namespace (main thread, before any other thread exists);
//! 3. install the capture rules: from here on the app's traffic goes to ports
//!    nobody listens on yet, so it fails, it never bypasses;
//! 4. open the audit store, bind the admin endpoint (`/readyz` says 503),
//!    then the transparent listener and the resolver; report ready;
//! 5. serve; reload the policy on SIGHUP or when the file changes;
//! 6. on SIGTERM/SIGINT (a clean exit) finish the audit session and delete
//!    the table; on any failure leave the rules in place and exit non-zero.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_auditor::{SessionEnd, SessionMode, SessionRecorder};
use airlock_proxy::admin::{self, AdminState};
use airlock_proxy::approvals::api::ApprovalTokens;
use airlock_proxy::{
    ApprovalsConfig, CertificateAuthority, EventSink, Proxy, ProxyConfig, ResolvedCredential,
};
use anyhow::{Context, bail};
use tokio::task::JoinSet;

use crate::approvals::{ApprovalOptions, ApprovalSocket};
use crate::audit::WithNote;
use crate::audit_sink::{AuditSink, Tee};
use crate::cli::{AuditOptions, UpstreamOptions, parse_duration};
use crate::finish::Finish;
use crate::policy_reload::Reloader;
use crate::serve::{
    Signals, Stop, announce_placeholders, bind_dns, bind_tcp, open_events, serve_until_stopped,
};
use crate::ship::LiveShipper;
use crate::sidecar::netns::{self, Target};
use crate::sidecar::rules::{CaptureRules, DEFAULT_MARK, TableName};
use crate::sidecar::wait_ready;
use crate::{one_line, policy_file, secrets};

/// What the session record says a sidecar cannot see.
const CAPABILITIES_NOTE: &str =
    "sidecar mode: network and DNS events only; exec and file events are not visible";
/// How often the audit store's lag is measured.
const AUDIT_LAG_EVERY: Duration = Duration::from_secs(1);

#[derive(clap::Args)]
pub(crate) struct SidecarArgs {
    /// The policy file (TOML). Reloaded on SIGHUP and when the file changes.
    #[arg(long, value_name = "FILE", required_unless_present = "wait_ready")]
    policy: Option<PathBuf>,
    /// Join this network namespace (e.g. /run/netns/NAME) [default: stay in the current one].
    #[arg(long, value_name = "PATH", conflicts_with = "pid")]
    netns: Option<PathBuf>,
    /// Join the network namespace of this process (e.g. a container's main process).
    #[arg(long, value_name = "PID", value_parser = crate::cli::parse_pid)]
    pid: Option<u32>,
    /// Directory of the CA (`airlock ca init --dir DIR`); the app must trust its ca.pem.
    #[arg(long, value_name = "DIR", required_unless_present = "wait_ready")]
    ca_dir: Option<PathBuf>,
    /// Admin endpoint (/healthz, /readyz, /metrics), inside the namespace.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:15021", value_parser = crate::cli::parse_addr)]
    admin: SocketAddr,
    #[command(flatten)]
    upstream: UpstreamOptions,
    /// Port of the transparent listener on 127.0.0.1 (names the nft table too).
    #[arg(long, value_name = "PORT", default_value_t = 15001, value_parser = crate::cli::parse_port)]
    transparent_port: u16,
    /// Port of the DNS resolver (UDP and TCP) on 127.0.0.1.
    #[arg(long, value_name = "PORT", default_value_t = 15053, value_parser = crate::cli::parse_port)]
    dns_port: u16,
    /// SO_MARK on airlock's own sockets; marked packets are not captured [default: 0x4149524c].
    #[arg(long, value_name = "MARK", value_parser = parse_mark)]
    socket_mark: Option<u32>,
    /// Also stream every event as JSON lines here ("-" for stdout), for log pipelines.
    #[arg(long, value_name = "FILE")]
    events: Option<String>,
    #[command(flatten)]
    audit: AuditOptions,
    #[command(flatten)]
    approvals: ApprovalOptions,
    /// Serve the approvals API on --admin to bearers of these tokens (NAME:TOKEN per line, mode 0600; the app shares the admin address but cannot read this file).
    #[arg(long, value_name = "FILE")]
    approval_token_file: Option<PathBuf>,
    /// No longer used: the capture rules are loaded over netlink (accepted
    /// so that older manifests keep working).
    #[arg(long, value_name = "PATH", hide = true)]
    nft: Option<PathBuf>,
    /// Leave the capture rules in place on a clean exit too (traffic then fails until a sidecar runs again).
    #[arg(long)]
    keep_rules: bool,
    /// Instead of running a sidecar, wait until the one whose admin endpoint is ADDR is ready, then exit 0.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["policy", "ca_dir", "netns", "pid"], value_parser = crate::cli::parse_addr)]
    wait_ready: Option<SocketAddr>,
    /// How long --wait-ready waits, e.g. 30s or 2m.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    wait_timeout: Duration,
    /// Pause between installing the rules and binding the listeners (for testing start-up ordering).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, hide = true)]
    start_delay: Option<Duration>,
}

fn parse_mark(s: &str) -> Result<u32, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    };
    match parsed {
        Ok(0) => Err("the socket mark must not be 0 (unmarked packets are the app's)".into()),
        Ok(mark) => Ok(mark),
        Err(_) => Err(format!(
            "invalid socket mark {s:?}: expected a number like 0x4149524c"
        )),
    }
}

/// Everything checked before the namespace is touched.
struct Prepared {
    policy_path: PathBuf,
    policy: airlock_policy::Policy,
    credentials: Vec<ResolvedCredential>,
    ca: CertificateAuthority,
    upstream_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    audit_db: PathBuf,
    audit_key: PathBuf,
    worker_threads: usize,
    approvals: ApprovalsConfig,
    approval_tokens: Option<ApprovalTokens>,
}

pub(crate) fn run(args: SidecarArgs) -> anyhow::Result<ExitCode> {
    if let Some(addr) = args.wait_ready {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        runtime.block_on(wait_ready::wait(addr, args.wait_timeout))?;
        eprintln!("airlock: sidecar at {addr} is ready");
        return Ok(ExitCode::SUCCESS);
    }
    let prepared = prepare(&args)?;
    let target = match (&args.netns, args.pid) {
        (Some(path), _) => Some(Target::Path(path.clone())),
        (None, Some(pid)) => Some(Target::Pid(pid)),
        (None, None) => None,
    };
    if let Some(target) = &target {
        // No thread exists yet: the whole process moves (see sidecar::netns).
        netns::join(target)?;
    }
    let rules = CaptureRules {
        table: TableName::for_port(args.transparent_port),
        mark: args.socket_mark.unwrap_or(DEFAULT_MARK),
        transparent_port: args.transparent_port,
        dns_port: args.dns_port,
    };
    if args.nft.is_some() {
        eprintln!(
            "airlock: --nft is ignored: the capture rules are loaded over netlink, without the nft program"
        );
    }
    let runtime = crate::serve::runtime("airlock-proxy")?;
    let signals = {
        let _context = runtime.enter();
        Signals::install()?
    };
    rules.install()?;
    eprintln!(
        "airlock: capture rules installed (nft table inet {}); traffic fails until the sidecar is ready",
        rules.table.as_str()
    );
    let end = runtime.block_on(serve(&args, prepared, &rules, target.as_ref(), signals));
    let end = end.unwrap_or_else(|e| Stop::Failed(one_line(&e)));
    match end {
        Stop::Signal(why) => {
            if args.keep_rules {
                eprintln!("airlock: {why}; capture rules kept (--keep-rules)");
            } else {
                rules.remove()?;
                eprintln!(
                    "airlock: {why}; removed nft table inet {}",
                    rules.table.as_str()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Stop::Failed(why) => {
            eprintln!(
                "airlock: {why}; the capture rules stay in place, so the app's traffic fails until a sidecar runs again (to lift them: nft delete table inet {} in the namespace)",
                rules.table.as_str()
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

fn prepare(args: &SidecarArgs) -> anyhow::Result<Prepared> {
    let (Some(policy_path), Some(ca_dir)) = (&args.policy, &args.ca_dir) else {
        bail!("--policy and --ca-dir are required to run a sidecar");
    };
    if args.transparent_port == args.dns_port {
        bail!("--transparent-port and --dns-port must differ");
    }
    let policy = policy_file::load(policy_path)?;
    let credentials = secrets::resolve_all(policy.credentials())?;
    let ca = CertificateAuthority::load(ca_dir)?;
    let worker_threads = crate::serve::worker_threads()?;
    let upstream_roots = args.upstream.roots()?;
    let audit_db = args.audit.db()?;
    let audit_key = args.audit.key()?;
    let mark = args.socket_mark.unwrap_or(DEFAULT_MARK);
    let approvals = args.approvals.config(&upstream_roots, Some(mark))?;
    let approval_tokens = match &args.approval_token_file {
        Some(path) => Some(secrets::approval_tokens(path)?),
        None => None,
    };
    Ok(Prepared {
        policy_path: policy_path.clone(),
        policy,
        credentials,
        ca,
        upstream_roots,
        audit_db,
        audit_key,
        worker_threads,
        approvals,
        approval_tokens,
    })
}

async fn serve(
    args: &SidecarArgs,
    prepared: Prepared,
    rules: &CaptureRules,
    target: Option<&Target>,
    signals: Signals,
) -> anyhow::Result<Stop> {
    let Prepared {
        policy_path,
        policy,
        credentials,
        ca,
        upstream_roots,
        audit_db,
        audit_key,
        worker_threads,
        approvals,
        approval_tokens,
    } = prepared;
    announce_placeholders(&credentials);
    let limits = serde_json::json!({
        "netns": target.map(|t| t.path().display().to_string()),
        "nft_table": rules.table.as_str(),
        "socket_mark": rules.mark,
        "transparent_port": rules.transparent_port,
        "dns_port": rules.dns_port,
    });
    let info =
        crate::audit::session_info(&policy, SessionMode::Sidecar, limits, args.audit.labels()?)
            .with_budget(args.audit.max_session_bytes())
            .with_note(CAPABILITIES_NOTE);
    let recorder = crate::audit::begin(&audit_db, Some(&audit_key), info, &credentials)?;
    let shipper = match &args.audit.audit_ship {
        Some(to) => {
            // The capture rules leave only marked sockets alone: the
            // connection to the central store is the sidecar's own, like
            // its upstream ones, and must not be captured by its proxy.
            airlock_auditor::postgres::mark_connections(rules.mark);
            Some(LiveShipper::start(&audit_db, to, &recorder)?)
        }
        None => None,
    };
    let gate = shipper
        .as_ref()
        .filter(|_| args.audit.audit_ship_required)
        .map(|s| s.gate(recorder.session_id().clone()));
    let mut sinks: Vec<Arc<dyn EventSink>> =
        vec![Arc::new(AuditSink::new(recorder.clone()).gated(gate))];
    if let Some(events) = &args.events {
        sinks.push(open_events(events)?);
    }
    let mut config = ProxyConfig::new(policy, Arc::new(ca), Arc::new(Tee(sinks)));
    config.credentials = credentials;
    config.pins = args.upstream.resolve.clone();
    config.upstream_roots = upstream_roots;
    config.audit_sync = args.audit.decisions_wait();
    config.socket_mark = Some(rules.mark);
    config.worker_threads = worker_threads;
    config.approvals = ApprovalsConfig {
        session: recorder.session_id().to_string(),
        ..approvals
    };
    let proxy = Proxy::new(config)?;
    if let Some(shipper) = &shipper {
        shipper.report_to(&proxy.metrics());
    }
    let _approval_socket = ApprovalSocket::serve(proxy.approvals())?;

    let mut servers = JoinSet::new();
    let admin_state = AdminState::with_approvals(proxy.clone(), approval_tokens);
    let admin_listener = bind_tcp(args.admin, "--admin").await?;
    servers.spawn(admin::serve(admin_listener, admin_state.clone()));
    if let Some(delay) = args.start_delay {
        tokio::time::sleep(delay).await;
    }
    let local = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let transparent = bind_tcp(local(rules.transparent_port), "--transparent-port").await?;
    let (dns_udp, dns_tcp) = bind_dns(local(rules.dns_port), "--dns-port").await?;
    let p = proxy.clone();
    servers.spawn(async move { p.serve_transparent(transparent).await });
    let p = proxy.clone();
    servers.spawn(async move { p.serve_dns_udp(dns_udp).await });
    let p = proxy.clone();
    servers.spawn(async move { p.serve_dns_tcp(dns_tcp).await });
    let lag = tokio::spawn(measure_audit_lag(proxy.clone(), recorder.clone()));
    admin_state.set_ready(true);
    eprintln!(
        "airlock: sidecar ready (policy {}, transparent 127.0.0.1:{}, DNS 127.0.0.1:{}, admin http://{}/readyz)",
        policy_path.display(),
        rules.transparent_port,
        rules.dns_port,
        args.admin
    );

    let reloader = Reloader {
        proxy: &proxy,
        path: &policy_path,
        record: Some(&recorder),
    };
    let end = serve_until_stopped(&reloader, signals, &mut servers).await;
    admin_state.set_ready(false);
    lag.abort();
    let (code, reason) = match &end {
        Stop::Signal(why) => (0, why.clone()),
        Stop::Failed(why) => (1, why.clone()),
    };
    let finished = Finish::proxy(proxy, Some(recorder))
        .shipping(shipper)
        .stop_serving(&mut servers)
        .await?
        .finish_blocking(SessionEnd {
            exit_status: Some(code),
            signal: None,
            reason: Some(reason),
        })
        .await
        .context("finishing the audit session")?;
    match (end, finished) {
        (Stop::Signal(_), Err(e)) => Ok(Stop::Failed(format!(
            "finishing the audit session failed: {e}"
        ))),
        (end, _) => Ok(end),
    }
}

/// Audit lag, for `/metrics`: how long the store takes to make everything
/// queued so far durable, measured once a second.
async fn measure_audit_lag(proxy: Proxy, recorder: SessionRecorder) {
    let metrics = proxy.metrics();
    loop {
        tokio::time::sleep(AUDIT_LAG_EVERY).await;
        let started = Instant::now();
        let r = recorder.clone();
        let synced = tokio::task::spawn_blocking(move || r.sync()).await;
        metrics.set_audit_lag(started.elapsed());
        metrics.set_audit_healthy(matches!(synced, Ok(Ok(()))) && recorder.healthy());
    }
}
