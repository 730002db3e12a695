//! One session's rows read back for verify ([`SessionRows`]), through the
//! readers' connection.

use rusqlite::{Connection, OptionalExtension, Rows, Statement};

use super::db;
use super::search::has_table;
use crate::search::Terms;
use crate::{AuditError, CheckpointRow, EventRow, IndexRow, SessionRow, SessionRows};

const EVENTS_SQL: &str = "SELECT seq, ts_us, kind, exec_id, payload, hash FROM events WHERE sid = ?1 ORDER BY seq, rowid";

const INDEX_SQL: &str = "SELECT seq, ts_us, kind, host, method, verdict, url, path, command
     FROM event_terms WHERE sid = ?1 ORDER BY seq, rowid";

/// A statement that is stepped only once it is first read from.
enum Cursor<'s, 'c> {
    Prepared(&'s mut Statement<'c>),
    Stepping(Rows<'s>),
    Failed,
}

impl<'s> Cursor<'s, '_> {
    fn next(
        &mut self,
        sid: i64,
        context: &'static str,
    ) -> Result<Option<&rusqlite::Row<'s>>, AuditError> {
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
                "SELECT started_us, info_json, public_key, key_fingerprint, ended_us, end_json, final_seq
                 FROM sessions WHERE sid = ?1",
                [self.sid],
                |r| {
                    Ok(SessionRow {
                        started_us: r.get(0)?,
                        info_json: r.get(1)?,
                        public_key: r.get(2)?,
                        stored_fp: r.get(3)?,
                        ended_us: r.get(4)?,
                        end_json: r.get(5)?,
                        final_seq: r.get(6)?,
                    })
                },
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
        let rows = stmt
            .query_map([self.sid], |r| {
                Ok(CheckpointRow {
                    seq: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                    hash: r.get(1)?,
                    is_final: r.get(2)?,
                    signature: r.get(3)?,
                })
            })
            .map_err(db())?;
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
        let db = || db("verifying");
        Ok(Some(EventRow {
            seq: u64::try_from(r.get::<_, i64>(0).map_err(db())?).unwrap_or(0),
            ts_us: r.get(1).map_err(db())?,
            kind: r.get(2).map_err(db())?,
            exec_id: r.get(3).map_err(db())?,
            payload: r.get(4).map_err(db())?,
            stored: r.get(5).map_err(db())?,
        }))
    }

    fn next_index_row(&mut self) -> Result<Option<IndexRow>, AuditError> {
        let Some(r) = self.index.next(self.sid, "verifying the search index")? else {
            return Ok(None);
        };
        let db = || db("verifying the search index");
        Ok(Some(IndexRow {
            seq: u64::try_from(r.get::<_, i64>(0).map_err(db())?).unwrap_or(0),
            ts_us: r.get(1).map_err(db())?,
            kind: r.get(2).map_err(db())?,
            terms: Terms {
                host: r.get(3).map_err(db())?,
                method: r.get(4).map_err(db())?,
                verdict: r.get(5).map_err(db())?,
                url: r.get(6).map_err(db())?,
                path: r.get(7).map_err(db())?,
                command: r.get(8).map_err(db())?,
            },
        }))
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
