//! Search across sessions: which sessions talked to a host, wrote a file or
//! ran a command (`airlock audit search`).
//!
//! The recorder writes each event's searchable values to `event_terms` in
//! the same transaction as the event (see [`terms`]), and SQLite indexes
//! them: a host is a lookup (or, for `*.example.com`, a range) on the host
//! index, a file a lookup or range on the path index. The matching events
//! are then read back from `events` by (session, seq), so what search shows
//! is the hashed record itself, never the index.
//!
//! Sessions recorded before the index existed (not in `search_indexed`) are
//! scanned instead: their events' terms are computed into a temporary table
//! of this connection and the same query runs over it. The database is never
//! written, so search works on a read-only copy; the scan costs time
//! proportional to those sessions' events, and the results say how many
//! sessions were scanned.

pub(crate) mod consistency;
pub(crate) mod terms;

use crate::{HttpExchange, TcpConnection};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};

use crate::{AuditError, AuditEvent, EventKind, ExecId, Seq, SessionId, StoredEvent};

/// What to look for. Every filter given must match (AND); at least one of
/// host, url, method, verdict, file and command must be given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchQuery {
    /// A host name (case-insensitive, exact), or `*.example.com` for every
    /// name under example.com. Matches DNS names, TCP destinations and the
    /// hosts of HTTP requests and approvals.
    pub host: Option<String>,
    /// Text the URL of an HTTP request or approval contains (case-sensitive).
    pub url: Option<String>,
    /// An HTTP method (case-insensitive).
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
    /// Only events at or after this time (µs since the epoch).
    pub since_us: Option<i64>,
    /// Only events at or before this time (µs since the epoch).
    pub until_us: Option<i64>,
    /// Only this session: its id or a unique prefix.
    pub session: Option<String>,
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
        "nothing to search for; give at least one of --host, --url, --method, --verdict, --file, --command"
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

/// The table the recorder fills, and the one scanned sessions get.
const INDEXED: &str = "main.event_terms";
const SCANNED: &str = "temp.scanned_terms";

/// Kinds that have terms (see [`terms::of`]): the only ones a scan reads.
const SEARCHABLE: [EventKind; 8] = [
    EventKind::Exec,
    EventKind::StepStart,
    EventKind::File,
    EventKind::Dns,
    EventKind::Tcp,
    EventKind::Http,
    EventKind::ApprovalRequested,
    EventKind::ApprovalDecided,
];

/// The WHERE clause and its parameters, built once from a checked query.
struct Filter {
    sql: String,
    params: Vec<Value>,
}

impl SearchQuery {
    fn filter(&self, sid: Option<i64>) -> Result<Filter, QueryError> {
        let mut f = Filter {
            sql: String::from("1"),
            params: Vec::new(),
        };
        let mut any = false;
        let push = |f: &mut Filter, clause: &str, values: Vec<Value>| {
            f.sql.push_str(" AND ");
            f.sql.push_str(clause);
            f.params.extend(values);
        };
        let text = |v: &Option<String>, flag: &'static str| match v.as_deref().map(str::trim) {
            Some("") => Err(QueryError::Blank { flag }),
            other => Ok(other.map(str::to_owned)),
        };
        if let Some(host) = text(&self.host, "--host")? {
            any = true;
            let (wild, name) = match host.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, host.as_str()),
            };
            let name = name.trim_end_matches('.');
            if name.is_empty() || name.contains(['*', '/', ' ']) || name.starts_with('.') {
                return Err(QueryError::Host(host.clone()));
            }
            let key = terms::host_key(name);
            if wild {
                // Every key under "com.example." sorts between it and
                // "com.example/" ('/' follows '.').
                push(
                    &mut f,
                    "host >= ? AND host < ?",
                    vec![
                        Value::Text(format!("{key}.")),
                        Value::Text(format!("{key}/")),
                    ],
                );
            } else {
                push(&mut f, "host = ?", vec![Value::Text(key)]);
            }
        }
        if let Some(url) = text(&self.url, "--url")? {
            any = true;
            push(&mut f, "instr(url, ?) > 0", vec![Value::Text(url)]);
        }
        if let Some(method) = text(&self.method, "--method")? {
            any = true;
            push(
                &mut f,
                "method = ?",
                vec![Value::Text(method.to_ascii_uppercase())],
            );
        }
        if let Some(verdict) = text(&self.verdict, "--verdict")? {
            any = true;
            let v = verdict.to_ascii_lowercase();
            if !["allow", "deny", "report"].contains(&v.as_str()) {
                return Err(QueryError::Verdict(verdict));
            }
            push(&mut f, "verdict = ?", vec![Value::Text(v)]);
        }
        if let Some(file) = text(&self.file, "--file")? {
            any = true;
            match file.strip_suffix('/') {
                // Everything under DIR/ sorts between "DIR/" and "DIR0".
                Some(dir) => push(
                    &mut f,
                    "path >= ? AND path < ?",
                    vec![
                        Value::Text(format!("{dir}/")),
                        Value::Text(format!("{dir}0")),
                    ],
                ),
                // A bare name is a final component, wherever it is: the
                // path ends in "/NAME". A scan of the paths alone (the
                // index holds nothing else), since no index sorts by end.
                None if !file.contains('/') => {
                    let tail = format!("/{file}");
                    push(
                        &mut f,
                        "path IS NOT NULL AND substr(path, -?) = ?",
                        vec![
                            Value::Integer(tail.chars().count() as i64),
                            Value::Text(tail),
                        ],
                    );
                }
                None => push(&mut f, "path = ?", vec![Value::Text(file)]),
            }
        }
        if let Some(command) = text(&self.command, "--command")? {
            any = true;
            push(&mut f, "instr(command, ?) > 0", vec![Value::Text(command)]);
        }
        if !any {
            return Err(QueryError::Empty);
        }
        if let (Some(since), Some(until)) = (self.since_us, self.until_us)
            && since > until
        {
            return Err(QueryError::TimeRange);
        }
        if let Some(since) = self.since_us {
            push(&mut f, "ts_us >= ?", vec![Value::Integer(since)]);
        }
        if let Some(until) = self.until_us {
            push(&mut f, "ts_us <= ?", vec![Value::Integer(until)]);
        }
        if let Some(sid) = sid {
            push(&mut f, "sid = ?", vec![Value::Integer(sid)]);
        }
        Ok(f)
    }

    /// Checks the query without running it.
    pub fn check(&self) -> Result<(), QueryError> {
        self.filter(None).map(drop)
    }
}

