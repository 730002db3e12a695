//! Reading sessions, events and contents back out of the central store,
//! as the readers ([`crate::RecordStore`]) ask for them.

use super::client::{Client, Queries};

use super::db;
use crate::{
    AuditError, AuditEvent, EventKind, ExecId, Seq, SessionEnd, SessionId, SessionInfo,
    SessionMode, SessionSummary, StoredEvent,
};

/// Summaries of every session, or of the one whose row is `only`, in the
/// order SQLite lists them (start time, then the order they arrived).
pub(super) fn summaries(
    c: &mut Client,
    only: Option<i64>,
) -> Result<Vec<SessionSummary>, AuditError> {
    let err = db("listing sessions");
    let rows = c
        .query(
            "SELECT s.sid, s.id, s.started_us, s.ended_us, s.end_json, s.info_json, s.key_fingerprint,
                    (SELECT count(*) FROM events e WHERE e.sid = s.sid),
                    (SELECT count(*) FROM events e WHERE e.sid = s.sid AND e.kind = $2)
             FROM sessions s WHERE $1::bigint IS NULL OR s.sid = $1
             ORDER BY s.started_us, s.sid",
            &[&only, &EventKind::StepStart.as_str()],
        )
        .map_err(&err)?;
    Ok(rows
        .into_iter()
        .map(|r| {
            // Unparseable metadata is shown as unknown; verify reports it.
            let info: SessionInfo = serde_json::from_str(r.get(5)).unwrap_or_default();
            let steps = (info.mode == SessionMode::Session)
                .then(|| u64::try_from(r.get::<_, i64>(8)).unwrap_or(0));
            SessionSummary {
                id: SessionId::from_stored(r.get(1)),
                started_us: r.get(2),
                ended_us: r.get(3),
                end: r
                    .get::<_, Option<&str>>(4)
                    .and_then(|j| serde_json::from_str::<SessionEnd>(j).ok()),
                info,
                events: u64::try_from(r.get::<_, i64>(7)).unwrap_or(0),
                steps,
                key_fingerprint: r.get(6),
            }
        })
        .collect())
}

/// The store's row number of a session.
pub(super) fn sid(c: &mut Client, id: &SessionId) -> Result<i64, AuditError> {
    c.query_opt("SELECT sid FROM sessions WHERE id = $1", &[&id.as_str()])
        .map_err(db("looking up the session"))?
        .map(|r| r.get(0))
        .ok_or_else(|| AuditError::UnknownSession(id.to_string()))
}

/// A full id or unique prefix, turned into the session's id.
pub(super) fn resolve(c: &mut Client, text: &str) -> Result<SessionId, AuditError> {
    let prefix = SessionId::parse(text)?;
    let err = db("looking up the session");
    // The prefix is hexadecimal (parsed above): no LIKE wildcard in it.
    let pattern = format!("{}%", prefix.as_str());
    let ids: Vec<String> = c
        .query(
            "SELECT id FROM sessions WHERE id LIKE $1 ORDER BY id LIMIT 2",
            &[&pattern],
        )
        .map_err(&err)?
        .into_iter()
        .map(|r| r.get(0))
        .collect();
    match ids.len() {
        0 => Err(AuditError::UnknownSession(text.to_string())),
        1 => Ok(SessionId::from_stored(
            ids.into_iter().next().unwrap_or_default(),
        )),
        _ => {
            let count: i64 = c
                .query_one(
                    "SELECT count(*) FROM sessions WHERE id LIKE $1",
                    &[&pattern],
                )
                .map_err(&err)?
                .get(0);
            Err(AuditError::AmbiguousSession {
                prefix: text.to_string(),
                count: usize::try_from(count).unwrap_or(2),
            })
        }
    }
}

/// A session's events after `after`, in seq order, optionally only some
/// kinds.
pub(super) fn events(
    c: &mut Client,
    sid: i64,
    after: i64,
    kinds: Option<&[EventKind]>,
) -> Result<Vec<StoredEvent>, AuditError> {
    let rows = match kinds {
        Some(kinds) => {
            let names: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
            c.query(
                "SELECT seq, ts_us, kind, exec_id, payload FROM events
                 WHERE sid = $1 AND seq > $2 AND kind = ANY($3) ORDER BY seq",
                &[&sid, &after, &names],
            )
        }
        None => c.query(
            "SELECT seq, ts_us, kind, exec_id, payload FROM events
             WHERE sid = $1 AND seq > $2 ORDER BY seq",
            &[&sid, &after],
        ),
    }
    .map_err(db("reading events"))?;
    rows.into_iter()
        .map(|r| {
            stored_event(
                r.get(0),
                r.get(1),
                r.get(2),
                r.get::<_, Option<String>>(3),
                r.get(4),
            )
        })
        .collect()
}

/// One event row parsed, as every reader gets it.
pub(super) fn stored_event(
    seq: i64,
    ts_us: i64,
    kind_text: &str,
    exec_id: Option<String>,
    payload: &str,
) -> Result<StoredEvent, AuditError> {
    let seq = u64::try_from(seq).unwrap_or(0);
    let kind = EventKind::parse(kind_text).ok_or_else(|| AuditError::Corrupt {
        seq,
        problem: format!("unknown kind {kind_text:?}"),
    })?;
    let event: AuditEvent = serde_json::from_str(payload).map_err(|e| AuditError::Corrupt {
        seq,
        problem: e.to_string(),
    })?;
    Ok(StoredEvent {
        seq: Seq(seq),
        ts_us,
        kind,
        exec_id: exec_id.map(ExecId),
        event,
    })
}

/// A file content blob by the SHA-256 it is stored under.
pub(super) fn content(c: &mut Client, sha256: &str) -> Result<Option<Vec<u8>>, AuditError> {
    Ok(
        c.query_opt("SELECT data FROM contents WHERE sha256 = $1", &[&sha256])
            .map_err(db("reading file content"))?
            .map(|r| r.get(0)),
    )
}

/// Grows with every commit that changes what a reader sees: each shipped
/// batch counts on its session's row, each key enrolled or revoked on its
/// key's. A sum, not a maximum, so that commits finishing out of order
/// still each move it.
pub(super) fn data_version(c: &mut Client) -> Result<i64, AuditError> {
    Ok(c.query_one(
        "SELECT (COALESCE((SELECT sum(batches) FROM sessions), 0)
                     + COALESCE((SELECT sum(changes) FROM node_keys), 0))::bigint",
        &[],
    )
    .map_err(db("reading the store's version"))?
    .get(0))
}
