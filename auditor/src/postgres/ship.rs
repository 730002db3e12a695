//! Taking shipped batches ([`ShipDestination`]): one transaction per
//! batch, under a lock on the session's row, so that a batch sent twice,
//! or by two shippers of the same session at once, is stored once.

use super::client::{Queries, Transaction};

use super::error::CentralError;
use super::store::PgStore;
use super::{db, db_error};
use crate::search::terms;
use crate::ship::{PackedEvent, PackedTerms, ShipBatch, ShipDestination, ShipTerms, Shipped};
use crate::{AuditError, AuditEvent, Redactor, Seq, SessionId, SessionInfo};

impl ShipDestination for PgStore {
    fn shipped(&self, session: &SessionId) -> Result<Shipped, AuditError> {
        self.with(|c| {
            let row = c
                .query_opt(
                    "SELECT (SELECT max(seq) FROM events e WHERE e.sid = s.sid),
                            s.ended_us IS NOT NULL
                            AND EXISTS (SELECT 1 FROM checkpoints k WHERE k.sid = s.sid AND k.is_final)
                     FROM sessions s WHERE s.id = $1",
                    &[&session.as_str()],
                )
                .map_err(db("reading where shipping stands"))?;
            Ok(row.map_or_else(Shipped::default, |r| Shipped {
                up_to: r.get::<_, Option<i64>>(0).map(|s| Seq(s as u64)),
                ended: r.get(1),
            }))
        })
    }

    fn ship(&self, batch: &ShipBatch) -> Result<(), AuditError> {
        self.with(|c| {
            let mut tx = c.transaction().map_err(db("shipping"))?;
            store_batch(&mut tx, batch)?;
            tx.commit().map_err(db("committing a shipped batch"))
        })
    }
}

/// The session's row in the store, as a batch finds it (locked).
struct Held {
    sid: i64,
    /// The last event held.
    up_to: Option<i64>,
    ended: bool,
}

fn store_batch(tx: &mut Transaction<'_>, batch: &ShipBatch) -> Result<(), AuditError> {
    let held = lock_session(tx, batch)?;
    let events: Vec<PackedEvent<'_>> = batch
        .events
        .iter()
        .filter(|e| held.up_to.is_none_or(|h| e.seq as i64 > h))
        .collect();
    // Contiguous from the store's last event: a gap could never be filled
    // in order, and verify would report the session broken.
    let mut expected = held.up_to.map(|h| h as u64 + 1);
    for e in &events {
        if let Some(want) = expected
            && e.seq != want
        {
            return Err(CentralError::Gap {
                session: batch.session.to_string(),
                first: e.seq,
                held: held.up_to.unwrap_or(0) as u64,
            }
            .into());
        }
        expected = Some(e.seq + 1);
    }
    let up_to = events.last().map(|e| e.seq as i64).or(held.up_to);
    insert_contents(tx, batch)?;
    insert_events(tx, held.sid, &events)?;
    insert_terms(tx, held.sid, batch, &events)?;
    insert_checkpoints(tx, held.sid, batch, up_to)?;
    // The end is written once, when every event up to it is held, and
    // never overwritten.
    if !held.ended
        && let (Some(ended_us), Some(end_json), Some(final_seq)) =
            (batch.row.ended_us, &batch.row.end_json, batch.row.final_seq)
        && (final_seq == 0 || up_to.is_some_and(|u| u >= final_seq))
    {
        tx.execute_prepared(
            "UPDATE sessions SET ended_us = $1, end_json = $2, final_seq = $3
             WHERE sid = $4 AND ended_us IS NULL",
            &[&ended_us, end_json, &final_seq, &held.sid],
        )
        .map_err(db("shipping the session's end"))?;
    }
    // Every batch counts: what readers' data_version is made of.
    tx.execute_prepared(
        "UPDATE sessions SET batches = batches + 1,
             shipped_us = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
         WHERE sid = $1",
        &[&held.sid],
    )
    .map_err(db("shipping"))?;
    Ok(())
}

