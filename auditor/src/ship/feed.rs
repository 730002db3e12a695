//! The live shipper's hand-off from the recorder: every commit's rows, as
//! the local record now holds them, passed in memory so that a shipper
//! keeping up never reads them back out of SQLite.
//!
//! The local record stays the spool and the only source of truth: the feed
//! only carries copies of committed rows, and holds at most
//! [`MAX_PENDING_BYTES`] a session. A shipper that fell behind (a
//! restart, a store that was down, a feed that overflowed) reads SQLite up
//! to where the feed begins, then takes the feed again.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{EventFields, ShipEvents, ShipTerms, Shipped};
use crate::commit::Commit;
use crate::{CheckpointRow, SessionId};

/// What one session's queue may hold before it is dropped (the rows wait
/// in the local record): a busy node's 100 ms of events many times over.
const MAX_PENDING_BYTES: usize = 16 << 20;

/// Committed rows of the sessions recorded in this process, waiting for
/// the live shipper.
#[derive(Debug, Default)]
pub struct ShipFeed {
    sessions: Mutex<HashMap<SessionId, Pending>>,
}

/// One session's committed rows not yet taken, contiguous: they continue a
/// destination that holds every event up to `after`.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub(crate) after: u64,
    pub(crate) events: ShipEvents,
    pub(crate) index: ShipTerms,
    /// File contents, each with the seq of the event that stored it.
    contents: Vec<(u64, String, Vec<u8>)>,
    pub(crate) checkpoints: Vec<CheckpointRow>,
    /// The session's end: (ended_us, end_json, final_seq).
    pub(crate) end: Option<(i64, String, u64)>,
    bytes: usize,
}

/// What the feed holds for a destination standing somewhere.
#[derive(Debug)]
pub(crate) enum Take {
    /// The rows that follow it.
    Rows(Pending),
    /// Its rows begin after this seq: read the local record up to there.
    Gap(u64),
    /// Nothing that could be shipped on its own yet.
    Nothing,
}

impl ShipFeed {
    /// Takes `commit` of `session`, which follows event `after`.
    pub(crate) fn committed(&self, session: &SessionId, after: u64, commit: &Commit<'_>) {
        let mut sessions = self.lock();
        let pending = sessions.entry(session.clone()).or_insert_with(|| Pending {
            after,
            ..Pending::default()
        });
        if pending.after + pending.events.len() as u64 != after {
            // Not contiguous (a commit the feed missed): start again here.
            *pending = Pending {
                after,
                ..Pending::default()
            };
        }
        pending.push(commit);
        if pending.bytes > MAX_PENDING_BYTES {
            // The shipper is far behind or gone: the rows wait in the
            // local record, and the feed starts again with the next commit.
            sessions.remove(session);
        }
    }

    /// The rows of `session` after what a destination standing at `at`
    /// holds: all of them, taken out of the feed.
    pub(crate) fn take(&self, session: &SessionId, at: Shipped) -> Take {
        let mut sessions = self.lock();
        let Some(pending) = sessions.get_mut(session) else {
            return Take::Nothing;
        };
        let held = at.up_to.map_or(0, |s| s.get());
        if pending.after > held {
            return Take::Gap(pending.after);
        }
        pending.skip_through(held);
        // As from the local record: checkpoints alone wait for the events
        // or the end they come with.
        if pending.events.is_empty() && pending.end.is_none() {
            if pending.checkpoints.is_empty() {
                sessions.remove(session);
            }
            return Take::Nothing;
        }
        sessions.remove(session).map_or(Take::Nothing, Take::Rows)
    }

