//! Shipping: copying a node's local record, row for row, into a central
//! store, so that a fleet's sessions are searched, verified and replayed
//! in one place.
//!
//! The local SQLite record stays the durable spool: a [`ShipSource`] hands
//! out what a destination does not hold yet, and a [`ShipDestination`]
//! stores it. The rows travel as stored, hashes and signatures included,
//! so the central copy verifies against the node's own key exactly as the
//! local one does: shipping cannot make a record look better than it is.
//!
//! Exactly once, whatever fails: a destination stores one batch in one
//! transaction and ignores rows it already holds (idempotent on
//! (session, seq)), and a shipper always asks the destination where it is
//! ([`ShipDestination::shipped`]) before it sends, never its own
//! memory. A shipper killed between a commit and its next step, or a
//! destination restarted, resumes exactly where the destination stopped.

mod feed;
mod follow;
mod packed;
mod progress;

pub use feed::ShipFeed;
pub use follow::{Connect, LINGER, Shipper};
pub use packed::{EventFields, Packed, PackedEvent, PackedTerms, ShipEvents, ShipTerms};
pub use progress::{ShipProgress, ShipStatus};

use crate::sqlite::SqliteStore;
use crate::{AuditError, CheckpointRow, RecordStore, Seq, SessionId, SessionRow};

/// One session's rows that a destination does not hold yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShipBatch {
    pub session: SessionId,
    /// The session's row as it is now: its end appears once it ended.
    pub row: SessionRow,
    /// Whether the session's search terms were written as it was recorded.
    pub indexed: bool,
    /// Events after the destination's last, contiguous, in seq order
    /// (possibly none, when only the session's end is new), as stored.
    pub events: ShipEvents,
    /// The search terms of exactly those events, as stored.
    pub index: ShipTerms,
    /// The session's signed checkpoints up to the last event of the batch
    /// (a destination ignores those it holds).
    pub checkpoints: Vec<CheckpointRow>,
    /// The file contents those events reference, by the SHA-256 they are
    /// stored under.
    pub contents: Vec<(String, Vec<u8>)>,
}

/// A batch's buffers, kept from one batch for the next.
#[derive(Debug, Clone, Default)]
pub struct Spare {
    pub events: ShipEvents,
    pub index: ShipTerms,
}

/// Where a destination stands on one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shipped {
    /// The last event it holds, none before the first.
    pub up_to: Option<Seq>,
    /// It holds the session's end (its row's end and final checkpoint):
    /// nothing of the session is left to ship.
    pub ended: bool,
}

/// How far a node's local record says a session was shipped, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShipMark {
    pub shipped: Shipped,
    /// When the destination last confirmed it (µs since the epoch).
    pub at_us: i64,
}

/// A store that takes shipped rows: the central record.
pub trait ShipDestination: Send + Sync {
    /// Where the destination stands on `session` (default: nothing held).
    fn shipped(&self, session: &SessionId) -> Result<Shipped, AuditError>;

    /// Stores the batch in one transaction. Rows already held are left
    /// as they are, so a batch sent twice is stored once.
    fn ship(&self, batch: &ShipBatch) -> Result<(), AuditError>;
}

/// Events per batch [`ship_all`] sends: large enough that a commit's cost
/// is spread over many events, small enough to hold in memory.
pub const BATCH_EVENTS: usize = 1000;

/// What a shipping pass sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShipReport {
    /// Sessions of which something was sent.
    pub sessions: usize,
    /// Batches sent (each one transaction at the destination).
    pub batches: usize,
    /// Events sent.
    pub events: u64,
    /// Of those, the events the recorder handed over in memory (the rest
    /// were read back from the local record).
    pub fed: u64,
}

impl std::ops::AddAssign for ShipReport {
    fn add_assign(&mut self, other: Self) {
        self.sessions += other.sessions;
        self.batches += other.batches;
        self.events += other.events;
        self.fed += other.fed;
    }
}

/// Ships every session of `store` until `to` holds all of it (each
/// session's end included, when it ended).
pub fn ship_all(store: &SqliteStore, to: &dyn ShipDestination) -> Result<ShipReport, AuditError> {
    let mut report = ShipReport::default();
    for summary in store.sessions()? {
        report += ship_session(store, &summary.id, to)?;
    }
    Ok(report)
}

/// Ships one session until `to` holds all of it, asking the destination
/// where it stands before every batch.
pub fn ship_session(
    store: &SqliteStore,
    session: &SessionId,
    to: &dyn ShipDestination,
) -> Result<ShipReport, AuditError> {
    let mut report = ShipReport::default();
    let mut at = to.shipped(session)?;
    let mut spare = Spare::default();
    while let Some((_, events)) = ship_next(store, session, at, BATCH_EVENTS, to, &mut spare)? {
        let now = to.shipped(session)?;
        // A destination that took a batch and did not move would be sent
        // the same batch forever.
        if now == at {
            return Err(AuditError::ShipStalled {
                session: session.to_string(),
            });
        }
        report.sessions = 1;
        report.batches += 1;
        report.events += events as u64;
        at = now;
    }
    Ok(report)
}

/// Ships the next batch of `session` (up to `limit` events) to `to`, which
/// stands at `at`: where it then stands and how many events it took, or
/// None when it lacked nothing. The batch is read into `spare`'s buffers,
/// and they are left there for the next.
pub(crate) fn ship_next(
    store: &SqliteStore,
    session: &SessionId,
    at: Shipped,
    limit: usize,
    to: &dyn ShipDestination,
    spare: &mut Spare,
) -> Result<Option<(Shipped, usize)>, AuditError> {
    let Some(batch) = store.ship_batch_with(session, at, limit, spare)? else {
        return Ok(None);
    };
    let shipped = to.ship(&batch);
    let after = (batch.shipped_after(at), batch.events.len());
    *spare = Spare {
        events: batch.events,
        index: batch.index,
    };
    shipped?;
    Ok(Some(after))
}

impl ShipBatch {
    /// Where the destination stands once it stores this batch, from where
    /// it stood before.
    fn shipped_after(&self, before: Shipped) -> Shipped {
        let up_to = self.events.last_seq().map(Seq).or(before.up_to);
        let reached = |last: i64| up_to.map_or(0, Seq::get) >= u64::try_from(last).unwrap_or(0);
        Shipped {
            up_to,
            // Ended once the end is in the row and every event up to the
            // final one is held (the final checkpoint comes with them).
            ended: self.row.ended_us.is_some() && self.row.final_seq.is_none_or(reached),
        }
    }
}
