//! Identifier newtypes: sessions, processes, event sequence numbers, the
//! steps of a live session, and the exchanges and connections that link a
//! decided record to its end.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A session id: 48 bits of milliseconds since the epoch followed by 80
/// random bits, as 32 lowercase hex characters. The time prefix makes ids
/// sort by start time, which keeps `airlock audit sessions` readable and lets
/// users type short unique prefixes (like git).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// A new id from its start time and 80 random bits (the caller draws
    /// them: this crate does no I/O).
    pub fn new(now_ms: u64, random: [u8; 10]) -> Self {
        Self(format!(
            "{:012x}{}",
            now_ms & 0xffff_ffff_ffff,
            crate::hex(&random)
        ))
    }

    /// Accepts a full id or a prefix as typed by a user; only checks the
    /// characters (resolution against the database is the store's `resolve_session`).
    pub fn parse(text: &str) -> Result<Self, BadSessionId> {
        let t = text.trim().to_ascii_lowercase();
        if t.is_empty() || t.len() > 32 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(BadSessionId(text.to_string()));
        }
        Ok(Self(t))
    }

    /// An id as a store hands it back: one it wrote, so not checked again.
    pub fn from_stored(text: String) -> Self {
        Self(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Text typed as a session id that cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid session id {0:?}: expected hexadecimal characters")]
pub struct BadSessionId(pub String);

/// Identifies one exec'd program image inside a session. The producer picks
/// the format (airlock's is the shim's per-sandbox exec sequence number as
/// text, e.g. "7"); the auditor only compares them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExecId(pub String);

impl ExecId {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ExecId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Per-session event sequence number, starting at 1 with no gaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Seq(pub u64);

impl Seq {
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A step of a live session (`airlock session exec`): one command run in
/// the session's sandbox, numbered from 1 in the order the steps began.
/// Serialised as a bare number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StepNo(pub u64);

impl StepNo {
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for StepNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One HTTP exchange, unique in its proxy's lifetime: it links the record
/// made when the exchange was decided to the one made when it ended, and an
/// approval to the exchange it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExchangeId(pub u64);

/// One accepted client connection, unique in its proxy's lifetime: it links
/// the record made when the connection was decided to the one made when it
/// closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConnectionId(pub u64);

impl fmt::Display for ExchangeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
