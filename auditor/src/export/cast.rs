//! asciicast v2 (https://docs.asciinema.org/manual/asciicast/v2/) of the
//! session's terminal output. stderr is emitted as "o" too, because players
//! render only output frames.

use std::io::Write;

use crate::{AuditError, AuditEvent, SessionSummary, StoredEvent};

pub fn write(
    summary: &SessionSummary,
    events: &[StoredEvent],
    out: &mut dyn Write,
) -> Result<(), AuditError> {
    let (width, height) = summary.info.terminal.unwrap_or((80, 24));
    let mut header = serde_json::json!({
        "version": 2,
        "width": width,
        "height": height,
        "timestamp": summary.started_us / 1_000_000,
        "title": format!("airlock session {}", summary.id),
    });
    if !summary.info.command.is_empty()
        && let Some(obj) = header.as_object_mut()
    {
        obj.insert("command".into(), summary.info.command.join(" ").into());
    }
    let io = |e| AuditError::io("cannot write asciicast export")(e);
    serde_json::to_writer(&mut *out, &header)?;
    out.write_all(b"\n").map_err(io)?;
    for ev in events {
        if let AuditEvent::Output { data, .. } = &ev.event {
            let t = (ev.ts_us.saturating_sub(summary.started_us)).max(0) as f64 / 1e6;
            let frame = serde_json::json!([t, "o", String::from_utf8_lossy(data)]);
            serde_json::to_writer(&mut *out, &frame)?;
            out.write_all(b"\n").map_err(io)?;
        }
    }
    Ok(())
}
