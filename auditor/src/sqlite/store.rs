//! The SQLite audit database: opening it, starting sessions, and reading back.

use std::collections::HashMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ed25519_dalek::{SigningKey, VerifyingKey};
use rusqlite::{Connection, OptionalExtension, params};

use super::verify_rows::SqliteRows;
use super::writer::SqliteWriter;
use super::{db, schema, search};
use crate::keys::{KeyFingerprint, SigningKeySource, obtain_signing_key};
use crate::recorder::NewSession;
use crate::ship::ShipMark;
use crate::{
    AuditError, AuditEvent, EventKind, ExecId, RecordStore, Redactor, SearchQuery, SearchResults,
    Seq, SessionEnd, SessionId, SessionInfo, SessionMode, SessionRecorder, SessionRows,
    SessionSummary, StoredEvent,
};

/// One SQLite audit database. Sessions recorded from it share its
/// [`Redactor`].
pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    key: Option<SigningKey>,
    redactor: Redactor,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens or creates the database (and its directory, mode 0700) for
    /// recording, loading or creating the signing key.
    pub fn open(db: &Path, key: SigningKeySource) -> Result<Self, AuditError> {
        if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.exists()
        {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(AuditError::io(format!(
                    "cannot create audit directory {}",
                    dir.display()
                )))?;
        }
        let signing = obtain_signing_key(&key)?;
        let conn = schema::open_rw(db)?;
        Ok(Self {
            path: db.to_path_buf(),
            conn: Mutex::new(conn),
            key: Some(signing),
            redactor: Redactor::new(),
        })
    }

    /// Opens an existing database for reading and verification only.
    pub fn open_readonly(db: &Path) -> Result<Self, AuditError> {
        if !db.exists() {
            return Err(AuditError::NoDatabase(db.to_path_buf()));
        }
        let conn = schema::open_ro(db)?;
        Ok(Self {
            path: db.to_path_buf(),
            conn: Mutex::new(conn),
            key: None,
            redactor: Redactor::new(),
        })
    }

    /// Opens an existing database to ship it: read, plus the marks that
    /// say how far each session was shipped. Never records, so no key.
    pub fn open_for_shipping(db: &Path) -> Result<Self, AuditError> {
        if !db.exists() {
            return Err(AuditError::NoDatabase(db.to_path_buf()));
        }
        schema::open_ro(db)?;
        Ok(Self {
            path: db.to_path_buf(),
            conn: Mutex::new(schema::open_rw(db)?),
            key: None,
            redactor: Redactor::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Summaries of every session, or of the one whose row is `only`.
    fn summaries(&self, only: Option<i64>) -> Result<Vec<SessionSummary>, AuditError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT s.sid, s.id, s.started_us, s.ended_us, s.end_json, s.info_json, s.key_fingerprint,
                        (SELECT COUNT(*) FROM events e WHERE e.sid = s.sid)
                 FROM sessions s WHERE ?1 IS NULL OR s.sid = ?1 ORDER BY s.started_us, s.sid",
            )
            .map_err(db("listing sessions"))?;
        let rows = stmt
            .query_map([only], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, String>(6)?,
                    r.get::<_, i64>(7)?,
                ))
            })
            .map_err(db("listing sessions"))?;
        let mut steps = conn
            .prepare_cached("SELECT COUNT(*) FROM events WHERE sid = ?1 AND kind = ?2")
            .map_err(db("listing sessions"))?;
        let mut out = Vec::new();
        for row in rows {
            let (sid, id, started_us, ended_us, end_json, info_json, fp, count) =
                row.map_err(db("listing sessions"))?;
            // Unparseable metadata is shown as unknown; verify reports it.
            let info: SessionInfo = serde_json::from_str(&info_json).unwrap_or_default();
            // Counted only for live sessions, so listing others costs nothing more.
            let steps = if info.mode == SessionMode::Session {
                let n: i64 = steps
                    .query_row(params![sid, EventKind::StepStart.as_str()], |r| r.get(0))
                    .map_err(db("listing sessions"))?;
                Some(u64::try_from(n).unwrap_or(0))
            } else {
                None
            };
            out.push(SessionSummary {
                id: SessionId::from_stored(id),
                started_us,
                ended_us,
                end: end_json.and_then(|j| serde_json::from_str::<SessionEnd>(&j).ok()),
                info,
                events: u64::try_from(count).unwrap_or(0),
                steps,
                key_fingerprint: fp,
            });
        }
        Ok(out)
    }

    pub(super) fn sid(&self, id: &SessionId) -> Result<i64, AuditError> {
        self.conn()
            .query_row(
                "SELECT sid FROM sessions WHERE id = ?1",
                [id.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(db("looking up the session"))?
            .ok_or_else(|| AuditError::UnknownSession(id.to_string()))
    }

    fn read_events(
        &self,
        session: &SessionId,
        after: i64,
        kinds: Option<&[EventKind]>,
    ) -> Result<Vec<StoredEvent>, AuditError> {
        let sid = self.sid(session)?;
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, ts_us, kind, exec_id, payload FROM events
                 WHERE sid = ?1 AND seq > ?2 ORDER BY seq, rowid",
            )
            .map_err(db("reading events"))?;
        let rows = stmt
            .query_map([sid, after], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })
            .map_err(db("reading events"))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, ts_us, kind_text, exec_id, payload) = row.map_err(db("reading events"))?;
            let seq = u64::try_from(seq).unwrap_or(0);
            let kind = EventKind::parse(&kind_text).ok_or_else(|| AuditError::Corrupt {
                seq,
                problem: format!("unknown kind {kind_text:?}"),
            })?;
            if let Some(filter) = kinds
                && !filter.contains(&kind)
            {
                continue;
            }
            let event: AuditEvent =
                serde_json::from_str(&payload).map_err(|e| AuditError::Corrupt {
                    seq,
                    problem: e.to_string(),
                })?;
            out.push(StoredEvent {
                seq: Seq(seq),
                ts_us,
                kind,
                exec_id: exec_id.map(ExecId),
                event,
            });
        }
        Ok(out)
    }
}

