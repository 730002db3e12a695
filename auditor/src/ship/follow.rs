//! The shipper: copies a local record's sessions into a destination, once
//! (`airlock audit ship`) or following the record as it grows
//! (`--audit-ship`, `audit ship --follow`), and comes back after every
//! failure without losing or repeating a row.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::feed::{Pending, ShipFeed, Take};
use super::{
    BATCH_EVENTS, ShipBatch, ShipDestination, ShipProgress, ShipReport, Shipped, Spare, ship_next,
};
use crate::sqlite::SqliteStore;
use crate::{AuditError, RecordStore, Seq, SessionId, SessionRow};

/// Opens a connection to the destination: called again after each failure,
/// since a failed connection is not trusted to recover.
pub type Connect = Box<dyn Fn() -> Result<Box<dyn ShipDestination>, AuditError> + Send>;

/// How often a following shipper looks for new rows when nobody wakes it.
const POLL: Duration = Duration::from_millis(25);
/// How long a following shipper lets new events gather after it caught
/// up, unless woken. Every batch costs the node a read transaction and a
/// mark in its local record, and the destination a transaction: shipped
/// as each recorder commit lands, a busy node paid that for a few events
/// each time; gathered, one batch carries up to [`super::BATCH_EVENTS`]
/// events. What it adds to the lag stays far below the second a fleet's
/// live view allows, and a decision waiting under `--audit-ship-required`
/// wakes the shipper at once (`ShipProgress::wait_shipped`).
pub const LINGER: Duration = Duration::from_millis(100);
/// The longest wait between attempts to reach a failed destination.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// What a pass over the local record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Nothing was new.
    Idle,
    /// It shipped all it found.
    CaughtUp,
    /// It shipped, and more was waiting than one batch holds.
    Behind,
}

/// What one batch did: where the destination now stands, how many events
/// it took, and whether they came from the feed.
struct Sent {
    now: Shipped,
    events: usize,
    fed: bool,
}

/// One local record and where it goes.
pub struct Shipper {
    local: SqliteStore,
    connect: Connect,
    progress: Arc<ShipProgress>,
    linger: Duration,
    /// The recorder's commits, in memory; None ships from the local
    /// record alone.
    feed: Option<Arc<ShipFeed>>,
}

impl std::fmt::Debug for Shipper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shipper")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// The connection and what it is trusted to hold, dropped together on a
/// failure: after one, the destination is asked again before anything is
/// sent, so a batch whose commit was lost in flight is not sent twice.
#[derive(Default)]
struct Link {
    destination: Option<Box<dyn ShipDestination>>,
    known: HashMap<SessionId, Shipped>,
    /// The last batch's buffers, filled again by the next.
    spare: Spare,
    /// The rows of sessions shipped from the feed, read from the local
    /// record once: (the row without its end, whether it was indexed).
    rows: HashMap<SessionId, (SessionRow, bool)>,
}

impl Shipper {
    pub fn new(local: SqliteStore, connect: Connect, progress: Arc<ShipProgress>) -> Self {
        Self {
            local,
            connect,
            progress,
            linger: LINGER,
            feed: None,
        }
    }

    /// Ships the rows `feed` hands over as they are committed, reading the
    /// local record only for what the feed does not hold.
    pub fn with_feed(mut self, feed: Arc<ShipFeed>) -> Self {
        self.feed = Some(feed);
        self
    }

    /// Lingers `linger` instead of [`LINGER`] after a pass that caught up.
    pub fn with_linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Ships everything the local record holds now, then returns; the
    /// first failure is returned (what was shipped before it stays).
    pub fn drain(&self) -> Result<ShipReport, AuditError> {
        let mut link = Link::default();
        let mut report = ShipReport::default();
        while self.pass(&mut link, &mut report)? != Pass::Idle {}
        Ok(report)
    }

