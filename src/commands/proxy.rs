//! `airlock proxy`: the egress proxy as a standalone process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use airlock_proxy::admin::{self, AdminState};
use airlock_proxy::{ApprovalsConfig, CertificateAuthority, EventSink, Proxy, ProxyConfig};
use anyhow::Context;

use airlock_auditor::{SessionEnd, SessionMode};

use crate::approvals::{ApprovalOptions, ApprovalSocket};
use crate::audit::WithNote;
use crate::audit_sink::{AuditSink, Tee};
use crate::cli::{AuditOptions, UpstreamOptions, parse_addr};
use crate::finish::Finish;
use crate::policy_reload::Reloader;
use crate::serve::{
    Signals, Stop, announce_placeholders, bind_dns, bind_tcp, open_events, serve_until_stopped,
};
use crate::ship::LiveShipper;
use crate::{policy_file, secrets};

#[derive(clap::Args)]
// The proxy records only when given a database: no default.
#[command(mut_arg("audit_db", |a| a.help(
    "Also record the session into this audit database (see `airlock audit`)"
)))]
pub(crate) struct ProxyArgs {
    /// Address of the explicit forward proxy (HTTP_PROXY / HTTPS_PROXY). Port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = parse_addr)]
    listen: SocketAddr,
    /// The policy file (TOML). Reloaded on SIGHUP.
    #[arg(long)]
    policy: PathBuf,
    /// Directory of the CA made by `airlock ca init` [default: ~/.local/share/airlock/ca, created on first use].
    #[arg(long, value_name = "DIR")]
    ca_dir: Option<PathBuf>,
    #[command(flatten)]
    upstream: UpstreamOptions,
    /// Also accept connections redirected here by nftables (SO_ORIGINAL_DST).
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    transparent_listen: Option<SocketAddr>,
    /// Also answer DNS (UDP and TCP) here: allowed names get synthetic addresses, others NXDOMAIN.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    dns_listen: Option<SocketAddr>,
    /// Where to write decision events as JSON lines ("-" for stdout).
    #[arg(long, value_name = "FILE", default_value = "-")]
    events: String,
    #[command(flatten)]
    audit: AuditOptions,
    #[command(flatten)]
    approvals: ApprovalOptions,
    /// Serve /healthz, /readyz, /metrics here (and the approvals API, with --approval-token-file).
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    admin_listen: Option<SocketAddr>,
    /// Serve the approvals API on the admin listener to bearers of these tokens (NAME:TOKEN per line, mode 0600).
    #[arg(long, value_name = "FILE", requires = "admin_listen")]
    approval_token_file: Option<PathBuf>,
}

pub(crate) fn run(args: ProxyArgs) -> anyhow::Result<ExitCode> {
    let runtime = crate::serve::runtime("airlock-proxy")?;
    runtime.block_on(serve(args))
}

