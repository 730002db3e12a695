//! The chain walk: recompute every event's hash from the genesis on, in seq
//! order, and compare it with the stored hash and with the checkpoints
//! signed at that seq. Each event the chain proves is then checked for what
//! hangs off it outside the chain: its file contents and its search rows.

use super::checkpoints::Checkpoints;
use super::context::{Problems, Verification};
use crate::chain::{self, Hash};
use crate::search::consistency::IndexCursor;
use crate::{AuditError, EventRow};

/// Where the walk stands. Once the chain breaks (`chain_ok` false), nothing
/// after the break is proven, so the walk only counts the rest.
pub(super) struct Walk {
    prev: Hash,
    expected: u64,
    /// Event rows examined.
    pub(super) events: u64,
    pub(super) chain_ok: bool,
    /// The highest seq a valid checkpoint was seen to match.
    pub(super) verified_through: u64,
    /// The last checkpointed seq the chain matched, where a mismatch found
    /// at a later checkpoint can have started.
    last_good_cp: u64,
}

impl Walk {
    fn from_genesis(genesis: Hash) -> Self {
        Self {
            prev: genesis,
            expected: 1,
            events: 0,
            chain_ok: true,
            verified_through: 0,
            last_good_cp: 0,
        }
    }

    /// The last seq the chain reached.
    pub(super) fn last_seq(&self) -> u64 {
        self.expected - 1
    }

    /// Checks that `event` is the next link of the chain; its hash when it
    /// is. Otherwise adds the problem and marks the chain broken.
    fn link(
        &mut self,
        event: &EventRow,
        checkpoints: &Checkpoints,
        problems: &mut Problems,
    ) -> Option<Hash> {
        let (seq, expected) = (event.seq, self.expected);
        if seq < expected {
            problems.add(
                Some(seq),
                format!("seq {seq} occurs more than once (an event was inserted or reordered)"),
            );
        } else if seq > expected {
            let gap = if seq - 1 == expected {
                format!("seq {expected} is missing")
            } else {
                format!("seq {expected}..{} are missing", seq - 1)
            };
            problems.add(Some(expected), format!("{gap} (events were deleted)"));
        } else {
            let h = chain::link(
                &self.prev,
                seq,
                event.ts_us,
                &event.kind,
                event.exec_id.as_deref(),
                event.payload.as_bytes(),
            );
            if h[..] != event.stored[..] {
                problems.add(
                    Some(seq),
                    format!("seq {seq} ({}) does not match its recorded hash (the event was modified, inserted or moved)", event.kind),
                );
            } else if self.check_checkpoint_at(seq, &h, checkpoints, problems) {
                return Some(h);
            }
        }
        self.chain_ok = false;
        None
    }

    /// Compares the recomputed hash at `seq` with any checkpoints signed there.
    /// Returns false when a validly signed checkpoint disagrees with the chain.
    fn check_checkpoint_at(
        &mut self,
        seq: u64,
        h: &Hash,
        checkpoints: &Checkpoints,
        problems: &mut Problems,
    ) -> bool {
        let Some(cps) = checkpoints.at(seq) else {
            return true;
        };
        let mut ok = true;
        for cp in cps.iter().filter(|c| c.valid) {
            if cp.hash[..] == h[..] {
                self.verified_through = seq;
            } else {
                let from = self.last_good_cp + 1;
                problems.add(
                    Some(from),
                    format!("the chain up to seq {seq} does not match its signed checkpoint: an event in seq {from}..{seq} was modified and the hashes rewritten"),
                );
                ok = false;
            }
        }
        if ok {
            self.last_good_cp = seq;
        }
        ok
    }

    fn advance(&mut self, h: Hash) {
        self.prev = h;
        self.expected += 1;
    }
}

impl Verification<'_> {
    /// Walks every event of the session in seq order.
    pub(super) fn walk_chain(&mut self, checkpoints: &Checkpoints) -> Result<Walk, AuditError> {
        let stored = &self.stored;
        let genesis = chain::genesis(
            self.session.as_str(),
            &stored.public_key,
            stored.started_us,
            &stored.info_json,
        );
        let mut walk = Walk::from_genesis(genesis);
        // A checkpoint at seq 0 signs the genesis alone.
        walk.check_checkpoint_at(0, &genesis, checkpoints, &mut self.problems);
        // Read only after the first event, so the index rows are no older
        // than the events they are compared with (see `SessionRows`).
        let mut index = self.rows.indexed()?.then(IndexCursor::new);
        while let Some(event) = self.rows.next_event()? {
            walk.events += 1;
            if !walk.chain_ok {
                continue;
            }
            let Some(h) = walk.link(&event, checkpoints, &mut self.problems) else {
                continue;
            };
            self.check_proven_event(&event, &mut index)?;
            walk.advance(h);
        }
        Ok(walk)
    }

    /// Checks what a proven event names outside the chain: the file
    /// content it references and its rows in the search index.
    fn check_proven_event(
        &mut self,
        event: &EventRow,
        index: &mut Option<IndexCursor>,
    ) -> Result<(), AuditError> {
        if let Some(p) = self.check_content(event.seq, &event.payload)? {
            self.problems.add(Some(event.seq), p);
        }
        if let Some(cursor) = index.as_mut()
            && let Some(p) = cursor.check_event(
                &mut *self.rows,
                event.seq,
                event.ts_us,
                &event.kind,
                &event.payload,
            )?
        {
            self.problems.add(Some(event.seq), p);
            // One problem says it; the rest of the index is suspect too.
            *index = None;
        }
        Ok(())
    }
}
