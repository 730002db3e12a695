//! Verification: recompute a session's hash chain from the stored rows and
//! check every signed checkpoint against it.
//!
//! What this proves: every event up to the last valid checkpoint is exactly
//! what the recorder wrote, in order, with none missing or added, and (given a
//! trust anchor) that the recorder held the trusted key. What it cannot
//! prove: that a whole session was not deleted, or that events after the last
//! checkpoint of an unfinished (crashed) session are genuine — those are
//! reported as an unsigned tail.

//!
//! The check is a series of steps, each with one job and each adding to one
//! list of problems ([`context::Problems`]): the session's key and its trust,
//! the checkpoints' signatures, the chain walk (with each event's contents
//! and search index rows), and the end of the session. The order of the
//! steps is the order of the problems in the report, so it is kept as is.

mod checkpoints;
mod contents;
mod context;
mod end;
mod signer;
mod walk;

use serde::Serialize;

use crate::keys::TrustAnchor;
use crate::{AuditError, Seq, SessionId, SessionRows};
use context::Verification;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyOutcome {
    /// Chain and signatures check out, the session finished, and its final
    /// checkpoint covers every event.
    Intact,
    /// Nothing is wrong with what is signed, but the session never finished
    /// (crash, kill -9, still running): events after the last checkpoint are
    /// unproven.
    Incomplete,
    /// Something was modified, deleted, inserted, reordered, truncated or
    /// re-signed.
    Tampered,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "status")]
pub enum KeyTrust {
    /// The session's key is the trusted key.
    Trusted,
    /// The session was signed by some other key.
    Untrusted { trusted_fingerprint: String },
    /// No trust anchor was given: only internal consistency was checked.
    Unchecked,
}

#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub session: SessionId,
    pub outcome: VerifyOutcome,
    /// Event rows examined.
    pub events: u64,
    /// Highest seq proven by a valid signed checkpoint (0 if none).
    pub verified_through: Seq,
    /// Events after `verified_through` that no checkpoint covers.
    pub unsigned_tail: u64,
    /// The first event that is not what was recorded, when one can be named.
    pub first_bad_seq: Option<Seq>,
    /// One line per problem, first problem first.
    pub problems: Vec<String>,
    pub key_fingerprint: String,
    pub key_trust: KeyTrust,
    pub finished: bool,
}

impl VerifyReport {
    pub fn is_intact(&self) -> bool {
        self.outcome == VerifyOutcome::Intact
    }

    /// One line for humans.
    pub fn summary(&self) -> String {
        let trust = match &self.key_trust {
            KeyTrust::Trusted => "signed by the trusted key".to_string(),
            KeyTrust::Untrusted { .. } => "signed by an UNTRUSTED key".to_string(),
            KeyTrust::Unchecked => "signer not checked (no trusted key given)".to_string(),
        };
        match self.outcome {
            VerifyOutcome::Intact => format!(
                "{}: intact: {} events, chain and signatures valid, {trust} ({})",
                self.session, self.events, self.key_fingerprint
            ),
            VerifyOutcome::Incomplete => format!(
                "{}: INCOMPLETE: verified through seq {}, {} unsigned tail event(s), session never finished (crash or still running); {trust}",
                self.session, self.verified_through, self.unsigned_tail
            ),
            VerifyOutcome::Tampered => format!(
                "{}: TAMPERED: {}{}",
                self.session,
                self.first_bad_seq
                    .map(|s| format!("first bad seq {s}: "))
                    .unwrap_or_default(),
                self.problems.first().cloned().unwrap_or_default()
            ),
        }
    }
}

/// Verifies one session: each step below adds what it finds to the same
/// list of problems, and the report is read off that list at the end.
pub(crate) fn verify_session(
    rows: &mut dyn SessionRows,
    session: &SessionId,
    trust: &TrustAnchor,
) -> Result<VerifyReport, AuditError> {
    let mut v = Verification::open(rows, session, trust)?;
    let signer = v.check_key();
    let key_trust = v.check_trust(&signer)?;
    let checkpoints = v.check_signatures(&signer)?;
    let walk = v.walk_chain(&checkpoints)?;
    v.check_end(&walk, &checkpoints);
    Ok(v.report(signer, key_trust, &walk))
}
