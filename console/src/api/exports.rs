//! HAR, JSON lines and asciicast downloads: the very bytes
//! `airlock audit export` writes, from the same writers.

use airlock_auditor::export::{cast, har, jsonl};
use http::Response;

use super::resolve;
use crate::ConsoleError;
use crate::respond::{self, Body};
use crate::server::State;

pub(super) fn export(
    state: &State,
    id: &str,
    format: &str,
) -> Result<Response<Body>, ConsoleError> {
    let id = resolve(state, id)?;
    let summary = state.store.session(&id)?;
    let events = state.store.events(&id, None)?;
    let mut out = Vec::new();
    let extension = match format {
        "har" => {
            har::write(&summary, &events, &mut out)?;
            "har"
        }
        "jsonl" => {
            jsonl::write(&id, &events, &mut out)?;
            "jsonl"
        }
        "cast" => {
            cast::write(&summary, &events, &mut out)?;
            "cast"
        }
        other => {
            return Err(ConsoleError::NotFound(format!(
                "no export format {other:?}; use har, jsonl or cast"
            )));
        }
    };
    Ok(respond::download(out, &format!("airlock-{id}.{extension}")))
}
