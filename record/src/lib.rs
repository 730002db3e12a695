//! The record's model: what Airlock records, with no I/O.
//!
//! The proxy, the sandbox shim, the auditor and the console all speak these
//! types: ids and values ([`SessionId`], [`ExecId`], [`ExchangeId`],
//! [`Verdict`], [`RuleRef`], [`FileOp`]) and every event as a named struct,
//! wrapped by [`AuditEvent`]. The serialized form of each event is the
//! record's stored form (the hash chain covers it), so it only ever grows by
//! fields that are left out when absent: records written before a field
//! existed read and verify unchanged.
#![forbid(unsafe_code)]

pub mod codec;
mod digest;
pub mod escape;
mod event;
mod events;
mod ids;
mod mcp;
mod os_text;
mod session;
mod values;

pub use digest::{hex, sha256_hex};
pub use event::{AuditEvent, EventKind};
pub use events::{
    ApprovalDecided, ApprovalRequested, DnsQuery, Exec, ExecFile, ExecImage, Exit, FileChange,
    FileIdentity, FileOp, HttpExchange, Note, Output, OutputStream, PolicyInForce, PolicySource,
    Resize, StepEnd, StepStart, TcpConnection, Untraced, WebSocketMessage, WebSocketRecord, Xattr,
};
pub use ids::{BadSessionId, ConnectionId, ExchangeId, ExecId, Seq, SessionId, StepNo};
pub use mcp::{McpCall, McpResult, McpServer, McpTool, McpToolList};
pub use os_text::OsText;
pub use session::{
    DEFAULT_MAX_SESSION_BYTES, Isolation, RecordKey, SessionEnd, SessionInfo, SessionMode,
    SessionSummary, StoredEvent, WritableDir, collapse_exchanges,
};
pub use values::{RuleRef, UnknownVerdict, Verdict};
