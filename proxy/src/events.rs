//! The one interface through which the proxy reports what it decided and saw.
//!
//! Every DNS query, connection, request and response becomes an [`Event`]
//! handed to an [`EventSink`]. The binary plugs in the auditor (or a JSON-lines
//! sink); the proxy never knows which. Secrets never reach this interface:
//! header values carrying an injected credential are already `[secret:NAME]`.

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// One accepted client connection, for the lifetime of the proxy.
pub use airlock_record::ConnectionId as ConnId;
/// One HTTP exchange; its decided and ended events share it.
pub use airlock_record::ExchangeId as RequestId;
pub use airlock_record::Verdict;
use airlock_record::{
    ApprovalDecided, ApprovalRequested, AuditEvent, DnsQuery, ExecId, HttpExchange, McpCall,
    TcpConnection,
};

/// Hands out process-unique ids.
#[derive(Debug, Default)]
pub struct IdGenerator(AtomicU64);

impl IdGenerator {
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Microseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct TimestampUs(pub u64);

impl TimestampUs {
    pub fn now() -> Self {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self(u64::try_from(since.as_micros()).unwrap_or(u64::MAX))
    }
}

/// How the front door received the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FrontDoor {
    Explicit,
    Transparent,
}

/// What the proxy does with an accepted connection's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Handling {
    /// HTTP (plain or TLS-intercepted), decided request by request.
    Inspect,
    /// Opaque TCP tunnel (`protocol = "tcp"`).
    Tunnel,
    /// TLS tunnel checked against its SNI but not intercepted.
    Passthrough,
    /// Refused before any byte went upstream.
    Refused,
}

/// A prefix of a body as it crossed the proxy, for the record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyCapture {
    /// Total bytes that crossed, which may exceed `captured.len()`.
    pub bytes: u64,
    /// The first bytes, up to the proxy's capture cap.
    pub captured: Vec<u8>,
    pub truncated: bool,
}

/// Which way a WebSocket message travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WsDirection {
    /// From the sandboxed client to the upstream server.
    ToUpstream,
    /// From the upstream server to the client (after scrubbing).
    ToClient,
}

impl WsDirection {
    /// The serialized name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToUpstream => "to_upstream",
            Self::ToClient => "to_client",
        }
    }
}

/// A WebSocket message's opcode (RFC 6455 §5.2). A fragmented message is
/// recorded once, under the opcode of its first frame, with its fragment
/// count; `continuation` appears only for a message whose start was not seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WsOpcode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl WsOpcode {
    /// The serialized name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Continuation => "continuation",
            Self::Text => "text",
            Self::Binary => "binary",
            Self::Close => "close",
            Self::Ping => "ping",
            Self::Pong => "pong",
        }
    }

    /// The opcode's number on the wire.
    pub fn code(self) -> u8 {
        match self {
            Self::Continuation => 0x0,
            Self::Text => 0x1,
            Self::Binary => 0x2,
            Self::Close => 0x8,
            Self::Ping => 0x9,
            Self::Pong => 0xA,
        }
    }
}

/// Who ended an upgraded connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WsPeer {
    Client,
    Upstream,
    /// Airlock itself, because a peer stopped speaking WebSocket.
    Airlock,
}

impl WsPeer {
    /// The serialized name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Upstream => "upstream",
            Self::Airlock => "airlock",
        }
    }
}

/// What crossed an upgraded connection in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WsTotals {
    pub messages: u64,
    /// Payload bytes, as forwarded.
    pub bytes: u64,
}

