//! JSON Lines for a SIEM: one self-contained object per event.

use std::io::Write;

use crate::humanize;
use crate::{AuditError, SessionId, StoredEvent};

/// `{session, seq, ts (RFC 3339), ts_us, kind, exec_id, ...event fields}`.
pub fn event_json(session: &SessionId, ev: &StoredEvent) -> serde_json::Value {
    let mut obj = serde_json::Map::new();
    obj.insert("session".into(), session.as_str().into());
    obj.insert("seq".into(), ev.seq.get().into());
    obj.insert("ts".into(), humanize::rfc3339(ev.ts_us).into());
    obj.insert("ts_us".into(), ev.ts_us.into());
    obj.insert("kind".into(), ev.kind.as_str().into());
    obj.insert(
        "exec_id".into(),
        ev.exec_id
            .as_ref()
            .map_or(serde_json::Value::Null, |e| e.as_str().into()),
    );
    if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(&ev.event) {
        for (k, v) in fields {
            // The envelope fields above are authoritative.
            obj.entry(k).or_insert(v);
        }
    }
    serde_json::Value::Object(obj)
}

pub fn write(
    session: &SessionId,
    events: &[StoredEvent],
    out: &mut dyn Write,
) -> Result<(), AuditError> {
    for ev in events {
        serde_json::to_writer(&mut *out, &event_json(session, ev))?;
        out.write_all(b"\n")
            .map_err(AuditError::io("cannot write JSONL export"))?;
    }
    Ok(())
}
