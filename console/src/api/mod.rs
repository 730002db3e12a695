//! The JSON API the page is built from (listed in docs/console.md), one
//! module a page. Handlers read the store on the blocking pool: SQLite
//! calls block.

use std::sync::Arc;

use airlock_auditor::humanize;
use airlock_auditor::search::{ScopeError, SessionScope};
use airlock_record::SessionId;
use http::Response;
use percent_encoding::percent_decode_str;

use crate::ConsoleError;
use crate::respond::{self, Body};
use crate::server::State;

mod event;
mod exports;
mod files;
mod live;
mod search;
mod session;
mod sessions;
mod tools;
mod tree;

pub(crate) async fn dispatch(state: Arc<State>, path: &str, query: &str) -> Response<Body> {
    let params = Params::parse(query);
    let parts: Vec<String> = path
        .split('/')
        .map(|p| percent_decode_str(p).decode_utf8_lossy().into_owned())
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    match parts.as_slice() {
        ["sessions"] => blocking(state, move |s| sessions::list(s, &params)).await,
        ["search"] => blocking(state, move |s| search::run(s, &params)).await,
        ["sessions", id, rest @ ..] => {
            let id = (*id).to_owned();
            match rest {
                [] => blocking(state, move |s| session::detail(s, &id)).await,
                ["events"] => blocking(state, move |s| session::events(s, &id, &params)).await,
                ["events", seq] => {
                    let seq = (*seq).to_owned();
                    blocking(state, move |s| event::detail(s, &id, &seq)).await
                }
                ["tree"] => blocking(state, move |s| tree::of(s, &id)).await,
                ["tools"] => blocking(state, move |s| tools::list(s, &id)).await,
                ["files"] => blocking(state, move |s| files::list(s, &id)).await,
                ["content", sha] => {
                    let sha = (*sha).to_owned();
                    blocking(state, move |s| files::content(s, &id, &sha, &params)).await
                }
                ["diff"] => blocking(state, move |s| files::diff(s, &id, &params)).await,
                ["export", format] => {
                    let format = (*format).to_owned();
                    blocking(state, move |s| exports::export(s, &id, &format)).await
                }
                ["live"] => live::stream(state, id, &params).await,
                _ => respond::error(&not_found()),
            }
        }
        _ => respond::error(&not_found()),
    }
}

fn not_found() -> ConsoleError {
    ConsoleError::NotFound("no such API endpoint; docs/console.md lists them".into())
}

/// Runs a handler that reads the store on the blocking pool.
async fn blocking(
    state: Arc<State>,
    handler: impl FnOnce(&State) -> Result<Response<Body>, ConsoleError> + Send + 'static,
) -> Response<Body> {
    match tokio::task::spawn_blocking(move || handler(&state)).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => respond::error(&e),
        Err(e) => respond::error(&ConsoleError::Task(e)),
    }
}

/// The session a path names: a full id or a unique prefix.
fn resolve(state: &State, id: &str) -> Result<SessionId, ConsoleError> {
    Ok(state.store.resolve_session(id)?)
}

/// A URL's query, decoded (`+` is a space, as forms send it).
#[derive(Debug, Clone, Default)]
pub(crate) struct Params(Vec<(String, String)>);

impl Params {
    fn parse(query: &str) -> Self {
        let decode = |s: &str| {
            percent_decode_str(&s.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        };
        Self(
            query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (decode(k), decode(v)),
                    None => (decode(p), String::new()),
                })
                .collect(),
        )
    }

    /// The value of `name`, when given and not empty.
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// Every value of a repeatable `name`, exactly as given (a label's
    /// value may begin or end with a space), empty ones left out.
    fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    /// Which sessions, by who ran them: `label=KEY=VALUE` (repeatable, all
    /// must hold) and `node=NAME`, as `airlock audit sessions` takes them.
    fn scope(&self) -> Result<SessionScope, ConsoleError> {
        let scope = SessionScope {
            labels: self
                .all("label")
                .map(str::parse)
                .collect::<Result<_, ScopeError>>()
                .map_err(|e| ConsoleError::BadRequest(e.to_string()))?,
            node: self.get("node").map(str::to_owned),
        };
        scope
            .check()
            .map_err(|e| ConsoleError::BadRequest(e.to_string()))?;
        Ok(scope)
    }

    /// `name` as a time bound (RFC 3339, or a duration back from now).
    fn time(&self, name: &str) -> Result<Option<i64>, ConsoleError> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        humanize::time_bound(text, now_us()).map(Some).ok_or_else(|| {
            ConsoleError::BadRequest(format!(
                "invalid {name} {text:?}: give a duration back from now (2h, 30m, 1d) or an RFC 3339 time (2026-11-25T18:00:00Z)"
            ))
        })
    }
}

fn now_us() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::Params;

    #[test]
    fn queries_decode_as_forms_send_them() {
        let p = Params::parse("host=%2A.example.com&command=curl+-s&empty=&flag");
        assert_eq!(p.get("host"), Some("*.example.com"));
        assert_eq!(p.get("command"), Some("curl -s"));
        assert_eq!(p.get("empty"), None);
        assert_eq!(p.get("missing"), None);
    }
}
