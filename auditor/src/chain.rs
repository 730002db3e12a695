//! The hash chain and the bytes that checkpoints sign.
//!
//! Encodings are length-prefixed so that no two different tuples can produce
//! the same byte string (no ambiguity between e.g. kind "ex" + exec "ec..."
//! and kind "exec").

use sha2::{Digest, Sha256};

pub(crate) type Hash = [u8; 32];

const GENESIS_DOMAIN: &[u8] = b"airlock-audit-genesis-v1\0";
const EVENT_DOMAIN: &[u8] = b"airlock-audit-event-v1\0";
const CHECKPOINT_DOMAIN: &[u8] = b"airlock-audit-checkpoint-v1\0";

fn put(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

/// h_0: binds the chain to its session id, signing key and start metadata, so
/// the session row cannot be edited or re-keyed without breaking the chain.
pub(crate) fn genesis(
    session_id: &str,
    public_key: &[u8],
    started_us: i64,
    info_json: &str,
) -> Hash {
    let mut h = Sha256::new();
    h.update(GENESIS_DOMAIN);
    put(&mut h, session_id.as_bytes());
    put(&mut h, public_key);
    h.update(started_us.to_be_bytes());
    put(&mut h, info_json.as_bytes());
    h.finalize().into()
}

/// h_n = SHA-256(h_{n-1} || seq || ts || kind || exec_id || payload).
pub(crate) fn link(
    prev: &Hash,
    seq: u64,
    ts_us: i64,
    kind: &str,
    exec_id: Option<&str>,
    payload: &[u8],
) -> Hash {
    let mut h = Sha256::new();
    h.update(EVENT_DOMAIN);
    h.update(prev);
    h.update(seq.to_be_bytes());
    h.update(ts_us.to_be_bytes());
    put(&mut h, kind.as_bytes());
    match exec_id {
        Some(id) => {
            h.update([1u8]);
            put(&mut h, id.as_bytes());
        }
        None => h.update([0u8]),
    }
    put(&mut h, payload);
    h.finalize().into()
}

/// What a checkpoint signature covers. The final checkpoint also covers the
/// session's end record, so the exit status cannot be rewritten either.
pub(crate) fn checkpoint_message(
    session_id: &str,
    seq: u64,
    hash: &Hash,
    end_json: Option<&str>,
) -> Vec<u8> {
    let mut m = Vec::with_capacity(128);
    m.extend_from_slice(CHECKPOINT_DOMAIN);
    m.extend_from_slice(&(session_id.len() as u64).to_be_bytes());
    m.extend_from_slice(session_id.as_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(hash);
    match end_json {
        Some(end) => {
            m.push(1);
            m.extend_from_slice(&Sha256::digest(end.as_bytes()));
        }
        None => m.push(0),
    }
    m
}

pub(crate) use airlock_record::{hex, sha256_hex};

pub(crate) fn to_hash(bytes: &[u8]) -> Option<Hash> {
    bytes.try_into().ok()
}