async fn serve(args: ProxyArgs) -> anyhow::Result<ExitCode> {
    let signals = Signals::install()?;
    let policy = policy_file::load(&args.policy)?;
    let credentials = secrets::resolve_all(policy.credentials())?;
    let worker_threads = crate::serve::worker_threads()?;
    // Every address is bound before anything is created or recorded: a
    // busy port leaves no new CA behind and no audit session that never ran.
    let listeners = Listeners::bind(&args).await?;
    announce_placeholders(&credentials);
    let (ca, ca_dir) = load_or_create_ca(args.ca_dir.as_deref())?;
    let ca = Arc::new(ca);
    let upstream_roots = args.upstream.roots()?;
    let approval_tokens = match &args.approval_token_file {
        Some(path) => Some(secrets::approval_tokens(path)?),
        None => None,
    };
    let json_events = open_events(&args.events)?;
    let recorder = match &args.audit.audit_db {
        Some(db) => Some(crate::audit::begin(
            db,
            args.audit.audit_key.as_deref(),
            crate::audit::session_info(
                &policy,
                SessionMode::Proxy,
                serde_json::Value::Null,
                args.audit.labels()?,
            )
            .with_budget(args.audit.max_session_bytes())
            .with_note("proxy mode: network events only; exec and file events are not visible"),
            &credentials,
        )?),
        None => None,
    };
    let shipper = match (&args.audit.audit_db, &args.audit.audit_ship, &recorder) {
        (Some(db), Some(to), Some(recorder)) => Some(LiveShipper::start(db, to, recorder)?),
        (None, Some(_), _) => anyhow::bail!(
            "--audit-ship ships the record --audit-db keeps; give --audit-db FILE too"
        ),
        _ => None,
    };
    let events: Arc<dyn EventSink> = match &recorder {
        Some(r) => {
            let gate = shipper
                .as_ref()
                .filter(|_| args.audit.audit_ship_required)
                .map(|s| s.gate(r.session_id().clone()));
            let audit = AuditSink::new(r.clone()).gated(gate);
            Arc::new(Tee(vec![json_events, Arc::new(audit)]))
        }
        None => json_events,
    };
    let mut config = ProxyConfig::new(policy, ca, events);
    config.credentials = credentials;
    config.pins = args.upstream.resolve.clone();
    config.upstream_roots = upstream_roots;
    config.audit_sync = args.audit.decisions_wait();
    config.worker_threads = worker_threads;
    config.approvals = ApprovalsConfig {
        session: recorder.as_ref().map_or_else(
            || format!("proxy-{}", std::process::id()),
            |r| r.session_id().to_string(),
        ),
        ..args.approvals.config(&config.upstream_roots, None)?
    };
    let proxy = Proxy::new(config)?;
    if let Some(shipper) = &shipper {
        shipper.report_to(&proxy.metrics());
    }
    let _approval_socket = ApprovalSocket::serve(proxy.approvals())?;

    let mut servers = tokio::task::JoinSet::new();
    let Listeners {
        explicit,
        admin,
        transparent,
        dns,
    } = listeners;
    eprintln!(
        "airlock: proxy listening on {} (policy {}, CA {})",
        explicit.local_addr()?,
        args.policy.display(),
        ca_dir.join(airlock_proxy::ca::CA_CERT_FILE).display()
    );
    let p = proxy.clone();
    servers.spawn(async move { p.serve_explicit(explicit).await });
    if let Some(listener) = admin {
        eprintln!(
            "airlock: admin endpoint on http://{}",
            listener.local_addr()?
        );
        let state = AdminState::with_approvals(proxy.clone(), approval_tokens);
        state.set_ready(true);
        servers.spawn(admin::serve(listener, state));
    }
    if let Some(listener) = transparent {
        eprintln!(
            "airlock: transparent listener on {}",
            listener.local_addr()?
        );
        let p = proxy.clone();
        servers.spawn(async move { p.serve_transparent(listener).await });
    }
    if let Some((udp, tcp)) = dns {
        eprintln!("airlock: DNS on {} (UDP and TCP)", udp.local_addr()?);
        let p = proxy.clone();
        servers.spawn(async move { p.serve_dns_udp(udp).await });
        let p = proxy.clone();
        servers.spawn(async move { p.serve_dns_tcp(tcp).await });
    }

    let reloader = Reloader {
        proxy: &proxy,
        path: &args.policy,
        record: recorder.as_ref(),
    };
    let (code, reason) = match serve_until_stopped(&reloader, signals, &mut servers).await {
        Stop::Signal(why) => (0, why),
        Stop::Failed(why) => (1, why),
    };
    Finish::proxy(proxy, recorder)
        .shipping(shipper)
        .stop_serving(&mut servers)
        .await?
        .finish_blocking(SessionEnd {
            exit_status: Some(i32::from(code)),
            signal: None,
            reason: Some(reason.clone()),
        })
        .await?
        .context("finishing the audit session")?;
    if code != 0 {
        eprintln!("airlock: {reason}");
    }
    Ok(ExitCode::from(code))
}

/// The proxy's sockets, bound before anything else happens.
struct Listeners {
    explicit: tokio::net::TcpListener,
    admin: Option<tokio::net::TcpListener>,
    transparent: Option<tokio::net::TcpListener>,
    dns: Option<(tokio::net::UdpSocket, tokio::net::TcpListener)>,
}

impl Listeners {
    async fn bind(args: &ProxyArgs) -> anyhow::Result<Self> {
        let explicit = bind_tcp(args.listen, "--listen").await?;
        let admin = match args.admin_listen {
            Some(addr) => Some(bind_tcp(addr, "--admin-listen").await?),
            None => None,
        };
        let transparent = match args.transparent_listen {
            Some(addr) => Some(bind_tcp(addr, "--transparent-listen").await?),
            None => None,
        };
        let dns = match args.dns_listen {
            Some(addr) => Some(bind_dns(addr, "--dns-listen").await?),
            None => None,
        };
        Ok(Self {
            explicit,
            admin,
            transparent,
            dns,
        })
    }
}

/// An explicit `--ca-dir` must hold a CA; the default one is created on first use.
fn load_or_create_ca(dir: Option<&Path>) -> anyhow::Result<(CertificateAuthority, PathBuf)> {
    if let Some(dir) = dir {
        return Ok((CertificateAuthority::load(dir)?, dir.to_owned()));
    }
    let dir = crate::paths::default_ca_dir()?;
    if dir.join(airlock_proxy::ca::CA_CERT_FILE).exists() {
        return Ok((CertificateAuthority::load(&dir)?, dir));
    }
    let ca = CertificateAuthority::init(&dir)?;
    eprintln!(
        "airlock: created a CA in {}; clients must trust {}",
        dir.display(),
        dir.join(airlock_proxy::ca::CA_CERT_FILE).display()
    );
    Ok((ca, dir))
}
