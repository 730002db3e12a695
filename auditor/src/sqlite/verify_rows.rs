//! One session's rows read back for verify ([`SessionRows`]), through the
//! readers' connection.

use rusqlite::{Connection, OptionalExtension, Row, Rows, Statement};

use super::db;
use super::search::has_table;
use crate::search::Terms;
use crate::{AuditError, CheckpointRow, EventRow, IndexRow, SessionRow, SessionRows};

const EVENTS_SQL: &str = "SELECT seq, ts_us, kind, exec_id, payload, hash FROM events WHERE sid = ?1 ORDER BY seq, rowid";

const INDEX_SQL: &str = "SELECT seq, ts_us, kind, host, method, verdict, url, path, command
     FROM event_terms WHERE sid = ?1 ORDER BY seq, rowid";

/// The columns [`session_row`] reads, in its order.
pub(super) const SESSION_COLUMNS: &str =
    "started_us, info_json, public_key, key_fingerprint, ended_us, end_json, final_seq";

pub(super) fn session_row(r: &Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        started_us: r.get(0)?,
        info_json: r.get(1)?,
        public_key: r.get(2)?,
        stored_fp: r.get(3)?,
        ended_us: r.get(4)?,
        end_json: r.get(5)?,
        final_seq: r.get(6)?,
    })
}

/// Reads `seq, hash, is_final, signature`.
pub(super) fn checkpoint_row(r: &Row<'_>) -> rusqlite::Result<CheckpointRow> {
    Ok(CheckpointRow {
        seq: seq(r, 0)?,
        hash: r.get(1)?,
        is_final: r.get(2)?,
        signature: r.get(3)?,
    })
}

/// Reads `seq, ts_us, kind, exec_id, payload, hash`.
pub(super) fn event_row(r: &Row<'_>) -> rusqlite::Result<EventRow> {
    Ok(EventRow {
        seq: seq(r, 0)?,
        ts_us: r.get(1)?,
        kind: r.get(2)?,
        exec_id: r.get(3)?,
        payload: r.get(4)?,
        stored: r.get(5)?,
    })
}

/// Reads `seq, ts_us, kind, host, method, verdict, url, path, command`.
pub(super) fn index_row(r: &Row<'_>) -> rusqlite::Result<IndexRow> {
    Ok(IndexRow {
        seq: seq(r, 0)?,
        ts_us: r.get(1)?,
        kind: r.get(2)?,
        terms: Terms {
            host: r.get(3)?,
            method: r.get(4)?,
            verdict: r.get(5)?,
            url: r.get(6)?,
            path: r.get(7)?,
            command: r.get(8)?,
        },
    })
}

/// A seq as stored; a negative one (only a tampered row has one) reads as 0,
/// which verify reports as out of order.
fn seq(r: &Row<'_>, i: usize) -> rusqlite::Result<u64> {
    Ok(u64::try_from(r.get::<_, i64>(i)?).unwrap_or(0))
}

/// A statement that is stepped only once it is first read from.
enum Cursor<'s, 'c> {
    Prepared(&'s mut Statement<'c>),
    Stepping(Rows<'s>),
    Failed,
}

impl<'s> Cursor<'s, '_> {
    fn next(&mut self, sid: i64, context: &'static str) -> Result<Option<&Row<'s>>, AuditError> {
        if let Self::Prepared(_) = self {
            let Self::Prepared(stmt) = std::mem::replace(self, Self::Failed) else {
                unreachable!("checked above");
            };
            *self = Self::Stepping(stmt.query([sid]).map_err(db(context))?);
        }
        match self {
            Self::Stepping(rows) => rows.next().map_err(db(context)),
            _ => Ok(None),
        }
    }
}

/// One session's rows, read as verify asks for them.
pub(crate) struct SqliteRows<'s, 'c> {
    conn: &'c Connection,
    sid: i64,
    events: Cursor<'s, 'c>,
    index: Cursor<'s, 'c>,
}

impl SqliteRows<'_, '_> {
    /// Hands `read` the rows of the session whose row is `sid`.
    pub(crate) fn read(
        conn: &Connection,
        sid: i64,
        read: &mut dyn FnMut(&mut dyn SessionRows) -> Result<(), AuditError>,
    ) -> Result<(), AuditError> {
        let mut events = conn
            .prepare(EVENTS_SQL)
            .map_err(db("verifying the session"))?;
        let mut index = conn
            .prepare(INDEX_SQL)
            .map_err(db("verifying the search index"))?;
        // Each statement reads the database as of its first step: the
        // events first, then (when the first event is checked) the index,
        // so it sees every row the events it is compared with were
        // committed with.
        let mut rows = SqliteRows {
            conn,
            sid,
            events: Cursor::Prepared(&mut events),
            index: Cursor::Prepared(&mut index),
        };
        read(&mut rows)
    }
}

impl SessionRows for SqliteRows<'_, '_> {
    fn session(&mut self) -> Result<SessionRow, AuditError> {
        self.conn
            .query_row(
                &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE sid = ?1"),
                [self.sid],
                session_row,
            )
            .map_err(db("verifying the session"))
    }

    fn checkpoints(&mut self) -> Result<Vec<CheckpointRow>, AuditError> {
        let db = || db("verifying the session");
        let mut stmt = self
            .conn
            .prepare(
                "SELECT seq, hash, is_final, signature FROM checkpoints WHERE sid = ?1 ORDER BY seq, rowid",
            )
            .map_err(db())?;
        let rows = stmt.query_map([self.sid], checkpoint_row).map_err(db())?;
        rows.collect::<Result<_, _>>().map_err(db())
    }

    fn indexed(&mut self) -> Result<bool, AuditError> {
        let conn = self.conn;
        if !has_table(conn, "search_indexed")? || !has_table(conn, "event_terms")? {
            return Ok(false);
        }
        conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM search_indexed WHERE sid = ?1)",
            [self.sid],
            |r| r.get(0),
        )
        .map_err(db("verifying the search index"))
    }

    fn next_event(&mut self) -> Result<Option<EventRow>, AuditError> {
        let Some(r) = self.events.next(self.sid, "verifying the session")? else {
            return Ok(None);
        };
        event_row(r).map(Some).map_err(db("verifying"))
    }

    fn next_index_row(&mut self) -> Result<Option<IndexRow>, AuditError> {
        let Some(r) = self.index.next(self.sid, "verifying the search index")? else {
            return Ok(None);
        };
        index_row(r)
            .map(Some)
            .map_err(db("verifying the search index"))
    }

    fn content(&mut self, sha256: &str) -> Result<Option<Vec<u8>>, AuditError> {
        self.conn
            .query_row(
                "SELECT data FROM contents WHERE sha256 = ?1",
                [sha256],
                |r| r.get(0),
            )
            .optional()
            .map_err(db("verifying file content"))
    }
}
