//! Kills asked for from outside a step's own connection (the `kill`
//! request): the kill frame waits behind whatever stdin the client queued
//! before it, which a command that does not read its input never takes, so
//! a client also needs a way that nothing queued can hold.

use std::collections::HashMap;
use std::sync::Mutex;

use airlock_shim::StepId;
use tokio::sync::oneshot;

/// The running steps that a `kill` request can reach.
#[derive(Default)]
pub(super) struct Kills {
    armed: Mutex<HashMap<StepId, oneshot::Sender<()>>>,
}

impl Kills {
    /// `step` may now be killed by request; the receiver resolves `Ok`
    /// when it is (and `Err` once disarmed).
    pub(super) fn arm(&self, step: StepId) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut armed) = self.armed.lock() {
            armed.insert(step, tx);
        }
        rx
    }

    /// `step` ended: no request reaches it any more.
    pub(super) fn disarm(&self, step: StepId) {
        if let Ok(mut armed) = self.armed.lock() {
            armed.remove(&step);
        }
    }

    /// Ask for `step`'s kill; false when it is not running.
    pub(super) fn fire(&self, step: StepId) -> bool {
        let tx = self.armed.lock().ok().and_then(|mut a| a.remove(&step));
        tx.is_some_and(|tx| tx.send(()).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_running_step_is_killed_and_only_once() {
        let kills = Kills::default();
        let mut rx = kills.arm(StepId(3));
        assert!(!kills.fire(StepId(4)), "no such step");
        assert!(kills.fire(StepId(3)));
        assert!(rx.try_recv().is_ok());
        assert!(!kills.fire(StepId(3)), "a kill is asked for once");
        let mut rx = kills.arm(StepId(5));
        kills.disarm(StepId(5));
        assert!(!kills.fire(StepId(5)), "an ended step is out of reach");
        assert!(rx.try_recv().is_err());
    }
}
