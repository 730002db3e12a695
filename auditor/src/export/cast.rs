//! asciicast v2 (https://docs.asciinema.org/manual/asciicast/v2/) of the
//! session's terminal output. stderr is emitted as "o" too, because players
//! render only output frames. The header carries the terminal's size at the
//! start (when the command ran on a pty) and "r" events its resizes; a
//! live session's steps begin with "m" (marker) events.

use crate::{Output, Resize, StepStart};
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
        obj.insert(
            "command".into(),
            summary
                .info
                .command
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
                .into(),
        );
    }
    let io = |e| AuditError::io("cannot write asciicast export")(e);
    serde_json::to_writer(&mut *out, &header)?;
    out.write_all(b"\n").map_err(io)?;
    for ev in events {
        let t = (ev.ts_us.saturating_sub(summary.started_us)).max(0) as f64 / 1e6;
        let frame = match &ev.event {
            AuditEvent::Output(Output { data, .. }) => {
                serde_json::json!([t, "o", String::from_utf8_lossy(data)])
            }
            // "r" (resize) events, data "COLSxROWS" (asciicast v2).
            AuditEvent::Resize(Resize { cols, rows }) => {
                serde_json::json!([t, "r", format!("{cols}x{rows}")])
            }
            // A live session's steps as "m" (marker) events, which players
            // offer as chapters; the output between them is the steps'.
            AuditEvent::StepStart(StepStart { step, label, .. }) => {
                let text = match label {
                    Some(l) => format!("step {step}: {l}"),
                    None => format!("step {step}"),
                };
                serde_json::json!([t, "m", text])
            }
            _ => continue,
        };
        serde_json::to_writer(&mut *out, &frame)?;
        out.write_all(b"\n").map_err(io)?;
    }
    Ok(())
}
