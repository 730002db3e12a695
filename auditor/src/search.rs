//! Search across sessions: which sessions talked to a host, wrote a file or
//! ran a command (`airlock audit search`).
//!
//! The recorder writes each event's searchable values ([`Terms`], see
//! [`terms`]) beside the event in the same commit, and the store indexes
//! them: a host is a lookup (or, for `*.example.com`, a range), a file a
//! lookup or range on the paths. A query is checked here into [`Criteria`]
//! in the index's terms; each store matches them (SQLite's queries are in
//! `crate::sqlite`) and reads the matching events back by (session, seq),
//! so what search shows is the hashed record itself, never the index.
//!
//! Sessions recorded before the index existed are scanned instead: their
//! events' terms are computed at search time and matched the same way. The
//! store is never written, so search works on a read-only copy; the scan
//! costs time proportional to those sessions' events, and the results say
//! how many sessions were scanned.

pub(crate) mod consistency;
mod scope;
pub(crate) mod terms;

pub use scope::{LabelFilter, ScopeError, SessionScope};
pub use terms::Terms;

use crate::{EventKind, RecordKey, SessionId, StoredEvent};

/// What to look for. Every filter given must match (AND); at least one of
/// host, url, method, verdict, file, command and tool must be given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchQuery {
    /// A host name (case-insensitive, exact), or `*.example.com` for every
    /// name under example.com. Matches DNS names, TCP destinations, the
    /// hosts of HTTP requests and approvals, and MCP servers.
    pub host: Option<String>,
    /// Text the URL of an HTTP request or approval contains (case-sensitive).
    pub url: Option<String>,
    /// An HTTP method, or an MCP message's JSON-RPC method (`tools/call`),
    /// case-insensitive.
    pub method: Option<String>,
    /// "allow", "deny" or "report": how an HTTP request, TCP connection or
    /// DNS query was decided.
    pub verdict: Option<String>,
    /// A file's path as seen inside the sandbox (either path of a rename),
    /// a directory ending in `/` for every file under it, or a bare name
    /// (no `/`) for every file of that name in any directory.
    pub file: Option<String>,
    /// Text an exec's path or argv (joined by spaces) contains, or a live
    /// session step's command (case-sensitive).
    pub command: Option<String>,
    /// An MCP tool's name (exact, case-sensitive: servers tell tools apart
    /// by case): the `mcp_call` events that called it.
    pub tool: Option<String>,
    /// Only events at or after this time (µs since the epoch).
    pub since_us: Option<i64>,
    /// Only events at or before this time (µs since the epoch).
    pub until_us: Option<i64>,
    /// Only this session: its id or a unique prefix.
    pub session: Option<String>,
    /// Only these sessions, by full id (with `session` too: only a session
    /// in both). An empty set matches nothing. What a [`SessionScope`]
    /// (labels, node) is resolved into above the engine, so that an engine
    /// honours it as one `session IN (...)` condition.
    pub sessions: Option<Vec<SessionId>>,
}

/// One matching event.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    pub session: SessionId,
    pub event: StoredEvent,
}

/// What a search found, oldest first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SearchResults {
    pub hits: Vec<SearchHit>,
    /// Sessions recorded before the search index existed, which were
    /// scanned rather than looked up.
    pub scanned_sessions: usize,
}

/// A query that cannot be run as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error(
        "nothing to search for; give at least one of --host, --url, --method, --verdict, --file, --command, --tool"
    )]
    Empty,
    #[error("{flag} is empty; give the text to look for")]
    Blank { flag: &'static str },
    #[error(
        "invalid host pattern {0:?}: give a host name (api.example.com) or *.DOMAIN for every name under DOMAIN"
    )]
    Host(String),
    #[error("invalid verdict {0:?}: use allow, deny or report")]
    Verdict(String),
    #[error("the time range is empty: --since is after --until")]
    TimeRange,
}

/// Kinds that have terms (see [`terms::of`]): the only ones a scan reads.
pub(crate) const SEARCHABLE: [EventKind; 9] = [
    EventKind::Exec,
    EventKind::StepStart,
    EventKind::File,
    EventKind::Dns,
    EventKind::Tcp,
    EventKind::Http,
    EventKind::ApprovalRequested,
    EventKind::ApprovalDecided,
    EventKind::McpCall,
];

/// A host filter, in the index's form (see [`terms::host_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMatch {
    /// This name's key exactly.
    Exact(String),
    /// Every key under this domain's key (`*.example.com`): those that
    /// begin with it and a dot.
    Under(String),
}

