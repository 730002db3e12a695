//! Verification: recompute a session's hash chain from the stored rows and
//! check every signed checkpoint against it.
//!
//! What this proves: every event up to the last valid checkpoint is exactly
//! what the recorder wrote, in order, with none missing or added, and (given a
//! trust anchor) that the recorder held the trusted key. What it cannot
//! prove: that a whole session was not deleted, or that events after the last
//! checkpoint of an unfinished (crashed) session are genuine — those are
//! reported as an unsigned tail.

use std::collections::BTreeMap;

use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use rusqlite::{Connection, params};
use serde::Serialize;

use crate::chain::{self, Hash};
use crate::keys::{KeyFingerprint, TrustAnchor, resolve_anchor};
use crate::search::consistency::{self, IndexCursor};
use crate::{AuditError, Seq, SessionId};

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

struct SessionRow {
    started_us: i64,
    info_json: String,
    public_key: Vec<u8>,
    stored_fp: String,
    ended_us: Option<i64>,
    end_json: Option<String>,
    final_seq: Option<i64>,
}

struct Checkpoint {
    hash: Vec<u8>,
    valid: bool,
    is_final: bool,
}

struct Problems {
    list: Vec<String>,
    first_bad: Option<u64>,
}

impl Problems {
    fn add(&mut self, seq: Option<u64>, text: String) {
        if let Some(s) = seq {
            self.first_bad = Some(self.first_bad.map_or(s, |f| f.min(s)));
        }
        self.list.push(text);
    }
}

