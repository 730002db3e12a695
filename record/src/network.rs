//! What crossed the network: DNS queries, TCP connections and HTTP
//! exchanges (with an upgraded exchange's WebSocket messages).

use serde::{Deserialize, Serialize};

use crate::codec::{b64, opt_b64};
use crate::{ConnectionId, ExchangeId, ExecId, RuleRef, Verdict};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DnsQuery {
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    pub name: String,
    pub qtype: String,
    #[serde(default)]
    pub answer: Vec<String>,
    pub decision: Verdict,
    #[serde(default)]
    pub rule: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpConnection {
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    /// Links the record made when the connection was decided to the one
    /// made when it closed (with byte counts); readers show the latest.
    #[serde(default)]
    pub connection: Option<ConnectionId>,
    /// Destination address as "ip:port".
    pub dst: String,
    #[serde(default)]
    pub host: Option<String>,
    pub port: u16,
    pub decision: Verdict,
    #[serde(default)]
    pub rule: Option<RuleRef>,
    /// Why a refused connection was refused. Left out when absent, so
    /// records written before the field existed verify unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub bytes_up: u64,
    #[serde(default)]
    pub bytes_down: u64,
    #[serde(default)]
    pub duration_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpExchange {
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    /// Links the records of one exchange: the proxy records the decision
    /// before forwarding (so nothing goes out unrecorded, even if airlock
    /// dies mid-request) and the completed exchange when the response
    /// ends. Readers show the latest record of each exchange.
    #[serde(default)]
    pub exchange: Option<ExchangeId>,
    pub method: String,
    pub url: String,
    pub http_version: String,
    #[serde(default)]
    pub request_headers: Vec<(String, String)>,
    #[serde(default, with = "opt_b64")]
    pub request_body: Option<Vec<u8>>,
    #[serde(default)]
    pub request_body_truncated: bool,
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub response_headers: Vec<(String, String)>,
    #[serde(default, with = "opt_b64")]
    pub response_body: Option<Vec<u8>>,
    #[serde(default)]
    pub response_body_truncated: bool,
    #[serde(default)]
    pub bytes_up: u64,
    #[serde(default)]
    pub bytes_down: u64,
    /// When the request started (µs since the epoch); defaults to the
    /// event's own timestamp.
    #[serde(default)]
    pub started_us: Option<i64>,
    /// Milliseconds from request start to response headers.
    #[serde(default)]
    pub ms_to_headers: Option<f64>,
    /// Milliseconds from request start to the end of the response.
    #[serde(default)]
    pub ms_total: Option<f64>,
    /// "allow" | "deny" | "report".
    pub decision: Verdict,
    /// The policy rule that decided, e.g. "policy.toml:12".
    #[serde(default)]
    pub rule: Option<RuleRef>,
    #[serde(default)]
    pub reason: Option<String>,
    /// An upgraded (101) exchange's WebSocket messages and how it ended;
    /// set on the record made when the relay ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub websocket: Option<Box<WebSocketRecord>>,
}

/// What crossed an upgraded WebSocket exchange, and how it ended.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WebSocketRecord {
    /// The first messages of each direction, payloads up to the capture cap.
    #[serde(default)]
    pub messages: Vec<WebSocketMessage>,
    /// "client" | "upstream" | "airlock" (a peer broke the protocol).
    pub closed_by: String,
    #[serde(default)]
    pub close_code: Option<u16>,
    #[serde(default)]
    pub close_reason: Option<String>,
    #[serde(default)]
    pub messages_to_upstream: u64,
    #[serde(default)]
    pub bytes_to_upstream: u64,
    #[serde(default)]
    pub messages_to_client: u64,
    #[serde(default)]
    pub bytes_to_client: u64,
    #[serde(default)]
    pub ms_total: Option<f64>,
    /// Why it ended other than by a closing handshake.
    #[serde(default)]
    pub error: Option<String>,
}

/// One WebSocket message (RFC 6455), as forwarded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebSocketMessage {
    /// Microseconds since the Unix epoch.
    pub ts_us: i64,
    /// "to_upstream" | "to_client".
    pub direction: String,
    /// "text" | "binary" | "close" | "ping" | "pong" | "continuation".
    pub opcode: String,
    #[serde(default)]
    pub fragments: u32,
    /// Payload length as forwarded.
    pub bytes: u64,
    #[serde(with = "b64")]
    pub payload: Vec<u8>,
    #[serde(default)]
    pub truncated: bool,
}

impl WebSocketMessage {
    /// The opcode's number (RFC 6455 §5.2), as HAR's `_webSocketMessages` has it.
    pub fn opcode_number(&self) -> u8 {
        match self.opcode.as_str() {
            "text" => 1,
            "binary" => 2,
            "close" => 8,
            "ping" => 9,
            "pong" => 10,
            _ => 0,
        }
    }
}

impl HttpExchange {
    /// An exchange as decided, before anything crossed: what was asked and
    /// what the policy said; the rest is filled in as it ends.
    pub fn decided(method: String, url: String, http_version: String, decision: Verdict) -> Self {
        Self {
            exec_id: None,
            exchange: None,
            method,
            url,
            http_version,
            request_headers: Vec::new(),
            request_body: None,
            request_body_truncated: false,
            status: None,
            response_headers: Vec::new(),
            response_body: None,
            response_body_truncated: false,
            bytes_up: 0,
            bytes_down: 0,
            started_us: None,
            ms_to_headers: None,
            ms_total: None,
            decision,
            rule: None,
            reason: None,
            websocket: None,
        }
    }
}