/// Creates the session's row if the store has none, and locks it, so a
/// second shipper of the same session waits for this batch's commit and
/// then sees what it stored.
fn lock_session(tx: &mut Transaction<'_>, batch: &ShipBatch) -> Result<Held, AuditError> {
    let row = &batch.row;
    let info: SessionInfo = serde_json::from_str(&row.info_json).unwrap_or_default();
    let labels = serde_json::to_string(&info.labels)?;
    let id = batch.session.as_str();
    tx.execute_prepared(
        "INSERT INTO sessions (id, started_us, info_json, public_key, key_fingerprint, node, labels)
         VALUES ($1, $2, $3, $4, $5, $6, ($7::text)::jsonb)
         ON CONFLICT (id) DO NOTHING",
        &[
            &id,
            &row.started_us,
            &row.info_json,
            &row.public_key,
            &row.stored_fp,
            &info.host,
            &labels,
        ],
    )
    .map_err(db("shipping the session's row"))?;
    let locked = tx
        .query_one_prepared(
            "SELECT sid, started_us, info_json, public_key, key_fingerprint, ended_us IS NOT NULL
             FROM sessions WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .map_err(db("locking the session's row"))?;
    let same = locked.get::<_, i64>(1) == row.started_us
        && locked.get::<_, &str>(2) == row.info_json
        && locked.get::<_, &[u8]>(3) == row.public_key.as_slice()
        && locked.get::<_, &str>(4) == row.stored_fp;
    if !same {
        return Err(CentralError::Conflict {
            session: id.to_string(),
        }
        .into());
    }
    let sid: i64 = locked.get(0);
    // Read after the lock was granted: a statement of its own sees what
    // the shipper that held it before committed.
    let up_to: Option<i64> = tx
        .query_one_prepared("SELECT max(seq) FROM events WHERE sid = $1", &[&sid])
        .map_err(db("shipping"))?
        .get(0);
    Ok(Held {
        sid,
        up_to,
        ended: locked.get(5),
    })
}

fn insert_contents(tx: &mut Transaction<'_>, batch: &ShipBatch) -> Result<(), AuditError> {
    if batch.contents.is_empty() {
        return Ok(());
    }
    // In one order for every shipper: two batches of different sessions
    // holding the same contents then wait for each other instead of
    // deadlocking on the key's index.
    let mut contents: Vec<&(String, Vec<u8>)> = batch.contents.iter().collect();
    contents.sort_by(|a, b| a.0.cmp(&b.0));
    contents.dedup_by(|a, b| a.0 == b.0);
    let shas: Vec<&str> = contents.iter().map(|(s, _)| s.as_str()).collect();
    let sizes: Vec<i64> = contents.iter().map(|(_, d)| d.len() as i64).collect();
    let data: Vec<&[u8]> = contents.iter().map(|(_, d)| d.as_slice()).collect();
    tx.execute_prepared(
        "INSERT INTO contents (sha256, size, data)
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])
         ON CONFLICT (sha256) DO NOTHING",
        &[&shas, &sizes, &data],
    )
    .map_err(db("shipping file contents"))?;
    Ok(())
}

