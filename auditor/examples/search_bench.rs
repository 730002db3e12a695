//! Search across sessions at scale (issue 17): SESSIONS sessions holding
//! SESSIONS x PER_SESSION events in all, then `SEARCHES` searches by host
//! and by file path, each timed from opening the database read-only to
//! holding the matching events (what `airlock audit search` does). Prints
//! one JSON object with the medians.
//!
//!     cargo run --release -p airlock-auditor --example search_bench -- \
//!         [SESSIONS] [PER_SESSION] [SEARCHES] [DB]
//!
//! A DB that already holds the sessions is reused rather than generated
//! again, so repeated runs time only the searches.

#![allow(clippy::print_stdout, clippy::print_stderr)] // it reports by printing
use airlock_auditor::Verdict;
use airlock_auditor::{DnsQuery, Exec, FileChange, HttpExchange, TcpConnection};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use airlock_auditor::{
    AuditEvent, AuditStore, ExecId, FileOp, SearchQuery, SessionEnd, SessionInfo, SessionMode,
    SigningKeySource,
};

/// The host and file the searches look for: a few sessions contacted and
/// wrote them, as an incident responder's needle in the haystack.
const NEEDLE_HOST: &str = "exfil.example.net";
const NEEDLE_FILE: &str = "/work/.ssh/id_ed25519";
/// One session in this many has the needles.
const NEEDLE_EVERY: u64 = 250;

