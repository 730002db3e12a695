//! How many events may wait for the writer: `record` waits for room when
//! they are all taken (back-pressure, never a drop). Kept apart from the
//! channel, which allocates as it fills: a `sync_channel` of that depth
//! allocates and touches room for every event when it is made (11 MB, most
//! of a recorded session's start; BENCHMARKS.md, "Start-up without `nft`").

use std::sync::{Condvar, Mutex, MutexGuard};

/// The writer is gone: no room will ever be given back.
#[derive(Debug)]
pub(super) struct Closed;

pub(super) struct Room {
    depth: usize,
    state: Mutex<State>,
    freed: Condvar,
}

struct State {
    taken: usize,
    closed: bool,
}

impl Room {
    pub(super) fn new(depth: usize) -> Self {
        Self {
            depth,
            state: Mutex::new(State {
                taken: 0,
                closed: false,
            }),
            freed: Condvar::new(),
        }
    }

    /// Takes room for one event, waiting while there is none.
    pub(super) fn take(&self) -> Result<(), Closed> {
        let mut state = self.lock();
        while state.taken >= self.depth && !state.closed {
            state = self.freed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        if state.closed {
            return Err(Closed);
        }
        state.taken += 1;
        Ok(())
    }

    /// The writer has taken `events` off the channel.
    pub(super) fn give_back(&self, events: usize) {
        if events == 0 {
            return;
        }
        let mut state = self.lock();
        let was_full = state.taken >= self.depth;
        state.taken = state.taken.saturating_sub(events);
        drop(state);
        if was_full {
            self.freed.notify_all();
        }
    }

    /// The writer stops: whoever waits for room gets `Closed`.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.freed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_full_room_waits_until_the_writer_gives_some_back() {
        let room = Arc::new(Room::new(2));
        room.take().unwrap();
        room.take().unwrap();
        let waiting = {
            let room = room.clone();
            std::thread::spawn(move || room.take())
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiting.is_finished(), "took room that was not there");
        room.give_back(1);
        assert!(waiting.join().unwrap().is_ok());
    }

    #[test]
    fn whoever_waits_when_the_writer_stops_is_told_not_left_waiting() {
        let room = Arc::new(Room::new(1));
        room.take().unwrap();
        let waiting = {
            let room = room.clone();
            std::thread::spawn(move || room.take())
        };
        std::thread::sleep(Duration::from_millis(50));
        room.close();
        assert!(waiting.join().unwrap().is_err());
        assert!(room.take().is_err());
    }
}