    /// Forgets `session` (its end was shipped).
    pub(crate) fn forget(&self, session: &SessionId) {
        self.lock().remove(session);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Pending>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Pending {
    fn push(&mut self, commit: &Commit<'_>) {
        for chained in commit.events {
            let row = chained.event;
            self.events.push(EventFields {
                seq: row.seq,
                ts_us: row.ts_us,
                kind: row.kind.as_bytes(),
                exec_id: row.exec_id.as_deref().map(str::as_bytes),
                payload: row.payload.as_bytes(),
                hash: &chained.hash,
            });
            self.bytes += row.payload.len() + 64;
            for t in &row.terms {
                self.index
                    .push_terms(row.seq, row.ts_us, row.kind.as_bytes(), t);
            }
            if let Some((sha, data)) = &row.content {
                self.bytes += data.len();
                self.contents.push((row.seq, sha.clone(), data.clone()));
            }
        }
        if let Some(cp) = &commit.checkpoint {
            self.checkpoints.push(CheckpointRow {
                seq: cp.seq,
                hash: cp.hash.to_vec(),
                is_final: cp.is_final,
                signature: cp.signature.to_vec(),
            });
        }
        if let Some(end) = &commit.end {
            self.end = Some((end.ended_us, end.end_json.to_owned(), end.final_seq));
        }
    }

    /// Drops what a destination holding every event up to `held` has:
    /// those events, their terms and contents, and the checkpoints before
    /// it (one signed at `held` itself may have come after its event).
    fn skip_through(&mut self, held: u64) {
        if held <= self.after {
            return;
        }
        self.events.skip_through(held);
        self.index.skip_through(held);
        self.contents.retain(|(seq, ..)| *seq > held);
        self.checkpoints.retain(|cp| cp.seq >= held);
        self.after = held;
    }

    /// The file contents its events stored, by SHA-256, each once.
    pub(crate) fn take_contents(&mut self) -> Vec<(String, Vec<u8>)> {
        let mut seen = std::collections::HashSet::new();
        std::mem::take(&mut self.contents)
            .into_iter()
            .filter_map(|(_, sha, data)| seen.insert(sha.clone()).then_some((sha, data)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Seq;
    use crate::commit::{ChainedEvent, NewCheckpoint, NewEnd, NewEvent};

    fn session() -> SessionId {
        SessionId::from_stored("s".into())
    }

    fn event(seq: u64, payload: &str) -> NewEvent {
        NewEvent {
            seq,
            ts_us: seq as i64,
            kind: "dns",
            exec_id: None,
            payload: payload.into(),
            content: None,
            terms: Vec::new(),
        }
    }

    /// Feeds `count` events after `after` as one commit, with a
    /// checkpoint at its last (none: a timer's checkpoint).
    fn commit(feed: &ShipFeed, after: u64, count: u64, end: bool) {
        let rows: Vec<_> = (after + 1..=after + count)
            .map(|s| event(s, &"x".repeat(10)))
            .collect();
        let events: Vec<_> = rows
            .iter()
            .map(|event| ChainedEvent {
                event,
                hash: [1; 32],
            })
            .collect();
        let last = rows.last().map_or(after, |r| r.seq);
        feed.committed(
            &session(),
            after,
            &Commit {
                events: &events,
                checkpoint: Some(NewCheckpoint {
                    seq: last,
                    ts_us: 0,
                    hash: [2; 32],
                    is_final: end,
                    signature: [3; 64],
                }),
                end: end.then_some(NewEnd {
                    ended_us: 9,
                    end_json: "{}",
                    final_seq: last,
                }),
                durable: end,
            },
        );
    }

    fn at(up_to: u64) -> Shipped {
        Shipped {
            up_to: (up_to > 0).then_some(Seq(up_to)),
            ended: false,
        }
    }

    fn seqs(take: Take) -> Vec<u64> {
        match take {
            Take::Rows(p) => p.events.iter().map(|e| e.seq).collect(),
            other => panic!("no rows: {other:?}"),
        }
    }

    #[test]
    fn contiguous_commits_are_handed_over_whole_and_once() {
        let feed = ShipFeed::default();
        commit(&feed, 0, 3, false);
        commit(&feed, 3, 2, false);
        assert_eq!(seqs(feed.take(&session(), at(0))), [1, 2, 3, 4, 5]);
        assert!(matches!(feed.take(&session(), at(5)), Take::Nothing));
    }

    #[test]
    fn a_destination_behind_the_feed_reads_the_record_up_to_where_it_begins() {
        let feed = ShipFeed::default();
        commit(&feed, 10, 2, false);
        assert!(matches!(feed.take(&session(), at(4)), Take::Gap(10)));
        // Once the record brought it to 10, the feed follows on.
        assert_eq!(seqs(feed.take(&session(), at(10))), [11, 12]);
    }

    #[test]
    fn what_the_record_already_shipped_is_dropped_from_the_feed() {
        let feed = ShipFeed::default();
        commit(&feed, 0, 4, false);
        let Take::Rows(p) = feed.take(&session(), at(2)) else {
            panic!("no rows");
        };
        assert_eq!(p.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(p.after, 2);
        assert_eq!(p.checkpoints.len(), 1, "the checkpoint at 4 stays");
        // All of it shipped from the record: nothing is left to send.
        commit(&feed, 4, 2, false);
        assert!(matches!(feed.take(&session(), at(6)), Take::Nothing));
    }

    #[test]
    fn checkpoints_alone_wait_for_the_events_or_the_end_they_come_with() {
        let feed = ShipFeed::default();
        commit(&feed, 0, 2, false);
        assert_eq!(seqs(feed.take(&session(), at(0))), [1, 2]);
        // A timer's checkpoint over what was shipped, then the end.
        commit(&feed, 2, 0, false);
        assert!(matches!(feed.take(&session(), at(2)), Take::Nothing));
        commit(&feed, 2, 0, true);
        let Take::Rows(p) = feed.take(&session(), at(2)) else {
            panic!("the end was not handed over");
        };
        assert!(p.events.is_empty());
        assert_eq!(p.end, Some((9, "{}".to_owned(), 2)));
        assert_eq!(
            p.checkpoints.iter().map(|c| c.is_final).collect::<Vec<_>>(),
            [false, true]
        );
    }

    #[test]
    fn a_commit_that_does_not_follow_on_starts_the_feed_again() {
        let feed = ShipFeed::default();
        commit(&feed, 0, 2, false);
        commit(&feed, 6, 2, false);
        assert!(matches!(feed.take(&session(), at(2)), Take::Gap(6)));
    }

    #[test]
    fn a_feed_nobody_takes_is_dropped_past_its_limit_and_starts_again() {
        let feed = ShipFeed::default();
        let big = "y".repeat(1 << 20);
        let mut seq = 0;
        while seq < 40 {
            seq += 1;
            let row = event(seq, &big);
            let events = [ChainedEvent {
                event: &row,
                hash: [0; 32],
            }];
            feed.committed(
                &session(),
                seq - 1,
                &Commit {
                    events: &events,
                    checkpoint: None,
                    end: None,
                    durable: false,
                },
            );
        }
        let held = feed.lock().get(&session()).map(|p| p.bytes);
        assert!(held.is_some_and(|b| b <= MAX_PENDING_BYTES), "{held:?}");
        // The rest is read from the record up to where the feed now begins.
        assert!(matches!(feed.take(&session(), at(0)), Take::Gap(after) if after > 0));
    }
}
