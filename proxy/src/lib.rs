//! Airlock's egress proxy.
//!
//! One engine behind three front doors — an explicit forward proxy, a
//! transparent listener for redirected connections, and a DNS resolver — that
//! intercepts TLS with certificates minted per host, enforces the policy,
//! injects credentials, and reports every decision through [`EventSink`].
//!
//! Where things happen:
//! - connection-level decision and TLS interception: `connection`
//! - one HTTP request (policy, credentials, forwarding, records): `exchange`
//! - the 403 texts: `refusal`
//! - DNS answers: `dns`; the bounded map of synthetic addresses: `synthetic`
//! - upstream resolution, the public-address rule and verified TLS: [`upstream`]
//!
//! The `fuzzing` feature (enabled by `fuzz/`) makes the parsers the fuzz
//! targets drive public: `dns`, `synthetic`, `target` and the ClientHello
//! peek. Without it the public API is what a user of the proxy needs.

#![forbid(unsafe_code)]
// Per crate rather than in the workspace's lints: off with `fuzzing`, which
// exposes the engine's internals to the fuzz targets.
#![cfg_attr(not(feature = "fuzzing"), warn(missing_debug_implementations))]

/// A module that is public only with the `fuzzing` feature, so that the fuzz
/// targets can reach its parser while the library's API stays small.
macro_rules! fuzzing_pub_mod {
    ($name:ident) => {
        // Its functions take crate-internal types (the engine): the fuzz
        // targets only pass back what they got from the same module.
        #[cfg(feature = "fuzzing")]
        #[allow(private_interfaces)]
        pub mod $name;
        // Its items are `pub` for the fuzz targets; without the feature they
        // are reachable from this crate only, which is the point.
        #[cfg(not(feature = "fuzzing"))]
        #[allow(unreachable_pub)]
        mod $name;
    };
}

mod accept;
pub mod admin;
pub mod approvals;
mod body;
pub mod ca;
// `pub` items for the fuzz targets, re-exported only with `fuzzing` (below).
#[allow(unreachable_pub)]
mod client_hello;
mod connection;
pub mod credentials;
fuzzing_pub_mod!(dns);
mod engine;
pub mod events;
mod exchange;
mod forward;
mod header_list;
mod mcp;
mod metered;
pub mod metrics;
mod outlet;
mod quota;
mod refusal;
mod replay;
mod rules;
fuzzing_pub_mod!(synthetic);
fuzzing_pub_mod!(target);
mod transparent;
mod upgrade;
pub mod upstream;
mod websocket;
mod workers;

use std::sync::Arc;

use airlock_policy::Policy;
use arc_swap::ArcSwap;
use rustls::pki_types::CertificateDer;
use tokio::net::{TcpListener, UdpSocket};

pub use approvals::{Approvals, ApprovalsConfig};
pub use ca::{CaError, CertificateAuthority};
#[cfg(feature = "fuzzing")]
pub use client_hello::{ClientHello, Peek, peek as peek_client_hello};
pub use credentials::{Credentials, Placeholder, ResolvedCredential, Secret};
pub use events::{Event, EventSink, JsonLinesSink, MemorySink, NullSink, SinkError};
pub use metrics::Metrics;
pub use upstream::{PinnedHost, PinnedHostError, UpstreamSetupError};
pub use workers::default_count as default_worker_threads;

use engine::{Engine, EngineParts};
use rules::Rules;

/// Bytes of each request and response body kept in the record by default.
pub const DEFAULT_CAPTURE_CAP: usize = 64 * 1024;

/// Everything the proxy needs to start. Built with [`ProxyConfig::new`] and
/// then adjusted field by field, so that a new setting (with its default) does
/// not break the callers.
#[non_exhaustive]
pub struct ProxyConfig {
    pub policy: Policy,
    pub credentials: Vec<ResolvedCredential>,
    pub ca: Arc<CertificateAuthority>,
    /// `--resolve HOST:IP` pins.
    pub pins: Vec<PinnedHost>,
    /// `--upstream-ca` certificates trusted besides the webpki roots.
    pub upstream_roots: Vec<CertificateDer<'static>>,
    pub events: Arc<dyn EventSink>,
    pub capture_cap: usize,
    /// Make every decision durable before forwarding.
    pub audit_sync: bool,
    /// `SO_MARK` for the proxy's own upstream and DNS sockets, so that a
    /// sidecar's capture rules let them out (None: no mark, the default).
    pub socket_mark: Option<u32>,
    /// Threads that serve connections (see `workers`); at least one.
    pub worker_threads: usize,
    /// Who decides on held requests, the cap, the webhook.
    pub approvals: ApprovalsConfig,
}

