//! Shared helpers for the auditor's integration tests: real SQLite files in
//! temp dirs, a separate rusqlite connection for tampering, and an
//! independent implementation of the documented chain format for forging.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use airlock_auditor::{
    AuditEvent, AuditStore, ExecId, FileOp, OutputStream, SessionEnd, SessionId, SessionInfo,
    SigningKeySource,
};
use ed25519_dalek::{Signer, SigningKey};
use sha2::{Digest, Sha256};

/// A test whose prerequisite is missing (root, a tool, a kernel feature) calls
/// this and returns. In CI (`CI=true`) the test fails here instead: a green CI
/// run must mean that every test ran. Elsewhere it skips loudly, on stderr,
/// naming the test (the test harness names each test's thread after it).
#[track_caller]
pub fn skip_or_fail(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{test}: prerequisite missing in CI (CI=true), failing instead of skipping: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
}

pub struct Env {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
    pub key: PathBuf,
}

pub fn env() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("audit.db");
    let key = dir.path().join("keys/audit.key");
    Env { dir, db, key }
}

impl Env {
    pub fn store(&self) -> AuditStore {
        AuditStore::open(&self.db, SigningKeySource::KeyFile(self.key.clone())).expect("open store")
    }
    pub fn raw(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(&self.db).expect("raw connection")
    }
}

pub fn info(command: &[&str]) -> SessionInfo {
    SessionInfo {
        command: command.iter().map(|s| s.to_string()).collect(),
        policy_name: "test".into(),
        policy_text: "[[allow]]\nhost = \"example.com\"\n".into(),
        airlock_version: "0.1.0".into(),
        host: "testhost".into(),
        ..SessionInfo::default()
    }
}

pub fn exec(id: &str, parent: Option<&str>, argv: &[&str]) -> AuditEvent {
    AuditEvent::Exec {
        exec_id: ExecId::new(id),
        parent_exec_id: parent.map(ExecId::new),
        pid: 100,
        ppid: 1,
        uid: 1000,
        path: format!("/usr/bin/{}", argv[0]),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: "/work".into(),
        env_names: vec!["PATH".into(), "HOME".into()],
        env_values_nonsecret: BTreeMap::from([("PATH".into(), "/usr/bin".into())]),
        step: None,
        image: Default::default(),
    }
}

pub fn dns(name: &str) -> AuditEvent {
    AuditEvent::Dns {
        exec_id: None,
        name: name.into(),
        qtype: "A".into(),
        answer: vec!["93.184.216.34".into()],
        decision: "allow".into(),
        rule: Some("policy.toml:3".into()),
    }
}

pub fn file(path: &str, op: FileOp, content: Option<&[u8]>) -> AuditEvent {
    AuditEvent::File {
        exec_id: Some(ExecId::new("e1")),
        path: path.into(),
        op,
        size: None,
        sha256: None,
        content: content.map(|c| c.to_vec()),
        rename_to: None,
        mode: None,
        stored_content: None,
        content_over_cap: false,
        identity: Default::default(),
    }
}

pub fn output(stream: OutputStream, data: &[u8]) -> AuditEvent {
    AuditEvent::Output {
        stream,
        data: data.to_vec(),
        step: None,
    }
}

/// A session with 30 dns events and checkpoints at seq 10, 20 and 30
/// (final). Returns its id.
pub fn thirty_event_session(store: &AuditStore) -> SessionId {
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

// ---- Independent implementation of the documented chain format ----

fn put(h: &mut Sha256, b: &[u8]) {
    h.update((b.len() as u64).to_be_bytes());
    h.update(b);
}

pub fn genesis(id: &str, pk: &[u8], started: i64, info: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"airlock-audit-genesis-v1\0");
    put(&mut h, id.as_bytes());
    put(&mut h, pk);
    h.update(started.to_be_bytes());
    put(&mut h, info.as_bytes());
    h.finalize().into()
}

