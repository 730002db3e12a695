//! Recording behaviour: concurrent sessions and handles, drop without
//! finish, sync durability.

use std::sync::Arc;

use airlock_auditor::{AuditStore, SigningKeySource, TrustAnchor, VerifyOutcome};
use airlock_test_support::audit_store::{dns, env, info, thirty_event_session};

#[test]
fn concurrent_sessions_and_cloned_handles_all_verify() {
    let e = env();
    let store = Arc::new(e.store());
    let mut sessions = Vec::new();
    let mut threads = Vec::new();
    for s in 0..3 {
        let rec = store.begin_session(info(&["job", &s.to_string()])).unwrap();
        sessions.push(rec.session_id().clone());
        for t in 0..4 {
            let rec = rec.clone();
            threads.push(std::thread::spawn(move || {
                let mut last = 0;
                for i in 0..1500 {
                    let seq = rec.record(dns(&format!("s{s}-t{t}-{i}.example"))).unwrap();
                    assert!(seq.get() > last, "seq increases per handle");
                    last = seq.get();
                }
            }));
        }
        // The original handle finishes once its clones are done (below).
        threads.push(std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(1));
            drop(rec);
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    // All handles dropped without finish: flushed and signed, not finished.
    for id in &sessions {
        let r = store
            .verify(id, &TrustAnchor::KeyFile(e.key.clone()))
            .unwrap();
        assert_eq!(r.events, 6000);
        assert_eq!(r.outcome, VerifyOutcome::Incomplete, "{r:#?}");
        assert_eq!(r.verified_through.get(), 6000, "drop flushes and signs");
        assert_eq!(r.unsigned_tail, 0);
        assert!(r.problems.is_empty());
    }
}

#[test]
fn sync_makes_events_visible_to_another_connection() {
    let e = env();
    let store = e.store();
    let rec = store.begin_session(info(&["x"])).unwrap();
    for i in 0..10 {
        rec.record(dns(&format!("{i}.example"))).unwrap();
    }
    rec.sync().unwrap();
    let other = AuditStore::open_readonly(&e.db).unwrap();
    let id = rec.session_id().clone();
    assert_eq!(other.events(&id, None).unwrap().len(), 10);
    let r = other.verify(&id, &TrustAnchor::None).unwrap();
    assert_eq!(r.verified_through.get(), 10, "sync also signs a checkpoint");
    rec.finish(Default::default()).unwrap();
    assert!(other.verify(&id, &TrustAnchor::None).unwrap().is_intact());
}

#[test]
fn finished_recorder_refuses_more_events() {
    let e = env();
    let store = AuditStore::open(&e.db, SigningKeySource::Ephemeral).unwrap();
    let rec = store.begin_session(info(&["x"])).unwrap();
    let clone = rec.clone();
    rec.finish(Default::default()).unwrap();
    let err = clone.record(dns("late.example")).unwrap_err();
    assert!(err.to_string().contains("already finished"), "{err}");
}

#[test]
fn empty_session_verifies_intact() {
    let e = env();
    let store = e.store();
    let rec = store.begin_session(info(&["true"])).unwrap();
    let id = rec.session_id().clone();
    rec.finish(Default::default()).unwrap();
    let r = store
        .verify(&id, &TrustAnchor::KeyFile(e.key.clone()))
        .unwrap();
    assert!(r.is_intact(), "{r:#?}");
    assert_eq!(r.events, 0);
}

#[test]
fn readonly_store_cannot_begin_sessions() {
    let e = env();
    thirty_event_session(&e.store());
    let ro = AuditStore::open_readonly(&e.db).unwrap();
    assert!(ro.begin_session(info(&["x"])).is_err());
    let missing = AuditStore::open_readonly(&e.dir.path().join("nope.db"))
        .err()
        .unwrap();
    assert!(missing.to_string().contains("--audit-db"), "{missing}");
}
