//! A captured connection, once its destination is known: the single place
//! where the connection-level decision is made and carried out — refuse,
//! tunnel, pass TLS through after checking its SNI, or intercept and serve
//! HTTP request by request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use airlock_policy::{ConnectionDecision, DefaultAction, Host, Scheme};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;

use airlock_record::{ExecId, RuleRef, TcpConnection};

use crate::client_hello::{MAX_CLIENT_HELLO, Peek, peek};
use crate::engine::{
    ConnInfo, Engine, HANDSHAKE_TIMEOUT, HEADER_READ_TIMEOUT, MAX_H2_STREAMS, MAX_HEADER_BYTES,
};
use crate::events::{ConnId, Event, FrontDoor, Handling, TimestampUs, Verdict};
use crate::exchange;
use crate::metered::{Meter, Metered};
use crate::refusal::Refusal;
use crate::replay::Replay;
use crate::target::Target;
use crate::upstream::ConnectError;

/// Why a captured connection ended early (recorded as its close reason).
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("{0}")]
    Connect(#[source] ConnectError),
    #[error("writing to upstream: {0}")]
    WriteUpstream(#[source] std::io::Error),
    #[error("{0}")]
    Relay(#[source] std::io::Error),
    #[error("passthrough rule, but the client did not start TLS")]
    PassthroughNotTls,
    #[error("bad ClientHello: {0}")]
    BadClientHello(&'static str),
    #[error("connection closed during the ClientHello")]
    ClosedDuringClientHello,
    #[error("connection closed before a request")]
    ClosedBeforeRequest,
    #[error("{0}")]
    Certificate(#[source] crate::ca::CaError),
    #[error("TLS handshake timed out")]
    HandshakeTimedOut,
    #[error("TLS handshake with client failed: {0}")]
    Handshake(#[source] std::io::Error),
    #[error("refused")]
    Refused,
    #[error(
        "not HTTP or TLS; to tunnel another protocol add a rule with host = \"{host}\", port = {port}, protocol = \"tcp\""
    )]
    NotHttpOrTls { host: Host, port: u16 },
    #[error("{0}")]
    Http(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    ReadClient(#[source] std::io::Error),
    #[error("client sent nothing in time")]
    ClientSilent,
    #[error(transparent)]
    Sni(#[from] SniError),
}

/// Why a ClientHello's SNI is refused.
#[derive(Debug, thiserror::Error)]
enum SniError {
    #[error("no SNI; passthrough to {0} needs it")]
    Missing(Host),
    #[error("SNI {sni:?} does not match the connection's host {host} (domain fronting refused)")]
    Mismatch { sni: String, host: Host },
}

/// Where a captured connection came from.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub id: ConnId,
    pub front: FrontDoor,
    pub client: SocketAddr,
    /// The address the client dialled (transparent mode).
    pub original_dst: Option<SocketAddr>,
    /// The exec that opened it, when the sink can tell (see
    /// `EventSink::attribute`): every record about it names that exec.
    pub exec: Option<ExecId>,
}

impl Origin {
    /// A connection from `client`, attributed once, as it arrives.
    pub(crate) fn new(
        engine: &Engine,
        front: FrontDoor,
        client: SocketAddr,
        original_dst: Option<SocketAddr>,
    ) -> Self {
        Self {
            id: engine.next_conn_id(),
            front,
            client,
            original_dst,
            exec: engine.events.attribute(client, false),
        }
    }
}

/// What to do with a connection: how to handle it, and the refusal every
/// request on it gets when the policy refused the connection as a whole.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The connection's record as decided; its end completes it.
    pub record: Box<TcpConnection>,
    pub handling: Handling,
    pub refusal: Option<Refusal>,
}

/// The connection-level decision for `target`, recorded before anything else happens.
pub(crate) async fn decide(engine: &Engine, origin: &Origin, target: &Target) -> Plan {
    let decision = engine
        .rules
        .load()
        .policy
        .connection(&target.host, target.port);
    let (handling, rule, refusal) = match decision {
        ConnectionDecision::Deny(denial) => (
            Handling::Refused,
            denial.rule.clone(),
            Some(Refusal::Policy(denial)),
        ),
        ConnectionDecision::Tunnel { rule } => (Handling::Tunnel, Some(rule), None),
        ConnectionDecision::Passthrough { rule } => (Handling::Passthrough, Some(rule), None),
        ConnectionDecision::Inspect => (Handling::Inspect, None, None),
    };
    // Inspected connections are decided per request; their record says "allow" here
    // only in the sense that the connection is accepted for inspection.
    let verdict = if refusal.is_some() {
        Verdict::Deny
    } else {
        Verdict::Allow
    };
    let record = Box::new(TcpConnection {
        exec_id: origin.exec.clone(),
        connection: Some(origin.id),
        dst: origin
            .original_dst
            .map_or_else(|| target.to_string(), |d| d.to_string()),
        host: Some(target.host.to_string()),
        port: target.port,
        decision: verdict,
        rule: rule.as_ref().map(|r| RuleRef::new(r.to_string())),
        reason: refusal.as_ref().map(Refusal::reason),
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: None,
    });
    let recorded = engine
        .record(Event::Connection {
            ts: TimestampUs::now(),
            conn: origin.id,
            front: origin.front,
            client: origin.client,
            target: target.to_string(),
            handling,
            connection: record.clone(),
        })
        .await;
    match recorded {
        Err(e) => Plan {
            record,
            handling: Handling::Refused,
            refusal: Some(Refusal::AuditUnavailable(e.to_string())),
        },
        Ok(()) => Plan {
            record,
            handling,
            refusal,
        },
    }
}

/// Carry out a decision on the client's stream. A refused connection is still
/// read: if it speaks HTTP (or TLS, which is intercepted) every request gets a
/// 403 that explains the refusal; anything else is closed. Nothing goes upstream.
pub(crate) async fn serve<S>(engine: Arc<Engine>, origin: Origin, target: Target, plan: Plan, io: S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let started = Instant::now();
    let meter = Meter::default();
    let io = Metered::new(io, meter.clone());
    let result = match plan.handling {
        Handling::Tunnel => tunnel(&engine, &target, Vec::new(), io).await,
        Handling::Passthrough => passthrough(&engine, &target, io).await,
        Handling::Inspect | Handling::Refused => {
            inspect(engine.clone(), &origin, &target, plan.refusal, io).await
        }
    };
    if let Err(e) = &result {
        tracing::debug!(conn = origin.id.0, target = %target, "connection ended: {e}");
    }
    let (up, down) = meter.totals();
    let mut record = plan.record;
    record.bytes_up = up;
    record.bytes_down = down;
    record.duration_ms = Some(started.elapsed().as_secs_f64() * 1000.0);
    engine.record_lossy(Event::ConnectionClosed {
        ts: TimestampUs::now(),
        conn: origin.id,
        error: result.err().map(|e| e.to_string()),
        connection: record,
    });
}

/// Opaque bytes both ways, after replaying what was already read.
async fn tunnel<S>(
    engine: &Engine,
    target: &Target,
    prefix: Vec<u8>,
    mut io: S,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut upstream = engine
        .upstream
        .connect_tcp(&target.host, target.port)
        .await
        .map_err(ConnectionError::Connect)?;
    if !prefix.is_empty() {
        upstream
            .write_all(&prefix)
            .await
            .map_err(ConnectionError::WriteUpstream)?;
    }
    tokio::io::copy_bidirectional(&mut io, &mut upstream)
        .await
        .map(|_| ())
        .map_err(ConnectionError::Relay)
}

/// A TLS tunnel whose SNI must name the rule's host.
async fn passthrough<S>(engine: &Engine, target: &Target, mut io: S) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (prefix, first) = read_first_bytes(&mut io).await?;
    let hello = match first {
        Peek::Hello(h) => h,
        Peek::NotTls => return Err(ConnectionError::PassthroughNotTls),
        Peek::Invalid(why) => return Err(ConnectionError::BadClientHello(why)),
        Peek::NeedMore => return Err(ConnectionError::ClosedDuringClientHello),
    };
    check_sni(hello.sni.as_deref(), target, true)?;
    tunnel(engine, target, prefix, io).await
}

/// Intercept: TLS (terminated with a minted certificate) or plain HTTP.
async fn inspect<S>(
    engine: Arc<Engine>,
    origin: &Origin,
    target: &Target,
    refusal: Option<Refusal>,
    mut io: S,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (prefix, first) = read_first_bytes(&mut io).await?;
    let conn = |scheme| {
        Arc::new(ConnInfo {
            id: origin.id,
            exec: origin.exec.clone(),
            client: origin.client,
            front: origin.front,
            scheme,
            bound: Some(target.clone()),
            refusal: refusal.clone(),
        })
    };
    match first {
        Peek::Hello(hello) => {
            check_sni(hello.sni.as_deref(), target, false)?;
            let config = if hello.sni.is_some() {
                engine.tls_by_sni.clone()
            } else {
                engine
                    .tls_for_host(&target.host)
                    .map_err(ConnectionError::Certificate)?
            };
            let accept = TlsAcceptor::from(config).accept(Replay::new(prefix, io));
            let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, accept)
                .await
                .map_err(|_| ConnectionError::HandshakeTimedOut)?
                .map_err(ConnectionError::Handshake)?;
            serve_http(engine, conn(Scheme::Https), tls).await
        }
        Peek::NotTls if looks_like_http(&prefix) => {
            serve_http(engine, conn(Scheme::Http), Replay::new(prefix, io)).await
        }
        Peek::NotTls if refusal.is_some() => Err(ConnectionError::Refused),
        // With default allow/report the policy lets everything through, and
        // that includes protocols Airlock cannot read.
        Peek::NotTls if engine.rules.load().policy.default_action() != DefaultAction::Deny => {
            tunnel(&engine, target, prefix, io).await
        }
        Peek::NotTls => Err(ConnectionError::NotHttpOrTls {
            host: target.host.clone(),
            port: target.port,
        }),
        Peek::Invalid(why) => Err(ConnectionError::BadClientHello(why)),
        Peek::NeedMore => Err(ConnectionError::ClosedBeforeRequest),
    }
}

/// Serve HTTP/1.1 and HTTP/2 on an accepted stream, with bounded heads and timeouts.
async fn serve_http<S>(
    engine: Arc<Engine>,
    conn: Arc<ConnInfo>,
    io: S,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| exchange::handle(engine.clone(), conn.clone(), req));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES)
        .preserve_header_case(false);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .max_concurrent_streams(MAX_H2_STREAMS)
        .initial_stream_window_size(crate::upstream::H2_STREAM_WINDOW)
        .initial_connection_window_size(crate::upstream::H2_CONNECTION_WINDOW)
        .max_pending_accept_reset_streams(Some(64))
        .max_local_error_reset_streams(Some(256))
        .enable_connect_protocol();
    builder
        .serve_connection_with_upgrades(TokioIo::new(io), service)
        .await
        .map_err(ConnectionError::Http)
}