/// One thing the proxy decided or observed: a record of the record's model
/// (`airlock_record`, `exec_id` already attributed through
/// [`EventSink::attribute`]) with what only the proxy knows about it.
///
/// An exchange is one lifecycle: [`Event::Request`] when it is decided
/// (before anything is forwarded; the record that fails closed), then
/// exactly one [`Event::Response`] carrying its whole outcome (the
/// response, or the error that ended it, and for an upgraded exchange the
/// WebSocket relay, once the relay ends). A refusal is decided and ended at
/// once: its [`Event::Request`] carries Airlock's own answer and is its only
/// event. A connection is the same: [`Event::Connection`] when decided,
/// [`Event::ConnectionClosed`] with its byte counts when it ends.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    Dns {
        ts: TimestampUs,
        client: SocketAddr,
        #[serde(flatten)]
        query: Box<DnsQuery>,
    },
    Connection {
        ts: TimestampUs,
        conn: ConnId,
        front: FrontDoor,
        client: SocketAddr,
        /// `host:port` the connection was for (a name when known, else the
        /// address), as a URL's authority spells it.
        target: String,
        handling: Handling,
        #[serde(flatten)]
        connection: Box<TcpConnection>,
    },
    ConnectionClosed {
        ts: TimestampUs,
        conn: ConnId,
        error: Option<String>,
        #[serde(flatten)]
        connection: Box<TcpConnection>,
    },
    Request {
        ts: TimestampUs,
        conn: ConnId,
        request: RequestId,
        /// Names of credentials injected into this request.
        credentials: Vec<String>,
        /// For a refusal that a new rule would lift: that rule, as the 403
        /// shows it (TOML). None when forwarded, or when adding a rule would
        /// not help (a `[[deny]]` rule matched, a body constraint failed).
        #[serde(skip_serializing_if = "Option::is_none")]
        rule_to_add: Option<String>,
        /// As decided. For a refusal, also as ended: `status` is Airlock's
        /// own answer and `request_body` the body the client sent, read for
        /// the record only (never forwarded), up to the capture cap and
        /// scrubbed of every form of every credential's secret.
        #[serde(flatten, serialize_with = "lines::decided")]
        exchange: Box<HttpExchange>,
    },
    Response {
        ts: TimestampUs,
        conn: ConnId,
        request: RequestId,
        /// The whole exchange as it ended (the record's); its JSON line
        /// says only what the `request` line did not.
        #[serde(flatten, serialize_with = "lines::ended")]
        exchange: Box<HttpExchange>,
    },
    /// An `[[ask]]` rule held a request for a person's decision. Recorded
    /// before anyone is asked (and fails closed like a request's record).
    #[serde(rename = "approval_requested")]
    ApprovalRequested {
        ts: TimestampUs,
        conn: ConnId,
        request: RequestId,
        #[serde(flatten)]
        held: Box<ApprovalRequested>,
    },
    /// The end of a held request's wait.
    #[serde(rename = "approval_decided")]
    ApprovalDecided {
        ts: TimestampUs,
        conn: ConnId,
        request: RequestId,
        #[serde(flatten)]
        decided: Box<ApprovalDecided>,
    },
    /// One JSON-RPC message to an MCP server a policy grants with `mcp`:
    /// recorded when decided (before anything is forwarded), and again
    /// with the answer's summary (or a `tools/list` answer in full).
    #[serde(rename = "mcp_call")]
    McpCall {
        ts: TimestampUs,
        conn: ConnId,
        request: RequestId,
        #[serde(flatten)]
        call: Box<McpCall>,
    },
}

impl Event {
    /// A name or a request the policy refused.
    pub fn is_refusal(&self) -> bool {
        match self {
            Self::Dns { query, .. } => query.decision == Verdict::Deny,
            Self::Request { exchange, .. } => exchange.decision == Verdict::Deny,
            _ => false,
        }
    }

    /// What goes into the record: every event is one record.
    pub fn into_record(self) -> AuditEvent {
        match self {
            Self::Dns { query, .. } => AuditEvent::Dns(*query),
            Self::Connection { connection, .. } | Self::ConnectionClosed { connection, .. } => {
                AuditEvent::Tcp(*connection)
            }
            Self::Request { exchange, .. } | Self::Response { exchange, .. } => {
                AuditEvent::Http(*exchange)
            }
            Self::ApprovalRequested { held, .. } => AuditEvent::ApprovalRequested(*held),
            Self::ApprovalDecided { decided, .. } => AuditEvent::ApprovalDecided(*decided),
            Self::McpCall { call, .. } => AuditEvent::McpCall(*call),
        }
    }
}

/// An exchange's JSON lines: each says what is new at its stage, in the
/// record's names, and no more (a line is written for every request, and
/// the record, not the line, keeps the whole exchange together). Readers
/// join a `response` to its `request` by the `request` id.
mod lines {
    use airlock_record::codec::opt_b64;
    use airlock_record::{ExecId, HttpExchange, RuleRef, Verdict, WebSocketRecord};
    use serde::{Serialize, Serializer};

    /// What was asked and decided, and for a refusal, its answer.
    #[derive(Serialize)]
    struct Decided<'a> {
        // The exchange's id is the line's `request`.
        #[serde(skip_serializing_if = "Option::is_none")]
        exec_id: &'a Option<ExecId>,
        method: &'a str,
        url: &'a str,
        http_version: &'a str,
        request_headers: &'a [(String, String)],
        decision: Verdict,
        rule: &'a Option<RuleRef>,
        reason: &'a Option<String>,
        started_us: &'a Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        #[serde(with = "opt_b64", skip_serializing_if = "Option::is_none")]
        request_body: &'a Option<Vec<u8>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        request_body_truncated: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        bytes_up: Option<u64>,
    }

    /// How it ended.
    #[derive(Serialize)]
    struct Ended<'a> {
        status: Option<u16>,
        response_headers: &'a [(String, String)],
        #[serde(with = "opt_b64")]
        request_body: &'a Option<Vec<u8>>,
        request_body_truncated: bool,
        #[serde(with = "opt_b64")]
        response_body: &'a Option<Vec<u8>>,
        response_body_truncated: bool,
        bytes_up: u64,
        bytes_down: u64,
        ms_to_headers: Option<f64>,
        ms_total: Option<f64>,
        reason: &'a Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        websocket: &'a Option<Box<WebSocketRecord>>,
    }

    pub(super) fn decided<S: Serializer>(x: &HttpExchange, s: S) -> Result<S::Ok, S::Error> {
        let refused = x.status.is_some();
        Decided {
            exec_id: &x.exec_id,
            method: &x.method,
            url: &x.url,
            http_version: &x.http_version,
            request_headers: &x.request_headers,
            decision: x.decision,
            rule: &x.rule,
            reason: &x.reason,
            started_us: &x.started_us,
            status: x.status,
            request_body: if refused { &x.request_body } else { &None },
            request_body_truncated: refused.then_some(x.request_body_truncated),
            bytes_up: refused.then_some(x.bytes_up),
        }
        .serialize(s)
    }

    pub(super) fn ended<S: Serializer>(x: &HttpExchange, s: S) -> Result<S::Ok, S::Error> {
        Ended {
            status: x.status,
            response_headers: &x.response_headers,
            request_body: &x.request_body,
            request_body_truncated: x.request_body_truncated,
            response_body: &x.response_body,
            response_body_truncated: x.response_body_truncated,
            bytes_up: x.bytes_up,
            bytes_down: x.bytes_down,
            ms_to_headers: x.ms_to_headers,
            ms_total: x.ms_total,
            reason: &x.reason,
            websocket: &x.websocket,
        }
        .serialize(s)
    }
}

