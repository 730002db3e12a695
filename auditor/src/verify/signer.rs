//! The session's signing key: that the stored key is well formed and is the
//! one its stored fingerprint names, and whether it is the trusted key.

use ed25519_dalek::VerifyingKey;

use super::KeyTrust;
use super::context::Verification;
use crate::AuditError;
use crate::humanize;
use crate::keys::{KeyFingerprint, NodeKey, TrustAnchor, resolve_anchor};

/// The key the session says it was signed with, and the fingerprint the
/// report names it by ("invalid key" when it does not parse).
pub(super) struct Signer {
    pub(super) key: Option<VerifyingKey>,
    pub(super) fingerprint: String,
}

impl Verification<'_> {
    /// Parses the stored public key and checks it against the stored
    /// fingerprint, which is what a reader is shown and compares.
    pub(super) fn check_key(&mut self) -> Signer {
        let key = <[u8; 32]>::try_from(self.stored.public_key.as_slice())
            .ok()
            .and_then(|b| VerifyingKey::from_bytes(&b).ok());
        let fingerprint = key
            .as_ref()
            .map(|k| KeyFingerprint::of(k).0)
            .unwrap_or_else(|| "invalid key".into());
        let stored_fp = &self.stored.stored_fp;
        if key.is_none() {
            self.problems
                .add(None, "the session's public key is malformed".into());
        } else if fingerprint != *stored_fp {
            self.problems.add(
                None,
                format!("the session's key fingerprint {stored_fp} does not match its public key ({fingerprint})"),
            );
        }
        Signer { key, fingerprint }
    }

    /// Compares the signer with the trust anchor. Without an anchor only
    /// internal consistency is proven: whoever rewrote the log could have
    /// re-signed it with a key of their own.
    pub(super) fn check_trust(&mut self, signer: &Signer) -> Result<KeyTrust, AuditError> {
        if let TrustAnchor::Enrolled(keys) = self.trust {
            return Ok(self.check_enrolled(signer, keys));
        }
        Ok(match (resolve_anchor(self.trust)?, signer.key.as_ref()) {
            (None, _) => KeyTrust::Unchecked,
            (Some(t), Some(k)) if t == *k => KeyTrust::Trusted,
            (Some(t), _) => {
                let tf = KeyFingerprint::of(&t).0;
                self.problems.add(
                    None,
                    format!(
                        "signed by an untrusted key {} (trusted key is {tf}): the log may have been rewritten and re-signed",
                        signer.fingerprint
                    ),
                );
                KeyTrust::Untrusted {
                    trusted_fingerprint: tf,
                }
            }
        })
    }
}

impl Verification<'_> {
    /// A fleet's sessions are trusted when their node's key is enrolled and
    /// not revoked. Any other signer leaves the session unverified (never
    /// intact), with what to do about it; a key that signed a rewritten
    /// record is caught the same way, since the rewriter's key is not
    /// enrolled.
    fn check_enrolled(&mut self, signer: &Signer, keys: &[NodeKey]) -> KeyTrust {
        let enrolled = signer
            .key
            .as_ref()
            .and_then(|k| keys.iter().find(|n| n.key == *k));
        let fp = &signer.fingerprint;
        match enrolled {
            Some(NodeKey {
                revoked_us: None,
                name,
                ..
            }) => KeyTrust::Enrolled { node: name.clone() },
            Some(NodeKey {
                revoked_us: Some(at),
                name,
                ..
            }) => {
                self.unverified = Some(format!(
                    "signed by node key {fp}{}, which was revoked at {}: its sessions are not trusted; re-enroll it with `airlock audit keys add` only if the revocation was a mistake",
                    name.as_ref().map(|n| format!(" ({n})")).unwrap_or_default(),
                    humanize::rfc3339(*at)
                ));
                KeyTrust::Revoked {
                    node: name.clone(),
                    revoked_us: *at,
                }
            }
            None => {
                self.unverified = Some(format!(
                    "signed by {fp}, which is not an enrolled node key; if that node is yours, enroll its public key with `airlock audit keys add KEYFILE --name NODE --audit-db URL`"
                ));
                KeyTrust::NotEnrolled
            }
        }
    }
}
