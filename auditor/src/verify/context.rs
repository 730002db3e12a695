//! What one verification carries from step to step: the session as stored,
//! the connection it is read through, the trust anchor, and the one list of
//! problems every step adds to.

use rusqlite::Connection;

use super::signer::Signer;
use super::walk::Walk;
use super::{KeyTrust, VerifyOutcome, VerifyReport};
use crate::keys::TrustAnchor;
use crate::{AuditError, Seq, SessionId};

/// The `sessions` row, as stored (nothing in it is trusted yet).
pub(super) struct SessionRow {
    pub(super) started_us: i64,
    pub(super) info_json: String,
    pub(super) public_key: Vec<u8>,
    pub(super) stored_fp: String,
    pub(super) ended_us: Option<i64>,
    pub(super) end_json: Option<String>,
    pub(super) final_seq: Option<i64>,
}

impl SessionRow {
    fn read(conn: &Connection, sid: i64) -> Result<Self, AuditError> {
        conn.query_row(
            "SELECT started_us, info_json, public_key, key_fingerprint, ended_us, end_json, final_seq
             FROM sessions WHERE sid = ?1",
            [sid],
            |r| {
                Ok(Self {
                    started_us: r.get(0)?,
                    info_json: r.get(1)?,
                    public_key: r.get(2)?,
                    stored_fp: r.get(3)?,
                    ended_us: r.get(4)?,
                    end_json: r.get(5)?,
                    final_seq: r.get(6)?,
                })
            },
        )
        .map_err(AuditError::db("verifying the session"))
    }

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
    pub(super) conn: &'a Connection,
    pub(super) sid: i64,
    pub(super) session: &'a SessionId,
    pub(super) trust: &'a TrustAnchor,
    pub(super) stored: SessionRow,
    pub(super) problems: Problems,
}

impl<'a> Verification<'a> {
    pub(super) fn open(
        conn: &'a Connection,
        sid: i64,
        session: &'a SessionId,
        trust: &'a TrustAnchor,
    ) -> Result<Self, AuditError> {
        Ok(Verification {
            conn,
            sid,
            session,
            trust,
            stored: SessionRow::read(conn, sid)?,
            problems: Problems::default(),
        })
    }

    /// Reads the verdict off the problem list: any problem is tampering;
    /// otherwise an unfinished session or an unsigned tail is incomplete.
    pub(super) fn report(self, signer: Signer, key_trust: KeyTrust, walk: &Walk) -> VerifyReport {
        let finished = self.stored.finished();
        let unsigned_tail = walk.last_seq().saturating_sub(walk.verified_through);
        let outcome = if !self.problems.list.is_empty() {
            VerifyOutcome::Tampered
        } else if !finished || unsigned_tail > 0 {
            VerifyOutcome::Incomplete
        } else {
            VerifyOutcome::Intact
        };
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
        }
    }
}
