//! Search's queries over SQLite (see [`crate::search`]): the recorder's
//! `event_terms` rows are looked up through their indexes, and the
//! matching events read back from `events` by (session, seq), so what
//! search shows is the hashed record itself, never the index.
//!
//! Sessions recorded before the index existed (not in `search_indexed`) are
//! scanned instead: their events' terms are computed into a temporary table
//! of this connection and the same query runs over it. The database is never
//! written, so search works on a read-only copy.

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};

use super::db;
use crate::search::{Criteria, FileMatch, HostMatch, SEARCHABLE, SearchHit, arrange, terms};
use crate::{
    AuditError, AuditEvent, EventKind, ExecId, SearchQuery, SearchResults, Seq, SessionId,
    StoredEvent,
};

/// The table the recorder fills, and the one scanned sessions get.
const INDEXED: &str = "main.event_terms";
const SCANNED: &str = "temp.scanned_terms";

/// The condition of `event_terms_by_verdict` (see the schema), which
/// holds no allowed decision.
const NOT_ALLOWED: &str = "verdict <> 'allow'";

/// The WHERE clause and its parameters, built once from a checked query.
struct Filter {
    sql: String,
    params: Vec<Value>,
}

impl Filter {
    fn push(&mut self, clause: &str, values: Vec<Value>) {
        self.sql.push_str(" AND ");
        self.sql.push_str(clause);
        self.params.extend(values);
    }

    fn new(c: &Criteria, within: Option<&[i64]>) -> Self {
        let mut f = Self {
            sql: String::from("1"),
            params: Vec::new(),
        };
        match &c.host {
            // Every key under "com.example." sorts between it and
            // "com.example/" ('/' follows '.').
            Some(HostMatch::Under(key)) => f.push(
                "host >= ? AND host < ?",
                vec![
                    Value::Text(format!("{key}.")),
                    Value::Text(format!("{key}/")),
                ],
            ),
            Some(HostMatch::Exact(key)) => f.push("host = ?", vec![Value::Text(key.clone())]),
            None => {}
        }
        if let Some(url) = &c.url {
            f.push("instr(url, ?) > 0", vec![Value::Text(url.clone())]);
        }
        if let Some(method) = &c.method {
            f.push("method = ?", vec![Value::Text(method.clone())]);
        }
        if let Some(verdict) = &c.verdict {
            f.push("verdict = ?", vec![Value::Text(verdict.clone())]);
            // The verdict index's own condition (see the schema), written
            // out as it is there: SQLite uses a partial index only for a
            // query that states its condition, and holds no allow in it.
            if verdict != "allow" {
                f.push(NOT_ALLOWED, Vec::new());
            }
        }
        match &c.file {
            // Everything under DIR/ sorts between "DIR/" and "DIR0".
            Some(FileMatch::Under(dir)) => {
                let dir = dir.trim_end_matches('/');
                f.push(
                    "kind = 'file' AND path >= ? AND path < ?",
                    vec![
                        Value::Text(format!("{dir}/")),
                        Value::Text(format!("{dir}0")),
                    ],
                );
            }
            // A scan of the paths alone (the index holds nothing else),
            // since no index sorts by end.
            Some(FileMatch::Named(tail)) => f.push(
                "kind = 'file' AND path IS NOT NULL AND substr(path, -?) = ?",
                vec![
                    Value::Integer(tail.chars().count() as i64),
                    Value::Text(tail.clone()),
                ],
            ),
            Some(FileMatch::Exact(path)) => f.push(
                "kind = 'file' AND path = ?",
                vec![Value::Text(path.clone())],
            ),
            None => {}
        }
        if let Some(command) = &c.command {
            f.push("instr(command, ?) > 0", vec![Value::Text(command.clone())]);
        }
        // A tool's name is in `path` too (see `Terms::path`): only an
        // `mcp_call` row is a tool.
        if let Some(tool) = &c.tool {
            f.push(
                "kind = 'mcp_call' AND path = ?",
                vec![Value::Text(tool.clone())],
            );
        }
        if let Some(since) = c.since_us {
            f.push("ts_us >= ?", vec![Value::Integer(since)]);
        }
        if let Some(until) = c.until_us {
            f.push("ts_us <= ?", vec![Value::Integer(until)]);
        }
        if let Some(sids) = within {
            // One parameter however many sessions: a JSON array.
            f.push(
                "sid IN (SELECT value FROM json_each(?))",
                vec![Value::Text(json_ints(sids))],
            );
        }
        f
    }
}

fn json_ints(sids: &[i64]) -> String {
    serde_json::Value::from(sids.to_vec()).to_string()
}

