//! Telling the person (or agent) at the terminal what was refused and how to
//! allow it, once per distinct refusal. A 403 body explains itself, but many
//! clients only print "403 Forbidden", and a refused DNS name just looks like
//! a typo to the program that asked.

use std::collections::HashSet;
use std::sync::Mutex;

use airlock_proxy::events::{Event, EventSink, SinkError, Verdict};

pub struct DenialNotices {
    policy_name: String,
    seen: Mutex<HashSet<String>>,
}

impl DenialNotices {
    pub fn new(policy_name: &str) -> Self {
        Self {
            policy_name: policy_name.to_owned(),
            seen: Mutex::new(HashSet::new()),
        }
    }

    fn once(&self, key: String, line: impl FnOnce() -> String) {
        let first = self.seen.lock().map(|mut s| s.insert(key)).unwrap_or(false);
        if first {
            crate::terminal::eprint_line(&line());
        }
    }
}

impl EventSink for DenialNotices {
    fn emit(&self, event: Event) -> Result<(), SinkError> {
        match &event {
            Event::Dns {
                name,
                verdict: Verdict::Deny,
                ..
            } => self.once(format!("dns {name}"), || {
                format!(
                    "airlock: refused to resolve {name}: no rule allows it; to allow it add [[allow]] host = \"{name}\" to {}",
                    self.policy_name
                )
            }),
            Event::Request {
                method,
                url,
                verdict: Verdict::Deny,
                rule,
                reason,
                ..
            } => {
                let base = url.split('?').next().unwrap_or(url);
                self.once(format!("http {method} {base}"), || {
                    format!(
                        "airlock: refused {method} {base}: {} (decided by {}; the 403 response says what to change)",
                        reason.as_deref().unwrap_or("denied"),
                        rule.as_deref().unwrap_or(&self.policy_name)
                    )
                })
            }
            _ => {}
        }
        Ok(())
    }
}
