//! Hash chain and signatures: an untouched session verifies; every kind of
//! tampering done through a separate SQLite connection is detected and the
//! first bad seq is named.

use airlock_auditor::{AuditStore, KeyTrust, TrustAnchor, VerifyOutcome, VerifyReport};
use airlock_test_support::audit_store::{
    Env, assert_tampered, dns, env, file, info, thirty_event_session,
};
use airlock_test_support::chain::{forge_resign, link};

fn verify(e: &Env, id: &airlock_auditor::SessionId) -> VerifyReport {
    AuditStore::open_readonly(&e.db)
        .expect("open ro")
        .verify(id, &TrustAnchor::KeyFile(e.key.clone()))
        .expect("verify runs")
}

#[test]
fn untouched_session_is_intact_and_signed_by_the_trusted_key() {
    let e = env();
    let id = thirty_event_session(&e.store());
    let r = verify(&e, &id);
    assert_eq!(r.outcome, VerifyOutcome::Intact, "{r:#?}");
    assert_eq!(r.events, 30);
    assert_eq!(r.verified_through.get(), 30);
    assert_eq!(r.key_trust, KeyTrust::Trusted);
    assert!(r.finished);
    let cps: i64 = e
        .raw()
        .query_row("SELECT COUNT(*) FROM checkpoints", [], |r| r.get(0))
        .unwrap();
    assert_eq!(cps, 3, "checkpoints at 10, 20 (sync) and 30 (final)");
}

