//! The sessions list and its filters.

use std::collections::{BTreeMap, HashMap, HashSet};

use airlock_auditor::search::SessionScope;
use airlock_auditor::{SearchQuery, VerifyOutcome, timeline};
use airlock_record::{SessionId, SessionSummary};
use http::Response;
use serde::Serialize;

use super::Params;
use crate::ConsoleError;
use crate::respond::{self, Body};
use crate::server::State;
use crate::verification::Badge;

/// One row of the list.
#[derive(Debug, Serialize)]
struct Row {
    id: SessionId,
    started_us: i64,
    ended_us: Option<i64>,
    duration_ms: Option<f64>,
    mode: airlock_auditor::SessionMode,
    /// The kernel boundary it ran under (namespaces for older records).
    isolation: airlock_auditor::Isolation,
    command: Vec<String>,
    command_line: String,
    /// What the list shows: the sandboxed command, or for a live session
    /// its name or first step (its own command line is airlock's internal
    /// serve line, kept in `command_line`).
    title: String,
    policy_name: String,
    /// The node that recorded it (its host name).
    node: String,
    /// Its `--label`s: empty for a session recorded before labels existed.
    labels: BTreeMap<String, String>,
    end: Option<String>,
    exit_status: Option<i32>,
    events: u64,
    denials: u64,
    verification: Badge,
}

pub(super) fn list(state: &State, params: &Params) -> Result<Response<Body>, ConsoleError> {
    let filter = Filter::from_params(state, params)?;
    let denials = denials_by_session(state)?;
    let mut rows = Vec::new();
    for summary in state.store.sessions()?.into_iter().rev() {
        if !filter.keeps(&summary) {
            continue;
        }
        let report = state.verification.report(state, &summary.id)?;
        let badge = Badge::of(&report);
        if filter
            .verification
            .is_some_and(|want| want != report.outcome)
        {
            continue;
        }
        let denied = denials.get(&summary.id).copied().unwrap_or(0);
        if filter.denied && denied == 0 {
            continue;
        }
        let first_step = state.store.first_step_command(&summary)?;
        rows.push(row(summary, denied, badge, first_step.as_deref()));
    }
    Ok(respond::json(&serde_json::json!({ "sessions": rows })))
}

fn row(s: SessionSummary, denials: u64, verification: Badge, first_step: Option<&[String]>) -> Row {
    let end = s.end.as_ref();
    Row {
        duration_ms: duration_ms(s.started_us, s.ended_us),
        command_line: timeline::command_line(&s.info.command),
        title: timeline::session_title(&s, first_step),
        id: s.id,
        started_us: s.started_us,
        ended_us: s.ended_us,
        mode: s.info.mode,
        isolation: s.info.isolation,
        command: s.info.command.iter().map(ToString::to_string).collect(),
        policy_name: s.info.policy_name,
        node: s.info.host,
        labels: s.info.labels,
        end: end.map(airlock_auditor::SessionEnd::describe),
        exit_status: end.and_then(|e| e.exit_status),
        events: s.events,
        denials,
        verification,
    }
}

pub(super) fn duration_ms(started_us: i64, ended_us: Option<i64>) -> Option<f64> {
    ended_us.map(|end| (end - started_us) as f64 / 1000.0)
}

/// Refused requests, connections and lookups per session, from the search
/// index (one lookup, not a scan of every session).
fn denials_by_session(state: &State) -> Result<HashMap<SessionId, u64>, ConsoleError> {
    let query = SearchQuery {
        verdict: Some("deny".into()),
        ..SearchQuery::default()
    };
    let mut counts = HashMap::new();
    for hit in state.store.search(&query)?.hits {
        *counts.entry(hit.session).or_insert(0) += 1;
    }
    Ok(counts)
}

/// The list's filters, as the page sends them.
struct Filter {
    since_us: Option<i64>,
    until_us: Option<i64>,
    mode: Option<String>,
    /// Text of the session's command line; sessions where some exec's
    /// command line holds it are in `command_sessions`.
    command: Option<String>,
    command_sessions: HashSet<SessionId>,
    /// Sessions that contacted the host, when one was given.
    host_sessions: Option<HashSet<SessionId>>,
    denied: bool,
    verification: Option<VerifyOutcome>,
    /// Labels and node.
    scope: SessionScope,
}

impl Filter {
    fn from_params(state: &State, params: &Params) -> Result<Self, ConsoleError> {
        let sessions_matching = |query: SearchQuery| -> Result<HashSet<SessionId>, ConsoleError> {
            Ok(state
                .store
                .search(&query)?
                .hits
                .into_iter()
                .map(|h| h.session)
                .collect())
        };
        let command = params.get("command").map(str::to_owned);
        let command_sessions = match &command {
            Some(text) => sessions_matching(SearchQuery {
                command: Some(text.clone()),
                ..SearchQuery::default()
            })?,
            None => HashSet::new(),
        };
        let host_sessions = match params.get("host") {
            Some(host) => Some(sessions_matching(SearchQuery {
                host: Some(host.to_owned()),
                ..SearchQuery::default()
            })?),
            None => None,
        };
        let verification = match params.get("verification") {
            None => None,
            Some("intact") => Some(VerifyOutcome::Intact),
            Some("incomplete") => Some(VerifyOutcome::Incomplete),
            Some("tampered") => Some(VerifyOutcome::Tampered),
            Some("unverified") => Some(VerifyOutcome::Unverified),
            Some(other) => {
                return Err(ConsoleError::BadRequest(format!(
                    "unknown verification state {other:?}; use intact, incomplete, tampered or unverified"
                )));
            }
        };
        let mode = params.get("mode").map(str::to_owned);
        if let Some(m) = &mode
            && !["run", "session", "proxy", "sidecar"].contains(&m.as_str())
        {
            return Err(ConsoleError::BadRequest(format!(
                "unknown mode {m:?}; use run, session, proxy or sidecar"
            )));
        }
        Ok(Self {
            since_us: params.time("since")?,
            until_us: params.time("until")?,
            mode,
            command,
            command_sessions,
            host_sessions,
            denied: matches!(params.get("denied"), Some("1" | "true" | "on")),
            verification,
            scope: params.scope()?,
        })
    }

    /// Everything but the verification state and denials, which cost more.
    fn keeps(&self, s: &SessionSummary) -> bool {
        // A session overlaps [since, until] when it ended after `since`
        // (or is still running) and started before `until`.
        let overlaps = self
            .since_us
            .is_none_or(|since| s.ended_us.is_none_or(|end| end >= since))
            && self.until_us.is_none_or(|until| s.started_us <= until);
        let mode = self.mode.as_deref().is_none_or(|m| {
            serde_json::to_value(s.info.mode)
                .ok()
                .and_then(|v| v.as_str().map(|v| v == m))
                == Some(true)
        });
        let command = self.command.as_deref().is_none_or(|text| {
            timeline::command_line(&s.info.command).contains(text)
                || self.command_sessions.contains(&s.id)
        });
        let host = self
            .host_sessions
            .as_ref()
            .is_none_or(|set| set.contains(&s.id));
        overlaps && mode && command && host && self.scope.admits(&s.info)
    }
}
