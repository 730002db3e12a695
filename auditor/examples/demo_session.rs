//! Records a small, realistic session into an audit database so the
//! `airlock audit` readers have something to show.
//!
//!     cargo run -p airlock-auditor --example demo_session -- DB [KEY]
//!
//! KEY defaults to DB with the extension `.key`.

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
        exchange: None,
        exec_id: Some(ExecId::new("2:1")),
        method: "GET".into(),
        url: "https://api.github.com/repos/x/y?per_page=5".into(),
        http_version: "HTTP/2".into(),
        request_headers: vec![("authorization".into(), "[secret:GITHUB_TOKEN]".into())],
        request_body: None,
        request_body_truncated: false,
        status: Some(200),
        response_headers: vec![("content-type".into(), "application/json".into())],
        response_body: Some(br#"{"name":"y"}"#.to_vec()),
        response_body_truncated: false,
        bytes_up: 420,
        bytes_down: 1530,
        started_us: None,
        ms_to_headers: Some(80.0),
        ms_total: Some(95.0),
        decision: Verdict::Allow,
        rule: Some("policy.toml:4".into()),
        reason: None,
        websocket: None,
    }))?;
    rec.record(AuditEvent::File(FileChange {
        exec_id: Some(ExecId::new("2:1")),
        path: "/work/out/repo.json".into(),
        op: FileOp::Create,
        size: None,
        sha256: None,
        content: Some(br#"{"name":"y"}"#.to_vec()),
        rename_to: None,
        mode: Some(0o644),
        stored_content: None,
        content_over_cap: false,
        content_over_budget: false,
        identity: Default::default(),
        xattr: None,
    }))?;
    rec.record(AuditEvent::Http(HttpExchange {
        exchange: None,
        exec_id: Some(ExecId::new("2:1")),
        method: "POST".into(),
        url: "https://paste.example.net/upload".into(),
        http_version: "HTTP/1.1".into(),
        request_headers: vec![],
        request_body: Some(b"data".to_vec()),
        request_body_truncated: false,
        status: Some(403),
        response_headers: vec![],
        response_body: None,
        response_body_truncated: false,
        bytes_up: 4,
        bytes_down: 0,
        started_us: None,
        ms_to_headers: Some(1.0),
        ms_total: Some(1.0),
        decision: Verdict::Deny,
        rule: None,
        reason: Some("no rule allows host paste.example.net".into()),
        websocket: None,
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