/// The sessions a query keeps to, as rows of `sessions`: the one
/// `query.session` names (already resolved into `named`), those of
/// `query.sessions`, or both (only a session in both). `None`: every
/// session.
pub(crate) fn within(
    conn: &Connection,
    named: Option<i64>,
    query: &SearchQuery,
) -> Result<Option<Vec<i64>>, AuditError> {
    let Some(ids) = &query.sessions else {
        return Ok(named.map(|sid| vec![sid]));
    };
    let ids: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
    let mut stmt = conn
        .prepare("SELECT sid FROM sessions WHERE id IN (SELECT value FROM json_each(?1))")
        .map_err(db("searching"))?;
    let mut sids: Vec<i64> = stmt
        .query_map([serde_json::Value::from(ids).to_string()], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(db("searching"))?;
    if let Some(sid) = named {
        sids.retain(|&s| s == sid);
    }
    Ok(Some(sids))
}

/// Runs `query` over every session, or only those `within` lists.
pub(crate) fn run(
    conn: &Connection,
    query: &SearchQuery,
    within: Option<&[i64]>,
) -> Result<SearchResults, AuditError> {
    let filter = Filter::new(&query.criteria()?, within);
    let indexed = has_table(conn, "event_terms")? && has_table(conn, "search_indexed")?;
    let unindexed = unindexed_sessions(conn, indexed, within)?;
    let mut keys: Vec<(i64, i64)> = Vec::new();
    if indexed {
        keys.extend(matching(conn, INDEXED, &filter)?);
    }
    if !unindexed.is_empty() {
        scan_into_temp(conn, &unindexed)?;
        let found = matching(conn, SCANNED, &filter);
        let dropped = conn
            .execute_batch("DROP TABLE IF EXISTS temp.scanned_terms")
            .map_err(db("searching older sessions"));
        keys.extend(found?);
        dropped?;
    }
    keys.sort_unstable();
    keys.dedup();
    Ok(SearchResults {
        hits: arrange(read_hits(conn, &keys)?),
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
    .map_err(db("searching"))
}

fn unindexed_sessions(
    conn: &Connection,
    indexed: bool,
    within: Option<&[i64]>,
) -> Result<Vec<i64>, AuditError> {
    let sql = if indexed {
        "SELECT sid FROM sessions WHERE sid NOT IN (SELECT sid FROM search_indexed)
         AND (?1 IS NULL OR sid IN (SELECT value FROM json_each(?1)))"
    } else {
        "SELECT sid FROM sessions WHERE (?1 IS NULL OR sid IN (SELECT value FROM json_each(?1)))"
    };
    let mut stmt = conn.prepare(sql).map_err(db("searching"))?;
    stmt.query_map([within.map(json_ints)], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(db("searching"))
}

fn matching(conn: &Connection, table: &str, f: &Filter) -> Result<Vec<(i64, i64)>, AuditError> {
    let sql = format!("SELECT DISTINCT sid, seq FROM {table} WHERE {}", f.sql);
    let mut stmt = conn.prepare(&sql).map_err(db("searching"))?;
    stmt.query_map(rusqlite::params_from_iter(f.params.iter()), |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .and_then(|rows| rows.collect())
    .map_err(db("searching"))
}

/// Computes the terms of the sessions' events into a temporary table (a
/// read-only connection may still write its own temp database).
fn scan_into_temp(conn: &Connection, sids: &[i64]) -> Result<(), AuditError> {
    let err = db("searching older sessions");
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
        .map_err(db("searching older sessions"))?;
    let mut insert = conn
        .prepare(
            "INSERT INTO temp.scanned_terms
             (sid, seq, ts_us, kind, host, method, verdict, url, path, command)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .map_err(db("searching older sessions"))?;
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
            .map_err(db("searching older sessions"))?;
        for row in rows {
            let (seq, ts_us, kind, payload) = row.map_err(db("searching older sessions"))?;
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
                    .map_err(db("searching older sessions"))?;
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
        .map_err(db("reading search results"))?;
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
            .map_err(db("reading search results"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite's plan for a query over the recorder's table.
    fn plan(query: &SearchQuery) -> String {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(super::super::schema::SCHEMA).unwrap();
        let f = Filter::new(&query.criteria().unwrap(), None);
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

    /// The verdict index holds no allowed decision (nearly every one
    /// recorded), so the recorder does not pay for them; refusals and
    /// reports, what a search by verdict looks for, stay index lookups in
    /// any spelling.
    #[test]
    fn refusals_and_reports_are_index_lookups_and_allowed_decisions_are_not_indexed() {
        let q = |verdict: &str| SearchQuery {
            verdict: Some(verdict.into()),
            ..SearchQuery::default()
        };
        for verdict in ["deny", "DENY", "report", "Report"] {
            let plan = plan(&q(verdict));
            assert!(
                plan.contains("USING INDEX event_terms_by_verdict"),
                "{verdict}: {plan}"
            );
        }
        for verdict in ["allow", "ALLOW"] {
            let plan = plan(&q(verdict));
            assert!(
                !plan.contains("event_terms_by_verdict"),
                "{verdict}: {plan}"
            );
        }
    }
}
