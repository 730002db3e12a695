//! What one verification carries from step to step: the session as stored,
//! the store's rows it is read through, the trust anchor, and the one list
//! of problems every step adds to.

use super::signer::Signer;
use super::walk::Walk;
use super::{KeyTrust, VerifyOutcome, VerifyReport};
use crate::keys::TrustAnchor;
use crate::{AuditError, Seq, SessionId, SessionRow, SessionRows};

impl SessionRow {
    /// Any trace of an end counts: removing only part of the end record
    /// must not turn a finished session into a merely unfinished one.
    pub(super) fn finished(&self) -> bool {
        self.ended_us.is_some() || self.end_json.is_some() || self.final_seq.is_some()
    }
}

/// The problems found so far, first found first (the report keeps this
/// order), and the lowest seq any of them names.
#[derive(Default)]
pub(super) struct Problems {
    list: Vec<String>,
    first_bad: Option<u64>,
}

impl Problems {
    /// `seq` is the first event the problem proves bad, when it names one.
    pub(super) fn add(&mut self, seq: Option<u64>, text: String) {
        if let Some(s) = seq {
            self.first_bad = Some(self.first_bad.map_or(s, |f| f.min(s)));
        }
        self.list.push(text);
    }
}

/// One verification in progress; the steps are its methods, each in the
/// module named for its job.
pub(super) struct Verification<'a> {
    pub(super) rows: &'a mut dyn SessionRows,
    pub(super) session: &'a SessionId,
    pub(super) trust: &'a TrustAnchor,
    pub(super) stored: SessionRow,
    pub(super) problems: Problems,
    /// Why the signer is not trusted, when nothing else is wrong with the
    /// session: it verifies as unverified rather than tampered.
    pub(super) unverified: Option<String>,
}

impl<'a> Verification<'a> {
    pub(super) fn open(
        rows: &'a mut dyn SessionRows,
        session: &'a SessionId,
        trust: &'a TrustAnchor,
    ) -> Result<Self, AuditError> {
        let stored = rows.session()?;
        Ok(Verification {
            rows,
            session,
            trust,
            stored,
            problems: Problems::default(),
            unverified: None,
        })
    }

    /// Reads the verdict off the problem list: any problem is tampering;
    /// otherwise an unfinished session or an unsigned tail is incomplete.
    pub(super) fn report(
        mut self,
        signer: Signer,
        key_trust: KeyTrust,
        walk: &Walk,
    ) -> VerifyReport {
        let finished = self.stored.finished();
        let unsigned_tail = walk.last_seq().saturating_sub(walk.verified_through);
        let outcome = if !self.problems.list.is_empty() {
            VerifyOutcome::Tampered
        } else if self.unverified.is_some() {
            VerifyOutcome::Unverified
        } else if !finished || unsigned_tail > 0 {
            VerifyOutcome::Incomplete
        } else {
            VerifyOutcome::Intact
        };
        if let Some(why) = self.unverified.take() {
            self.problems.add(None, why);
        }
        VerifyReport {
            session: self.session.clone(),
            outcome,
            events: walk.events,
            verified_through: Seq(walk.verified_through),
            // Past a break the chain proves nothing, so no tail is "unsigned".
            unsigned_tail: if walk.chain_ok { unsigned_tail } else { 0 },
            first_bad_seq: self.problems.first_bad.map(Seq),
            problems: self.problems.list,
            key_fingerprint: signer.fingerprint,
            key_trust,
            finished,
            shipped: None,
        }
    }
}