/// Runs `query` over every session (or the one it names).
pub(crate) fn run(
    conn: &Connection,
    query: &SearchQuery,
    sid: Option<i64>,
) -> Result<SearchResults, AuditError> {
    let filter = query.filter(sid).map_err(AuditError::Query)?;
    let indexed = has_table(conn, "event_terms")? && has_table(conn, "search_indexed")?;
    let unindexed = unindexed_sessions(conn, indexed, sid)?;
    let mut keys: Vec<(i64, i64)> = Vec::new();
    if indexed {
        keys.extend(matching(conn, INDEXED, &filter)?);
    }
    if !unindexed.is_empty() {
        scan_into_temp(conn, &unindexed)?;
        let found = matching(conn, SCANNED, &filter);
        let dropped = conn
            .execute_batch("DROP TABLE IF EXISTS temp.scanned_terms")
            .map_err(AuditError::db("searching older sessions"));
        keys.extend(found?);
        dropped?;
    }
    keys.sort_unstable();
    keys.dedup();
    let mut hits = read_hits(conn, &keys)?;
    collapse(&mut hits);
    hits.sort_by(|a, b| {
        (a.event.ts_us, a.session.as_str(), a.event.seq).cmp(&(
            b.event.ts_us,
            b.session.as_str(),
            b.event.seq,
        ))
    });
    Ok(SearchResults {
        hits,
        scanned_sessions: unindexed.len(),
    })
}

pub(crate) fn has_table(conn: &Connection, name: &str) -> Result<bool, AuditError> {
    conn.query_row(
        "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |_| Ok(()),
    )
    .optional()
    .map(|r| r.is_some())
    .map_err(AuditError::db("searching"))
}

