//! The session's record budget: how many bytes of content (file versions,
//! HTTP bodies and WebSocket messages, terminal output) one session may keep.
//! Without it a sandbox with a small /tmp could grow the host's audit
//! database without bound by rewriting one file. Past the budget, events are
//! still recorded in full (metadata, hashes, sizes); only their content is
//! dropped, and the recorder writes one notice saying from which event.

use std::collections::HashSet;

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
    /// Blobs already kept in this session: the store deduplicates them, so
    /// keeping one again costs nothing.
    kept: HashSet<String>,
    spent: bool,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Budget {
        Budget {
            limit,
            used: 0,
            kept: HashSet::new(),
            spent: false,
        }
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    /// Whether `bytes` of content (deduplicated by `blob`, its hash, when it
    /// is a stored blob) may be kept. Once one piece is dropped, every later
    /// one is too, so "from event N on, no content" is exact.
    pub(crate) fn admit(&mut self, bytes: u64, blob: Option<&str>) -> Admit {
        if bytes == 0 || blob.is_some_and(|b| self.kept.contains(b)) {
            return Admit::Keep;
        }
        if self.spent {
            return Admit::Drop { first: false };
        }
        match self.used.checked_add(bytes) {
            Some(total) if total <= self.limit => {
                self.used = total;
                if let Some(b) = blob {
                    self.kept.insert(b.to_owned());
                }
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
        assert_eq!(b.admit(6, Some("a")), Admit::Keep);
        assert_eq!(b.admit(6, Some("a")), Admit::Keep, "deduplicated");
        assert_eq!(b.admit(6, Some("b")), Admit::Drop { first: true });
        assert_eq!(b.admit(1, None), Admit::Drop { first: false });
        assert_eq!(b.used(), 6);
    }
}
