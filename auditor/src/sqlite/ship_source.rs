//! What a node ships from its local record: the rows of one session that a
//! destination does not hold yet, read from one consistent view.

use std::collections::BTreeSet;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::search::has_table;
use super::verify_rows::{self, SESSION_COLUMNS};
use super::{SqliteStore, db};
use crate::ship::{EventFields, ShipBatch, ShipEvents, ShipTerms, Shipped, Spare};
use crate::{AuditError, CheckpointRow, SessionId, SessionRow};

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
        self.ship_batch_with(session, shipped, limit, &mut Spare::default())
    }

    /// As [`Self::ship_batch`], reading the events into `spare`'s buffers
    /// (taken: the batch holds them; when there is no batch they are left
    /// in `spare`).
    pub fn ship_batch_with(
        &self,
        session: &SessionId,
        shipped: Shipped,
        limit: usize,
        spare: &mut Spare,
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
        let Spare { events, index } = spare;
        events.clear();
        index.clear();
        let shas = events_after(&tx, sid, after, limit, events)?;
        let last = events.last_seq().unwrap_or(after);
        let ends_here = row.final_seq.is_some_and(|f| f as u64 <= last);
        if !ends_here {
            row.ended_us = None;
            row.end_json = None;
            row.final_seq = None;
            if events.is_empty() {
                return Ok(None);
            }
        }
        if !events.is_empty() {
            index_rows(&tx, sid, after + 1, last, index)?;
        }
        let batch = ShipBatch {
            session: session.clone(),
            indexed: indexed(&tx, sid)?,
            checkpoints: checkpoints(&tx, sid, after, last)?,
            contents: contents(&tx, shas)?,
            row,
            events: std::mem::take(events),
            index: std::mem::take(index),
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

/// Reads the events after `after` into `into`, as stored (borrowed from
/// SQLite's row and copied once into the batch's buffer), and returns the
/// SHA-256 of the file contents they name.
fn events_after(
    conn: &Connection,
    sid: i64,
    after: u64,
    limit: usize,
    into: &mut ShipEvents,
) -> Result<BTreeSet<String>, AuditError> {
    let read = db("reading a batch to ship");
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, ts_us, kind, exec_id, payload, hash FROM events
             WHERE sid = ?1 AND seq > ?2 ORDER BY seq, rowid LIMIT ?3",
        )
        .map_err(read)?;
    let mut rows = stmt
        .query(params![sid, after as i64, limit.max(1) as i64])
        .map_err(db("reading a batch to ship"))?;
    let mut shas = BTreeSet::new();
    while let Some(r) = rows.next().map_err(db("reading a batch to ship"))? {
        let event = event_fields(r).map_err(db("reading a batch to ship"))?;
        if let Some(sha) = stored_content(&event) {
            shas.insert(sha);
        }
        into.push(event);
    }
    Ok(shas)
}

/// One row of `events` as its stored bytes.
fn event_fields<'r>(r: &'r Row<'_>) -> rusqlite::Result<EventFields<'r>> {
    Ok(EventFields {
        seq: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
        ts_us: r.get(1)?,
        kind: bytes(r, 2)?,
        exec_id: match r.get_ref(3)? {
            ValueRef::Null => None,
            _ => Some(bytes(r, 3)?),
        },
        payload: bytes(r, 4)?,
        hash: bytes(r, 5)?,
    })
}

/// A text or blob column's bytes, borrowed from the row.
fn bytes<'r>(r: &'r Row<'_>, i: usize) -> rusqlite::Result<&'r [u8]> {
    let value = r.get_ref(i)?;
    value
        .as_bytes()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, value.data_type(), Box::new(e)))
}

/// The file content an event names, if any. Only file events carry one
/// (`stored_content`, set by the recorder), and the kind is chained with
/// the payload, so the other events are not scanned: most of a busy
/// node's events are HTTP exchanges.
fn stored_content(event: &EventFields<'_>) -> Option<String> {
    if event.kind != b"file" || memchr::memmem::find(event.payload, b"\"stored_content\"").is_none()
    {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(event.payload).ok()?;
    value.get("stored_content")?.as_str().map(str::to_owned)
}

fn index_rows(
    conn: &Connection,
    sid: i64,
    first: u64,
    last: u64,
    into: &mut ShipTerms,
) -> Result<(), AuditError> {
    if !has_table(conn, "event_terms")? {
        return Ok(());
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, ts_us, kind, host, method, verdict, url, path, command FROM event_terms
             WHERE sid = ?1 AND seq >= ?2 AND seq <= ?3 ORDER BY seq, rowid",
        )
        .map_err(db("reading a batch to ship"))?;
    let mut rows = stmt
        .query(params![sid, first as i64, last as i64])
        .map_err(db("reading a batch to ship"))?;
    while let Some(r) = rows.next().map_err(db("reading a batch to ship"))? {
        let mut push = || -> rusqlite::Result<()> {
            let text = |i| match r.get_ref(i)? {
                ValueRef::Null => Ok(None),
                _ => bytes(r, i).map(Some),
            };
            into.push_row(
                u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                r.get(1)?,
                &[
                    Some(bytes(r, 2)?),
                    text(3)?,
                    text(4)?,
                    text(5)?,
                    text(6)?,
                    text(7)?,
                    text(8)?,
                ],
            );
            Ok(())
        };
        push().map_err(db("reading a batch to ship"))?;
    }
    Ok(())
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
fn contents(
    conn: &Connection,
    shas: BTreeSet<String>,
) -> Result<Vec<(String, Vec<u8>)>, AuditError> {
    if shas.is_empty() {
        return Ok(Vec::new());
    }
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

impl SqliteStore {
    /// The session's row without its end, and whether it was indexed as
    /// recorded: what a batch from the live feed carries (the feed brings
    /// the end itself).
    pub fn ship_session_row(&self, session: &SessionId) -> Result<(SessionRow, bool), AuditError> {
        let sid = self.sid(session)?;
        let conn = self.conn();
        let mut row = session_row(&conn, sid)?;
        row.ended_us = None;
        row.end_json = None;
        row.final_seq = None;
        Ok((row, indexed(&conn, sid)?))
    }
}
