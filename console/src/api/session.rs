//! A session's header and its timeline.

use airlock_auditor::timeline::{self, Depths};
use airlock_record::{Seq, collapse_exchanges};
use http::Response;
use serde_json::json;

use super::{Params, resolve};
use crate::ConsoleError;
use crate::render::Listed;
use crate::respond::{self, Body};
use crate::server::State;

pub(super) fn detail(state: &State, id: &str) -> Result<Response<Body>, ConsoleError> {
    let id = resolve(state, id)?;
    let s = state.store.session(&id)?;
    let report = state.verification.report(state, &id)?;
    let end = s.end.as_ref();
    Ok(respond::json(&json!({
        "id": s.id,
        "started_us": s.started_us,
        "ended_us": s.ended_us,
        "duration_ms": super::sessions::duration_ms(s.started_us, s.ended_us),
        "mode": s.info.mode,
        "isolation": s.info.isolation,
        "command": s.info.command,
        "command_line": timeline::command_line(&s.info.command),
        "title": timeline::session_title(&s, state.store.first_step_command(&s)?.as_deref()),
        "policy_name": s.info.policy_name,
        "policy_sha256": s.info.policy_sha256(),
        "policy_text": s.info.policy_text,
        "limits": s.info.limits,
        "limits_summary": s.info.limits_summary(),
        "host": s.info.host,
        "airlock_version": s.info.airlock_version,
        "capabilities_note": s.info.capabilities_note,
        "max_file_bytes": s.info.max_file_bytes,
        "end": end.map(airlock_auditor::SessionEnd::describe),
        "exit_status": end.and_then(|e| e.exit_status),
        "signal": end.and_then(|e| e.signal),
        "end_reason": end.and_then(|e| e.reason.clone()),
        "events": s.events,
        "steps": s.steps,
        "key_fingerprint": s.key_fingerprint,
        "verification": report,
    })))
}

/// The timeline: every event with exchanges collapsed to their latest
/// record, or (with `after`) only the records after that seq, as they are.
pub(super) fn events(
    state: &State,
    id: &str,
    params: &Params,
) -> Result<Response<Body>, ConsoleError> {
    let id = resolve(state, id)?;
    let ended = state.store.session(&id)?.ended_us.is_some();
    let after = match params.get("after") {
        Some(text) => Some(Seq(text.parse().map_err(|_| {
            ConsoleError::BadRequest(format!("after={text:?} is not an event number"))
        })?)),
        None => None,
    };
    let all = state.store.events(&id, None)?;
    // Depths need every exec before the first event listed.
    let mut depths = Depths::default();
    let listed: Vec<Listed> = match after {
        None => {
            // Collapsing keeps each exchange's last record, so depths are
            // computed over the collapsed list, which keeps every exec.
            collapse_exchanges(&all)
                .iter()
                .map(|ev| Listed::of(ev, &mut depths))
                .collect()
        }
        Some(after) => all
            .iter()
            .filter_map(|ev| {
                let listed = Listed::of(ev, &mut depths);
                (ev.seq > after).then_some(listed)
            })
            .collect(),
    };
    Ok(respond::json(&json!({ "events": listed, "ended": ended })))
}
