//! Audit stores written through the auditor's API: real SQLite files in
//! temp dirs, a separate rusqlite connection for tampering, and events of
//! every kind.

use airlock_auditor::{DnsQuery, Exec, FileChange, HttpExchange, Output};
use airlock_auditor::{ExchangeId, Verdict};
use std::collections::BTreeMap;
use std::path::PathBuf;

use airlock_auditor::{
    AuditEvent, AuditStore, ExecId, FileOp, OutputStream, RecordStore, SessionEnd, SessionId,
    SessionInfo, SigningKeySource,
};

/// A temp dir with the paths of a database and its signing key in it.
#[derive(Debug)]
pub struct Env {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
    pub key: PathBuf,
}

/// A fresh temp dir for one store.
pub fn env() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("audit.db");
    let key = dir.path().join("keys/audit.key");
    Env { dir, db, key }
}

impl Env {
    /// The store, opened (or created) with the key file.
    pub fn store(&self) -> AuditStore {
        AuditStore::open(&self.db, SigningKeySource::KeyFile(self.key.clone())).expect("open store")
    }

    /// A connection of its own to the database, as an attacker would open it.
    pub fn raw(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(&self.db).expect("raw connection")
    }
}

/// A session's info for `command`, with a one-rule policy.
pub fn info(command: &[&str]) -> SessionInfo {
    SessionInfo {
        command: command.iter().map(|&s| s.into()).collect(),
        policy_name: "test".into(),
        policy_text: "[[allow]]\nhost = \"example.com\"\n".into(),
        airlock_version: "0.1.0".into(),
        host: "testhost".into(),
        ..SessionInfo::default()
    }
}

/// An exec of `/usr/bin/ARGV0` with id `id`, child of `parent`.
pub fn exec(id: &str, parent: Option<&str>, argv: &[&str]) -> AuditEvent {
    AuditEvent::Exec(Exec {
        exec_id: ExecId::new(id),
        parent_exec_id: parent.map(ExecId::new),
        pid: 100,
        ppid: 1,
        uid: 1000,
        path: format!("/usr/bin/{}", argv[0]).into(),
        argv: argv.iter().map(|&s| s.into()).collect(),
        cwd: "/work".into(),
        env_names: vec!["PATH".into(), "HOME".into()],
        env_values_nonsecret: BTreeMap::from([("PATH".into(), "/usr/bin".into())]),
        image: Default::default(),
        step: None,
    })
}

/// An allowed DNS query for `name`.
pub fn dns(name: &str) -> AuditEvent {
    AuditEvent::Dns(DnsQuery {
        exec_id: None,
        name: name.into(),
        qtype: "A".into(),
        answer: vec!["93.184.216.34".into()],
        decision: Verdict::Allow,
        rule: Some("policy.toml:3".into()),
    })
}

/// A file event of exec `e1`, with `content` if given.
pub fn file(path: &str, op: FileOp, content: Option<&[u8]>) -> AuditEvent {
    AuditEvent::File(FileChange {
        exec_id: Some(ExecId::new("e1")),
        content: content.map(|c| c.to_vec()),
        ..FileChange::new(path.into(), op)
    })
}

/// What the proxy records of exchange `exchange` of exec `e2`: `method url`,
/// answered `status` (none for a refusal it answered itself), decided
/// `decision` by rule `policy.toml:12`.
pub fn http_exchange(
    exchange: u64,
    method: &str,
    url: &str,
    status: Option<u16>,
    decision: Verdict,
) -> AuditEvent {
    AuditEvent::Http(HttpExchange {
        exec_id: Some(ExecId::new("e2")),
        exchange: Some(ExchangeId(exchange)),
        status,
        bytes_up: 42,
        ms_total: Some(5.0),
        rule: Some("policy.toml:12".into()),
        ..HttpExchange::decided(method.into(), url.into(), "HTTP/1.1".into(), decision)
    })
}

/// Terminal output on `stream`.
pub fn output(stream: OutputStream, data: &[u8]) -> AuditEvent {
    AuditEvent::Output(Output {
        stream,
        data: data.to_vec(),
        step: None,
    })
}

/// A session with 30 dns events and checkpoints at seq 10, 20 and 30
/// (final). Returns its id.
pub fn thirty_event_session(store: &dyn RecordStore) -> SessionId {
    let rec = store
        .begin_session(info(&["python3", "x.py"]))
        .expect("begin");
    for i in 1..=30 {
        rec.record(dns(&format!("host{i}.example.com")))
            .expect("record");
        if i % 10 == 0 && i < 30 {
            rec.sync().expect("sync");
        }
    }
    let id = rec.session_id().clone();
    rec.finish(SessionEnd {
        exit_status: Some(0),
        ..SessionEnd::default()
    })
    .expect("finish");
    id
}

/// `r` found the session tampered with, first at `seq`, with a problem that
/// mentions `words`, and says so in its summary.
pub fn assert_tampered(r: &airlock_auditor::VerifyReport, seq: u64, words: &str) {
    assert_eq!(
        r.outcome,
        airlock_auditor::VerifyOutcome::Tampered,
        "{r:#?}"
    );
    assert_eq!(r.first_bad_seq.map(|s| s.get()), Some(seq), "{r:#?}");
    assert!(
        r.problems.iter().any(|p| p.contains(words)),
        "expected a problem mentioning {words:?}: {r:#?}"
    );
    assert!(r.summary().contains("TAMPERED"), "{}", r.summary());
}