impl ProxyConfig {
    /// The required parts; everything else starts at its default: no
    /// credentials, pins or extra upstream roots, [`DEFAULT_CAPTURE_CAP`], no
    /// durable-before-forwarding, no socket mark, one worker per CPU.
    pub fn new(policy: Policy, ca: Arc<CertificateAuthority>, events: Arc<dyn EventSink>) -> Self {
        Self {
            policy,
            credentials: Vec::new(),
            ca,
            pins: Vec::new(),
            upstream_roots: Vec::new(),
            events,
            capture_cap: DEFAULT_CAPTURE_CAP,
            audit_sync: false,
            socket_mark: None,
            worker_threads: workers::default_count(),
            approvals: ApprovalsConfig::default(),
        }
    }
}

impl std::fmt::Debug for ProxyConfig {
    /// The settings; not the policy, credentials, CA or sink themselves.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyConfig")
            .field("pins", &self.pins)
            .field("upstream_roots", &self.upstream_roots.len())
            .field("capture_cap", &self.capture_cap)
            .field("audit_sync", &self.audit_sync)
            .field("socket_mark", &self.socket_mark)
            .field("worker_threads", &self.worker_threads)
            .finish_non_exhaustive()
    }
}

/// Why a proxy could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Upstream(#[from] UpstreamSetupError),
    #[error("cannot start the connection worker threads: {0}")]
    Workers(#[source] std::io::Error),
}

/// A running proxy engine; cheap to clone, shared by all front doors.
#[derive(Clone)]
pub struct Proxy {
    engine: Arc<Engine>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").finish_non_exhaustive()
    }
}

impl Proxy {
    pub fn new(config: ProxyConfig) -> Result<Self, SetupError> {
        let rules = Arc::new(ArcSwap::from_pointee(Rules {
            policy: config.policy,
            credentials: Credentials::new(config.credentials),
        }));
        let resolver =
            upstream::UpstreamResolver::new(&config.pins, rules.clone(), config.socket_mark);
        let workers =
            workers::Workers::start(config.worker_threads).map_err(SetupError::Workers)?;
        // One set of upstream clients per worker (and one for other threads),
        // so a pooled upstream connection is only ever used by its own worker.
        let upstream = upstream::Upstream::new(
            resolver,
            &config.upstream_roots,
            config.socket_mark,
            workers.count() + 1,
        )?;
        Ok(Self {
            engine: Arc::new(Engine::new(EngineParts {
                rules,
                ca: config.ca,
                upstream,
                events: config.events,
                capture_cap: config.capture_cap,
                audit_sync: config.audit_sync,
                workers: Arc::new(workers),
                approvals: Approvals::new(config.approvals),
            })),
        })
    }

    /// Serve the explicit forward proxy (HTTP absolute-form and CONNECT).
    pub async fn serve_explicit(&self, listener: TcpListener) -> std::io::Result<()> {
        forward::serve(self.engine.clone(), listener).await
    }

    /// Serve connections redirected by nftables (SO_ORIGINAL_DST).
    pub async fn serve_transparent(&self, listener: TcpListener) -> std::io::Result<()> {
        transparent::serve(self.engine.clone(), listener).await
    }

    /// Serve DNS over UDP.
    pub async fn serve_dns_udp(&self, socket: UdpSocket) -> std::io::Result<()> {
        dns::serve_udp(self.engine.clone(), socket).await
    }

    /// Serve DNS over TCP.
    pub async fn serve_dns_tcp(&self, listener: TcpListener) -> std::io::Result<()> {
        dns::serve_tcp(self.engine.clone(), listener).await
    }

    /// Swap in a new policy and credentials; running connections keep going,
    /// new decisions use the new rules.
    pub fn reload(&self, policy: Policy, credentials: Vec<ResolvedCredential>) {
        self.engine.rules.store(Arc::new(Rules {
            policy,
            credentials: Credentials::new(credentials),
        }));
    }

    /// The policy in force.
    pub fn policy(&self) -> Policy {
        self.engine.rules.load().policy.clone()
    }

    /// Close every connection and stop the worker threads (before a session's
    /// record is finished, so nothing is recorded after its end).
    pub fn stop_connections(&self) {
        self.engine.workers.stop();
    }

    /// True once recording failed; the proxy then refuses everything.
    pub fn audit_failed(&self) -> bool {
        self.engine.audit_failed()
    }

    pub fn ca(&self) -> &CertificateAuthority {
        &self.engine.ca
    }

    /// The requests waiting for a person's decision, and the decisions.
    pub fn approvals(&self) -> Arc<Approvals> {
        self.engine.approvals.clone()
    }

    /// The counters `/metrics` serves.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.engine.metrics.clone()
    }
}