/// A file filter, against the paths the index holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileMatch {
    /// This path exactly.
    Exact(String),
    /// Every path under this directory, given with its final `/`.
    Under(String),
    /// Every path that ends in this `/NAME`, wherever it is.
    Named(String),
}

/// A checked query in the index's terms: what a store matches its index
/// rows against. Every filter given must match (AND).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Criteria {
    pub host: Option<HostMatch>,
    /// Text the URL contains.
    pub url: Option<String>,
    /// Upper-case.
    pub method: Option<String>,
    /// Lower-case: "allow", "deny" or "report".
    pub verdict: Option<String>,
    pub file: Option<FileMatch>,
    /// Text the command contains.
    pub command: Option<String>,
    /// An MCP tool's name, exactly.
    pub tool: Option<String>,
    pub since_us: Option<i64>,
    pub until_us: Option<i64>,
}

impl SearchQuery {
    /// Checks the query and puts it in the index's terms.
    pub fn criteria(&self) -> Result<Criteria, QueryError> {
        let mut c = Criteria::default();
        let text = |v: &Option<String>, flag: &'static str| match v.as_deref().map(str::trim) {
            Some("") => Err(QueryError::Blank { flag }),
            other => Ok(other.map(str::to_owned)),
        };
        if let Some(host) = text(&self.host, "--host")? {
            let (wild, name) = match host.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, host.as_str()),
            };
            let name = name.trim_end_matches('.');
            if name.is_empty() || name.contains(['*', '/', ' ']) || name.starts_with('.') {
                return Err(QueryError::Host(host.clone()));
            }
            let key = terms::host_key(name);
            c.host = Some(if wild {
                HostMatch::Under(key)
            } else {
                HostMatch::Exact(key)
            });
        }
        c.url = text(&self.url, "--url")?;
        c.method = text(&self.method, "--method")?.map(|m| m.to_ascii_uppercase());
        if let Some(verdict) = text(&self.verdict, "--verdict")? {
            let v = verdict.to_ascii_lowercase();
            if !["allow", "deny", "report"].contains(&v.as_str()) {
                return Err(QueryError::Verdict(verdict));
            }
            c.verdict = Some(v);
        }
        if let Some(file) = text(&self.file, "--file")? {
            c.file = Some(match file.strip_suffix('/') {
                Some(dir) => FileMatch::Under(format!("{dir}/")),
                // A bare name is a final component, wherever it is.
                None if !file.contains('/') => FileMatch::Named(format!("/{file}")),
                None => FileMatch::Exact(file),
            });
        }
        c.command = text(&self.command, "--command")?;
        // Not trimmed: a tool is named exactly as the server spells it.
        c.tool = match self.tool.as_deref() {
            Some("") => return Err(QueryError::Blank { flag: "--tool" }),
            other => other.map(str::to_owned),
        };
        let any = c.host.is_some()
            || c.tool.is_some()
            || c.url.is_some()
            || c.method.is_some()
            || c.verdict.is_some()
            || c.file.is_some()
            || c.command.is_some();
        if !any {
            return Err(QueryError::Empty);
        }
        if let (Some(since), Some(until)) = (self.since_us, self.until_us)
            && since > until
        {
            return Err(QueryError::TimeRange);
        }
        c.since_us = self.since_us;
        c.until_us = self.until_us;
        Ok(c)
    }

    /// Checks the query without running it.
    pub fn check(&self) -> Result<(), QueryError> {
        self.criteria().map(drop)
    }
}

/// Puts a store's matching events in the order search shows them: the
/// latest record of each HTTP exchange and TCP connection, oldest first.
pub(crate) fn arrange(mut hits: Vec<SearchHit>) -> Vec<SearchHit> {
    collapse(&mut hits);
    hits.sort_by(|a, b| {
        (a.event.ts_us, a.session.as_str(), a.event.seq).cmp(&(
            b.event.ts_us,
            b.session.as_str(),
            b.event.seq,
        ))
    });
    hits
}

/// Keeps the latest matching record of each HTTP exchange, TCP connection
/// and MCP message, as the timeline does (see [`crate::collapse_exchanges`]).
fn collapse(hits: &mut Vec<SearchHit>) {
    let key = |h: &SearchHit| RecordKey::of(&h.event.event).map(|k| (h.session.clone(), k));
    let mut last = std::collections::HashMap::new();
    for (i, h) in hits.iter().enumerate() {
        if let Some(k) = key(h) {
            let entry = last.entry(k).or_insert(i);
            if hits[*entry].event.seq < h.event.seq {
                *entry = i;
            }
        }
    }
    let mut i = 0;
    hits.retain(|h| {
        let keep = key(h).is_none_or(|k| last.get(&k) == Some(&i));
        i += 1;
        keep
    });
}
