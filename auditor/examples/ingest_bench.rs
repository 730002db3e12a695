//! Raw ingest rate of the audit store with realistic small events (a mix of
//! exec, dns, tcp, http and file-metadata events, ~300-600 bytes of JSON
//! each). Prints one JSON object.
//!
//!     cargo run --release -p airlock-auditor --example ingest_bench -- [EVENTS] [DB]
//!
//! `writer_cpu_us_per_event` is the CPU time of every thread but the main
//! one (the session's `audit-…` writer thread: chain, signing, SQLite)
//! from the first `record` to `finish`, divided by the events: the figure
//! that holds on a shared machine, where the wall-clock rate swings.

#![allow(clippy::print_stdout, clippy::print_stderr)] // it reports by printing
use airlock_auditor::Verdict;
use airlock_auditor::{DnsQuery, Exec, FileChange, HttpExchange, TcpConnection};
use std::collections::BTreeMap;
use std::time::Instant;

use airlock_auditor::{
    AuditEvent, AuditStore, ExecId, FileOp, SessionEnd, SessionInfo, SigningKeySource, TrustAnchor,
};

fn event(i: u64) -> AuditEvent {
    let exec_id = Some(ExecId::new(format!("{}:{}", 1000 + i % 7, 12345)));
    match i % 5 {
        0 => AuditEvent::Exec(Exec {
            exec_id: ExecId::new(format!("{}:{}", 1000 + i, 12345)),
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
                "requests".into(),
            ],
            cwd: "/work".into(),
            env_names: vec!["PATH".into(), "HOME".into(), "LANG".into()],
            env_values_nonsecret: BTreeMap::from([("LANG".into(), "C.UTF-8".into())]),
            step: None,
            image: Default::default(),
        }),
        1 => AuditEvent::Dns(DnsQuery {
            exec_id,
            name: format!("host{}.pypi.org", i % 100),
            qtype: "A".into(),
            answer: vec!["151.101.0.223".into(), "151.101.64.223".into()],
            decision: Verdict::Allow,
            rule: Some("policy.toml:12".into()),
        }),
        2 => AuditEvent::Tcp(TcpConnection {
            connection: None,
            exec_id,
            dst: "151.101.0.223:443".into(),
            host: Some("pypi.org".into()),
            port: 443,
            decision: Verdict::Allow,
            rule: Some("policy.toml:12".into()),
            reason: None,
            bytes_up: 1200 + i % 500,
            bytes_down: 50_000 + i % 9000,
            duration_ms: Some(42.0),
        }),
        3 => AuditEvent::Http(HttpExchange {
            exec_id,
            request_headers: vec![
                ("user-agent".into(), "pip/24.0".into()),
                (
                    "accept".into(),
                    "application/vnd.pypi.simple.v1+json".into(),
                ),
            ],
            status: Some(200),
            response_headers: vec![("content-type".into(), "application/json".into())],
            response_body: Some(br#"{"files":[],"meta":{"api-version":"1.1"}}"#.to_vec()),
            bytes_up: 300,
            bytes_down: 4000,
            ms_to_headers: Some(20.0),
            ms_total: Some(25.0),
            rule: Some("policy.toml:12".into()),
            ..HttpExchange::decided(
                "GET".into(),
                format!("https://pypi.org/simple/package-{}/", i % 1000),
                "HTTP/2".into(),
                Verdict::Allow,
            )
        }),
        _ => AuditEvent::File(FileChange {
            exec_id,
            size: Some(4096),
            sha256: Some("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into()),
            mode: Some(0o644),
            ..FileChange::new(
                format!(
                    "/work/.venv/lib/python3.12/site-packages/pkg/mod{}.py",
                    i % 500
                )
                .into(),
                FileOp::Modify,
            )
        }),
    }
}

/// CPU time (user + system) in microseconds from a `/proc/…/stat` file:
/// `/proc/self/stat` counts every thread of the process, exited ones
/// included; `/proc/thread-self/stat` the calling thread only.
fn cpu_us(stat: &str) -> Result<f64, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(stat)?;
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is the first, utime the 12th, stime the 13th.
    let after = text.rsplit_once(')').ok_or("unreadable stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // USER_HZ, 100 on every Linux architecture this runs on.
    Ok(ticks as f64 * 10_000.0)
}

/// CPU of the threads other than this one, in microseconds.
fn others_cpu_us() -> Result<f64, Box<dyn std::error::Error>> {
    Ok(cpu_us("/proc/self/stat")? - cpu_us("/proc/thread-self/stat")?)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(500_000);
    let tmp = std::env::temp_dir().join(format!("airlock-ingest-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let db = args
        .next()
        .map(Into::into)
        .unwrap_or_else(|| tmp.join("bench.db"));

    let store = AuditStore::open(&db, SigningKeySource::Ephemeral)?;
    let events: Vec<AuditEvent> = (0..n).map(event).collect();
    let payload_bytes: usize = events
        .iter()
        .map(|e| serde_json::to_vec(e).map_or(0, |v| v.len()))
        .sum();

    let rec = store.begin_session(SessionInfo {
        command: vec!["bench".into()],
        ..SessionInfo::default()
    })?;
    let id = rec.session_id().clone();
    let cpu_before = others_cpu_us()?;
    let start = Instant::now();
    for ev in events {
        rec.record(ev)?;
    }
    let queued = start.elapsed();
    rec.finish(SessionEnd::default())?;
    let total = start.elapsed();
    let writer_cpu_us = others_cpu_us()? - cpu_before;

    let vstart = Instant::now();
    let key = store.public_key().ok_or("no key")?;
    let report = store.verify(&id, &TrustAnchor::PublicKey(key))?;
    let verify_s = vstart.elapsed().as_secs_f64();

    let db_size = std::fs::metadata(&db)?.len()
        + std::fs::metadata(db.with_extension("db-wal")).map_or(0, |m| m.len());
    println!(
        "{}",
        serde_json::json!({
            "events": n,
            "avg_payload_bytes": payload_bytes as f64 / n as f64,
            "seconds_to_durable": total.as_secs_f64(),
            "events_per_second": n as f64 / total.as_secs_f64(),
            "record_call_events_per_second": n as f64 / queued.as_secs_f64(),
            "writer_cpu_us_per_event": writer_cpu_us / n as f64,
            "verify_seconds": verify_s,
            "verify_events_per_second": n as f64 / verify_s,
            "intact": report.is_intact(),
            "db_bytes": db_size,
        })
    );
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}
