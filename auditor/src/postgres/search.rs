//! Search's queries over the central store (see [`crate::search`]): the
//! same [`Criteria`] SQLite matches, matched against `event_terms` through
//! its indexes, and the matching events read back from `events`, so what
//! search shows is the shipped record itself, never the index. Every
//! session here is indexed (terms are computed at shipping for those
//! recorded before search existed), so nothing is scanned.

use super::client::{Client, Queries};
use tokio_postgres::types::ToSql;

use super::db;
use super::read::stored_event;
use crate::search::{Criteria, FileMatch, HostMatch, SearchHit, arrange};
use crate::{AuditError, SearchQuery, SearchResults, SessionId};

/// The WHERE clause over `event_terms` and its parameters.
#[derive(Default)]
struct Filter {
    sql: String,
    params: Vec<Box<dyn ToSql + Sync>>,
}

impl Filter {
    /// Adds `clause`, its `?`s numbered in order as `$n`.
    fn push(&mut self, clause: &str, values: Vec<Box<dyn ToSql + Sync>>) {
        let mut numbered = String::new();
        let mut n = self.params.len();
        for part in clause.split('?').enumerate() {
            if part.0 > 0 {
                n += 1;
                numbered.push_str(&format!("${n}"));
            }
            numbered.push_str(part.1);
        }
        self.sql.push_str(" AND ");
        self.sql.push_str(&numbered);
        self.params.extend(values);
    }

    fn new(c: &Criteria, sid: Option<i64>, sessions: Option<&[SessionId]>) -> Self {
        let mut f = Self {
            sql: "TRUE".into(),
            params: Vec::new(),
        };
        let text = |s: String| -> Box<dyn ToSql + Sync> { Box::new(s) };
        match &c.host {
            // Every key under "com.example." sorts between it and
            // "com.example/" ('/' follows '.'; the column is COLLATE "C").
            Some(HostMatch::Under(key)) => f.push(
                "host >= ? AND host < ?",
                vec![text(format!("{key}.")), text(format!("{key}/"))],
            ),
            Some(HostMatch::Exact(key)) => f.push("host = ?", vec![text(key.clone())]),
            None => {}
        }
        if let Some(url) = &c.url {
            f.push("strpos(url, ?) > 0", vec![text(url.clone())]);
        }
        if let Some(method) = &c.method {
            f.push("method = ?", vec![text(method.clone())]);
        }
        if let Some(verdict) = &c.verdict {
            f.push("verdict = ?", vec![text(verdict.clone())]);
        }
        match &c.file {
            // Everything under DIR/ sorts between "DIR/" and "DIR0".
            Some(FileMatch::Under(dir)) => {
                let dir = dir.trim_end_matches('/');
                f.push(
                    "kind = 'file' AND path >= ? AND path < ?",
                    vec![text(format!("{dir}/")), text(format!("{dir}0"))],
                );
            }
            Some(FileMatch::Named(tail)) => f.push(
                "kind = 'file' AND path IS NOT NULL AND right(path, ?) = ?",
                vec![Box::new(tail.chars().count() as i32), text(tail.clone())],
            ),
            Some(FileMatch::Exact(path)) => {
                f.push("kind = 'file' AND path = ?", vec![text(path.clone())])
            }
            None => {}
        }
        if let Some(command) = &c.command {
            f.push("strpos(command, ?) > 0", vec![text(command.clone())]);
        }
        // A tool's name is in `path` too (see `Terms::path`): only an
        // `mcp_call` row is a tool.
        if let Some(tool) = &c.tool {
            f.push("kind = 'mcp_call' AND path = ?", vec![text(tool.clone())]);
        }
        if let Some(since) = c.since_us {
            f.push("ts_us >= ?", vec![Box::new(since)]);
        }
        if let Some(until) = c.until_us {
            f.push("ts_us <= ?", vec![Box::new(until)]);
        }
        if let Some(sid) = sid {
            f.push("sid = ?", vec![Box::new(sid)]);
        }
        if let Some(ids) = sessions {
            // The set labels or a node resolved into (SearchQuery::sessions):
            // one array parameter however many; an empty one matches nothing.
            let ids: Vec<String> = ids.iter().map(|id| id.as_str().to_owned()).collect();
            f.push(
                "sid IN (SELECT sid FROM sessions WHERE id = ANY(?))",
                vec![Box::new(ids)],
            );
        }
        f
    }
}

/// Runs `query` over every session, or only those `query.sessions` lists
/// (and of those, the one whose row is `sid`, when given).
pub(super) fn run(
    c: &mut Client,
    query: &SearchQuery,
    sid: Option<i64>,
) -> Result<SearchResults, AuditError> {
    let filter = Filter::new(&query.criteria()?, sid, query.sessions.as_deref());
    let sql = format!(
        "SELECT s.id, e.seq, e.ts_us, e.kind, e.exec_id, e.payload
         FROM events e JOIN sessions s ON s.sid = e.sid
         WHERE (e.sid, e.seq) IN (SELECT sid, seq FROM event_terms WHERE {})
         ORDER BY e.sid, e.seq",
        filter.sql
    );
    let params: Vec<&(dyn ToSql + Sync)> = filter.params.iter().map(|p| &**p).collect();
    let rows = c.query(&sql, &params).map_err(db("searching"))?;
    let mut hits = Vec::with_capacity(rows.len());
    for r in rows {
        hits.push(SearchHit {
            session: SessionId::from_stored(r.get(0)),
            event: stored_event(r.get(1), r.get(2), r.get(3), r.get(4), r.get(5))?,
        });
    }
    Ok(SearchResults {
        hits: arrange(hits),
        scanned_sessions: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::PgStore;
    use airlock_test_support::postgres::PgServer;

    /// Postgres's plan for the matching part of `query`, with sequential
    /// scans priced out, so that a plan without the index means the index
    /// cannot serve the query (a collation that reorders '.' and '/' would
    /// do that to the ranges).
    fn plan(store: &PgStore, query: &SearchQuery) -> String {
        let f = Filter::new(&query.criteria().unwrap(), None, None);
        let sql = format!("EXPLAIN SELECT sid, seq FROM event_terms WHERE {}", f.sql);
        let params: Vec<&(dyn ToSql + Sync)> = f.params.iter().map(|p| &**p).collect();
        store
            .with(|c| {
                let mut tx = c.transaction().unwrap();
                tx.batch_execute("SET LOCAL enable_seqscan = off").unwrap();
                let rows = tx.query(&sql, &params).unwrap();
                Ok(rows
                    .iter()
                    .map(|r| r.get::<_, String>(0))
                    .collect::<Vec<_>>()
                    .join("\n"))
            })
            .unwrap()
    }

    #[test]
    fn hosts_domains_files_and_directories_are_index_lookups_not_scans() {
        let pg = PgServer::start();
        let store = PgStore::open(&pg.url()).unwrap();
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
            let plan = plan(&store, &query);
            assert!(plan.contains(index), "{query:?}: {plan}");
            assert!(!plan.contains("Seq Scan"), "{query:?}: {plan}");
        }
    }
}