    /// Ships as the local record grows, coming back after every failure,
    /// until [`ShipProgress::stop`]: then it ships what is left and
    /// returns, giving up at the stop's deadline or at the first failure
    /// (what is left waits in the local record for the next shipper).
    pub fn follow(&self) -> ShipReport {
        let mut link = Link::default();
        let mut report = ShipReport::default();
        let mut backoff = POLL;
        // The local record's version when a pass last found nothing to
        // ship: until it changes, there is nothing new to look at.
        let mut idle_at = None;
        loop {
            let stopping = self.progress.stopping();
            if stopping.is_some_and(|deadline| Instant::now() >= deadline) {
                return report;
            }
            let attempt = self.local.data_version().and_then(|version| {
                if stopping.is_none() && idle_at == Some(version) {
                    return Ok(None);
                }
                self.pass(&mut link, &mut report)
                    .map(|more| Some((more, version)))
            });
            match attempt {
                Ok(Some((Pass::Behind, _))) => backoff = POLL,
                Ok(Some((Pass::CaughtUp, _))) => {
                    backoff = POLL;
                    // Returns at once when stopping or woken.
                    self.progress.idle(self.linger);
                }
                Ok(Some((Pass::Idle, _))) if stopping.is_some() => return report,
                Ok(Some((Pass::Idle, version))) => {
                    idle_at = Some(version);
                    backoff = POLL;
                    self.progress.idle(POLL);
                }
                Ok(None) => self.progress.idle(POLL),
                Err(e) => {
                    link = Link::default();
                    idle_at = None;
                    self.progress.failed(e.to_string());
                    if stopping.is_some() {
                        // The session is over and the store still fails:
                        // its end waits in the local record, not its user.
                        return report;
                    }
                    tracing::warn!("shipping the audit record: {e}; retrying");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// One pass over every session not yet wholly shipped, one batch each.
    fn pass(&self, link: &mut Link, report: &mut ShipReport) -> Result<Pass, AuditError> {
        let sessions = self.local.unshipped_sessions()?;
        // What waits, as far as the marks say: reported before the
        // destination is tried, so an unreachable one shows as a lag.
        let behind = |up_to: Option<Seq>, last: Option<Seq>| {
            last.map_or(0, Seq::get)
                .saturating_sub(up_to.map_or(0, Seq::get))
        };
        self.progress
            .pending(sessions.iter().map(|s| behind(s.mark.up_to, s.last)).sum());
        // Out of the link for the pass: a failure drops it, and the next
        // pass connects again.
        let connected = match link.destination.take() {
            Some(d) => d,
            None => (self.connect)()?,
        };
        let destination = connected.as_ref();
        let mut shipped_any = false;
        let mut pending = 0;
        for unshipped in sessions {
            let session = &unshipped.session;
            let at = match link.known.get(session) {
                Some(at) => *at,
                None => destination.shipped(session)?,
            };
            let Some(Sent { now, events, fed }) = self.ship_next(link, destination, session, at)?
            else {
                link.known.insert(session.clone(), at);
                if at.ended {
                    // The destination had it all; only the mark was behind.
                    self.local.mark_shipped(session, at, now_us())?;
                }
                self.progress.shipped_batch(session, at, 0);
                continue;
            };
            link.known.insert(session.clone(), now);
            if now.ended {
                link.rows.remove(session);
                if let Some(feed) = &self.feed {
                    feed.forget(session);
                }
            }
            self.local.mark_shipped(session, now, now_us())?;
            self.progress.shipped_batch(session, now, events);
            if at.up_to.is_none() && events > 0 {
                report.sessions += 1;
            }
            report.batches += 1;
            report.events += events as u64;
            if fed {
                report.fed += events as u64;
            }
            shipped_any = true;
            pending += behind(now.up_to, unshipped.last);
        }
        self.progress.pending(pending);
        link.destination = Some(connected);
        Ok(match (shipped_any, pending) {
            (false, _) => Pass::Idle,
            (true, 0) => Pass::CaughtUp,
            (true, _) => Pass::Behind,
        })
    }
}

impl Shipper {
    /// Ships the next batch of `session` to a destination standing at
    /// `at`: from the feed when it holds what follows, else from the local
    /// record (up to where the feed begins).
    fn ship_next(
        &self,
        link: &mut Link,
        destination: &dyn ShipDestination,
        session: &SessionId,
        at: Shipped,
    ) -> Result<Option<Sent>, AuditError> {
        let held = at.up_to.map_or(0, Seq::get);
        let limit = match self.feed.as_ref().map(|f| f.take(session, at)) {
            Some(Take::Rows(pending)) => {
                return self.ship_pending(link, destination, session, at, pending);
            }
            Some(Take::Gap(from)) => {
                usize::try_from(from - held).map_or(BATCH_EVENTS, |gap| gap.clamp(1, BATCH_EVENTS))
            }
            Some(Take::Nothing) | None => BATCH_EVENTS,
        };
        let sent = ship_next(
            &self.local,
            session,
            at,
            limit,
            destination,
            &mut link.spare,
        )?;
        Ok(sent.map(|(now, events)| Sent {
            now,
            events,
            fed: false,
        }))
    }

    /// Ships rows the feed handed over, with the session's row as the
    /// local record holds it (read once a session).
    fn ship_pending(
        &self,
        link: &mut Link,
        destination: &dyn ShipDestination,
        session: &SessionId,
        at: Shipped,
        mut pending: Pending,
    ) -> Result<Option<Sent>, AuditError> {
        let (mut row, indexed) = match link.rows.get(session) {
            Some(known) => known.clone(),
            None => {
                let known = self.local.ship_session_row(session)?;
                link.rows.insert(session.clone(), known.clone());
                known
            }
        };
        if let Some((ended_us, end_json, final_seq)) = pending.end.take() {
            row.ended_us = Some(ended_us);
            row.end_json = Some(end_json);
            row.final_seq = i64::try_from(final_seq).ok();
        }
        let contents = pending.take_contents();
        let batch = ShipBatch {
            session: session.clone(),
            row,
            indexed,
            events: pending.events,
            index: pending.index,
            checkpoints: pending.checkpoints,
            contents,
        };
        destination.ship(&batch)?;
        Ok(Some(Sent {
            now: batch.shipped_after(at),
            events: batch.events.len(),
            fed: true,
        }))
    }
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
