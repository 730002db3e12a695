//! The standard test upstream: a real HTTPS (or plain HTTP) server with the
//! endpoints the tests need, which remembers every request that reached it.

mod git;
mod package_index;
mod routes;
mod websocket;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hyper::Request;
use hyper::body::Incoming;
use rustls::ServerConfig;
use tokio::sync::Notify;

use crate::server::{TestServer, serve_http};

/// A real HTTPS (or plain HTTP) server with the endpoints the tests need:
/// `/echo` (request as JSON), `/sse` (two events, the second only after
/// `release_sse`), `/ws` (WebSocket echo), `/bytes/N` (N bytes), `/upload`
/// (counts a streamed request body), `/grpc` (a body and trailers), plus
/// what [`Extra`] adds. Torn down when dropped.
#[derive(Debug)]
pub struct Upstream {
    pub addr: SocketAddr,
    pub sse_gate: Arc<Notify>,
    /// Every request that reached this server, in order.
    pub seen: Seen,
    server: TestServer,
}

/// Every request that reached an [`Upstream`].
pub type Seen = Arc<Mutex<Vec<SeenRequest>>>;

/// One request as the upstream saw it.
#[derive(Clone, Debug)]
pub struct SeenRequest {
    pub method: String,
    pub path: String,
    /// The path and the query, as in the request line.
    pub target: String,
    pub headers: http::HeaderMap,
}

/// Routes beyond the built-in ones.
#[derive(Debug, Default, Clone)]
pub struct Extra {
    /// path -> (content type, bytes)
    pub files: std::collections::HashMap<String, (String, Vec<u8>)>,
    /// Serve `/git/...` with `git http-backend` from this project root.
    pub git_root: Option<PathBuf>,
    /// Notified when the first bytes of an `/upload` body arrive.
    pub upload_started: Arc<Notify>,
    /// Answer every other request with `upstream saw TARGET\n` (its path and
    /// query) instead of the built-in routes: plain text that any client
    /// (git, pip, node) takes as it is, naming what arrived.
    pub say_target: bool,
}

impl Upstream {
    pub async fn start(tls: Option<ServerConfig>) -> Self {
        Self::start_with(tls, Extra::default()).await
    }

    pub async fn start_with(tls: Option<ServerConfig>, extra: Extra) -> Self {
        let extra = Arc::new(extra);
        let sse_gate = Arc::new(Notify::new());
        let seen: Seen = Arc::default();
        let handler = {
            let (gate, log) = (sse_gate.clone(), seen.clone());
            move |req: Request<Incoming>| {
                log.lock().unwrap().push(SeenRequest {
                    method: req.method().to_string(),
                    path: req.uri().path().to_owned(),
                    target: req
                        .uri()
                        .path_and_query()
                        .map(|p| p.to_string())
                        .unwrap_or_default(),
                    headers: req.headers().clone(),
                });
                routes::route(req, gate.clone(), extra.clone())
            }
        };
        let handler = Arc::new(handler);
        let server = match tls {
            Some(config) => {
                TestServer::tls(config, move |tls| {
                    let handler = handler.clone();
                    serve_http(tls, move |req| handler(req))
                })
                .await
            }
            None => {
                TestServer::tcp(move |tcp| {
                    let handler = handler.clone();
                    serve_http(tcp, move |req| handler(req))
                })
                .await
            }
        };
        Self {
            addr: server.addr,
            sse_gate,
            seen,
            server,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// How many requests reached this server.
    pub fn hits(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// How many TCP connections reached this server.
    pub fn connections(&self) -> usize {
        self.server.accepted()
    }

    /// The path and query of every request that reached this server, in order.
    pub fn targets(&self) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.iter().map(|r| r.target.clone()).collect()
    }

    /// The value of `header` on the last request that reached this server.
    pub fn last_header(&self, header: &str) -> Option<String> {
        self.seen.lock().unwrap().last().and_then(|r| {
            r.headers
                .get(header)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        })
    }

    /// Let `/sse` send its second event.
    pub fn release_sse(&self) {
        self.sse_gate.notify_one();
    }
}
