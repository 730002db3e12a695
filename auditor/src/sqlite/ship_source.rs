//! What a node ships from its local record: the rows of one session that a
//! destination does not hold yet, read from one consistent view.

use std::collections::BTreeSet;

use rusqlite::{Connection, OptionalExtension, params};

use super::search::has_table;
use super::verify_rows::{self, SESSION_COLUMNS};
use super::{SqliteStore, db};
use crate::ship::{ShipBatch, Shipped};
use crate::{AuditError, CheckpointRow, EventRow, IndexRow, SessionId, SessionRow};

impl SqliteStore {
    /// The next batch of `session` for a destination that stands at
    /// `shipped`: up to `limit` events after its last, their search terms,
    /// contents and checkpoints, and the session's row. The row carries
    /// the session's end only in the batch that holds its last event (or,
    /// all events shipped, alone). None when the destination holds it all.
    pub fn ship_batch(
        &self,
        session: &SessionId,
        shipped: Shipped,
        limit: usize,
    ) -> Result<Option<ShipBatch>, AuditError> {
        if shipped.ended {
            return Ok(None);
        }
        let sid = self.sid(session)?;
        let mut conn = self.conn();
        // One read transaction: the row, events, terms and checkpoints
        // all as of the same commit of the recorder.
        let tx = conn.transaction().map_err(db("reading a batch to ship"))?;
        let after = shipped.up_to.map_or(0, |s| s.0);
        let mut row = session_row(&tx, sid)?;
        let events = events_after(&tx, sid, after, limit)?;
        let last = events.last().map_or(after, |e| e.seq);
        let ends_here = row.final_seq.is_some_and(|f| f as u64 <= last);
        if !ends_here {
            row.ended_us = None;
            row.end_json = None;
            row.final_seq = None;
            if events.is_empty() {
                return Ok(None);
            }
        }
        let index = match events.first() {
            Some(first) => index_rows(&tx, sid, first.seq, last)?,
            None => Vec::new(),
        };
        let batch = ShipBatch {
            session: session.clone(),
            indexed: indexed(&tx, sid)?,
            checkpoints: checkpoints(&tx, sid, after, last)?,
            contents: contents(&tx, &events)?,
            row,
            events,
            index,
        };
        tx.finish().map_err(db("reading a batch to ship"))?;
        Ok(Some(batch))
    }
}

fn session_row(conn: &Connection, sid: i64) -> Result<SessionRow, AuditError> {
    conn.prepare_cached(&format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE sid = ?1"
    ))
    .and_then(|mut stmt| stmt.query_row([sid], verify_rows::session_row))
    .map_err(db("reading a batch to ship"))
}

fn events_after(
    conn: &Connection,
    sid: i64,
    after: u64,
    limit: usize,
) -> Result<Vec<EventRow>, AuditError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, ts_us, kind, exec_id, payload, hash FROM events
             WHERE sid = ?1 AND seq > ?2 ORDER BY seq, rowid LIMIT ?3",
        )
        .map_err(db("reading a batch to ship"))?;
    stmt.query_map(
        params![sid, after as i64, limit.max(1) as i64],
        verify_rows::event_row,
    )
    .and_then(|rows| rows.collect())
    .map_err(db("reading a batch to ship"))
}

fn index_rows(
    conn: &Connection,
    sid: i64,
    first: u64,
    last: u64,
) -> Result<Vec<IndexRow>, AuditError> {
    if !has_table(conn, "event_terms")? {
        return Ok(Vec::new());
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, ts_us, kind, host, method, verdict, url, path, command FROM event_terms
             WHERE sid = ?1 AND seq >= ?2 AND seq <= ?3 ORDER BY seq, rowid",
        )
        .map_err(db("reading a batch to ship"))?;
    stmt.query_map(
        params![sid, first as i64, last as i64],
        verify_rows::index_row,
    )
    .and_then(|rows| rows.collect())
    .map_err(db("reading a batch to ship"))
}

fn indexed(conn: &Connection, sid: i64) -> Result<bool, AuditError> {
    if !has_table(conn, "search_indexed")? || !has_table(conn, "event_terms")? {
        return Ok(false);
    }
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM search_indexed WHERE sid = ?1)",
        [sid],
        |r| r.get(0),
    )
    .map_err(db("reading a batch to ship"))
}

/// Checkpoints from the destination's last event (one signed there may
/// have been committed after that event was shipped) to the batch's last.
fn checkpoints(
    conn: &Connection,
    sid: i64,
    after: u64,
    last: u64,
) -> Result<Vec<CheckpointRow>, AuditError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, hash, is_final, signature FROM checkpoints
             WHERE sid = ?1 AND seq >= ?2 AND seq <= ?3 ORDER BY seq, rowid",
        )
        .map_err(db("reading a batch to ship"))?;
    stmt.query_map(
        params![sid, after as i64, last as i64],
        verify_rows::checkpoint_row,
    )
    .and_then(|rows| rows.collect())
    .map_err(db("reading a batch to ship"))
}

/// The file contents the events name (`stored_content`), each once.
fn contents(conn: &Connection, events: &[EventRow]) -> Result<Vec<(String, Vec<u8>)>, AuditError> {
    let shas: BTreeSet<String> = events
        .iter()
        .filter(|e| e.payload.contains("\"stored_content\""))
        .filter_map(|e| {
            let value: serde_json::Value = serde_json::from_str(&e.payload).ok()?;
            value.get("stored_content")?.as_str().map(str::to_owned)
        })
        .collect();
    let mut stmt = conn
        .prepare_cached("SELECT data FROM contents WHERE sha256 = ?1")
        .map_err(db("reading a batch to ship"))?;
    let mut out = Vec::with_capacity(shas.len());
    for sha in shas {
        // A blob deleted from the node's record is not invented here:
        // verify on the central store reports it missing, as on the node.
        if let Some(data) = stmt
            .query_row([&sha], |r| r.get::<_, Vec<u8>>(0))
            .optional()
            .map_err(db("reading a batch to ship"))?
        {
            out.push((sha, data));
        }
    }
    Ok(out)
}
