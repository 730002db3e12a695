//! Pieces every long-running proxy front end shares (`airlock proxy`,
//! `airlock sidecar`): binding listeners with a useful error, the JSON-lines
//! event stream, placeholder notices, and the loop that serves until a
//! signal or a failure (reloading the policy through [`Reloader`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use airlock_proxy::{EventSink, JsonLinesSink};
use anyhow::Context;
use tokio::net::{TcpListener, UdpSocket};
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinSet;

use crate::policy_file;
use crate::policy_reload::Reloader;
use crate::policy_watch::ChainWatch;

/// The runtime for everything but the connections themselves: accepting,
/// DNS, the admin endpoint, signals, policy reloads. One thread is plenty;
/// connections are served by the proxy's own workers ([`worker_threads`]).
pub(crate) fn runtime(thread_name: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name(thread_name)
        .build()
        .context("starting the async runtime")
}

/// How many threads serve connections: `AIRLOCK_WORKER_THREADS`, else one per CPU.
pub(crate) fn worker_threads() -> anyhow::Result<usize> {
    let Some(value) = std::env::var_os("AIRLOCK_WORKER_THREADS") else {
        return Ok(airlock_proxy::default_worker_threads());
    };
    value
        .to_str()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=1024).contains(n))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "AIRLOCK_WORKER_THREADS={}: not a number of threads from 1 to 1024; set one, or unset it for one per CPU",
                value.to_string_lossy()
            )
        })
}

/// Clients of a standalone proxy need the dummy values to send; they are not secret.
pub(crate) fn announce_placeholders(credentials: &[airlock_proxy::ResolvedCredential]) {
    for cred in credentials {
        if let Some(ph) = &cred.placeholder {
            eprintln!(
                "airlock: placeholder {}={} (credential {}: swapped for the secret only on HTTPS requests to its hosts)",
                ph.variable, ph.dummy, cred.name
            );
        }
    }
}

pub(crate) async fn bind_tcp(addr: SocketAddr, flag: &str) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        anyhow::anyhow!(
            "{flag} {addr}: cannot listen ({e}); another process may be using it: pick another address with {flag}"
        )
    })?;
    widen_backlog(&listener)?;
    Ok(listener)
}

/// How many connections the kernel queues for a listener before it drops
/// SYNs (listen(2); capped by net.core.somaxconn). The default of Tokio and
/// std, 128, turns a burst of connects into one-second SYN retransmits.
const LISTEN_BACKLOG: i32 = 4096;

/// Raise a listening socket's backlog. Calling listen(2) again on a socket
/// that already listens only adjusts its backlog (Linux, inet_listen in
/// net/ipv4/af_inet.c).
pub(crate) fn widen_backlog(listener: &impl std::os::fd::AsFd) -> anyhow::Result<()> {
    let backlog = nix::sys::socket::Backlog::new(LISTEN_BACKLOG).context("listen backlog")?;
    nix::sys::socket::listen(listener, backlog).context("raising the listen backlog")
}

/// A DNS listener: UDP and TCP on the same address. With port 0 the kernel
/// picks a free UDP port that may be taken for TCP, so try a few.
pub(crate) async fn bind_dns(
    addr: SocketAddr,
    flag: &str,
) -> anyhow::Result<(UdpSocket, TcpListener)> {
    let mut attempts_left = if addr.port() == 0 { 16 } else { 1 };
    loop {
        let udp = UdpSocket::bind(addr).await.with_context(|| {
            format!("{flag} {addr}: cannot listen on UDP (is another process using it?)")
        })?;
        let bound = udp.local_addr()?;
        attempts_left -= 1;
        match TcpListener::bind(bound).await {
            Ok(tcp) => {
                widen_backlog(&tcp)?;
                return Ok((udp, tcp));
            }
            Err(e) if attempts_left == 0 => {
                return Err(e).with_context(|| {
                    format!("{flag} {bound}: cannot listen on TCP (is another process using it?)")
                });
            }
            Err(_) => continue,
        }
    }
}

/// The JSON-lines event stream: "-" for stdout, else a file appended to.
pub(crate) fn open_events(target: &str) -> anyhow::Result<Arc<dyn EventSink>> {
    if target == "-" {
        return Ok(Arc::new(JsonLinesSink::new(std::io::stdout())));
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(target)
        .with_context(|| format!("--events {target}: cannot open for appending"))?;
    Ok(Arc::new(JsonLinesSink::new(file)))
}

/// How often the policy file is checked for changes.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How often the audit store's health is checked.
const AUDIT_CHECK_EVERY: Duration = Duration::from_millis(250);

/// The signals a long-running front end answers. Installed before anything
/// is bound or announced: until a handler exists, SIGTERM and SIGHUP take
/// their default action and end the process (signal(7)), which would leave
/// an audit session unfinished the moment a supervisor saw "listening".
pub(crate) struct Signals {
    hangup: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    /// Needs a Tokio runtime context (`Runtime::enter` or inside `block_on`).
    pub(crate) fn install() -> anyhow::Result<Self> {
        Ok(Self {
            hangup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }
}

/// How serving ended.
pub(crate) enum Stop {
    /// SIGTERM or SIGINT: a clean exit.
    Signal(String),
    /// A listener or the audit store failed.
    Failed(String),
}

/// Serve until SIGTERM/SIGINT or a failure, reloading the policy on SIGHUP
/// and when the file changes. A failed audit store stops everything rather
/// than let the proxy run unaudited. The listeners in `servers` still run
/// when this returns: the caller ends the session with
/// [`crate::finish::Finish::stop_serving`], which stops them and every
/// connection before the record ends.
pub(crate) async fn serve_until_stopped(
    policy: &Reloader<'_>,
    signals: Signals,
    servers: &mut JoinSet<std::io::Result<()>>,
) -> Stop {
    let Signals {
        mut hangup,
        mut terminate,
        mut interrupt,
    } = signals;
    let proxy = policy.proxy;
    let mut audit_check = tokio::time::interval(AUDIT_CHECK_EVERY);
    let mut watch_tick = tokio::time::interval(WATCH_EVERY);
    // Every file of the chain: a change to a base file reloads too.
    let mut watch = ChainWatch::new(&policy_file::files(&proxy.policy()));
    loop {
        tokio::select! {
            _ = hangup.recv() => {
                if policy.reload() {
                    watch.follow(&policy_file::files(&proxy.policy()));
                }
            }
            _ = watch_tick.tick() => {
                if watch.changed() && policy.reload() {
                    watch.follow(&policy_file::files(&proxy.policy()));
                }
            }
            _ = terminate.recv() => return Stop::Signal("stopped by SIGTERM".into()),
            _ = interrupt.recv() => return Stop::Signal("stopped by SIGINT".into()),
            _ = audit_check.tick() => {
                if proxy.audit_failed() {
                    proxy.metrics().set_audit_healthy(false);
                    return Stop::Failed("the audit store failed; stopped rather than run unaudited".into());
                }
            }
            Some(ended) = servers.join_next() => {
                let why = match ended {
                    Ok(Ok(())) => "a listener stopped".to_owned(),
                    Ok(Err(e)) => format!("a listener failed: {e}"),
                    Err(e) => format!("a listener task panicked: {e}"),
                };
                return Stop::Failed(why);
            }
        }
    }
}