fn event(session: u64, i: u64) -> AuditEvent {
    let exec_id = Some(ExecId::new(format!("{}:{}", 1000 + i % 7, session)));
    let host = format!("pkg{}.pypi.org", (session + i) % 200);
    match i % 5 {
        0 => AuditEvent::Exec(Exec {
            exec_id: ExecId::new(format!("{}:{}", 1000 + i, session)),
            parent_exec_id: exec_id,
            pid: (1000 + i % 30000) as i32,
            ppid: 1000,
            uid: 1000,
            path: "/usr/bin/python3".into(),
            argv: vec![
                "python3".into(),
                "-m".into(),
                "pip".into(),
                "install".into(),
                format!("package-{}", i % 1000).into(),
            ],
            cwd: "/work".into(),
            env_names: vec!["PATH".into(), "HOME".into(), "LANG".into()],
            env_values_nonsecret: BTreeMap::from([("LANG".into(), "C.UTF-8".into())]),
            step: None,
            image: Default::default(),
        }),
        1 => AuditEvent::Dns(DnsQuery {
            exec_id,
            name: host,
            qtype: "A".into(),
            answer: vec!["151.101.0.223".into()],
            decision: Verdict::Allow,
            rule: Some("policy.toml:12".into()),
        }),
        2 => AuditEvent::Tcp(TcpConnection {
            connection: None,
            exec_id,
            dst: "151.101.0.223:443".into(),
            host: Some(host),
            port: 443,
            decision: if i.is_multiple_of(97) {
                Verdict::Deny
            } else {
                Verdict::Allow
            },
            rule: Some("policy.toml:12".into()),
            reason: None,
            bytes_up: 1200,
            bytes_down: 50_000,
            duration_ms: Some(42.0),
        }),
        3 => http(
            exec_id,
            &format!("https://{host}/simple/package-{}/", i % 1000),
        ),
        _ => AuditEvent::File(FileChange {
            exec_id,
            size: Some(4096),
            sha256: Some("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into()),
            mode: Some(0o644),
            ..FileChange::new(
                format!(
                    "/work/.venv/lib/python3.12/site-packages/pkg{}/mod{}.py",
                    session % 50,
                    i % 500
                )
                .into(),
                FileOp::Modify,
            )
        }),
    }
}

fn http(exec_id: Option<ExecId>, url: &str) -> AuditEvent {
    AuditEvent::Http(HttpExchange {
        exec_id,
        request_headers: vec![("user-agent".into(), "pip/24.0".into())],
        status: Some(200),
        response_headers: vec![("content-type".into(), "application/json".into())],
        response_body: Some(br#"{"files":[],"meta":{"api-version":"1.1"}}"#.to_vec()),
        bytes_up: 300,
        bytes_down: 4000,
        ms_to_headers: Some(20.0),
        ms_total: Some(25.0),
        rule: Some("policy.toml:12".into()),
        ..HttpExchange::decided("GET".into(), url.into(), "HTTP/2".into(), Verdict::Allow)
    })
}

/// The needles: a lookup, a connection, a request and the key written.
fn needles() -> Vec<AuditEvent> {
    let exec_id = Some(ExecId::new("666:1"));
    let mut file = event(0, 4);
    if let AuditEvent::File(FileChange { path, .. }) = &mut file {
        *path = NEEDLE_FILE.into();
    }
    vec![
        AuditEvent::Dns(DnsQuery {
            exec_id: exec_id.clone(),
            name: NEEDLE_HOST.into(),
            qtype: "A".into(),
            answer: vec!["203.0.113.9".into()],
            decision: Verdict::Allow,
            rule: None,
        }),
        http(exec_id, &format!("https://{NEEDLE_HOST}/upload")),
        file,
    ]
}

fn generate(db: &Path, sessions: u64, per_session: u64) -> Result<(), Box<dyn std::error::Error>> {
    let store = AuditStore::open(db, SigningKeySource::Ephemeral)?;
    let modes = [
        SessionMode::Run,
        SessionMode::Proxy,
        SessionMode::Sidecar,
        SessionMode::Session,
    ];
    for s in 0..sessions {
        let rec = store.begin_session(SessionInfo {
            command: vec!["bench".into(), s.to_string().into()],
            mode: modes[(s % 4) as usize],
            ..SessionInfo::default()
        })?;
        let mut n = per_session;
        if s % NEEDLE_EVERY == 7 {
            for ev in needles() {
                rec.record(ev)?;
                n = n.saturating_sub(1);
            }
        }
        for i in 0..n {
            rec.record(event(s, i))?;
        }
        rec.finish(SessionEnd::default())?;
    }
    Ok(())
}

fn median(mut ms: Vec<f64>) -> f64 {
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
}

/// Median milliseconds of `searches` runs of `query`, and its hit count.
fn time(
    db: &Path,
    query: &SearchQuery,
    searches: usize,
) -> Result<(f64, usize), Box<dyn std::error::Error>> {
    let mut ms = Vec::with_capacity(searches);
    let mut hits = 0;
    for _ in 0..searches {
        let start = Instant::now();
        let store = AuditStore::open_readonly(db)?;
        let found = store.search(query)?;
        ms.push(start.elapsed().as_secs_f64() * 1000.0);
        hits = found.hits.len();
        if found.scanned_sessions > 0 {
            return Err("sessions were scanned, not looked up".into());
        }
    }
    Ok((median(ms), hits))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut number = |default: u64| -> Result<u64, Box<dyn std::error::Error>> {
        Ok(args
            .next()
            .map(|a| a.parse())
            .transpose()?
            .unwrap_or(default))
    };
    let sessions = number(1000)?;
    let per_session = number(1000)?;
    let searches = number(21)?.max(1) as usize;
    let db = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("airlock-search-bench-{sessions}x{per_session}.db"))
        });

    let existing = if db.exists() {
        AuditStore::open_readonly(&db)?.sessions()?.len() as u64
    } else {
        0
    };
    let generate_s = if existing == sessions {
        None
    } else if existing == 0 {
        let start = Instant::now();
        generate(&db, sessions, per_session)?;
        Some(start.elapsed().as_secs_f64())
    } else {
        return Err(format!(
            "{} holds {existing} sessions, not {sessions}: remove it or pass another DB",
            db.display()
        )
        .into());
    };

    let by_host = SearchQuery {
        host: Some(NEEDLE_HOST.into()),
        ..SearchQuery::default()
    };
    let by_file = SearchQuery {
        file: Some(NEEDLE_FILE.into()),
        ..SearchQuery::default()
    };
    let (host_ms, host_hits) = time(&db, &by_host, searches)?;
    let (file_ms, file_hits) = time(&db, &by_file, searches)?;
    // Not a needle: every refused connection to any pypi.org host, for
    // what a search returning thousands of events costs.
    let wide = SearchQuery {
        host: Some("*.pypi.org".into()),
        verdict: Some("deny".into()),
        ..SearchQuery::default()
    };
    let (wide_ms, wide_hits) = time(&db, &wide, searches)?;
    let expected = sessions.div_ceil(NEEDLE_EVERY).min(sessions) as usize;
    if host_hits == 0 || file_hits == 0 || file_hits > expected {
        return Err(format!("unexpected hits: host {host_hits}, file {file_hits}").into());
    }
    println!(
        "{}",
        serde_json::json!({
            "sessions": sessions,
            "events": sessions * per_session,
            "generate_seconds": generate_s,
            "searches": searches,
            "host_ms_median": host_ms,
            "host_hits": host_hits,
            "file_ms_median": file_ms,
            "file_hits": file_hits,
            "wide_ms_median": wide_ms,
            "wide_hits": wide_hits,
            "db_bytes": std::fs::metadata(&db)?.len(),
        })
    );
    Ok(())
}
