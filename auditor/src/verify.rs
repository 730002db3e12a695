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
    /// Nothing is wrong with the chain, but it was signed by a key the
    /// store does not trust: a central store's session whose node key is
    /// not enrolled, or was revoked.
    Unverified,
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
    /// Signed by an enrolled node key of the central store.
    Enrolled { node: Option<String> },
    /// Signed by a node key the central store does not hold.
    NotEnrolled,
    /// Signed by an enrolled node key that was revoked.
    Revoked {
        node: Option<String>,
        revoked_us: i64,
    },
}

/// How far a central store holds a session whose end it never received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ShippedUpTo {
    /// The last event it holds (0: none).
    pub seq: Seq,
    /// That event's time (µs since the epoch); the session's start when
    /// it holds none.
    pub ts_us: i64,
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
    /// On a central store, for a session whose end was never shipped: how
    /// far it was shipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shipped: Option<ShippedUpTo>,
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
            KeyTrust::Enrolled { node: Some(n) } => format!("signed by enrolled node key of {n}"),
            KeyTrust::Enrolled { node: None } => "signed by an enrolled node key".to_string(),
            KeyTrust::NotEnrolled => "signed by a key that is NOT ENROLLED".to_string(),
            KeyTrust::Revoked { .. } => "signed by a REVOKED node key".to_string(),
        };
        match self.outcome {
            VerifyOutcome::Intact => format!(
                "{}: intact: {} events, chain and signatures valid, {trust} ({})",
                self.session, self.events, self.key_fingerprint
            ),
            VerifyOutcome::Incomplete if self.shipped.is_some() && !self.finished => {
                let shipped = self.shipped.unwrap_or(ShippedUpTo {
                    seq: Seq(0),
                    ts_us: 0,
                });
                format!(
                    "{}: INCOMPLETE: shipped up to event {} at {}, and its end never was (the node stopped shipping: it died, lost its way to the store, or the session is still running); verified through seq {}, {} unsigned tail event(s); {trust}",
                    self.session,
                    shipped.seq,
                    crate::humanize::rfc3339(shipped.ts_us),
                    self.verified_through,
                    self.unsigned_tail
                )
            }
            VerifyOutcome::Incomplete => format!(
                "{}: INCOMPLETE: verified through seq {}, {} unsigned tail event(s), session never finished (crash or still running); {trust}",
                self.session, self.verified_through, self.unsigned_tail
            ),
            VerifyOutcome::Unverified => format!(
                "{}: UNVERIFIED: {} events, chain and signatures consistent, but {}",
                self.session,
                self.events,
                self.problems.first().cloned().unwrap_or_default()
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
