//! A session: what it was started with, how it ended, and its events as
//! a store hands them back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    AuditEvent, EventKind, ExecId, HttpExchange, McpCall, OsText, Seq, SessionId, TcpConnection,
};

/// How airlock was running; tells a reader which event kinds could be seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SessionMode {
    #[default]
    Run,
    Sidecar,
    Proxy,
    /// A live session (`airlock session start`): one sandbox, many
    /// commands, each a step (`step_start`/`step_end` events).
    Session,
}

/// Which kernel boundary ran the sandboxed commands (`--isolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Linux namespaces and seccomp on the host's kernel; also every
    /// session recorded before the choice existed.
    #[default]
    Namespaces,
    /// gVisor (`runsc`): a user-space kernel between the command and the
    /// host's.
    Gvisor,
}

impl Isolation {
    /// The name `--isolation` takes and the record shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Namespaces => "namespaces",
            Self::Gvisor => "gvisor",
        }
    }

    /// Left out of the record when it is the default, so that records made
    /// before the field existed verify unchanged.
    pub fn is_namespaces(&self) -> bool {
        *self == Self::Namespaces
    }
}

/// Metadata recorded when a session starts. It is bound into the hash chain
/// (the chain's genesis hash covers it), so editing it later is detected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Airlock's own command line: bytes, as it was given (see [`OsText`]).
    pub command: Vec<OsText>,
    pub policy_name: String,
    pub policy_text: String,
    pub limits: serde_json::Value,
    pub airlock_version: String,
    pub host: String,
    pub mode: SessionMode,
    /// What this session can and cannot see, e.g. "exec and file events not
    /// visible" in proxy mode.
    pub capabilities_note: Option<String>,
    /// File contents larger than this are recorded by hash only.
    pub max_file_bytes: u64,
    /// Terminal size for asciicast export (columns, rows).
    pub terminal: Option<(u16, u16)>,
    /// The session's record budget: bytes of content (file versions, HTTP
    /// bodies and WebSocket messages, output) it may keep; past it only
    /// hashes and sizes. `None` in records made before the budget existed
    /// (left out then, so they verify unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_session_bytes: Option<u64>,
    /// The host directories the sandbox could write and kept (the
    /// workspace first, then each `--rw` grant), and where the sandbox saw
    /// them: what `audit files --undo` maps recorded paths back through.
    /// Empty in records made before undo existed (left out then, so they
    /// verify unchanged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable_dirs: Vec<WritableDir>,
    /// Who ran the session, as `--label key=value` said: in a fleet, the
    /// pod, namespace and node the deployment fills in. Searched and
    /// filtered on; bound into the chain like the rest. Empty in records
    /// made before labels existed (left out then, so they verify
    /// unchanged).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The kernel boundary the sandbox ran under. Absent (namespaces) in
    /// records made before the choice existed, and left out for it, so
    /// those verify unchanged.
    #[serde(default, skip_serializing_if = "Isolation::is_namespaces")]
    pub isolation: Isolation,
}

/// A host directory mounted writable in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WritableDir {
    /// Where the sandbox saw it.
    pub sandbox: OsText,
    /// The host directory.
    pub host: OsText,
    /// The session's workspace (`--workspace`), not a `--rw` grant.
    #[serde(default)]
    pub workspace: bool,
}

/// The record budget of a session that does not choose one: fits a laptop.
pub const DEFAULT_MAX_SESSION_BYTES: u64 = 256 << 20;

impl Default for SessionInfo {
    fn default() -> Self {
        Self {
            command: Vec::new(),
            policy_name: String::new(),
            policy_text: String::new(),
            limits: serde_json::Value::Null,
            airlock_version: String::new(),
            host: String::new(),
            mode: SessionMode::Run,
            capabilities_note: None,
            max_file_bytes: 1024 * 1024,
            terminal: None,
            max_session_bytes: Some(DEFAULT_MAX_SESSION_BYTES),
            writable_dirs: Vec::new(),
            labels: BTreeMap::new(),
            isolation: Isolation::Namespaces,
        }
    }
}

