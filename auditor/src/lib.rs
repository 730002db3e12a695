//! Airlock's audit store.
//!
//! Everything a sandboxed session did (execs, file writes, DNS queries, TCP
//! connections, HTTP exchanges, terminal output) is recorded into one SQLite
//! database that lives outside the sandbox. Each session's events form a
//! SHA-256 hash chain; periodic checkpoints over that chain are signed with an
//! Ed25519 key that is *not* stored in the database, so an incident responder
//! can prove afterwards that nothing was modified, deleted, inserted,
//! reordered or truncated.
//!
//! The store is reached through one interface, [`RecordStore`], whose first
//! implementation is SQLite ([`sqlite`], where all SQL lives); [`open_store`]
//! opens one from where it is. Writing goes through [`SessionRecorder`] (a
//! cheap, cloneable handle feeding one writer thread that group-commits
//! through the store's [`commit::SessionWriter`]). Reading goes through
//! [`RecordStore`] plus the renderers in [`timeline`], [`export`] and
//! [`restore`]; [`RecordStore::search`] looks events up across sessions.
#![forbid(unsafe_code)]
// Not in the workspace's lints yet: the shim's pty::RawMode has no Debug.
#![warn(missing_debug_implementations)]

mod budget;
mod chain;
pub mod commit;
pub mod diff;
mod error;
pub mod export;
pub mod humanize;
mod ids;
mod keys;
pub mod postgres;
mod record_store;
mod recorder;
mod redact;
pub mod restore;
pub mod search;
pub mod ship;
pub mod sqlite;
mod store;
pub mod timeline;
pub mod undo;
mod verify;

pub use error::{AuditError, EngineError};
// The record's model, re-exported: readers of the record need only this crate.
pub use airlock_record::{
    ApprovalDecided, ApprovalRequested, AuditEvent, ConnectionId, DEFAULT_MAX_SESSION_BYTES,
    DnsQuery, EventKind, ExchangeId, Exec, ExecFile, ExecId, ExecImage, Exit, FileChange,
    FileIdentity, FileOp, HttpExchange, Isolation, McpCall, McpResult, McpServer, McpTool,
    McpToolList, Note, OsText, Output, OutputStream, PolicyInForce, PolicySource, RecordKey,
    Resize, RuleRef, Seq, SessionEnd, SessionId, SessionInfo, SessionMode, SessionSummary, StepEnd,
    StepNo, StepStart, StoredEvent, TcpConnection, Untraced, Verdict, WebSocketMessage,
    WebSocketRecord, WritableDir, Xattr, collapse_exchanges, escape, sha256_hex,
};
pub use keys::{
    KeyFingerprint, NodeKey, SigningKeySource, TrustAnchor, load_public_key, parse_public_key,
    public_key_text,
};
pub use record_store::{CheckpointRow, EventRow, IndexRow, RecordStore, SessionRow, SessionRows};
pub use recorder::SessionRecorder;
pub use redact::Redactor;
pub use search::{SearchHit, SearchQuery, SearchResults};
pub use store::{Access, AuditStore, open_store};
pub use verify::{KeyTrust, ShippedUpTo, VerifyOutcome, VerifyReport};

/// Re-exported so callers can pass a trusted public key without depending on
/// ed25519-dalek themselves.
pub use ed25519_dalek::VerifyingKey;
