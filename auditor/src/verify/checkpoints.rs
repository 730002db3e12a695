//! The session's signed checkpoints: every signature is checked once, up
//! front, so that the chain walk only has to compare hashes with them.

use std::collections::BTreeMap;

use ed25519_dalek::{Signature, Verifier, VerifyingKey};

use super::context::Verification;
use super::signer::Signer;
use crate::chain;
use crate::{AuditError, CheckpointRow, SessionId};

impl CheckpointRow {
    /// A final checkpoint signs the session's end record too, so one
    /// without an end record cannot verify.
    fn verifies(
        &self,
        key: Option<&VerifyingKey>,
        session: &SessionId,
        end_json: Option<&str>,
    ) -> bool {
        match (
            key,
            chain::to_hash(&self.hash),
            Signature::from_slice(&self.signature),
        ) {
            (Some(k), Some(h), Ok(sig)) => {
                let end = if self.is_final { end_json } else { None };
                let end_ok = !self.is_final || end.is_some();
                end_ok
                    && k.verify(
                        &chain::checkpoint_message(session.as_str(), self.seq, &h, end),
                        &sig,
                    )
                    .is_ok()
            }
            _ => false,
        }
    }
}

/// A checkpoint with its signature checked.
pub(super) struct Checkpoint {
    pub(super) hash: Vec<u8>,
    pub(super) valid: bool,
    pub(super) is_final: bool,
}

/// Every checkpoint of the session by seq (several may share one seq).
pub(super) struct Checkpoints(BTreeMap<u64, Vec<Checkpoint>>);

impl Checkpoints {
    pub(super) fn at(&self, seq: u64) -> Option<&[Checkpoint]> {
        self.0.get(&seq).map(Vec::as_slice)
    }

    /// The highest seq a validly signed checkpoint covers.
    pub(super) fn highest_valid(&self) -> Option<u64> {
        self.0
            .iter()
            .rev()
            .find(|(_, cps)| cps.iter().any(|c| c.valid))
            .map(|(&seq, _)| seq)
    }

    /// The seqs of the validly signed final checkpoints, lowest first.
    pub(super) fn valid_finals(&self) -> Vec<u64> {
        self.0
            .iter()
            .flat_map(|(s, cps)| {
                cps.iter()
                    .filter(|c| c.valid && c.is_final)
                    .map(move |_| *s)
            })
            .collect()
    }
}

impl Verification<'_> {
    /// Reads every checkpoint and checks its signature, adding a problem
    /// for each one that does not verify.
    pub(super) fn check_signatures(&mut self, signer: &Signer) -> Result<Checkpoints, AuditError> {
        let mut checkpoints: BTreeMap<u64, Vec<Checkpoint>> = BTreeMap::new();
        for row in self.rows.checkpoints()? {
            let valid = row.verifies(
                signer.key.as_ref(),
                self.session,
                self.stored.end_json.as_deref(),
            );
            if !valid {
                self.problems.add(
                    Some(row.seq.max(1)),
                    format!(
                        "the {}checkpoint at seq {} has an invalid signature (checkpoint or session end record altered)",
                        if row.is_final { "final " } else { "" },
                        row.seq
                    ),
                );
            }
            checkpoints.entry(row.seq).or_default().push(Checkpoint {
                hash: row.hash,
                valid,
                is_final: row.is_final,
            });
        }
        Ok(Checkpoints(checkpoints))
    }
}
