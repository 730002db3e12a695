//! What a shipper has done, for those who report it (`/metrics`) and those
//! who wait on it (`--audit-ship-required`), and how they reach it: a wake
//! to ship now, and a stop.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Shipped;
use crate::{Seq, SessionId};

/// Shared between one shipper and everyone watching it.
#[derive(Debug, Default)]
pub struct ShipProgress {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    shipped: HashMap<SessionId, Shipped>,
    /// Events recorded locally and not shipped yet, as of the last pass.
    pending: u64,
    /// Since when events have been waiting (None: caught up).
    behind_since: Option<Instant>,
    shipped_events: u64,
    errors: u64,
    last_error: Option<String>,
    /// Someone waits for an event to be shipped: ship now, do not poll.
    wake: bool,
    /// Stop once everything is shipped, or at this instant.
    stop: Option<Instant>,
}

/// A snapshot for reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShipStatus {
    /// Events recorded and not yet shipped.
    pub pending_events: u64,
    /// How long the oldest of them has waited (zero when caught up).
    pub lag: Duration,
    /// Events shipped since the shipper started.
    pub shipped_events: u64,
    /// Failed attempts to reach or write the destination.
    pub errors: u64,
    /// The last of those failures, if the shipper has not recovered yet.
    pub last_error: Option<String>,
}

impl ShipProgress {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn status(&self) -> ShipStatus {
        let state = self.state();
        ShipStatus {
            pending_events: state.pending,
            lag: state.behind_since.map_or(Duration::ZERO, |t| t.elapsed()),
            shipped_events: state.shipped_events,
            errors: state.errors,
            last_error: state.last_error.clone(),
        }
    }

    /// Where the destination stands on `session`, as far as this shipper knows.
    pub fn shipped(&self, session: &SessionId) -> Shipped {
        self.state()
            .shipped
            .get(session)
            .copied()
            .unwrap_or_default()
    }

    /// Blocks until the destination holds `session` up to `seq` (true), or
    /// `timeout` passes or the shipper stops (false). Wakes the shipper,
    /// so that it ships now rather than at its next poll.
    pub fn wait_shipped(&self, session: &SessionId, seq: Seq, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state();
        state.wake = true;
        self.changed.notify_all();
        loop {
            let held = state
                .shipped
                .get(session)
                .and_then(|s| s.up_to)
                .is_some_and(|up_to| up_to >= seq);
            if held {
                return true;
            }
            let now = Instant::now();
            if now >= deadline || state.stop.is_some() {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Asks the shipper to ship what is left and stop, giving up at `deadline`.
    pub fn stop(&self, deadline: Instant) {
        self.state().stop = Some(deadline);
        self.changed.notify_all();
    }

    /// The stop's deadline, once asked to stop.
    pub(super) fn stopping(&self) -> Option<Instant> {
        self.state().stop
    }

    pub(super) fn shipped_batch(&self, session: &SessionId, now: Shipped, events: usize) {
        let mut state = self.state();
        state.shipped.insert(session.clone(), now);
        state.shipped_events += events as u64;
        state.last_error = None;
        self.changed.notify_all();
    }

    /// After a pass: how many events are left (none when it shipped all).
    pub(super) fn pending(&self, pending: u64) {
        let mut state = self.state();
        state.pending = pending;
        state.behind_since = match pending {
            0 => None,
            _ => state.behind_since.or(Some(Instant::now())),
        };
    }

    pub(super) fn failed(&self, error: String) {
        let mut state = self.state();
        state.errors += 1;
        state.last_error = Some(error);
        state.behind_since = state.behind_since.or(Some(Instant::now()));
        self.changed.notify_all();
    }

    /// Sleeps until woken, stopped, or `poll` passes.
    pub(super) fn idle(&self, poll: Duration) {
        let state = self.state();
        if state.wake || state.stop.is_some() {
            drop(state);
            self.state().wake = false;
            return;
        }
        let (mut state, _) = self
            .changed
            .wait_timeout_while(state, poll, |s| !s.wake && s.stop.is_none())
            .unwrap_or_else(|p| p.into_inner());
        state.wake = false;
    }
}
