//! Per-session request quotas (`max_requests`).
//!
//! Counters are keyed by the rule's content key, so a reload that keeps a rule
//! unchanged keeps its count, and an edited rule starts afresh.

use std::collections::HashMap;
use std::sync::Mutex;

use airlock_policy::RuleRef;

#[derive(Debug, Default)]
pub(crate) struct Quotas {
    used: Mutex<HashMap<String, u64>>,
}

impl Quotas {
    /// Take one request from the rule's quota; false when it is used up.
    pub(crate) fn try_take(&self, rule: &RuleRef, max: u64) -> bool {
        self.try_take_key(rule.key(), max)
    }

    /// Take one from the quota counted under `key` (an MCP tool entry's
    /// `max_calls`: its rule's key and the entry's position).
    pub(crate) fn try_take_key(&self, key: String, max: u64) -> bool {
        let Ok(mut used) = self.used.lock() else {
            return false; // fail closed
        };
        let count = used.entry(key).or_insert(0);
        if *count >= max {
            return false;
        }
        *count += 1;
        true
    }
}