impl RecordStore for SqliteStore {
    fn public_key(&self) -> Option<VerifyingKey> {
        self.key.as_ref().map(|k| k.verifying_key())
    }

    fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Starts recording a new session.
    fn begin_session(&self, info: SessionInfo) -> Result<SessionRecorder, AuditError> {
        let key = self.key.clone().ok_or(AuditError::ReadOnly)?;
        let new = NewSession::new(&info, key, &self.redactor)?;
        let sid = {
            let conn = self.conn();
            conn.execute(
                "INSERT INTO sessions (id, started_us, info_json, public_key, key_fingerprint)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    new.id.as_str(),
                    new.started_us,
                    new.info_json,
                    &new.public.as_bytes()[..],
                    KeyFingerprint::of(&new.public).0
                ],
            )
            .map_err(db("creating the session record"))?;
            let sid = conn.last_insert_rowid();
            // This recorder writes every event's search terms, so search
            // may look this session up rather than scan it.
            conn.execute(
                "INSERT OR IGNORE INTO search_indexed (sid) VALUES (?1)",
                [sid],
            )
            .map_err(db("creating the session record"))?;
            sid
        };
        let conn = schema::open_rw(&self.path)?;
        new.start(Box::new(SqliteWriter { conn, sid }))
    }

    /// All sessions, oldest first.
    fn sessions(&self) -> Result<Vec<SessionSummary>, AuditError> {
        self.summaries(None)
    }

    /// One session's summary.
    fn session(&self, id: &SessionId) -> Result<SessionSummary, AuditError> {
        let sid = self.sid(id)?;
        self.summaries(Some(sid))?
            .into_iter()
            .next()
            .ok_or_else(|| AuditError::UnknownSession(id.to_string()))
    }

    /// Turns a full id or unique prefix into the session id.
    fn resolve_session(&self, text: &str) -> Result<SessionId, AuditError> {
        let prefix = SessionId::parse(text)?;
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT id FROM sessions WHERE substr(id, 1, length(?1)) = ?1 LIMIT 2")
            .map_err(db("looking up the session"))?;
        let ids: Vec<String> = stmt
            .query_map([prefix.as_str()], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(db("looking up the session"))?;
        match ids.len() {
            0 => Err(AuditError::UnknownSession(text.to_string())),
            1 => Ok(SessionId::from_stored(
                ids.into_iter().next().unwrap_or_default(),
            )),
            _ => {
                let count: i64 = conn
                    .query_row(
                        "SELECT COUNT(*) FROM sessions WHERE substr(id, 1, length(?1)) = ?1",
                        [prefix.as_str()],
                        |r| r.get(0),
                    )
                    .unwrap_or(2);
                Err(AuditError::AmbiguousSession {
                    prefix: text.to_string(),
                    count: usize::try_from(count).unwrap_or(2),
                })
            }
        }
    }

    /// A session's events in seq order, optionally only some kinds.
    fn events(
        &self,
        session: &SessionId,
        kinds: Option<&[EventKind]>,
    ) -> Result<Vec<StoredEvent>, AuditError> {
        self.read_events(session, -1, kinds)
    }

    /// A session's events after `after`, in seq order: what a reader
    /// following a running session has not seen yet.
    fn events_after(
        &self,
        session: &SessionId,
        after: Seq,
    ) -> Result<Vec<StoredEvent>, AuditError> {
        self.read_events(session, i64::try_from(after.0).unwrap_or(i64::MAX), None)
    }

    /// Changes whenever another connection commits to the database
    /// (`PRAGMA data_version`, sqlite.org/pragma.html#pragma_data_version):
    /// what a reader caching results checks before trusting them.
    fn data_version(&self) -> Result<i64, AuditError> {
        self.conn()
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(db("reading the database's version"))
    }

    /// Events of every session (or of `query.session`, and of
    /// `query.sessions`) matching `query`, oldest first; see
    /// [`crate::search`]. Never writes to the database.
    fn search(&self, query: &SearchQuery) -> Result<SearchResults, AuditError> {
        query.check()?;
        let named = match &query.session {
            Some(text) => Some(self.sid(&self.resolve_session(text)?)?),
            None => None,
        };
        let conn = self.conn();
        let within = search::within(&conn, named, query)?;
        search::run(&conn, query, within.as_deref())
    }

    /// A stored file content blob by the SHA-256 of its stored bytes.
    fn ship_marks(&self) -> Result<HashMap<SessionId, ShipMark>, AuditError> {
        self.marks()
    }

    fn content(&self, sha256: &str) -> Result<Option<Vec<u8>>, AuditError> {
        self.conn()
            .query_row(
                "SELECT data FROM contents WHERE sha256 = ?1",
                [sha256],
                |r| r.get(0),
            )
            .optional()
            .map_err(db("reading file content"))
    }

    fn read_rows(
        &self,
        session: &SessionId,
        read: &mut dyn FnMut(&mut dyn SessionRows) -> Result<(), AuditError>,
    ) -> Result<(), AuditError> {
        let sid = self.sid(session)?;
        let conn = self.conn();
        SqliteRows::read(&conn, sid, read)
    }
}