pub fn link(
    prev: &[u8; 32],
    seq: u64,
    ts: i64,
    kind: &str,
    exec: Option<&str>,
    payload: &[u8],
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"airlock-audit-event-v1\0");
    h.update(prev);
    h.update(seq.to_be_bytes());
    h.update(ts.to_be_bytes());
    put(&mut h, kind.as_bytes());
    match exec {
        Some(e) => {
            h.update([1u8]);
            put(&mut h, e.as_bytes());
        }
        None => h.update([0u8]),
    }
    put(&mut h, payload);
    h.finalize().into()
}

pub fn checkpoint_message(id: &str, seq: u64, hash: &[u8], end: Option<&str>) -> Vec<u8> {
    let mut m = b"airlock-audit-checkpoint-v1\0".to_vec();
    m.extend_from_slice(&(id.len() as u64).to_be_bytes());
    m.extend_from_slice(id.as_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(hash);
    match end {
        Some(e) => {
            m.push(1);
            m.extend_from_slice(&Sha256::digest(e.as_bytes()));
        }
        None => m.push(0),
    }
    m
}

/// What an attacker with write access to the DB (but not the key) can do:
/// rewrite rows, recompute the whole chain, re-sign every checkpoint with a
/// key of their own and swap the session's public key.
pub fn forge_resign(db: &Path, id: &SessionId, rewrite: impl Fn(u64, &str) -> String) {
    let conn = rusqlite::Connection::open(db).expect("open");
    let key = SigningKey::from_bytes(&[7u8; 32]);
    let pk = key.verifying_key().to_bytes();
    let fp = {
        let d = Sha256::digest(pk);
        let hex: String = d[..16].iter().map(|b| format!("{b:02x}")).collect();
        format!("SHA256:{hex}")
    };
    let (sid, started, info, end): (i64, i64, String, Option<String>) = conn
        .query_row(
            "SELECT sid, started_us, info_json, end_json FROM sessions WHERE id = ?1",
            [id.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .expect("session");
    conn.execute(
        "UPDATE sessions SET public_key = ?1, key_fingerprint = ?2 WHERE sid = ?3",
        rusqlite::params![&pk[..], fp, sid],
    )
    .expect("rekey");
    let rows: Vec<(i64, i64, i64, String, Option<String>, String)> = {
        let mut st = conn
            .prepare("SELECT rowid, seq, ts_us, kind, exec_id, payload FROM events WHERE sid = ?1 ORDER BY seq")
            .expect("prep");
        st.query_map([sid], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .expect("q")
        .collect::<Result<_, _>>()
        .expect("rows")
    };
    let mut prev = genesis(id.as_str(), &pk, started, &info);
    let mut hashes = BTreeMap::new();
    hashes.insert(0u64, prev);
    for (rowid, seq, ts, kind, exec, payload) in rows {
        let payload = rewrite(seq as u64, &payload);
        prev = link(
            &prev,
            seq as u64,
            ts,
            &kind,
            exec.as_deref(),
            payload.as_bytes(),
        );
        hashes.insert(seq as u64, prev);
        conn.execute(
            "UPDATE events SET payload = ?1, hash = ?2 WHERE rowid = ?3",
            rusqlite::params![payload, &prev[..], rowid],
        )
        .expect("rewrite");
    }
    let cps: Vec<(i64, i64, bool)> = {
        let mut st = conn
            .prepare("SELECT rowid, seq, is_final FROM checkpoints WHERE sid = ?1")
            .expect("prep");
        st.query_map([sid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("q")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    for (rowid, seq, is_final) in cps {
        let h = hashes[&(seq as u64)];
        let msg = checkpoint_message(
            id.as_str(),
            seq as u64,
            &h,
            if is_final { end.as_deref() } else { None },
        );
        let sig = key.sign(&msg).to_bytes();
        conn.execute(
            "UPDATE checkpoints SET hash = ?1, signature = ?2 WHERE rowid = ?3",
            rusqlite::params![&h[..], &sig[..], rowid],
        )
        .expect("resign");
    }
}
