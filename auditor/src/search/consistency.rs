//! Checking the search index against the chained events, for `verify`.
//!
//! The index (`event_terms`) is outside the hash chain, so on its own it
//! proves nothing: someone who can write the database could delete the rows
//! that would find an event, or add rows that point a search at the wrong
//! one. `verify` therefore recomputes each event's rows from its (verified)
//! payload with [`terms::of`] and compares them with what the index holds,
//! in one ordered pass beside the chain walk.
//!
//! The stored payload is already scrubbed, so the rows are recomputed with
//! an empty redactor; they equal what the recorder wrote from the scrubbed
//! event. Changing what [`terms::of`] extracts would make older sessions
//! fail this check: such a change needs a new `search_indexed` table, so
//! that sessions indexed the old way are checked (and searched) the old way.

use super::terms;
use crate::{AuditError, AuditEvent, EventKind, IndexRow, Redactor, SessionRows};

impl IndexRow {
    /// The same row, with the host compared as search compares it (without
    /// case): versions before 2026-11-25 lower-cased a host before scrubbing
    /// it, so a `[secret:NAME]` in a host they indexed is in lower case.
    fn matches(&self, other: &Self) -> bool {
        let (a, b) = (&self.terms, &other.terms);
        self.seq == other.seq
            && self.ts_us == other.ts_us
            && self.kind == other.kind
            && match (&a.host, &b.host) {
                (Some(x), Some(y)) => x.eq_ignore_ascii_case(y),
                (x, y) => x == y,
            }
            && (&a.method, &a.verdict, &a.url, &a.path, &a.command)
                == (&b.method, &b.verdict, &b.url, &b.path, &b.command)
    }
}

/// The index rows of one session, read in seq order beside the events.
pub(crate) struct IndexCursor {
    peeked: Option<IndexRow>,
    redactor: Redactor,
}

impl IndexCursor {
    pub(crate) fn new() -> Self {
        Self {
            peeked: None,
            redactor: Redactor::new(),
        }
    }

    /// Checks the rows of event `seq` against its payload; `Some(problem)`
    /// when they differ. Rows left before `seq` (naming no event) count as
    /// a difference here. Rows after the last event are not looked at:
    /// search finds nothing through them (it reads events back by seq), and
    /// a running session's next events may already have theirs.
    pub(crate) fn check_event(
        &mut self,
        stored: &mut dyn SessionRows,
        seq: u64,
        ts_us: i64,
        kind: &str,
        payload: &str,
    ) -> Result<Option<String>, AuditError> {
        // A kind this version does not know is left to the chain, which
        // already proved the event is what was recorded.
        let Some(known) = EventKind::parse(kind) else {
            return Ok(None);
        };
        let rows = if terms::is_indexed_kind(known) {
            let Ok(event) = serde_json::from_str::<AuditEvent>(payload) else {
                return Ok(None);
            };
            terms::of(&event, &self.redactor)
        } else {
            Vec::new()
        };
        let expected: Vec<IndexRow> = rows
            .into_iter()
            .map(|terms| IndexRow {
                seq,
                ts_us,
                kind: kind.to_owned(),
                terms,
            })
            .collect();
        let mut held = Vec::new();
        while let Some(row) = self.next_if(stored, |r| r.seq <= seq)? {
            held.push(row);
        }
        let same =
            held.len() == expected.len() && held.iter().zip(&expected).all(|(a, b)| a.matches(b));
        Ok((!same).then(|| mismatch(seq, kind)))
    }

    fn next_if(
        &mut self,
        stored: &mut dyn SessionRows,
        wanted: impl Fn(&IndexRow) -> bool,
    ) -> Result<Option<IndexRow>, AuditError> {
        if self.peeked.is_none() {
            self.peeked = stored.next_index_row()?;
        }
        Ok(self.peeked.take_if(|row| wanted(row)))
    }
}

fn mismatch(seq: u64, kind: &str) -> String {
    format!(
        "the search index does not match seq {seq} ({kind}): its rows were deleted, changed or added, so a search could miss or misplace events"
    )
}