pub(crate) fn verify_session(
    conn: &Connection,
    sid: i64,
    session: &SessionId,
    trust: &TrustAnchor,
) -> Result<VerifyReport, AuditError> {
    let db = AuditError::db("verifying the session");
    let SessionRow {
        started_us,
        info_json,
        public_key,
        stored_fp,
        ended_us,
        end_json,
        final_seq,
    } = conn
        .query_row(
            "SELECT started_us, info_json, public_key, key_fingerprint, ended_us, end_json, final_seq
             FROM sessions WHERE sid = ?1",
            [sid],
            |r| {
                Ok(SessionRow {
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
        .map_err(db)?;

    let mut problems = Problems {
        list: Vec::new(),
        first_bad: None,
    };
    let key = <[u8; 32]>::try_from(public_key.as_slice())
        .ok()
        .and_then(|b| VerifyingKey::from_bytes(&b).ok());
    let fingerprint = key
        .as_ref()
        .map(|k| KeyFingerprint::of(k).0)
        .unwrap_or_else(|| "invalid key".into());
    if key.is_none() {
        problems.add(None, "the session's public key is malformed".into());
    } else if fingerprint != stored_fp {
        problems.add(
            None,
            format!("the session's key fingerprint {stored_fp} does not match its public key ({fingerprint})"),
        );
    }
    let key_trust = match (resolve_anchor(trust)?, key.as_ref()) {
        (None, _) => KeyTrust::Unchecked,
        (Some(t), Some(k)) if t == *k => KeyTrust::Trusted,
        (Some(t), _) => {
            let tf = KeyFingerprint::of(&t).0;
            problems.add(
                None,
                format!(
                    "signed by an untrusted key {fingerprint} (trusted key is {tf}): the log may have been rewritten and re-signed"
                ),
            );
            KeyTrust::Untrusted {
                trusted_fingerprint: tf,
            }
        }
    };

    // Checkpoints: check every signature up front.
    let mut checkpoints: BTreeMap<u64, Vec<Checkpoint>> = BTreeMap::new();
    {
        let mut stmt = conn
            .prepare(
                "SELECT seq, hash, is_final, signature FROM checkpoints WHERE sid = ?1 ORDER BY seq, rowid",
            )
            .map_err(AuditError::db("verifying the session"))?;
        let rows = stmt
            .query_map([sid], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, bool>(2)?,
                    r.get::<_, Vec<u8>>(3)?,
                ))
            })
            .map_err(AuditError::db("verifying the session"))?;
        for row in rows {
            let (seq, hash, is_final, sig) =
                row.map_err(AuditError::db("verifying the session"))?;
            let seq = u64::try_from(seq).unwrap_or(0);
            let valid = match (
                key.as_ref(),
                chain::to_hash(&hash),
                Signature::from_slice(&sig),
            ) {
                (Some(k), Some(h), Ok(sig)) => {
                    let end = if is_final { end_json.as_deref() } else { None };
                    // A final checkpoint without an end record cannot verify.
                    let end_ok = !is_final || end.is_some();
                    end_ok
                        && k.verify(
                            &chain::checkpoint_message(session.as_str(), seq, &h, end),
                            &sig,
                        )
                        .is_ok()
                }
                _ => false,
            };
            if !valid {
                problems.add(
                    Some(seq.max(1)),
                    format!(
                        "the {}checkpoint at seq {seq} has an invalid signature (checkpoint or session end record altered)",
                        if is_final { "final " } else { "" }
                    ),
                );
            }
            checkpoints.entry(seq).or_default().push(Checkpoint {
                hash,
                valid,
                is_final,
            });
        }
    }

    // Walk the chain.
    let genesis = chain::genesis(session.as_str(), &public_key, started_us, &info_json);
    let mut prev: Hash = genesis;
    let mut expected: u64 = 1;
    let mut events: u64 = 0;
    let mut chain_ok = true;
    let mut verified_through: u64 = 0;
    let mut last_good_cp: u64 = 0;
    check_checkpoint_at(
        0,
        &prev,
        &checkpoints,
        &mut problems,
        &mut verified_through,
        &mut last_good_cp,
    );
    let indexed = consistency::is_indexed(conn, sid)?;
    {
        let mut stmt = conn
            .prepare(
                "SELECT seq, ts_us, kind, exec_id, payload, hash FROM events WHERE sid = ?1 ORDER BY seq, rowid",
            )
            .map_err(AuditError::db("verifying the session"))?;
        let mut rows = stmt
            .query(params![sid])
            .map_err(AuditError::db("verifying the session"))?;
        let mut index_stmt = conn
            .prepare(consistency::ROWS_SQL)
            .map_err(AuditError::db("verifying the search index"))?;
        // Stepped only after the events' statement, so it sees every row
        // the events it is compared with were committed with.
        let mut index = if indexed {
            let rows = index_stmt.query([sid]);
            Some(IndexCursor::new(
                rows.map_err(AuditError::db("verifying the search index"))?,
            ))
        } else {
            None
        };
        while let Some(r) = rows
            .next()
            .map_err(AuditError::db("verifying the session"))?
        {
            events += 1;
            if !chain_ok {
                continue;
            }
            let seq = u64::try_from(r.get::<_, i64>(0).map_err(AuditError::db("verifying"))?)
                .unwrap_or(0);
            let ts_us: i64 = r.get(1).map_err(AuditError::db("verifying"))?;
            let kind: String = r.get(2).map_err(AuditError::db("verifying"))?;
            let exec_id: Option<String> = r.get(3).map_err(AuditError::db("verifying"))?;
            let payload: String = r.get(4).map_err(AuditError::db("verifying"))?;
            let stored: Vec<u8> = r.get(5).map_err(AuditError::db("verifying"))?;
            if seq < expected {
                problems.add(
                    Some(seq),
                    format!("seq {seq} occurs more than once (an event was inserted or reordered)"),
                );
                chain_ok = false;
                continue;
            }
            if seq > expected {
                let gap = if seq - 1 == expected {
                    format!("seq {expected} is missing")
                } else {
                    format!("seq {expected}..{} are missing", seq - 1)
                };
                problems.add(Some(expected), format!("{gap} (events were deleted)"));
                chain_ok = false;
                continue;
            }
            let h = chain::link(
                &prev,
                seq,
                ts_us,
                &kind,
                exec_id.as_deref(),
                payload.as_bytes(),
            );
            if h[..] != stored[..] {
                problems.add(
                    Some(seq),
                    format!("seq {seq} ({kind}) does not match its recorded hash (the event was modified, inserted or moved)"),
                );
                chain_ok = false;
                continue;
            }
            if !check_checkpoint_at(
                seq,
                &h,
                &checkpoints,
                &mut problems,
                &mut verified_through,
                &mut last_good_cp,
            ) {
                chain_ok = false;
                continue;
            }
            if let Some(p) = check_content(conn, seq, &payload)? {
                problems.add(Some(seq), p);
            }
            if let Some(cursor) = index.as_mut()
                && let Some(p) = cursor.check_event(seq, ts_us, &kind, &payload)?
            {
                problems.add(Some(seq), p);
                // One problem says it; the rest of the index is suspect too.
                index = None;
            }
            prev = h;
            expected += 1;
        }
    }
    let last_seq = expected - 1;

    let finished = ended_us.is_some() || end_json.is_some() || final_seq.is_some();
    let valid_final: Vec<u64> = checkpoints
        .iter()
        .flat_map(|(s, cps)| {
            cps.iter()
                .filter(|c| c.valid && c.is_final)
                .map(move |_| *s)
        })
        .collect();
    if chain_ok {
        if let Some((&max_cp, _)) = checkpoints
            .iter()
            .rev()
            .find(|(_, cps)| cps.iter().any(|c| c.valid))
            && max_cp > last_seq
        {
            problems.add(
                Some(last_seq + 1),
                format!("a signed checkpoint covers seq {max_cp} but events end at seq {last_seq}: seq {}..{max_cp} were deleted (truncated)", last_seq + 1),
            );
        }
        if finished {
            match valid_final.last() {
                None => problems.add(
                    Some(verified_through + 1),
                    format!("the session is marked finished but its final signed checkpoint is missing: events after seq {verified_through} are unproven (truncated or appended)"),
                ),
                Some(&f) if f < last_seq => problems.add(
                    Some(f + 1),
                    format!("seq {}..{last_seq} come after the final checkpoint (events were appended)", f + 1),
                ),
                Some(_) => {}
            }
            if let (Some(fs), Some(&f)) = (final_seq, valid_final.last())
                && u64::try_from(fs).ok() != Some(f)
            {
                problems.add(
                    None,
                    format!("the session's final seq {fs} differs from its final checkpoint ({f})"),
                );
            }
        } else if !valid_final.is_empty() {
            problems.add(
                None,
                "the session has a signed final checkpoint but its end record was removed".into(),
            );
        }
    }

    let unsigned_tail = last_seq.saturating_sub(verified_through);
    let outcome = if !problems.list.is_empty() {
        VerifyOutcome::Tampered
    } else if !finished || unsigned_tail > 0 {
        VerifyOutcome::Incomplete
    } else {
        VerifyOutcome::Intact
    };
    Ok(VerifyReport {
        session: session.clone(),
        outcome,
        events,
        verified_through: Seq(verified_through),
        unsigned_tail: if chain_ok { unsigned_tail } else { 0 },
        first_bad_seq: problems.first_bad.map(Seq),
        problems: problems.list,
        key_fingerprint: fingerprint,
        key_trust,
        finished,
    })
}

/// Compares the recomputed hash at `seq` with any checkpoints signed there.
/// Returns false when a validly signed checkpoint disagrees with the chain.
fn check_checkpoint_at(
    seq: u64,
    h: &Hash,
    checkpoints: &BTreeMap<u64, Vec<Checkpoint>>,
    problems: &mut Problems,
    verified_through: &mut u64,
    last_good_cp: &mut u64,
) -> bool {
    let Some(cps) = checkpoints.get(&seq) else {
        return true;
    };
    let mut ok = true;
    for cp in cps.iter().filter(|c| c.valid) {
        if cp.hash[..] == h[..] {
            *verified_through = seq;
        } else {
            let from = *last_good_cp + 1;
            problems.add(
                Some(from),
                format!("the chain up to seq {seq} does not match its signed checkpoint: an event in seq {from}..{seq} was modified and the hashes rewritten"),
            );
            ok = false;
        }
    }
    if ok {
        *last_good_cp = seq;
    }
    ok
}

/// For file events, checks the stored content blob still has the hash the
/// (chained) payload names.
fn check_content(conn: &Connection, seq: u64, payload: &str) -> Result<Option<String>, AuditError> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(payload) else {
        return Ok(Some(format!("seq {seq} has a payload that is not JSON")));
    };
    let Some(sha) = value.get("stored_content").and_then(|v| v.as_str()) else {
        return Ok(None);
    };
    let data: Option<Vec<u8>> = conn
        .query_row("SELECT data FROM contents WHERE sha256 = ?1", [sha], |r| {
            r.get(0)
        })
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })
        .map_err(AuditError::db("verifying file content"))?;
    Ok(match data {
        None => Some(format!(
            "seq {seq}: the file content it references ({sha}) was deleted"
        )),
        Some(d) if chain::sha256_hex(&d) != sha => Some(format!(
            "seq {seq}: the file content it references was modified"
        )),
        Some(_) => None,
    })
}
