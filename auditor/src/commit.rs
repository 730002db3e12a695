//! What one group commit writes: the interface between a session's
//! recorder, which orders, chains and signs, and the store's writer, which
//! only makes it durable. Nothing here knows an engine.

use crate::chain::Hash;
use crate::search::Terms;

/// A session's writes into one store, one commit at a time, from the
/// recorder's writer thread. A store gives one to each session it begins.
pub trait SessionWriter: Send {
    /// Writes everything in `commit`, all or nothing.
    fn commit(&mut self, commit: &Commit<'_>) -> Result<(), CommitError>;
}

/// A commit that failed; the session must stop.
#[derive(Debug, thiserror::Error)]
#[error("cannot write audit events: {0}")]
pub struct CommitError(#[source] pub crate::EngineError);

/// One event as recorded: encoded and numbered, before it is chained.
#[derive(Debug)]
pub struct NewEvent {
    pub seq: u64,
    pub ts_us: i64,
    pub kind: &'static str,
    pub exec_id: Option<String>,
    pub payload: String,
    /// File content to keep, by the SHA-256 of these bytes.
    pub content: Option<(String, Vec<u8>)>,
    /// What search looks this event up by (see `crate::search`).
    pub terms: Vec<Terms>,
}

/// An event with the chain hash that links it to the one before.
#[derive(Debug)]
pub struct ChainedEvent<'a> {
    pub event: &'a NewEvent,
    pub hash: Hash,
}

/// A signed checkpoint over the chain up to `seq`.
#[derive(Debug)]
pub struct NewCheckpoint {
    pub seq: u64,
    pub ts_us: i64,
    pub hash: Hash,
    pub is_final: bool,
    pub signature: [u8; 64],
}

/// The session's end record, written with its final checkpoint.
#[derive(Debug)]
pub struct NewEnd<'a> {
    pub ended_us: i64,
    pub end_json: &'a str,
    pub final_seq: u64,
}

/// Everything one group commit writes, in this order: the events (with
/// their contents and search terms), a checkpoint if one is due, the end
/// record when finishing.
#[derive(Debug)]
pub struct Commit<'a> {
    pub events: &'a [ChainedEvent<'a>],
    pub checkpoint: Option<NewCheckpoint>,
    pub end: Option<NewEnd<'a>>,
    /// Durable against power loss (fsynced) when this returns, not only
    /// against a process crash.
    pub durable: bool,
}