impl SessionInfo {
    /// SHA-256 (hex) of the policy text the session ran under: compare it
    /// with a policy file to know whether that is the one that was in force.
    pub fn policy_sha256(&self) -> String {
        crate::sha256_hex(self.policy_text.as_bytes())
    }

    /// The limits that were set, as `name=value` pairs (unset ones left out).
    pub fn limits_summary(&self) -> String {
        match self.limits.as_object() {
            Some(limits) => limits
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
            None => String::new(),
        }
    }
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SessionEnd {
    pub exit_status: Option<i32>,
    pub signal: Option<i32>,
    /// Why airlock stopped it, if it did (e.g. "time limit", "audit store failed").
    pub reason: Option<String>,
}

impl SessionEnd {
    pub fn describe(&self) -> String {
        match (self.exit_status, self.signal) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(sig)) => format!("signal {sig}"),
            (None, None) => self.reason.clone().unwrap_or_else(|| "ended".into()),
        }
    }
}

/// One event as read back from the store.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: Seq,
    /// Microseconds since the Unix epoch, UTC.
    pub ts_us: i64,
    pub kind: EventKind,
    pub exec_id: Option<ExecId>,
    pub event: AuditEvent,
}

/// What identifies the records of one thing recorded more than once (an
/// HTTP exchange, a TCP connection, an MCP message), so that readers keep
/// only its latest record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecordKey {
    Http(u64),
    Tcp(u64),
    /// An MCP message: its exchange, JSON-RPC id, method and tool. The
    /// method and tool are part of the key so that a hostile client
    /// reusing one id for two different calls in one batch cannot make a
    /// reader hide one of them behind the other.
    Mcp(u64, String, String, Option<String>),
}

impl RecordKey {
    /// The key of `event`, or `None` for an event recorded once (and for a
    /// notification, which has no id and no answer).
    pub fn of(event: &AuditEvent) -> Option<Self> {
        match event {
            AuditEvent::Http(HttpExchange {
                exchange: Some(id), ..
            }) => Some(Self::Http(id.0)),
            AuditEvent::Tcp(TcpConnection {
                connection: Some(id),
                ..
            }) => Some(Self::Tcp(id.0)),
            AuditEvent::McpCall(McpCall {
                exchange: Some(id),
                rpc_id: Some(rpc),
                method,
                tool,
                ..
            }) => Some(Self::Mcp(
                id.0,
                rpc.to_string(),
                method.clone(),
                tool.clone(),
            )),
            _ => None,
        }
    }
}

/// The events with each HTTP exchange, TCP connection and MCP message
/// reduced to its latest record (see `AuditEvent::Http::exchange` and
/// [`crate::McpCall`]), in order. Verification uses the raw events.
pub fn collapse_exchanges(events: &[StoredEvent]) -> Vec<StoredEvent> {
    let exchange = |ev: &StoredEvent| RecordKey::of(&ev.event);
    let mut last = std::collections::HashMap::new();
    // An MCP message's first (decided) record: what its answered record
    // may leave out (its arguments), which a reader still shows.
    let mut decided: std::collections::HashMap<RecordKey, &McpCall> =
        std::collections::HashMap::new();
    for (i, ev) in events.iter().enumerate() {
        if let Some(id) = exchange(ev) {
            if let AuditEvent::McpCall(call) = &ev.event {
                decided.entry(id.clone()).or_insert(call);
            }
            last.insert(id, i);
        }
    }
    events
        .iter()
        .enumerate()
        .filter(|(i, ev)| exchange(ev).is_none_or(|id| last.get(&id) == Some(i)))
        .map(|(_, ev)| {
            let key = RecordKey::of(&ev.event);
            let mut ev = ev.clone();
            if let (AuditEvent::McpCall(call), Some(first)) =
                (&mut ev.event, key.and_then(|k| decided.get(&k)))
            {
                call.fill_from_decided(first);
            }
            ev
        })
        .collect()
}

/// One row of `airlock audit sessions`.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    pub id: SessionId,
    pub started_us: i64,
    pub ended_us: Option<i64>,
    pub end: Option<SessionEnd>,
    pub info: SessionInfo,
    pub events: u64,
    /// For a live session (mode `session`), how many steps it began; `None`
    /// for other modes.
    pub steps: Option<u64>,
    pub key_fingerprint: String,
}
