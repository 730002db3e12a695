//! Everything on the far side of the proxy: resolving names, the public-address
//! rule, verified TLS, pooled HTTP/1.1 and HTTP/2 connections, raw tunnels.

pub mod address;
pub mod connect;
pub(crate) mod marked_runtime;
pub mod resolve;

use std::sync::Arc;
use std::time::Duration;

use airlock_policy::Host;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::CertificateDer;
use tokio::net::TcpStream;

use crate::body::ProxyBody;
pub use connect::{ConnectError, MarkedConnector};
pub use resolve::{PinnedHost, PinnedHostError, ResolveError, UpstreamResolver};

const POOL_IDLE: Duration = Duration::from_secs(60);
/// HTTP/2 flow-control windows towards upstream servers.
pub const H2_STREAM_WINDOW: u32 = 8 << 20;
pub const H2_CONNECTION_WINDOW: u32 = 16 << 20;

pub type HttpClient = Client<HttpsConnector<MarkedConnector>, ProxyBody>;

/// Clients and resolver for upstream traffic.
#[derive(Clone)]
pub struct Upstream {
    pub resolver: UpstreamResolver,
    /// One pair of clients (so one connection pool) per connection worker,
    /// and the first for any other thread: see [`Upstream::client`].
    clients: Arc<[Clients]>,
    /// `SO_MARK` for every upstream socket (sidecar mode), see [`connect`].
    pub mark: Option<u32>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("resolver", &self.resolver)
            .field("clients", &self.clients.len())
            .field("mark", &self.mark)
            .finish()
    }
}

struct Clients {
    /// Negotiates HTTP/2 or HTTP/1.1 by ALPN.
    any: HttpClient,
    /// HTTP/1.1 only, for protocol upgrades (WebSocket).
    h1: HttpClient,
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamSetupError {
    #[error("--upstream-ca certificate rejected: {0}")]
    BadRoot(String),
}

impl Upstream {
    pub fn new(
        resolver: UpstreamResolver,
        extra_roots: &[CertificateDer<'static>],
        mark: Option<u32>,
        pools: usize,
    ) -> Result<Self, UpstreamSetupError> {
        let tls = verified_tls(extra_roots).map_err(UpstreamSetupError::BadRoot)?;
        let connector = MarkedConnector {
            resolver: resolver.clone(),
            mark,
        };
        let clients = (0..pools.max(1))
            .map(|_| Clients {
                any: build_client(connector.clone(), tls.clone(), true),
                h1: build_client(connector.clone(), tls.clone(), false),
            })
            .collect();
        Ok(Self {
            resolver,
            clients,
            mark,
        })
    }

    /// The client for a request from this thread: its worker's own, whose
    /// pooled connections are driven by the same thread (no cross-thread
    /// wake-up per request). `upgrade`: HTTP/1.1 only, for protocol upgrades.
    pub fn client(&self, upgrade: bool) -> &HttpClient {
        let pool = crate::workers::current().map_or(0, |worker| worker + 1);
        let clients = &self.clients[pool % self.clients.len()];
        if upgrade { &clients.h1 } else { &clients.any }
    }

    /// Open a raw TCP connection to `host:port` (tunnels and passthrough).
    pub async fn connect_tcp(&self, host: &Host, port: u16) -> Result<TcpStream, ConnectError> {
        let ips = self.resolver.resolve(host).await?;
        connect::connect_any(&ips, port, self.mark, host.as_str()).await
    }
}

/// The TLS every client of the proxy's own uses (upstreams, the approval
/// webhook): verified against the webpki roots plus `extra_roots`
/// (`--upstream-ca`), never "accept anything". Err: why a root was refused.
pub(crate) fn verified_tls(
    extra_roots: &[CertificateDer<'static>],
) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for root in extra_roots {
        roots.add(root.clone()).map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn build_client(http: MarkedConnector, tls: rustls::ClientConfig, h2: bool) -> HttpClient {
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = if h2 {
        builder.enable_all_versions().wrap_connector(http)
    } else {
        builder.enable_http1().wrap_connector(http)
    };
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE)
        // Fixed large windows: adaptive (BDP) sizing starts at 64 KiB and grows
        // slowly when round trips are microseconds, which caps bulk downloads.
        .http2_initial_stream_window_size(H2_STREAM_WINDOW)
        .http2_initial_connection_window_size(H2_CONNECTION_WINDOW)
        .build(https)
}

/// Explain an upstream failure in one line, naming the cause a user can act on.
pub fn explain(err: &(dyn std::error::Error + 'static)) -> (String, Option<ResolveError>) {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    let mut last = err.to_string();
    while let Some(e) = cause {
        if let Some(r) = e.downcast_ref::<ResolveError>() {
            return (r.to_string(), Some(r.clone()));
        }
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return (format!("upstream TLS failed: {tls}"), None);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            // rustls errors arrive wrapped in io::Error by tokio-rustls.
            if let Some(inner) = io.get_ref()
                && let Some(tls) = inner.downcast_ref::<rustls::Error>()
            {
                return (format!("upstream TLS failed: {tls}"), None);
            }
            last = format!("upstream connection failed: {io}");
        }
        cause = e.source();
    }
    (last, None)
}