fn unindexed_sessions(
    conn: &Connection,
    indexed: bool,
    only: Option<i64>,
) -> Result<Vec<i64>, AuditError> {
    let sql = if indexed {
        "SELECT sid FROM sessions WHERE sid NOT IN (SELECT sid FROM search_indexed)
         AND (?1 IS NULL OR sid = ?1)"
    } else {
        "SELECT sid FROM sessions WHERE (?1 IS NULL OR sid = ?1)"
    };
    let mut stmt = conn.prepare(sql).map_err(AuditError::db("searching"))?;
    stmt.query_map([only], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(AuditError::db("searching"))
}

fn matching(conn: &Connection, table: &str, f: &Filter) -> Result<Vec<(i64, i64)>, AuditError> {
    let sql = format!("SELECT DISTINCT sid, seq FROM {table} WHERE {}", f.sql);
    let mut stmt = conn.prepare(&sql).map_err(AuditError::db("searching"))?;
    stmt.query_map(rusqlite::params_from_iter(f.params.iter()), |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .and_then(|rows| rows.collect())
    .map_err(AuditError::db("searching"))
}

/// Computes the terms of the sessions' events into a temporary table (a
/// read-only connection may still write its own temp database).
fn scan_into_temp(conn: &Connection, sids: &[i64]) -> Result<(), AuditError> {
    let err = AuditError::db("searching older sessions");
    conn.execute_batch(
        "DROP TABLE IF EXISTS temp.scanned_terms;
         CREATE TEMP TABLE scanned_terms (
            sid INTEGER NOT NULL, seq INTEGER NOT NULL, ts_us INTEGER NOT NULL,
            kind TEXT NOT NULL, host TEXT, method TEXT, verdict TEXT, url TEXT,
            path TEXT, command TEXT)",
    )
    .map_err(err)?;
    let kinds: Vec<String> = SEARCHABLE
        .iter()
        .map(|k| format!("'{}'", k.as_str()))
        .collect();
    let mut read = conn
        .prepare(&format!(
            "SELECT seq, ts_us, kind, payload FROM events WHERE sid = ?1 AND kind IN ({})",
            kinds.join(",")
        ))
        .map_err(AuditError::db("searching older sessions"))?;
    let mut insert = conn
        .prepare(
            "INSERT INTO temp.scanned_terms
             (sid, seq, ts_us, kind, host, method, verdict, url, path, command)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .map_err(AuditError::db("searching older sessions"))?;
    // Stored payloads are already scrubbed; nothing more to redact.
    let none = crate::Redactor::new();
    for &sid in sids {
        let rows = read
            .query_map([sid], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(AuditError::db("searching older sessions"))?;
        for row in rows {
            let (seq, ts_us, kind, payload) =
                row.map_err(AuditError::db("searching older sessions"))?;
            // An unreadable payload is verify's to report; it matches nothing.
            let Ok(event) = serde_json::from_str::<AuditEvent>(&payload) else {
                continue;
            };
            for t in terms::of(&event, &none) {
                insert
                    .execute(params![
                        sid, seq, ts_us, kind, t.host, t.method, t.verdict, t.url, t.path,
                        t.command
                    ])
                    .map_err(AuditError::db("searching older sessions"))?;
            }
        }
    }
    Ok(())
}

fn read_hits(conn: &Connection, keys: &[(i64, i64)]) -> Result<Vec<SearchHit>, AuditError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT s.id, e.ts_us, e.kind, e.exec_id, e.payload
             FROM events e JOIN sessions s ON s.sid = e.sid
             WHERE e.sid = ?1 AND e.seq = ?2 ORDER BY e.rowid LIMIT 1",
        )
        .map_err(AuditError::db("reading search results"))?;
    let mut hits = Vec::with_capacity(keys.len());
    for &(sid, seq) in keys {
        let row = stmt
            .query_row([sid, seq], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })
            .optional()
            .map_err(AuditError::db("reading search results"))?;
        // Terms without their event (deleted since): verify reports that.
        let Some((id, ts_us, kind_text, exec_id, payload)) = row else {
            continue;
        };
        let seq = u64::try_from(seq).unwrap_or(0);
        let kind = EventKind::parse(&kind_text).ok_or_else(|| AuditError::Corrupt {
            seq,
            problem: format!("unknown kind {kind_text:?}"),
        })?;
        let event: AuditEvent =
            serde_json::from_str(&payload).map_err(|e| AuditError::Corrupt {
                seq,
                problem: e.to_string(),
            })?;
        hits.push(SearchHit {
            session: SessionId::from_stored(id),
            event: StoredEvent {
                seq: Seq(seq),
                ts_us,
                kind,
                exec_id: exec_id.map(ExecId),
                event,
            },
        });
    }
    Ok(hits)
}

/// Keeps the latest matching record of each HTTP exchange and TCP
/// connection, as the timeline does (see [`crate::collapse_exchanges`]).
fn collapse(hits: &mut Vec<SearchHit>) {
    let key = |h: &SearchHit| match &h.event.event {
        AuditEvent::Http(HttpExchange {
            exchange: Some(id), ..
        }) => Some((h.session.clone(), EventKind::Http, id.0)),
        AuditEvent::Tcp(TcpConnection {
            connection: Some(id),
            ..
        }) => Some((h.session.clone(), EventKind::Tcp, id.0)),
        _ => None,
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite's plan for a query over the recorder's table.
    fn plan(query: &SearchQuery) -> String {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(crate::schema::SCHEMA).unwrap();
        let f = query.filter(None).unwrap();
        let sql = format!(
            "EXPLAIN QUERY PLAN SELECT DISTINCT sid, seq FROM {INDEXED} WHERE {}",
            f.sql
        );
        let mut stmt = conn.prepare(&sql).unwrap();
        let rows: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(f.params.iter()), |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        rows.join("; ")
    }

    #[test]
    fn hosts_domains_files_and_directories_are_index_lookups_not_scans() {
        let q = |host: Option<&str>, file: Option<&str>| SearchQuery {
            host: host.map(Into::into),
            file: file.map(Into::into),
            since_us: Some(1),
            ..SearchQuery::default()
        };
        for (query, index) in [
            (q(Some("api.example.com"), None), "event_terms_by_host"),
            (q(Some("*.example.com"), None), "event_terms_by_host"),
            (q(None, Some("/work/a.txt")), "event_terms_by_path"),
            (q(None, Some("/work/")), "event_terms_by_path"),
        ] {
            let plan = plan(&query);
            assert!(plan.contains(&format!("USING INDEX {index}")), "{plan}");
        }
    }
}
