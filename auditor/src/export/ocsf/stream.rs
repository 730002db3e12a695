//! The OCSF lines of every session (or one) that a reader has not written
//! yet: what `audit export --format ocsf` prints once, and what `--follow`
//! prints each time the store changes. Works on any [`RecordStore`].

use std::collections::{HashMap, HashSet};

use super::{Cursor, SessionMapper};
use crate::{AuditError, EventKind, RecordStore, SessionId, SessionSummary};

/// Reads new events from a store and maps them, session by session.
#[derive(Debug)]
pub struct OcsfStream<'s> {
    store: &'s dyn RecordStore,
    only: Option<SessionId>,
    since_us: Option<i64>,
    mappers: HashMap<SessionId, SessionMapper>,
    /// Ended sessions whose every event was read: nothing more can come.
    done: HashSet<SessionId>,
}

impl<'s> OcsfStream<'s> {
    /// Every session, or only `only`; with `since_us`, only events
    /// recorded then or later.
    pub fn new(store: &'s dyn RecordStore, only: Option<SessionId>, since_us: Option<i64>) -> Self {
        Self {
            store,
            only,
            since_us,
            mappers: HashMap::new(),
            done: HashSet::new(),
        }
    }

    /// Appends to `out` a line for each event committed after `cursor`
    /// (sessions in the order they started, each's events in seq order) and
    /// advances `cursor` past every event read, lines or not. The caller
    /// writes `out` and only then saves the cursor.
    pub fn poll(&mut self, cursor: &mut Cursor, out: &mut Vec<u8>) -> Result<(), AuditError> {
        let sessions = match &self.only {
            Some(id) => vec![self.store.session(id)?],
            None => self.store.sessions()?,
        };
        for summary in sessions {
            if self.done.contains(&summary.id) {
                continue;
            }
            self.session(summary, cursor, out)?;
        }
        Ok(())
    }

    fn session(
        &mut self,
        summary: SessionSummary,
        cursor: &mut Cursor,
        out: &mut Vec<u8>,
    ) -> Result<(), AuditError> {
        let id = summary.id.clone();
        let ended = summary.ended_us.is_some();
        let after = cursor.last(&id);
        let events = self.store.events_after(&id, after)?;
        if !self.mappers.contains_key(&id) {
            let mut mapper = SessionMapper::new(summary);
            // A resumed export still names the commands of execs it wrote
            // before it stopped.
            if after.get() > 0 {
                for ev in self.store.events(&id, Some(&[EventKind::Exec]))? {
                    if ev.seq <= after {
                        mapper.learn(&ev);
                    }
                }
            }
            self.mappers.insert(id.clone(), mapper);
        }
        let Some(mapper) = self.mappers.get_mut(&id) else {
            return Ok(());
        };
        for ev in &events {
            let line = match self.since_us {
                Some(since) if ev.ts_us < since => {
                    mapper.learn(ev);
                    None
                }
                _ => mapper.event(ev),
            };
            if let Some(value) = line {
                serde_json::to_writer(&mut *out, &value)?;
                out.push(b'\n');
            }
            cursor.advance(&id, ev.seq);
        }
        // Read after the session's end was: its last events are in.
        if ended && events.is_empty() {
            self.done.insert(id.clone());
            self.mappers.remove(&id);
        }
        Ok(())
    }
}
