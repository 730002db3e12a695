//! An implementation of the audit chain's documented format that shares no
//! code with the auditor's, to forge what an attacker with write access to
//! the database (but not the key) could.

use std::collections::BTreeMap;
use std::path::Path;

use airlock_auditor::SessionId;
use ed25519_dalek::{Signer, SigningKey};
use sha2::{Digest, Sha256};

/// A length-prefixed field.
fn put(h: &mut Sha256, b: &[u8]) {
    h.update((b.len() as u64).to_be_bytes());
    h.update(b);
}

/// The hash a session's chain starts from.
pub fn genesis(id: &str, pk: &[u8], started: i64, info: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"airlock-audit-genesis-v1\0");
    put(&mut h, id.as_bytes());
    put(&mut h, pk);
    h.update(started.to_be_bytes());
    put(&mut h, info.as_bytes());
    h.finalize().into()
}

/// The hash of event `seq`, chained to `prev`.
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

/// What a checkpoint's signature signs.
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
/// key of their own and swap the session's public key. The session's
/// search index, which `verify` compares with the events, is dropped too,
/// as by a version that recorded none (search then scans the rewritten
/// events): only the trust anchor tells this forgery apart.
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
    for table in ["search_indexed", "event_terms"] {
        // Absent from databases made before search: nothing to drop.
        let _ = conn.execute(&format!("DELETE FROM {table} WHERE sid = ?1"), [sid]);
    }
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
