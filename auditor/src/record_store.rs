//! The record store interface: what every reader and the recorder ask of
//! a store, whatever engine keeps it. SQLite ([`crate::sqlite`]) is the
//! first implementation; every SQL statement lives there. Readers (the
//! timeline, files, export, search, verify, the console, policy replay and
//! suggest) take a `&dyn RecordStore` and never see the engine.
//!
//! What a store must keep is the hashed record itself: each session's row,
//! its events in seq order with their chain hashes, its signed checkpoints,
//! the file contents by hash, and the search terms beside the events.
//! Verification is not the store's to judge: it reads those rows back
//! untrusted ([`SessionRows`]) and checks them the same way for any store
//! ([`crate::verify`]).

mod rows;

use crate::StepStart;
use std::collections::HashMap;
use std::fmt;

use ed25519_dalek::VerifyingKey;

pub use rows::{CheckpointRow, EventRow, IndexRow, SessionRow};

use crate::keys::TrustAnchor;
use crate::ship::ShipMark;
use crate::verify::{VerifyReport, verify_session};
use crate::{
    AuditError, AuditEvent, EventKind, Redactor, SearchQuery, SearchResults, Seq, SessionId,
    SessionInfo, SessionMode, SessionRecorder, SessionSummary, StoredEvent,
};

/// One audit record store: sessions are recorded into it and read back
/// from it. Object safe, so that a reader takes `&dyn RecordStore` and a
/// second engine is one more implementation, not a branch in every reader.
pub trait RecordStore: Send + Sync + fmt::Debug {
    /// The public half of the signing key (None when opened read-only).
    fn public_key(&self) -> Option<VerifyingKey>;

    /// Secrets registered here are scrubbed from every session begun later.
    fn redactor(&self) -> &Redactor;

    /// Starts recording a new session.
    fn begin_session(&self, info: SessionInfo) -> Result<SessionRecorder, AuditError>;

    /// All sessions, oldest first.
    fn sessions(&self) -> Result<Vec<SessionSummary>, AuditError>;

    /// One session's summary.
    fn session(&self, id: &SessionId) -> Result<SessionSummary, AuditError>;

    /// Turns a full id or unique prefix into the session id.
    fn resolve_session(&self, text: &str) -> Result<SessionId, AuditError>;

    /// A session's events in seq order, optionally only some kinds.
    fn events(
        &self,
        session: &SessionId,
        kinds: Option<&[EventKind]>,
    ) -> Result<Vec<StoredEvent>, AuditError>;

    /// A session's events after `after`, in seq order: what a reader
    /// following a running session has not seen yet.
    fn events_after(&self, session: &SessionId, after: Seq)
    -> Result<Vec<StoredEvent>, AuditError>;

    /// What a live session is listed by ([`crate::timeline::session_title`]):
    /// none needed for another mode or a named session, else its first
    /// step's command, once it has one.
    fn first_step_command(
        &self,
        summary: &SessionSummary,
    ) -> Result<Option<Vec<String>>, AuditError> {
        if summary.info.mode != SessionMode::Session
            || crate::timeline::session_name(&summary.info.command).is_some()
        {
            return Ok(None);
        }
        let steps = self.events(&summary.id, Some(&[EventKind::StepStart]))?;
        Ok(steps.into_iter().find_map(|e| match e.event {
            AuditEvent::StepStart(StepStart { command, .. }) => Some(command),
            _ => None,
        }))
    }

    /// How far each session was shipped to a central store, as a node's
    /// local record notes it; none in a store that is not shipped from.
    fn ship_marks(&self) -> Result<HashMap<SessionId, ShipMark>, AuditError> {
        Ok(HashMap::new())
    }

    /// A stored file content blob by the SHA-256 of its stored bytes.
    fn content(&self, sha256: &str) -> Result<Option<Vec<u8>>, AuditError>;

    /// Events of every session (or of `query.session`, and only of the
    /// sessions in `query.sessions` when that is given: none when it is
    /// empty) matching `query`, oldest first; see [`crate::search`]. Never
    /// writes to the store.
    fn search(&self, query: &SearchQuery) -> Result<SearchResults, AuditError>;

    /// Changes whenever anyone else commits to the store: what a reader
    /// caching results checks before trusting them.
    fn data_version(&self) -> Result<i64, AuditError>;

    /// Hands `read` the session's rows as stored, for verification. The
    /// rows are read as `read` asks for them, from one consistent view.
    fn read_rows(
        &self,
        session: &SessionId,
        read: &mut dyn FnMut(&mut dyn SessionRows) -> Result<(), AuditError>,
    ) -> Result<(), AuditError>;

    /// Recomputes the session's hash chain and checks every checkpoint
    /// signature; see [`VerifyReport`]. The same check for every store.
    fn verify(&self, session: &SessionId, trust: &TrustAnchor) -> Result<VerifyReport, AuditError> {
        let mut report = None;
        self.read_rows(session, &mut |rows| {
            report = Some(verify_session(rows, session, trust)?);
            Ok(())
        })?;
        report.ok_or_else(|| AuditError::UnknownSession(session.to_string()))
    }
}

/// One session's rows as stored, nothing in them trusted yet: what verify
/// reads. Events and index rows come one at a time in seq order (a session
/// can be larger than memory), the index rows read no earlier than the
/// events they are compared with.
pub trait SessionRows {
    /// The session's own row.
    fn session(&mut self) -> Result<SessionRow, AuditError>;

    /// Every checkpoint, in seq order.
    fn checkpoints(&mut self) -> Result<Vec<CheckpointRow>, AuditError>;

    /// Whether the session's search terms were written as it was recorded
    /// (those recorded by versions before search were not, and are not
    /// checked).
    fn indexed(&mut self) -> Result<bool, AuditError>;

    /// The next event row, in seq order.
    fn next_event(&mut self) -> Result<Option<EventRow>, AuditError>;

    /// The next search index row, in seq order.
    fn next_index_row(&mut self) -> Result<Option<IndexRow>, AuditError>;

    /// A file content blob by the hash it is stored under.
    fn content(&mut self, sha256: &str) -> Result<Option<Vec<u8>>, AuditError>;
}