#[test]
fn key_file_is_private_and_not_in_the_database() {
    use std::os::unix::fs::PermissionsExt;
    let e = env();
    thirty_event_session(&e.store());
    let mode = std::fs::metadata(&e.key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let key_text = std::fs::read_to_string(&e.key).unwrap();
    let secret_b64 = key_text.split_whitespace().nth(1).unwrap();
    let db_bytes = std::fs::read(&e.db).unwrap();
    let wal = std::fs::read(e.db.with_extension("db-wal")).unwrap_or_default();
    for bytes in [db_bytes, wal] {
        assert!(
            !bytes
                .windows(secret_b64.len())
                .any(|w| w == secret_b64.as_bytes())
        );
    }
}

#[test]
fn group_readable_key_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let e = env();
    drop(e.store());
    std::fs::set_permissions(&e.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = AuditStore::open(
        &e.db,
        airlock_auditor::SigningKeySource::KeyFile(e.key.clone()),
    )
    .expect_err("must refuse");
    assert!(err.to_string().contains("chmod 600"), "{err}");
}

#[test]
fn modified_payload_is_detected_at_its_seq() {
    let e = env();
    let id = thirty_event_session(&e.store());
    e.raw()
        .execute(
            "UPDATE events SET payload = replace(payload, 'host7.', 'evil.') WHERE seq = 7",
            [],
        )
        .unwrap();
    assert_tampered(&verify(&e, &id), 7, "seq 7");
}

#[test]
fn modified_timestamp_is_detected() {
    let e = env();
    let id = thirty_event_session(&e.store());
    e.raw()
        .execute(
            "UPDATE events SET ts_us = ts_us - 1000000 WHERE seq = 15",
            [],
        )
        .unwrap();
    assert_tampered(&verify(&e, &id), 15, "modified");
}

#[test]
fn deleted_row_is_detected_at_its_seq() {
    let e = env();
    let id = thirty_event_session(&e.store());
    e.raw()
        .execute("DELETE FROM events WHERE seq = 12", [])
        .unwrap();
    assert_tampered(&verify(&e, &id), 12, "seq 12 is missing");
}

#[test]
fn inserted_duplicate_row_is_detected() {
    let e = env();
    let id = thirty_event_session(&e.store());
    e.raw()
        .execute(
            "INSERT INTO events (sid, seq, ts_us, kind, exec_id, payload, hash)
             SELECT sid, seq, ts_us, kind, exec_id, replace(payload, 'host5', 'fake'), hash FROM events WHERE seq = 5",
            [],
        )
        .unwrap();
    assert_tampered(&verify(&e, &id), 5, "more than once");
}

#[test]
fn appended_row_with_a_valid_link_is_detected() {
    let e = env();
    let id = thirty_event_session(&e.store());
    // The chain is public, so an attacker can compute a correct link; only
    // the signed final checkpoint exposes it.
    let conn = e.raw();
    let (sid, ts, hash): (i64, i64, Vec<u8>) = conn
        .query_row(
            "SELECT sid, ts_us, hash FROM events WHERE seq = 30",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let prev: [u8; 32] = hash.try_into().unwrap();
    let payload = r#"{"kind":"note","text":"nothing happened"}"#;
    let h = link(&prev, 31, ts + 1, "note", None, payload.as_bytes());
    conn.execute(
        "INSERT INTO events (sid, seq, ts_us, kind, exec_id, payload, hash) VALUES (?1, 31, ?2, 'note', NULL, ?3, ?4)",
        rusqlite::params![sid, ts + 1, payload, &h[..]],
    )
    .unwrap();
    assert_tampered(&verify(&e, &id), 31, "appended");
}

#[test]
fn swapped_rows_are_detected_at_the_first_of_them() {
    let e = env();
    let id = thirty_event_session(&e.store());
    let conn = e.raw();
    conn.execute_batch(
        "UPDATE events SET seq = -1 WHERE seq = 3;
         UPDATE events SET seq = 3 WHERE seq = 4;
         UPDATE events SET seq = 4 WHERE seq = -1;",
    )
    .unwrap();
    assert_tampered(&verify(&e, &id), 3, "seq 3");
}

#[test]
fn truncated_tail_is_detected() {
    let e = env();
    let id = thirty_event_session(&e.store());
    e.raw()
        .execute("DELETE FROM events WHERE seq > 25", [])
        .unwrap();
    assert_tampered(&verify(&e, &id), 26, "truncated");
}

#[test]
fn truncated_tail_with_checkpoints_removed_is_flagged() {
    let e = env();
    let id = thirty_event_session(&e.store());
    e.raw()
        .execute_batch("DELETE FROM events WHERE seq > 25; DELETE FROM checkpoints WHERE seq > 20;")
        .unwrap();
    assert_tampered(&verify(&e, &id), 21, "final signed checkpoint is missing");
}

#[test]
fn rewritten_exit_status_breaks_the_final_signature() {
    let e = env();
    let id = thirty_event_session(&e.store());
    e.raw()
        .execute(
            "UPDATE sessions SET end_json = replace(end_json, '\"exit_status\":0', '\"exit_status\":1')",
            [],
        )
        .unwrap();
    // The events themselves are untouched, but nothing after the last good
    // periodic checkpoint (seq 20) can be proven any more.
    assert_tampered(
        &verify(&e, &id),
        21,
        "final checkpoint at seq 30 has an invalid signature",
    );
}

#[test]
fn rewritten_session_metadata_breaks_the_chain_from_seq_1() {
    let e = env();
    let id = thirty_event_session(&e.store());
    e.raw()
        .execute(
            "UPDATE sessions SET info_json = replace(info_json, 'x.py', 'y.py')",
            [],
        )
        .unwrap();
    assert_tampered(&verify(&e, &id), 1, "seq 1");
}

#[test]
fn resigned_with_another_key_is_reported_as_untrusted() {
    let e = env();
    let id = thirty_event_session(&e.store());
    forge_resign(&e.db, &id, |seq, payload| {
        if seq == 7 {
            payload.replace("host7.", "innocent.")
        } else {
            payload.to_string()
        }
    });
    // Internally consistent: without a trust anchor the forgery passes...
    let ro = AuditStore::open_readonly(&e.db).unwrap();
    let unchecked = ro.verify(&id, &TrustAnchor::None).unwrap();
    assert_eq!(unchecked.outcome, VerifyOutcome::Intact, "{unchecked:#?}");
    assert_eq!(unchecked.key_trust, KeyTrust::Unchecked);
    // ...which is why verify trusts the local key file by default.
    let r = verify(&e, &id);
    assert_eq!(r.outcome, VerifyOutcome::Tampered);
    assert!(matches!(r.key_trust, KeyTrust::Untrusted { .. }));
    assert!(
        r.problems[0].contains("signed by an untrusted key"),
        "{r:#?}"
    );
}

#[test]
fn altered_file_content_blob_is_detected() {
    let e = env();
    let store = e.store();
    let rec = store.begin_session(info(&["sh"])).unwrap();
    rec.record(dns("a.example")).unwrap();
    rec.record(file(
        "/work/a.txt",
        airlock_auditor::FileOp::Create,
        Some(b"hello"),
    ))
    .unwrap();
    let id = rec.session_id().clone();
    rec.finish(Default::default()).unwrap();
    e.raw()
        .execute("UPDATE contents SET data = X'00'", [])
        .unwrap();
    assert_tampered(&verify(&e, &id), 2, "file content");
}

#[test]
fn session_prefixes_resolve_like_git() {
    let e = env();
    let store = e.store();
    let a = thirty_event_session(&store);
    let found = store.resolve_session(&a.as_str()[..20]).unwrap();
    assert_eq!(found, a);
    let err = store.resolve_session("ffffffff").unwrap_err().to_string();
    assert!(err.contains("airlock audit sessions"), "{err}");
    let sessions = store.sessions().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].events, 30);
    assert_eq!(sessions[0].info.command, vec!["python3", "x.py"]);
}