/// The batch's new events, streamed in one binary COPY. Nothing here can
/// collide with a row the store holds: under the session's lock only
/// events after its last are sent (`store_batch`), and the primary key on
/// (sid, seq) would refuse, and roll back, a batch that did collide.
///
/// Each event arrives packed as the fields of a binary COPY tuple
/// ([`crate::ship::ShipEvents`]): a row is the field count, the store's
/// sid, then the node's bytes as they are.
fn insert_events(
    tx: &mut Transaction<'_>,
    sid: i64,
    events: &[PackedEvent<'_>],
) -> Result<(), AuditError> {
    if events.is_empty() {
        return Ok(());
    }
    tx.copy_in_binary_raw(
        "COPY events (sid, seq, ts_us, kind, exec_id, payload, hash) FROM STDIN (FORMAT binary)",
        |buf| {
            let fields: usize = events.iter().map(|e| e.fields.len() + 14).sum();
            buf.reserve(fields);
            for e in events {
                buf.extend_from_slice(&7i16.to_be_bytes());
                buf.extend_from_slice(&8i32.to_be_bytes());
                buf.extend_from_slice(&sid.to_be_bytes());
                buf.extend_from_slice(e.fields);
            }
        },
    )
    .map_err(db("shipping events"))?;
    Ok(())
}

/// The search terms of the events just stored: the node's own, or, for a
/// session recorded before search existed, computed here from the
/// payloads, so that every session in the central store is indexed.
fn insert_terms(
    tx: &mut Transaction<'_>,
    sid: i64,
    batch: &ShipBatch,
    events: &[PackedEvent<'_>],
) -> Result<(), AuditError> {
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return Ok(());
    };
    // The node's rows are sent as they are (borrowed, not copied).
    let mut computed = ShipTerms::default();
    let rows = if batch.indexed {
        &batch.index
    } else {
        let none = Redactor::new();
        for e in events {
            let Ok(event) = serde_json::from_slice::<AuditEvent>(e.payload()) else {
                continue;
            };
            for t in terms::of(&event, &none) {
                computed.push_terms(e.seq, e.ts_us, e.kind(), &t);
            }
        }
        &computed
    };
    let rows: Vec<PackedTerms<'_>> = rows
        .iter()
        .filter(|r| r.seq >= first.seq && r.seq <= last.seq)
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    // A row is the field count, the store's sid, its place among its
    // event's rows (in the order they came), then the node's bytes.
    tx.copy_in_binary_raw(
        "COPY event_terms (sid, part, seq, ts_us, kind, host, method, verdict, url, path, command)
         FROM STDIN (FORMAT binary)",
        |buf| {
            buf.reserve(rows.iter().map(|r| r.fields.len() + 22).sum());
            let mut prev: Option<(u64, i32)> = None;
            for r in &rows {
                let part = match prev {
                    Some((seq, part)) if seq == r.seq => part + 1,
                    _ => 0,
                };
                prev = Some((r.seq, part));
                buf.extend_from_slice(&11i16.to_be_bytes());
                buf.extend_from_slice(&8i32.to_be_bytes());
                buf.extend_from_slice(&sid.to_be_bytes());
                buf.extend_from_slice(&4i32.to_be_bytes());
                buf.extend_from_slice(&part.to_be_bytes());
                buf.extend_from_slice(r.fields);
            }
        },
    )
    .map_err(db("shipping search terms"))?;
    Ok(())
}

/// The batch's checkpoints over events the store holds (those it holds
/// already are left as they are).
fn insert_checkpoints(
    tx: &mut Transaction<'_>,
    sid: i64,
    batch: &ShipBatch,
    up_to: Option<i64>,
) -> Result<(), AuditError> {
    let rows: Vec<_> = batch
        .checkpoints
        .iter()
        .filter(|c| c.seq == 0 || up_to.is_some_and(|u| c.seq as i64 <= u))
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    let seqs: Vec<i64> = rows.iter().map(|c| c.seq as i64).collect();
    let hashes: Vec<&[u8]> = rows.iter().map(|c| c.hash.as_slice()).collect();
    let finals: Vec<bool> = rows.iter().map(|c| c.is_final).collect();
    let sigs: Vec<&[u8]> = rows.iter().map(|c| c.signature.as_slice()).collect();
    tx.execute_prepared(
        "INSERT INTO checkpoints (sid, seq, hash, is_final, signature)
         SELECT $1, * FROM unnest($2::bigint[], $3::bytea[], $4::boolean[], $5::bytea[])
         ON CONFLICT (sid, seq, is_final) DO NOTHING",
        &[&sid, &seqs, &hashes, &finals, &sigs],
    )
    .map_err(|e| db_error("shipping checkpoints", e))?;
    Ok(())
}
