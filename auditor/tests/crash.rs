//! Crash safety: a recorder process killed with SIGKILL mid-stream leaves a
//! database that opens cleanly and verifies up to its last checkpoint.

use std::process::Command;
use std::time::{Duration, Instant};

use airlock_auditor::{AuditStore, SigningKeySource, TrustAnchor, VerifyOutcome};
use airlock_test_support::audit_store::{dns, env, info, thirty_event_session};

const CHILD_ENV: &str = "AIRLOCK_AUDIT_CRASH_CHILD_DB";

/// Runs only as the re-executed child: records forever until killed.
#[test]
fn crash_child() {
    let Ok(db) = std::env::var(CHILD_ENV) else {
        return;
    };
    let key = std::env::var("AIRLOCK_AUDIT_CRASH_CHILD_KEY").expect("key path");
    let store = AuditStore::open(db.as_ref(), SigningKeySource::KeyFile(key.into())).expect("open");
    let rec = store.begin_session(info(&["child"])).expect("begin");
    for i in 0u64.. {
        rec.record(dns(&format!("h{i}.example.com")))
            .expect("record");
        if i % 200 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn sigkill_mid_stream_leaves_a_verifiable_database() {
    let e = env();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &e.db)
        .env("AIRLOCK_AUDIT_CRASH_CHILD_KEY", &e.key)
        .spawn()
        .expect("spawn child");

    // Wait until the child has signed a few checkpoints, then kill -9 it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "child never wrote 3 checkpoints");
        if let Ok(conn) = rusqlite::Connection::open(&e.db) {
            let n: i64 = conn
                .query_row("SELECT COUNT(*) FROM checkpoints", [], |r| r.get(0))
                .unwrap_or(0);
            if n >= 3 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL"); // Child::kill sends SIGKILL on Unix.
    let status = child.wait().unwrap();
    assert!(!status.success());

    let store = AuditStore::open_readonly(&e.db).expect("database opens cleanly after kill -9");
    let sessions = store.sessions().unwrap();
    assert_eq!(sessions.len(), 1);
    assert!(sessions[0].ended_us.is_none());
    let r = store
        .verify(&sessions[0].id, &TrustAnchor::KeyFile(e.key.clone()))
        .unwrap();
    assert_eq!(r.outcome, VerifyOutcome::Incomplete, "{r:#?}");
    assert!(r.problems.is_empty(), "{r:#?}");
    assert!(r.verified_through.get() >= 2000, "{r:#?}");
    assert_eq!(r.events, r.verified_through.get() + r.unsigned_tail);
    assert!(!r.is_intact());
    println!("{}", r.summary());

    // And the same database keeps working for new sessions.
    let store = e.store();
    let id = thirty_event_session(&store);
    let r = store
        .verify(&id, &TrustAnchor::KeyFile(e.key.clone()))
        .unwrap();
    assert!(r.is_intact(), "{r:#?}");
}