/// Read until the first bytes say what the connection is (bounded in size and time).
async fn read_first_bytes<S: AsyncRead + Unpin>(
    io: &mut S,
) -> Result<(Vec<u8>, Peek), ConnectionError> {
    let mut buf = Vec::with_capacity(2048);
    let read = async {
        loop {
            let mut chunk = [0u8; 4096];
            let n = io
                .read(&mut chunk)
                .await
                .map_err(ConnectionError::ReadClient)?;
            if n == 0 {
                return Ok::<Peek, ConnectionError>(Peek::NeedMore);
            }
            buf.extend_from_slice(&chunk[..n]);
            match peek(&buf) {
                Peek::NeedMore if buf.len() <= MAX_CLIENT_HELLO + 5 * 16 => continue,
                Peek::NeedMore => return Ok(Peek::Invalid("ClientHello too large")),
                other => return Ok(other),
            }
        }
    };
    let first = tokio::time::timeout(HANDSHAKE_TIMEOUT, read)
        .await
        .map_err(|_| ConnectionError::ClientSilent)??;
    Ok((buf, first))
}

/// SNI must name the connection's host; `required` for passthrough, where it is all we see.
fn check_sni(sni: Option<&str>, target: &Target, required: bool) -> Result<(), SniError> {
    match sni {
        None if required => Err(SniError::Missing(target.host.clone())),
        None => Ok(()),
        Some(name) => match Host::parse(name) {
            Ok(h) if h == target.host => Ok(()),
            _ => Err(SniError::Mismatch {
                sni: name.to_owned(),
                host: target.host.clone(),
            }),
        },
    }
}

/// A request line starts with a method token (RFC 9112 §3).
fn looks_like_http(prefix: &[u8]) -> bool {
    let method_len = prefix.iter().take_while(|b| b.is_ascii_uppercase()).count();
    method_len > 0 && prefix.get(method_len) == Some(&b' ')
}
