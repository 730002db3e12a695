//! One session's rows read back for verify ([`SessionRows`]), from one
//! REPEATABLE READ transaction: every row verify compares is from the same
//! snapshot, whatever shippers commit meanwhile. Events and index rows are
//! fetched through cursors a page at a time, so a session larger than
//! memory is verified in constant space.

use std::collections::VecDeque;

use super::client::{Client, IsolationLevel, Portal, Queries, Row, Transaction};

use super::db;
use crate::search::Terms;
use crate::{AuditError, CheckpointRow, EventRow, IndexRow, SessionRow, SessionRows};

/// Rows fetched per round trip.
const PAGE: i32 = 2000;

/// A cursor over one query, opened when it is first read from.
struct Cursor {
    sql: &'static str,
    portal: Option<Portal>,
    page: VecDeque<Row>,
    done: bool,
}

impl Cursor {
    fn new(sql: &'static str) -> Self {
        Self {
            sql,
            portal: None,
            page: VecDeque::new(),
            done: false,
        }
    }

    fn next(
        &mut self,
        tx: &mut Transaction<'_>,
        sid: i64,
        context: &'static str,
    ) -> Result<Option<Row>, AuditError> {
        if self.page.is_empty() && !self.done {
            if self.portal.is_none() {
                self.portal = Some(tx.bind(self.sql, &[&sid]).map_err(db(context))?);
            }
            let Some(portal) = &self.portal else {
                unreachable!("bound above");
            };
            let rows = tx.query_portal(portal, PAGE).map_err(db(context))?;
            self.done = rows.len() < PAGE as usize;
            self.page.extend(rows);
        }
        Ok(self.page.pop_front())
    }
}

/// One session's rows, read as verify asks for them.
pub(super) struct PgRows<'t> {
    tx: Transaction<'t>,
    sid: i64,
    events: Cursor,
    index: Cursor,
}

impl PgRows<'_> {
    /// Hands `read` the rows of the session whose row is `sid`.
    pub(super) fn read(
        client: &mut Client,
        sid: i64,
        read: &mut dyn FnMut(&mut dyn SessionRows) -> Result<(), AuditError>,
    ) -> Result<(), AuditError> {
        let tx = client
            .transaction_with(IsolationLevel::RepeatableRead, true)
            .map_err(db("verifying the session"))?;
        let mut rows = PgRows {
            tx,
            sid,
            events: Cursor::new(
                "SELECT seq, ts_us, kind, exec_id, payload, hash FROM events WHERE sid = $1 ORDER BY seq",
            ),
            index: Cursor::new(
                "SELECT seq, ts_us, kind, host, method, verdict, url, path, command
                 FROM event_terms WHERE sid = $1 ORDER BY seq, part",
            ),
        };
        read(&mut rows)?;
        rows.tx.commit().map_err(db("verifying the session"))
    }
}

impl SessionRows for PgRows<'_> {
    fn session(&mut self) -> Result<SessionRow, AuditError> {
        let r = self
            .tx
            .query_one(
                "SELECT started_us, info_json, public_key, key_fingerprint, ended_us, end_json, final_seq
                 FROM sessions WHERE sid = $1",
                &[&self.sid],
            )
            .map_err(db("verifying the session"))?;
        Ok(SessionRow {
            started_us: r.get(0),
            info_json: r.get(1),
            public_key: r.get(2),
            stored_fp: r.get(3),
            ended_us: r.get(4),
            end_json: r.get(5),
            final_seq: r.get(6),
        })
    }

    fn checkpoints(&mut self) -> Result<Vec<CheckpointRow>, AuditError> {
        let rows = self
            .tx
            .query(
                "SELECT seq, hash, is_final, signature FROM checkpoints WHERE sid = $1
                 ORDER BY seq, is_final",
                &[&self.sid],
            )
            .map_err(db("verifying the session"))?;
        Ok(rows
            .into_iter()
            .map(|r| CheckpointRow {
                seq: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
                hash: r.get(1),
                is_final: r.get(2),
                signature: r.get(3),
            })
            .collect())
    }

    /// Every session in the central store has its terms: the node's, or
    /// computed when it was shipped.
    fn indexed(&mut self) -> Result<bool, AuditError> {
        Ok(true)
    }

    fn next_event(&mut self) -> Result<Option<EventRow>, AuditError> {
        let Some(r) = self
            .events
            .next(&mut self.tx, self.sid, "verifying the session")?
        else {
            return Ok(None);
        };
        Ok(Some(EventRow {
            seq: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
            ts_us: r.get(1),
            kind: r.get(2),
            exec_id: r.get(3),
            payload: r.get(4),
            stored: r.get(5),
        }))
    }

    fn next_index_row(&mut self) -> Result<Option<IndexRow>, AuditError> {
        let Some(r) = self
            .index
            .next(&mut self.tx, self.sid, "verifying the search index")?
        else {
            return Ok(None);
        };
        Ok(Some(IndexRow {
            seq: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
            ts_us: r.get(1),
            kind: r.get(2),
            terms: Terms {
                host: r.get(3),
                method: r.get(4),
                verdict: r.get(5),
                url: r.get(6),
                path: r.get(7),
                command: r.get(8),
            },
        }))
    }

    fn content(&mut self, sha256: &str) -> Result<Option<Vec<u8>>, AuditError> {
        Ok(self
            .tx
            .query_opt("SELECT data FROM contents WHERE sha256 = $1", &[&sha256])
            .map_err(db("verifying file content"))?
            .map(|r| r.get(0)))
    }
}
