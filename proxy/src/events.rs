//! The one interface through which the proxy reports what it decided and saw.
//!
//! Every DNS query, connection, request and response becomes an [`Event`]
//! handed to an [`EventSink`]. The binary plugs in the auditor (or a JSON-lines
//! sink); the proxy never knows which. Secrets never reach this interface:
//! header values carrying an injected credential are already `[secret:NAME]`.

use std::future::Future;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Identifies one accepted client connection for the lifetime of the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct ConnId(pub u64);

/// Identifies one HTTP exchange; a request and its response share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct RequestId(pub u64);

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

/// The outcome the proxy applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny,
    /// Allowed because the policy's default is `report`; deny would have blocked it.
    Report,
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BodyCapture {
    /// Total bytes that crossed, which may exceed `captured.len()`.
    pub bytes: u64,
    /// The first bytes, up to the proxy's capture cap.
    #[serde(with = "lossy_bytes")]
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

/// JSON-lines sinks show captured bodies as (lossy) UTF-8 text; consumers that
/// need the exact bytes, like the auditor, read `BodyCapture::captured` itself.
mod lossy_bytes {
    use serde::Serializer;
    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&String::from_utf8_lossy(bytes))
    }
}

/// One thing the proxy decided or observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    Dns {
        ts: TimestampUs,
        client: SocketAddr,
        name: String,
        qtype: String,
        verdict: Verdict,
        answers: Vec<IpAddr>,
        reason: Option<String>,
    },
    Connection {
        ts: TimestampUs,
        conn: ConnId,
        front: FrontDoor,
        client: SocketAddr,
        /// `host:port` the connection was for (a name when known, else the address).
        target: String,
        /// The address the client dialled, in transparent mode.
        original_dst: Option<SocketAddr>,
        handling: Handling,
        verdict: Verdict,
        rule: Option<String>,
        reason: Option<String>,
    },
    ConnectionClosed {
        ts: TimestampUs,
        conn: ConnId,
        bytes_up: u64,
        bytes_down: u64,
        duration_us: u64,
        error: Option<String>,
    },
    Request {
        ts: TimestampUs,
        conn: ConnId,
        request: RequestId,
        method: String,
        url: String,
        http_version: String,
        headers: Vec<(String, String)>,
        verdict: Verdict,
        rule: Option<String>,
        reason: Option<String>,
        /// Names of credentials injected into this request.
        credentials: Vec<String>,
        /// The status Airlock answered with itself (refusals); None when forwarded.
        refused_status: Option<u16>,
        /// For a refusal that a new rule would lift: that rule, as the 403
        /// shows it (TOML). None when forwarded, or when adding a rule would
        /// not help (a `[[deny]]` rule matched, a body constraint failed).
        #[serde(skip_serializing_if = "Option::is_none")]
        rule_to_add: Option<String>,
        /// For a refusal: the body the client sent, read for the record only
        /// (never forwarded), up to the capture cap and scrubbed of every
        /// form of every credential's secret. `bytes` is the declared
        /// Content-Length when there was one, else what was read. None when
        /// forwarded: the response's record carries that body.
        #[serde(skip_serializing_if = "Option::is_none")]
        request_body: Option<BodyCapture>,
    },
    Response {
        ts: TimestampUs,
        conn: ConnId,
        request: RequestId,
        status: u16,
        http_version: String,
        headers: Vec<(String, String)>,
        request_body: BodyCapture,
        response_body: BodyCapture,
        /// From the request reaching the proxy to the response head arriving.
        time_to_headers_us: u64,
        /// From the request reaching the proxy to the end of the response body.
        total_us: u64,
        error: Option<String>,
    },
    /// One WebSocket message relayed on an upgraded exchange. Recorded for
    /// the first messages of each direction; payloads up to the capture cap
    /// per direction (what the client got, i.e. after scrubbing).
    #[serde(rename = "websocket_message")]
    WebSocketMessage {
        ts: TimestampUs,
        conn: ConnId,
        request: RequestId,
        direction: WsDirection,
        opcode: WsOpcode,
        /// Frames the message arrived in (1 unless fragmented).
        fragments: u32,
        payload: BodyCapture,
    },
    /// The end of an upgraded exchange: always the last event about it.
    #[serde(rename = "websocket_end")]
    WebSocketEnd {
        ts: TimestampUs,
        conn: ConnId,
        request: RequestId,
        closed_by: WsPeer,
        /// The status code of the first close frame (RFC 6455 §7.4), if any.
        close_code: Option<u16>,
        close_reason: Option<String>,
        to_upstream: WsTotals,
        to_client: WsTotals,
        duration_us: u64,
        /// Why the connection ended other than by a closing handshake, e.g.
        /// "the client stopped speaking WebSocket: unmasked frame (RFC 6455 §5.1)".
        error: Option<String>,
    },
    /// An `[[ask]]` rule held a request for a person's decision. Recorded
    /// before anyone is asked (and fails closed like a request's record).
    #[serde(rename = "approval_requested")]
    ApprovalRequested {
        ts: TimestampUs,
        conn: ConnId,
        request: RequestId,
        approval: String,
        method: String,
        url: String,
        headers: Vec<(String, String)>,
        body_bytes: u64,
        body_sha256: String,
        rule: String,
        reason: Option<String>,
        timeout_ms: u64,
        approvers: Vec<String>,
    },
    /// The end of a held request's wait.
    #[serde(rename = "approval_decided")]
    ApprovalDecided {
        ts: TimestampUs,
        conn: ConnId,
        request: RequestId,
        approval: String,
        /// "approved", "denied", "expired" or "abandoned".
        outcome: String,
        /// "once" or "session" when approved.
        scope: Option<String>,
        /// Who decided; None when nobody did.
        by: Option<String>,
        note: Option<String>,
        waited_ms: u64,
        body_sha256: String,
        method: String,
        url: String,
    },
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
