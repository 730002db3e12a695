//! Opening one HTTPS connection to the origin, either straight to nginx or
//! through an explicit proxy's CONNECT tunnel, and sending GETs on it.
//!
//! Both routes share everything after the TCP/tunnel step (rustls, hyper,
//! request, body draining) so the comparison is like for like.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Either, Empty, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// How the client reaches the origin.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Route {
    /// TCP straight to this address (like curl --connect-to).
    Direct(SocketAddr),
    /// TCP to this explicit proxy, then `CONNECT host:port`.
    ExplicitProxy(SocketAddr),
    /// Resolve the origin's name with the system resolver at every connect, as
    /// an unmodified client does; inside `airlock run` that is airlock's DNS,
    /// and the connection is captured transparently.
    SystemDns,
}

/// The origin as the client names it: TLS SNI, certificate name and Host header.
#[derive(Clone, Debug)]
pub(crate) struct Origin {
    pub host: String,
    pub port: u16,
}

impl Origin {
    fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Everything needed to open connections; cheap to clone across tasks.
#[derive(Clone)]
pub(crate) struct Dialer {
    pub route: Route,
    pub origin: Arc<Origin>,
    /// What `CONNECT` asks for; the origin's authority unless overridden
    /// (a proxy that cannot resolve bench.test is asked for its IP instead).
    pub tunnel_authority: Arc<str>,
    /// `Proxy-Authorization` value sent with `CONNECT` (sandbox-runtime's proxy wants one).
    pub proxy_authorization: Option<Arc<str>>,
    pub tls: TlsConnector,
    pub server_name: ServerName<'static>,
    /// Send this as a POST body instead of a GET (an MCP tool call).
    pub post: Option<Arc<Post>>,
}

/// A POST every request sends: its body and content type.
#[derive(Debug)]
pub(crate) struct Post {
    pub body: Bytes,
    pub content_type: String,
}

impl Dialer {
    pub(crate) fn new(
        route: Route,
        origin: Origin,
        tls: Arc<ClientConfig>,
    ) -> anyhow::Result<Self> {
        let server_name = ServerName::try_from(origin.host.clone())
            .with_context(|| format!("{:?} is not a valid TLS server name", origin.host))?;
        let tunnel_authority = origin.authority().into();
        Ok(Self {
            route,
            tunnel_authority,
            proxy_authorization: None,
            origin: Arc::new(origin),
            tls: TlsConnector::from(tls),
            server_name,
            post: None,
        })
    }

    /// TCP (+ CONNECT) + TLS + HTTP/1.1 handshake; the connection is driven by a spawned task.
    pub(crate) async fn open(&self) -> anyhow::Result<Connection> {
        let tcp = match self.route {
            Route::Direct(addr) => dial(addr).await?,
            Route::ExplicitProxy(proxy) => {
                let mut tcp = dial(proxy).await?;
                connect_tunnel(
                    &mut tcp,
                    &self.tunnel_authority,
                    self.proxy_authorization.as_deref(),
                )
                .await?;
                tcp
            }
            Route::SystemDns => {
                let authority = self.origin.authority();
                let addr = tokio::net::lookup_host(authority.as_str())
                    .await
                    .with_context(|| format!("resolving {authority}"))?
                    .next()
                    .with_context(|| format!("{authority} resolved to no address"))?;
                dial(addr).await?
            }
        };
        let tls = self
            .tls
            .connect(self.server_name.clone(), tcp)
            .await
            .with_context(|| format!("TLS handshake with {}", self.origin.authority()))?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .context("HTTP/1.1 handshake")?;
        tokio::spawn(async move {
            // Errors surface on the request side; a closed connection is normal here.
            let _ = conn.await;
        });
        Ok(Connection {
            sender,
            host: self.origin.authority(),
            closing: false,
            post: self.post.clone(),
        })
    }
}

async fn dial(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    let tcp = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    // Small request/response pairs: do not let Nagle add delay (see tcp(7)).
    tcp.set_nodelay(true).context("setting TCP_NODELAY")?;
    Ok(tcp)
}

/// Sends `CONNECT authority` and reads the proxy's answer up to the blank line.
async fn connect_tunnel(
    tcp: &mut TcpStream,
    authority: &str,
    authorization: Option<&str>,
) -> anyhow::Result<()> {
    let auth = authorization
        .map(|a| format!("Proxy-Authorization: {a}\r\n"))
        .unwrap_or_default();
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{auth}\r\n");
    tcp.write_all(request.as_bytes())
        .await
        .context("sending CONNECT to the proxy")?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    loop {
        let n = tcp
            .read(&mut chunk)
            .await
            .context("reading the proxy's CONNECT response")?;
        if n == 0 {
            bail!("the proxy closed the connection before answering CONNECT {authority}");
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]);
            let status_line = head.lines().next().unwrap_or_default();
            let ok = status_line
                .split_whitespace()
                .nth(1)
                .is_some_and(|code| code == "200");
            if !ok {
                bail!(
                    "proxy refused CONNECT {authority}: {status_line:?} (check the benchmark policy)"
                );
            }
            if end + 4 != buf.len() {
                bail!("proxy sent data after its CONNECT response before the TLS handshake");
            }
            return Ok(());
        }
        if buf.len() > 16 * 1024 {
            bail!("proxy's CONNECT response head is larger than 16 KiB");
        }
    }
}

pub(crate) struct Connection {
    sender: SendRequest<Either<Empty<Bytes>, Full<Bytes>>>,
    host: String,
    closing: bool,
    post: Option<Arc<Post>>,
}

impl Connection {
    /// False once the server closed it or announced `Connection: close`
    /// (nginx does after keepalive_requests); callers then open a new one.
    pub(crate) fn reusable(&self) -> bool {
        !self.closing && !self.sender.is_closed()
    }

    /// GETs `path` (or POSTs the dialer's body to it), drains the answer
    /// and returns its length; anything but 200 is an error.
    pub(crate) async fn get(&mut self, path: &str) -> anyhow::Result<u64> {
        self.sender
            .ready()
            .await
            .context("connection closed before the next request")?;
        let request = match &self.post {
            None => Request::get(path)
                .header(header::HOST, &self.host)
                .body(Either::Left(Empty::<Bytes>::new())),
            Some(post) => Request::post(path)
                .header(header::HOST, &self.host)
                .header(header::CONTENT_TYPE, &post.content_type)
                .header(header::ACCEPT, "application/json, text/event-stream")
                .body(Either::Right(Full::new(post.body.clone()))),
        }
        .context("building the request")?;
        let response = self
            .sender
            .send_request(request)
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = response.status();
        let closing = response
            .headers()
            .get(header::CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        let mut body = response.into_body();
        let mut received = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.with_context(|| format!("reading the body of GET {path}"))?;
            if let Some(data) = frame.data_ref() {
                received += data.len() as u64;
            }
        }
        if closing {
            self.closing = true;
        }
        if status != StatusCode::OK {
            bail!("GET {path} answered {status}, expected 200 (is the policy allowing it?)");
        }
        Ok(received)
    }
}
