//! The end of the session: events missing after the last checkpoint, and
//! the final checkpoint against the session's end record. Only run when the
//! chain held, since past a break the events prove nothing either way.

use super::checkpoints::Checkpoints;
use super::context::Verification;
use super::walk::Walk;

impl Verification<'_> {
    /// Checks where the walk stopped against the checkpoints and the end
    /// record.
    pub(super) fn check_end(&mut self, walk: &Walk, checkpoints: &Checkpoints) {
        if !walk.chain_ok {
            return;
        }
        self.check_truncation(walk.last_seq(), checkpoints);
        if self.stored.finished() {
            self.check_final(walk, checkpoints);
        } else if !checkpoints.valid_finals().is_empty() {
            self.problems.add(
                None,
                "the session has a signed final checkpoint but its end record was removed".into(),
            );
        }
    }

    /// A signed checkpoint past the last event proves events were cut off.
    fn check_truncation(&mut self, last_seq: u64, checkpoints: &Checkpoints) {
        if let Some(max_cp) = checkpoints.highest_valid()
            && max_cp > last_seq
        {
            self.problems.add(
                Some(last_seq + 1),
                format!("a signed checkpoint covers seq {max_cp} but events end at seq {last_seq}: seq {}..{max_cp} were deleted (truncated)", last_seq + 1),
            );
        }
    }

    /// A finished session's final checkpoint must exist, cover the last
    /// event, and agree with the final seq its end record states.
    fn check_final(&mut self, walk: &Walk, checkpoints: &Checkpoints) {
        let (last_seq, verified_through) = (walk.last_seq(), walk.verified_through);
        let valid_final = checkpoints.valid_finals();
        match valid_final.last() {
            None => self.problems.add(
                Some(verified_through + 1),
                format!("the session is marked finished but its final signed checkpoint is missing: events after seq {verified_through} are unproven (truncated or appended)"),
            ),
            Some(&f) if f < last_seq => self.problems.add(
                Some(f + 1),
                format!("seq {}..{last_seq} come after the final checkpoint (events were appended)", f + 1),
            ),
            Some(_) => {}
        }
        if let (Some(fs), Some(&f)) = (self.stored.final_seq, valid_final.last())
            && u64::try_from(fs).ok() != Some(f)
        {
            self.problems.add(
                None,
                format!("the session's final seq {fs} differs from its final checkpoint ({f})"),
            );
        }
    }
}
