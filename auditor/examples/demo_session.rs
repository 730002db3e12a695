//! Records a small, realistic session into an audit database so the
//! `airlock audit` readers have something to show.
//!
//!     cargo run -p airlock-auditor --example demo_session -- DB [KEY]
//!
//! KEY defaults to DB with the extension `.key`.

#![allow(clippy::print_stdout, clippy::print_stderr)] // it reports by printing
use airlock_auditor::Verdict;
use airlock_auditor::{DnsQuery, Exec, Exit, FileChange, HttpExchange, Output};
use std::collections::BTreeMap;
use std::path::PathBuf;

use airlock_auditor::{
    AuditEvent, AuditStore, ExecId, FileOp, OutputStream, SessionEnd, SessionInfo, SigningKeySource,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let db: PathBuf = args.next().ok_or("usage: demo_session DB [KEY]")?.into();
    // The auditor chooses no per-user paths: without KEY, the key sits
    // beside the database (DB with the extension .key).
    let key = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| db.with_extension("key"));
    let store = AuditStore::open(&db, SigningKeySource::KeyFile(key))?;
    let rec = store.begin_session(SessionInfo {
        command: vec!["sh".into(), "-c".into(), "python3 fetch.py".into()],
        policy_name: "default".into(),
        ..SessionInfo::default()
    })?;
    let pause = || std::thread::sleep(std::time::Duration::from_millis(15));
    let ex = |id: &str, parent: Option<&str>, argv: &[&str]| {
        AuditEvent::Exec(Exec {
            exec_id: ExecId::new(id),
            parent_exec_id: parent.map(ExecId::new),
            pid: 2,
            ppid: 1,
            uid: 1000,
            path: format!("/usr/bin/{}", argv[0]).into(),
            argv: argv.iter().map(|&s| s.into()).collect(),
            cwd: "/work".into(),
            env_names: vec!["PATH".into()],
            env_values_nonsecret: BTreeMap::new(),
            step: None,
            image: Default::default(),
        })
    };
    rec.record(ex("1:1", None, &["sh", "-c", "python3 fetch.py"]))?;
    pause();
    rec.record(ex("2:1", Some("1:1"), &["python3", "fetch.py"]))?;
    rec.record(AuditEvent::Dns(DnsQuery {
        exec_id: Some(ExecId::new("2:1")),
        name: "api.github.com".into(),
        qtype: "A".into(),
        answer: vec!["140.82.121.6".into()],
        decision: Verdict::Allow,
        rule: Some("policy.toml:4".into()),
    }))?;
    pause();
    rec.record(AuditEvent::Http(HttpExchange {
        exec_id: Some(ExecId::new("2:1")),
        request_headers: vec![("authorization".into(), "[secret:GITHUB_TOKEN]".into())],
        status: Some(200),
        response_headers: vec![("content-type".into(), "application/json".into())],
        response_body: Some(br#"{"name":"y"}"#.to_vec()),
        bytes_up: 420,
        bytes_down: 1530,
        ms_to_headers: Some(80.0),
        ms_total: Some(95.0),
        rule: Some("policy.toml:4".into()),
        ..HttpExchange::decided(
            "GET".into(),
            "https://api.github.com/repos/x/y?per_page=5".into(),
            "HTTP/2".into(),
            Verdict::Allow,
        )
    }))?;
    rec.record(AuditEvent::File(FileChange {
        exec_id: Some(ExecId::new("2:1")),
        content: Some(br#"{"name":"y"}"#.to_vec()),
        mode: Some(0o644),
        ..FileChange::new("/work/out/repo.json".into(), FileOp::Create)
    }))?;
    rec.record(AuditEvent::Http(HttpExchange {
        exec_id: Some(ExecId::new("2:1")),
        request_body: Some(b"data".to_vec()),
        status: Some(403),
        bytes_up: 4,
        ms_to_headers: Some(1.0),
        ms_total: Some(1.0),
        reason: Some("no rule allows host paste.example.net".into()),
        ..HttpExchange::decided(
            "POST".into(),
            "https://paste.example.net/upload".into(),
            "HTTP/1.1".into(),
            Verdict::Deny,
        )
    }))?;
    rec.record(AuditEvent::Output(Output {
        stream: OutputStream::Stdout,
        data: b"saved repo.json\r\n".to_vec(),
        step: None,
    }))?;
    rec.record(AuditEvent::Exit(Exit {
        exec_id: ExecId::new("2:1"),
        status: Some(0),
        signal: None,
    }))?;
    let id = rec.session_id().clone();
    rec.finish(SessionEnd {
        exit_status: Some(0),
        ..SessionEnd::default()
    })?;
    println!("{id}");
    Ok(())
}
