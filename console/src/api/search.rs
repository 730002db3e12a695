//! Search across sessions: `airlock audit search`, on the Sessions page.

use airlock_auditor::{SearchQuery, timeline};
use http::Response;
use serde_json::json;

use super::Params;
use crate::ConsoleError;
use crate::respond::{self, Body};
use crate::server::State;

/// Hits past this many are counted but not listed: a page of a hundred
/// thousand rows helps nobody, and the count says to narrow the search.
const MAX_HITS: usize = 1000;

pub(super) fn run(state: &State, params: &Params) -> Result<Response<Body>, ConsoleError> {
    let verdict = params.get("verdict").map(str::to_owned);
    if let Some(v) = &verdict
        && !["allow", "deny", "report"].contains(&v.as_str())
    {
        return Err(ConsoleError::BadRequest(format!(
            "unknown verdict {v:?}; use allow, deny or report"
        )));
    }
    let query = SearchQuery {
        host: params.get("host").map(str::to_owned),
        url: params.get("url").map(str::to_owned),
        method: params.get("method").map(str::to_owned),
        verdict,
        file: params.get("file").map(str::to_owned),
        command: params.get("command").map(str::to_owned),
        tool: params.get("tool").map(str::to_owned),
        since_us: params.time("since")?,
        until_us: params.time("until")?,
        session: params.get("session").map(str::to_owned),
        sessions: None,
    };
    let results = params.scope()?.search(state.store.as_ref(), &query)?;
    let total = results.hits.len();
    let hits: Vec<_> = results
        .hits
        .iter()
        .rev()
        .take(MAX_HITS)
        .map(|hit| {
            let ev = &hit.event;
            json!({
                "session": hit.session,
                "seq": ev.seq,
                "ts_us": ev.ts_us,
                "exec_id": ev.exec_id,
                "kind": ev.kind.as_str(),
                "summary": timeline::describe(&ev.event),
                "verdict": crate::render::verdict(&ev.event),
            })
        })
        .collect();
    Ok(respond::json(&json!({
        "hits": hits,
        "total": total,
        "legacy_sessions": results.scanned_sessions,
    })))
}
