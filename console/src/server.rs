//! Binding the console's listener and serving connections until shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use airlock_auditor::{RecordStore, TrustAnchor};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::auth::Token;
use crate::verification::Cache;
use crate::{ConsoleError, router};

/// Given a refused request's method and URL, the `[[allow]]` rule that would
/// let it through. The binary supplies it (it knows the policy crate); the
/// console only shows what it returns.
pub type RuleAdvisor = Box<dyn Fn(&str, &str) -> Option<String> + Send + Sync>;

/// What `airlock audit serve` starts the console with.
pub struct ConsoleConfig {
    /// Opened read-only: the console never writes. Any store: the console
    /// reads only through [`RecordStore`].
    pub store: Box<dyn RecordStore>,
    /// The key a session must be signed by for a green badge.
    pub trust: TrustAnchor,
    pub listen: SocketAddr,
    pub rule_to_add: RuleAdvisor,
}

impl std::fmt::Debug for ConsoleConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleConfig")
            .field("store", &self.store)
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

/// Everything a request handler reads; shared by every connection.
pub(crate) struct State {
    pub(crate) store: Box<dyn RecordStore>,
    pub(crate) trust: TrustAnchor,
    pub(crate) token: Token,
    pub(crate) port: u16,
    pub(crate) rule_to_add: RuleAdvisor,
    pub(crate) verification: Cache,
}

/// A bound console, ready to serve.
#[derive(Debug)]
pub struct Console {
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<State>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("store", &self.store)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// Binds the listener and makes the access token.
    pub async fn bind(config: ConsoleConfig) -> Result<Self, ConsoleError> {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|cause| ConsoleError::Listen {
                    addr: config.listen,
                    cause,
                })?;
        let addr = listener
            .local_addr()
            .map_err(|cause| ConsoleError::Listen {
                addr: config.listen,
                cause,
            })?;
        let state = State {
            store: config.store,
            trust: config.trust,
            token: Token::random()?,
            port: addr.port(),
            rule_to_add: config.rule_to_add,
            verification: Cache::default(),
        };
        Ok(Self {
            listener,
            addr,
            state: Arc::new(state),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to open: the address plus the access token.
    pub fn url(&self) -> String {
        let ip = self.addr.ip();
        let host = if ip.is_unspecified() {
            "127.0.0.1".to_owned()
        } else if ip.is_ipv6() {
            format!("[{ip}]")
        } else {
            ip.to_string()
        };
        format!(
            "http://{host}:{}/?token={}",
            self.addr.port(),
            self.state.token.as_str()
        )
    }

    /// Serves until `shutdown` completes. Open connections (a live view's
    /// event stream) end with the process.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ConsoleError> {
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                () = &mut shutdown => return Ok(()),
                accepted = self.listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: keep serving the
                    // connections there are.
                    tracing::warn!(error = %e, "console: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let state = Arc::clone(&self.state);
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let state = Arc::clone(&state);
                    async move { Ok::<_, Infallible>(router::handle(state, req).await) }
                });
                if let Err(e) = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!(%peer, error = %e, "console: connection ended");
                }
            });
        }
    }
}
