//! Records one session of N HTTP requests (and a DNS query and connection
//! per 50 requests) through the auditor's public API, for timing
//! `airlock policy replay` on it (bench/run's "policy-replay" case). The
//! requests are a package-install and API mix: GETs to PyPI and GitHub,
//! and JSON POSTs whose body a replayed `[allow.body]` constraint checks.
//! Prints one JSON object with the session id.
//!
//!     cargo run --release -p airlock-auditor --example replay_corpus -- N DB

#![allow(clippy::print_stdout, clippy::print_stderr)] // it reports by printing
use airlock_auditor::Verdict;
use airlock_auditor::{AuditEvent, AuditStore, SessionEnd, SessionInfo, SigningKeySource};
use airlock_auditor::{DnsQuery, HttpExchange, TcpConnection};

fn request(i: u64) -> AuditEvent {
    let (method, url, body) = match i % 4 {
        0 => (
            "GET",
            format!("https://pypi.org/simple/package-{}/", i % 1000),
            None,
        ),
        1 => (
            "GET",
            format!(
                "https://files.pythonhosted.org/packages/{:02x}/{:02x}/pkg-{}.tar.gz",
                i % 251,
                i % 241,
                i % 997
            ),
            None,
        ),
        2 => (
            "GET",
            format!(
                "https://api.github.com/repos/org/repo-{}/pulls?page=2",
                i % 50
            ),
            None,
        ),
        _ => (
            "POST",
            "https://api.example.com/v1/jobs".to_owned(),
            Some(
                format!(
                    r#"{{"priority":{},"spec":{{"name":"build-{i}"}}}}"#,
                    1 + i % 3
                )
                .into_bytes(),
            ),
        ),
    };
    AuditEvent::Http(HttpExchange {
        exchange: Some(airlock_auditor::ExchangeId(i)),
        request_headers: vec![
            ("user-agent".into(), "bench/1.0".into()),
            ("content-type".into(), "application/json".into()),
        ],
        request_body: body,
        status: Some(200),
        response_headers: vec![("content-type".into(), "application/json".into())],
        bytes_up: 300,
        bytes_down: 4000,
        ms_to_headers: Some(20.0),
        ms_total: Some(25.0),
        rule: Some("policy.toml:4".into()),
        ..HttpExchange::decided(method.into(), url, "HTTP/1.1".into(), Verdict::Allow)
    })
}

fn lookup_and_connect(i: u64) -> [AuditEvent; 2] {
    [
        AuditEvent::Dns(DnsQuery {
            exec_id: None,
            name: "pypi.org".into(),
            qtype: "A".into(),
            answer: vec!["151.101.0.223".into()],
            decision: Verdict::Allow,
            rule: None,
        }),
        AuditEvent::Tcp(TcpConnection {
            exec_id: None,
            connection: Some(airlock_auditor::ConnectionId(i)),
            dst: "151.101.0.223:443".into(),
            host: Some("pypi.org".into()),
            port: 443,
            decision: Verdict::Allow,
            rule: None,
            reason: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: None,
        }),
    ]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().ok_or("usage: replay_corpus N DB")?.parse()?;
    let db = std::path::PathBuf::from(args.next().ok_or("usage: replay_corpus N DB")?);
    let store = AuditStore::open(&db, SigningKeySource::Ephemeral)?;
    let rec = store.begin_session(SessionInfo {
        command: vec!["replay-corpus".into()],
        ..SessionInfo::default()
    })?;
    let id = rec.session_id().clone();
    for i in 0..n {
        if i % 50 == 0 {
            for event in lookup_and_connect(i) {
                rec.record(event)?;
            }
        }
        rec.record(request(i))?;
    }
    rec.finish(SessionEnd::default())?;
    println!(
        "{}",
        serde_json::json!({ "session": id.to_string(), "requests": n })
    );
    Ok(())
}
