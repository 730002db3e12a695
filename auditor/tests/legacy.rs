//! Records written before live sessions had steps must verify and read
//! back exactly as they did. The fixtures were made by that code: a
//! finished `run` session dumped row for row (`legacy_session.sql`), its
//! public key, and what its timeline, JSONL and asciicast were then.

use std::path::PathBuf;

use airlock_auditor::export::{cast, jsonl};
use airlock_auditor::{AuditEvent, AuditStore, KeyTrust, SessionId, TrustAnchor, timeline};
use airlock_test_support::audit_store::*;

const SESSION: &str = "01a210fef705dd71dc03ee25d1e18929";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).expect("fixture")
}

/// A database holding only the legacy session, opened read-only.
fn legacy() -> (Env, AuditStore, SessionId) {
    let e = env();
    drop(e.store()); // creates the schema
    e.raw()
        .execute_batch(&read("legacy_session.sql"))
        .expect("load the fixture");
    let store = AuditStore::open_readonly(&e.db).expect("open");
    let id = store
        .resolve_session(SESSION)
        .expect("the fixture's session");
    (e, store, id)
}

#[test]
fn a_session_recorded_before_steps_still_verifies_intact_with_its_key() {
    let (_e, store, id) = legacy();
    let r = store
        .verify(&id, &TrustAnchor::KeyFile(fixture("legacy_session.pub")))
        .unwrap();
    assert!(r.is_intact(), "{r:#?}");
    assert_eq!(r.key_trust, KeyTrust::Trusted);
    assert_eq!(r.events, 13);
    let summary = store.session(&id).unwrap();
    assert_eq!(summary.steps, None, "not a live session");
}

#[test]
fn every_legacy_payload_reads_back_and_encodes_again_byte_for_byte() {
    let (e, store, id) = legacy();
    let conn = e.raw();
    let mut stmt = conn
        .prepare("SELECT payload FROM events ORDER BY seq")
        .unwrap();
    let payloads: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(payloads.len(), 13);
    for payload in &payloads {
        let event: AuditEvent = serde_json::from_str(payload).expect(payload);
        assert_eq!(event.step(), None, "{payload}");
        // The recorder writes exactly this encoding: an event without a
        // step is stored as it was before steps existed.
        assert_eq!(&serde_json::to_string(&event).unwrap(), payload);
    }
    assert_eq!(store.events(&id, None).unwrap().len(), 13);
}

#[test]
fn legacy_timeline_jsonl_and_asciicast_render_exactly_as_before() {
    let (_e, store, id) = legacy();
    let summary = store.session(&id).unwrap();
    let events = store.events(&id, None).unwrap();
    assert_eq!(
        timeline::render_text(&summary, &events, None),
        read("legacy_session.timeline.txt")
    );
    let mut json =
        serde_json::to_string_pretty(&timeline::render_json(&summary, &events, None)).unwrap();
    json.push('\n');
    assert_eq!(json, read("legacy_session.timeline.json"));
    let mut lines = Vec::new();
    jsonl::write(&id, &events, &mut lines).unwrap();
    assert_eq!(
        String::from_utf8(lines).unwrap(),
        read("legacy_session.jsonl")
    );
    let mut frames = Vec::new();
    cast::write(&summary, &events, &mut frames).unwrap();
    assert_eq!(
        String::from_utf8(frames).unwrap(),
        read("legacy_session.cast")
    );
    assert_eq!(
        timeline::session_title(&summary, None),
        "sh -c 'make test'",
        "the sessions list shows the command alone"
    );
}
