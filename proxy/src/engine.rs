//! The state every front door shares: rules, CA, upstream clients, quotas,
//! the synthetic DNS map, and the event sink with its fail-closed switch.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use airlock_policy::{Host, Scheme};
use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::approvals::Approvals;
use crate::ca::CertificateAuthority;
use crate::events::{ConnId, Event, EventSink, FrontDoor, IdGenerator, SinkError};
use crate::metrics::Metrics;
use crate::outlet::Outlet;
use crate::quota::Quotas;
use crate::rules::Rules;
use crate::synthetic::SyntheticAddresses;
use crate::target::Target;
use crate::upstream::Upstream;
use crate::workers::Workers;

/// How long a client may take to send a request's headers.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client may take to send the body prefix a body constraint needs.
pub(crate) const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a streamed request body may go without data before the request
/// is abandoned (see `body::IdleLimit`).
pub(crate) const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client may take to send its first bytes / finish the TLS handshake.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head accepted (HTTP/1.1 buffer and HTTP/2 header list).
pub(crate) const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Concurrent HTTP/2 streams per client connection.
pub(crate) const MAX_H2_STREAMS: u32 = 256;

/// Facts about one accepted client connection, fixed for its lifetime.
#[derive(Debug)]
pub(crate) struct ConnInfo {
    pub id: ConnId,
    /// The exec that opened it, when the sink can tell.
    pub exec: Option<airlock_record::ExecId>,
    pub client: SocketAddr,
    pub front: FrontDoor,
    /// `Https` when TLS was intercepted.
    pub scheme: Scheme,
    /// The destination every request must name; None on the explicit proxy's
    /// plain-HTTP front door, where each absolute-form request names its own.
    pub bound: Option<Target>,
    /// Set when the policy refused the whole connection: every request gets it.
    pub refusal: Option<crate::refusal::Refusal>,
}

pub(crate) struct Engine {
    pub rules: Arc<ArcSwap<Rules>>,
    pub ca: Arc<CertificateAuthority>,
    pub upstream: Upstream,
    /// Where events go; set failed once the sink failed, and from then on nothing is forwarded.
    pub events: Arc<Outlet>,
    pub quotas: Quotas,
    /// Each MCP server's last tool list, and calls awaiting their answer.
    pub mcp_lists: crate::mcp::ToolLists,
    pub ids: IdGenerator,
    pub synthetic: SyntheticAddresses,
    /// Bytes of each body kept for the record.
    pub capture_cap: usize,
    /// Make each decision durable before forwarding (`--audit-sync`).
    pub audit_sync: bool,
    /// Served to intercepted clients that sent SNI (shares session resumption).
    pub tls_by_sni: Arc<ServerConfig>,
    /// Operator counters, fed from every event (see `/metrics`).
    pub metrics: Arc<Metrics>,
    /// The threads accepted connections are served on.
    pub workers: Arc<Workers>,
    /// Requests `[[ask]]` rules hold for a person's decision.
    pub approvals: Arc<Approvals>,
}

/// What [`Engine::new`] is built from; the rest of the engine's state
/// (quotas, ids, synthetic addresses, metrics) starts empty.
pub(crate) struct EngineParts {
    pub rules: Arc<ArcSwap<Rules>>,
    pub ca: Arc<CertificateAuthority>,
    pub upstream: Upstream,
    pub events: Arc<dyn EventSink>,
    /// Bytes of each body kept for the record.
    pub capture_cap: usize,
    /// Make each decision durable before forwarding (`--audit-sync`).
    pub audit_sync: bool,
    pub workers: Arc<Workers>,
    pub approvals: Arc<Approvals>,
}

impl Engine {
    pub(crate) fn new(parts: EngineParts) -> Self {
        let EngineParts {
            rules,
            ca,
            upstream,
            events,
            capture_cap,
            audit_sync,
            workers,
            approvals,
        } = parts;
        let tls_by_sni = Arc::new(server_config(Arc::new(MintBySni(ca.clone()))));
        Self {
            rules,
            ca,
            upstream,
            events: Outlet::new(events),
            quotas: Quotas::default(),
            mcp_lists: Default::default(),
            ids: IdGenerator::default(),
            synthetic: SyntheticAddresses::default(),
            capture_cap,
            audit_sync,
            tls_by_sni,
            metrics: Arc::default(),
            workers,
            approvals,
        }
    }

    pub(crate) fn next_conn_id(&self) -> ConnId {
        ConnId(self.ids.next())
    }

    /// Record an event that gates an action: the action goes ahead only if this succeeds.
    pub(crate) async fn record(&self, event: Event) -> Result<(), SinkError> {
        if self.events.failed() {
            return Err(SinkError("an earlier audit write failed".into()));
        }
        self.metrics.observe(&event);
        if self.audit_sync {
            self.events.emit_durably(event).await
        } else {
            self.events.emit(event)
        }
    }

    /// Record an event about something already done; a failure stops all further forwarding.
    pub(crate) fn record_lossy(&self, event: Event) {
        self.metrics.observe(&event);
        // A failure is remembered by the outlet.
        let _ = self.events.emit(event);
    }

    /// True once the audit sink has failed (the binary stops the session).
    pub(crate) fn audit_failed(&self) -> bool {
        self.events.failed()
    }

    /// A TLS configuration that always serves the leaf for `host` (clients without SNI).
    pub(crate) fn tls_for_host(
        &self,
        host: &Host,
    ) -> Result<Arc<ServerConfig>, crate::ca::CaError> {
        let leaf = self.ca.leaf_for(host)?;
        Ok(Arc::new(server_config(Arc::new(FixedLeaf(leaf)))))
    }
}

fn server_config(resolver: Arc<dyn ResolvesServerCert>) -> ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_no_client_auth().with_cert_resolver(resolver))
        // The ring provider supports the safe defaults; this cannot fail.
        .unwrap_or_else(|_| unreachable!("ring supports TLS 1.2 and 1.3"));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

/// Mints (or reuses) the leaf for the SNI the client sent. The connection
/// layer has already checked that the SNI names the connection's target.
#[derive(Debug)]
struct MintBySni(Arc<CertificateAuthority>);

impl ResolvesServerCert for MintBySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let host = Host::parse(hello.server_name()?).ok()?;
        match self.0.leaf_for(&host) {
            Ok(leaf) => Some(leaf),
            Err(e) => {
                tracing::error!("{e}");
                None
            }
        }
    }
}

#[derive(Debug)]
struct FixedLeaf(Arc<CertifiedKey>);

impl ResolvesServerCert for FixedLeaf {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}