/// Why a sink refused an event. The proxy fails closed on it: the request that
/// produced the event is refused, never carried out unrecorded.
#[derive(Debug, thiserror::Error)]
#[error("audit sink failed: {0}")]
pub struct SinkError(pub String);

pub type SyncFuture<'a> = Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + 'a>>;

/// Where events go. `emit` must not block for long (queue, don't fsync);
/// `sync` resolves once everything emitted so far is durable.
pub trait EventSink: Send + Sync + 'static {
    fn emit(&self, event: Event) -> Result<(), SinkError>;

    /// Whether this sink does anything with `event`: one that does not is
    /// not handed it (and not handed a copy of it).
    fn wants(&self, _event: &Event) -> bool {
        true
    }

    /// The exec that owns the sandbox-side socket `client` (a UDP one when
    /// `udp`), if this sink can tell. The proxy asks once, when a
    /// connection or query arrives, and puts the answer in every record
    /// about it.
    fn attribute(&self, _client: SocketAddr, _udp: bool) -> Option<ExecId> {
        None
    }

    /// Emit several events in order: all of them, even after one fails.
    fn emit_all(&self, events: Vec<Event>) -> Result<(), SinkError> {
        let mut result = Ok(());
        for event in events {
            if let Err(e) = self.emit(event) {
                result = Err(e);
            }
        }
        result
    }

    fn sync(&self) -> SyncFuture<'_> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Resolves once everything emitted so far is confirmed beyond this
    /// process (`--audit-ship-required`: in the central store), after
    /// [`EventSink::sync`]. A failure refuses the decision that waits, and
    /// only it: unlike a failed sync, it does not stop later traffic, which
    /// goes ahead once confirmations come back.
    fn confirm(&self) -> SyncFuture<'_> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// Discards events (for benchmarks and tests that do not look at them).
#[derive(Debug)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: Event) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Writes each event as one JSON object per line.
pub struct JsonLinesSink<W: Write + Send> {
    out: Mutex<W>,
}

impl<W: Write + Send> std::fmt::Debug for JsonLinesSink<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonLinesSink").finish_non_exhaustive()
    }
}

impl<W: Write + Send> JsonLinesSink<W> {
    pub fn new(out: W) -> Self {
        Self {
            out: Mutex::new(out),
        }
    }
}

impl<W: Write + Send + 'static> EventSink for JsonLinesSink<W> {
    fn emit(&self, event: Event) -> Result<(), SinkError> {
        self.emit_all(vec![event])
    }

    /// One write for the lot.
    fn emit_all(&self, events: Vec<Event>) -> Result<(), SinkError> {
        let mut result = Ok(());
        let mut lines = Vec::with_capacity(512 * events.len());
        for event in &events {
            let start = lines.len();
            match serde_json::to_writer(&mut lines, event) {
                Ok(()) => lines.push(b'\n'),
                Err(e) => {
                    lines.truncate(start);
                    result = Err(SinkError(e.to_string()));
                }
            }
        }
        let mut out = self
            .out
            .lock()
            .map_err(|_| SinkError("event writer poisoned".into()))?;
        // Flushed each time so that `tail -f` and log shippers see events as they happen.
        out.write_all(&lines)
            .and_then(|()| out.flush())
            .map_err(|e| SinkError(format!("writing event: {e}")))?;
        result
    }
}

/// Collects events in memory (for tests of the proxy as a library).
#[derive(Debug, Default)]
pub struct MemorySink(pub Mutex<Vec<Event>>);

impl EventSink for MemorySink {
    fn emit(&self, event: Event) -> Result<(), SinkError> {
        self.0
            .lock()
            .map_err(|_| SinkError("memory sink poisoned".into()))?
            .push(event);
        Ok(())
    }
}

/// A decided GET of `url`, for tests of what reads events.
#[cfg(test)]
pub(crate) fn test_exchange(url: &str, decision: Verdict) -> HttpExchange {
    HttpExchange {
        exchange: Some(RequestId(1)),
        ..HttpExchange::decided("GET".into(), url.into(), "HTTP/1.1".into(), decision)
    }
}
