//! Opening upstream TCP connections, optionally with a socket mark.
//!
//! In sidecar mode the proxy shares its network namespace with the app, whose
//! outbound traffic nftables redirects back to the proxy. The proxy's own
//! connections must not be redirected, and the rules tell them apart by the
//! packet mark set with `SO_MARK` (see socket(7)): setting it needs
//! CAP_NET_ADMIN, which the app does not have, so the app cannot forge it —
//! not even after changing its uid to the proxy's.
//!
//! hyper-util's `HttpConnector` has no hook for socket options, hence this
//! small connector that every upstream path (pooled HTTP clients and raw
//! tunnels) goes through.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use airlock_policy::Host;
use hyper_util::rt::TokioIo;
use nix::sys::socket::{setsockopt, sockopt};
use tokio::net::{TcpSocket, TcpStream};

use super::resolve::{ResolveError, UpstreamResolver};

/// How long one connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why no upstream connection could be made; one line naming the cause.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Kept as the source (not transparent) so `explain` finds it in the chain.
    #[error("{0}")]
    Resolve(#[from] ResolveError),
    #[error("connecting to {addr}: {source}")]
    Io {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("connecting to {0}: timed out")]
    TimedOut(SocketAddr),
    #[error("{0}: no addresses to connect to")]
    NoAddresses(String),
    #[error("invalid upstream URI {0:?}: it names no host")]
    NoHost(String),
    #[error(
        "cannot set socket mark {mark:#x} on the upstream socket: {source}; the sidecar needs CAP_NET_ADMIN"
    )]
    Mark {
        mark: u32,
        #[source]
        source: nix::Error,
    },
}

/// A fresh socket for `addr`, marked when `mark` is set.
fn socket_for(addr: SocketAddr, mark: Option<u32>) -> Result<TcpSocket, ConnectError> {
    let io = |source| ConnectError::Io { addr, source };
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(io)?;
    if let Some(mark) = mark {
        setsockopt(&socket, sockopt::Mark, &mark)
            .map_err(|source| ConnectError::Mark { mark, source })?;
    }
    socket.set_nodelay(true).map_err(io)?;
    Ok(socket)
}

/// Connect to the first of `ips` that answers on `port`.
pub async fn connect_any(
    ips: &[IpAddr],
    port: u16,
    mark: Option<u32>,
    what: &str,
) -> Result<TcpStream, ConnectError> {
    let mut last = ConnectError::NoAddresses(what.to_owned());
    for ip in ips {
        let addr = SocketAddr::new(*ip, port);
        let socket = socket_for(addr, mark)?;
        match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(source)) => last = ConnectError::Io { addr, source },
            Err(_) => last = ConnectError::TimedOut(addr),
        }
    }
    Err(last)
}

/// Resolves with [`UpstreamResolver`] (pins, the public-address rule) and
/// connects with [`connect_any`]; the TCP layer under the pooled HTTP clients.
#[derive(Clone, Debug)]
pub struct MarkedConnector {
    pub resolver: UpstreamResolver,
    pub mark: Option<u32>,
}

impl tower_service::Service<http::Uri> for MarkedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let name = uri
                .host()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
                .ok_or_else(|| ConnectError::NoHost(uri.to_string()))?;
            let host = Host::parse(name).map_err(|_| ResolveError::InvalidHost(name.to_owned()))?;
            let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
                Some("http") => 80,
                _ => 443,
            });
            let ips = this.resolver.resolve(&host).await?;
            let stream = connect_any(&ips, port, this.mark, name).await?;
            Ok(TokioIo::new(stream))
        })
    }
}
