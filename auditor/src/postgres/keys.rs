//! The enrolled node keys: which signers the central store trusts
//! (`airlock audit keys add|list|revoke`).

use super::client::{Queries, Row};
use ed25519_dalek::VerifyingKey;

use super::db;
use super::error::CentralError;
use super::store::PgStore;
use crate::{AuditError, KeyFingerprint, NodeKey};

const COLUMNS: &str = "public_key, fingerprint, name, added_us, revoked_us";

fn node_key(r: &Row) -> Result<NodeKey, AuditError> {
    let bytes: &[u8] = r.get(0);
    let fingerprint: String = r.get(1);
    let key = <[u8; 32]>::try_from(bytes)
        .ok()
        .and_then(|b| VerifyingKey::from_bytes(&b).ok())
        .ok_or_else(|| CentralError::BadKey(format!("the enrolled key {fingerprint}")))?;
    Ok(NodeKey {
        fingerprint: KeyFingerprint(fingerprint),
        key,
        name: r.get(2),
        added_us: r.get(3),
        revoked_us: r.get(4),
    })
}

/// `SHA256:…` as `airlock audit keys list` shows it, with or without its
/// prefix.
fn normalized(fingerprint: &str) -> String {
    let fp = fingerprint.trim();
    match fp.strip_prefix("SHA256:") {
        Some(_) => fp.to_string(),
        None => format!("SHA256:{fp}"),
    }
}

impl PgStore {
    /// Every enrolled node key, revoked ones included, oldest first.
    pub fn node_keys(&self) -> Result<Vec<NodeKey>, AuditError> {
        self.with(|c| {
            c.query(
                &format!("SELECT {COLUMNS} FROM node_keys ORDER BY added_us, fingerprint"),
                &[],
            )
            .map_err(db("listing node keys"))?
            .iter()
            .map(node_key)
            .collect()
        })
    }

    /// Enrolls a node's public key under `name`. Enrolling a key again
    /// renames it, and lifts its revocation: enrolling is the operator
    /// saying it is trusted.
    pub fn enroll(&self, key: &VerifyingKey, name: Option<&str>) -> Result<NodeKey, AuditError> {
        let fp = KeyFingerprint::of(key).0;
        self.with(|c| {
            let row = c
                .query_one(
                    &format!(
                        "INSERT INTO node_keys (fingerprint, public_key, name, added_us)
                         VALUES ($1, $2, $3, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
                         ON CONFLICT (fingerprint) DO UPDATE
                           SET name = COALESCE(EXCLUDED.name, node_keys.name), revoked_us = NULL,
                               changes = node_keys.changes + 1
                         RETURNING {COLUMNS}"
                    ),
                    &[&fp, &&key.as_bytes()[..], &name],
                )
                .map_err(db("enrolling a node key"))?;
            node_key(&row)
        })
    }

    /// Revokes the key with this fingerprint: every session it signed
    /// verifies as unverified from now on. Revoking twice keeps the first
    /// time.
    pub fn revoke(&self, fingerprint: &str) -> Result<NodeKey, AuditError> {
        let fp = normalized(fingerprint);
        self.with(|c| {
            let row = c
                .query_opt(
                    &format!(
                        "UPDATE node_keys
                         SET revoked_us = COALESCE(revoked_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint),
                             changes = changes + 1
                         WHERE fingerprint = $1 RETURNING {COLUMNS}"
                    ),
                    &[&fp],
                )
                .map_err(db("revoking a node key"))?
                .ok_or(CentralError::UnknownKey(fp))?;
            node_key(&row)
        })
    }
}
