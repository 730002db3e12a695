//! Resolving upstream names, by Airlock and never by the sandbox.
//!
//! Order: operator pins (`--resolve HOST:IP`, trusted as given), then the
//! system's hosts file and DNS servers through hickory. Answers that are not
//! public addresses are dropped unless the policy names them explicitly, so a
//! name that resolves to 127.0.0.1 or 169.254.169.254 cannot be used to reach
//! the host's own services.

use std::collections::HashMap;
use std::future::Future;
use std::net::{AddrParseError, IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use airlock_policy::{Host, HostError};
use arc_swap::ArcSwap;
use hickory_resolver::Resolver;
use hickory_resolver::config::{ResolveHosts, ResolverConfig};
use hyper_util::client::legacy::connect::dns::Name;

use super::address::is_public;
use super::marked_runtime::MarkedRuntime;
use crate::rules::Rules;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "{host} resolves to {ip}, a non-public address; pin it with --resolve {host}:{ip} or allow it with a policy rule naming {ip}"
    )]
    NonPublic { host: String, ip: IpAddr },
    #[error("cannot resolve {host}: {detail}")]
    Lookup { host: String, detail: String },
    #[error("invalid upstream host {0:?}")]
    InvalidHost(String),
}

/// An operator's `--resolve HOST:IP` pin (parsed with `str::parse`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PinnedHost {
    pub host: Host,
    pub ip: IpAddr,
}

/// Why a `--resolve` argument is not a [`PinnedHost`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum PinnedHostError {
    #[error("invalid --resolve {0:?}: expected HOST:IP, e.g. api.example.com:127.0.0.1")]
    NoColon(String),
    #[error(
        "invalid --resolve {input:?}: expected HOST:IP, e.g. api.example.com:127.0.0.1: {source}"
    )]
    Host {
        input: String,
        #[source]
        source: HostError,
    },
    #[error("invalid --resolve {input:?}: expected HOST:IP, e.g. api.example.com:127.0.0.1")]
    Ip {
        input: String,
        #[source]
        source: AddrParseError,
    },
}

impl std::str::FromStr for PinnedHost {
    type Err = PinnedHostError;
    /// `HOST:IP`, where IP may be IPv6 in brackets (`h:[::1]`) or bare after the first colon.
    fn from_str(s: &str) -> Result<Self, PinnedHostError> {
        let (host, ip) = s
            .split_once(':')
            .ok_or_else(|| PinnedHostError::NoColon(s.to_owned()))?;
        let ip = ip.trim_start_matches('[').trim_end_matches(']');
        Ok(Self {
            host: Host::parse(host).map_err(|source| PinnedHostError::Host {
                input: s.to_owned(),
                source,
            })?,
            ip: ip.parse().map_err(|source| PinnedHostError::Ip {
                input: s.to_owned(),
                source,
            })?,
        })
    }
}

/// Resolves upstream hosts and enforces the public-address rule.
///
/// Cheap to clone (one shared allocation): every upstream request clones it,
/// because hyper-util's client clones its connector per request, and a
/// hickory resolver by value is a dozen reference counts shared by all
/// connection workers.
#[derive(Clone)]
pub struct UpstreamResolver(Arc<ResolverState>);

impl std::fmt::Debug for UpstreamResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamResolver").finish_non_exhaustive()
    }
}

struct ResolverState {
    pins: HashMap<Host, Vec<IpAddr>>,
    system: Resolver<MarkedRuntime>,
    rules: Arc<ArcSwap<Rules>>,
}

impl UpstreamResolver {
    /// `mark`: `SO_MARK` for the resolver's own sockets (sidecar mode).
    pub fn new(pins: &[PinnedHost], rules: Arc<ArcSwap<Rules>>, mark: Option<u32>) -> Self {
        let mut map: HashMap<Host, Vec<IpAddr>> = HashMap::new();
        for pin in pins {
            map.entry(pin.host.clone()).or_default().push(pin.ip);
        }
        Self(Arc::new(ResolverState {
            pins: map,
            system: system_resolver(mark),
            rules,
        }))
    }

    /// The addresses to connect to for `host`, all of them permitted.
    pub async fn resolve(&self, host: &Host) -> Result<Vec<IpAddr>, ResolveError> {
        if let Some(ips) = self.0.pins.get(host) {
            return Ok(ips.clone());
        }
        if let Some(ip) = host.ip() {
            return self.permit(host, vec![ip]);
        }
        let lookup =
            self.0
                .system
                .lookup_ip(host.as_str())
                .await
                .map_err(|e| ResolveError::Lookup {
                    host: host.to_string(),
                    detail: e.to_string(),
                })?;
        self.permit(host, lookup.iter().collect())
    }

    /// Keep the permitted addresses; if none remain, say which one was refused.
    fn permit(&self, host: &Host, ips: Vec<IpAddr>) -> Result<Vec<IpAddr>, ResolveError> {
        let rules = self.0.rules.load();
        let (ok, refused): (Vec<IpAddr>, Vec<IpAddr>) = ips
            .into_iter()
            .partition(|ip| is_public(*ip) || rules.policy.allows_private_address(*ip));
        match (ok.is_empty(), refused.first()) {
            (false, _) => Ok(ok),
            (true, Some(ip)) => Err(ResolveError::NonPublic {
                host: host.to_string(),
                ip: *ip,
            }),
            (true, None) => Err(ResolveError::Lookup {
                host: host.to_string(),
                detail: "no addresses".into(),
            }),
        }
    }
}

/// The system's resolver (hosts file first), its sockets carrying `mark`.
pub(crate) fn system_resolver(mark: Option<u32>) -> Resolver<MarkedRuntime> {
    let builder = Resolver::builder(MarkedRuntime::new(mark)).unwrap_or_else(|_| {
        // No usable /etc/resolv.conf: the hosts file and pins still work.
        Resolver::builder_with_config(ResolverConfig::default(), MarkedRuntime::new(mark))
    });
    let mut builder = builder;
    let opts = builder.options_mut();
    opts.use_hosts_file = ResolveHosts::Always;
    opts.timeout = Duration::from_secs(3);
    opts.attempts = 2;
    // build() only fails on invalid configuration, which the defaults are not;
    // fall back to an empty configuration rather than abort.
    builder.build().unwrap_or_else(|_| {
        Resolver::builder_with_config(ResolverConfig::default(), MarkedRuntime::new(mark))
            .build()
            .expect("the empty resolver configuration is valid")
    })
}

/// hyper-util's connector asks this for addresses; it never resolves IP literals
/// itself through us, so callers check those with [`UpstreamResolver::resolve`] first.
impl tower_service::Service<Name> for UpstreamResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = ResolveError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ResolveError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ResolveError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let host = Host::parse(name.as_str())
                .map_err(|_| ResolveError::InvalidHost(name.as_str().to_owned()))?;
            let ips = this.resolve(&host).await?;
            Ok(ips
                .into_iter()
                .map(|ip| SocketAddr::new(ip, 0))
                .collect::<Vec<_>>()
                .into_iter())
        })
    }
}
