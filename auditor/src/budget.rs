//! The session's record budget: how many bytes of content (file versions,
//! HTTP bodies and WebSocket messages, terminal output) one session may keep.
//! Without it a sandbox with a small /tmp could grow the host's audit
//! database without bound by rewriting one file. Past the budget, events are
//! still recorded in full (metadata, hashes, sizes); only their content is
//! dropped, and the recorder writes one notice saying from which event.

/// What the budget says about one piece of content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    Keep,
    /// Drop the content. `first` is true exactly once per session: the
    /// caller then records the notice before this event.
    Drop {
        first: bool,
    },
}

#[derive(Debug)]
pub(crate) struct Budget {
    limit: u64,
    used: u64,
    spent: bool,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            limit,
            used: 0,
            spent: false,
        }
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    /// Whether `bytes` of content may be kept. Once one piece is dropped,
    /// every later one is too, so "from event N on, no content" is exact.
    ///
    /// A blob the store already holds is counted again (the store keeps it
    /// once): the budget is an upper bound on what a session adds, and
    /// remembering every blob kept would itself grow with the session.
    pub(crate) fn admit(&mut self, bytes: u64) -> Admit {
        if bytes == 0 {
            return Admit::Keep;
        }
        if self.spent {
            return Admit::Drop { first: false };
        }
        match self.used.checked_add(bytes) {
            Some(total) if total <= self.limit => {
                self.used = total;
                Admit::Keep
            }
            _ => {
                self.spent = true;
                Admit::Drop { first: true }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_kept_up_to_the_budget_and_never_after_the_first_drop() {
        let mut b = Budget::new(10);
        assert_eq!(b.admit(6), Admit::Keep);
        assert_eq!(b.admit(0), Admit::Keep, "nothing to keep");
        assert_eq!(b.admit(5), Admit::Drop { first: true });
        assert_eq!(
            b.admit(1),
            Admit::Drop { first: false },
            "fits, but after a drop"
        );
        assert_eq!(b.used(), 6);
    }
}
