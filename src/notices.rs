//! Telling the person (or agent) at the terminal what was refused and how to
//! allow it, once per distinct refusal. A 403 body explains itself, but many
//! clients only print "403 Forbidden", and a program that is not HTTP only
//! sees its connection closed.
//!
//! A request an `[[ask]]` rule holds gets a line too, saying how to decide
//! it: the prompt is never on the terminal itself, whose input belongs to
//! the sandboxed program (docs/approvals.md, "Interactive").
//!
//! The names and URLs in these lines are the sandboxed program's own, so
//! they go through `escape::text` like every other record shown to a person:
//! this is the caller's live terminal.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use airlock_auditor::{HttpExchange, RuleRef, escape};
use airlock_policy::Policy;
use airlock_proxy::events::{Event, EventSink, SinkError, Verdict};

/// Distinct refusals shown on stderr in one session.
const MAX_NOTICES: usize = 100;

pub(crate) struct DenialNotices {
    policy_name: String,
    /// Where a rule would go: "to FILE", or "with --policy FILE" when no file was given.
    add_to: String,
    seen: Mutex<HashSet<String>>,
    /// Held requests announced so far (bounded like the refusals).
    held: AtomicUsize,
}

impl DenialNotices {
    pub(crate) fn new(policy: &Policy) -> Self {
        let add_to = if policy.is_builtin() {
            "and pass it with --policy FILE".to_owned()
        } else {
            format!("to {}", policy.source_name())
        };
        Self {
            policy_name: policy.source_name().to_owned(),
            add_to,
            seen: Mutex::new(HashSet::new()),
            held: AtomicUsize::new(0),
        }
    }

    /// Print `line` the first time `key` is seen. A program that asks for
    /// endless distinct names would otherwise flood the terminal and grow
    /// the set without bound: after [`MAX_NOTICES`] distinct refusals one last
    /// line says where the rest are.
    fn once(&self, key: String, line: impl FnOnce() -> String) {
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        if seen.len() > MAX_NOTICES || seen.contains(&key) {
            return;
        }
        if seen.len() == MAX_NOTICES {
            seen.insert(String::new());
            crate::terminal::eprint_line(&format!(
                "airlock: more than {MAX_NOTICES} different refusals; the rest are not shown here (airlock audit timeline has them all)"
            ));
            return;
        }
        seen.insert(key);
        crate::terminal::eprint_line(&line());
    }
}

impl EventSink for DenialNotices {
    /// Refusals and held requests only.
    fn wants(&self, event: &Event) -> bool {
        event.is_refusal() || matches!(event, Event::ApprovalRequested { .. })
    }

    fn emit(&self, event: Event) -> Result<(), SinkError> {
        match &event {
            Event::Dns { query, .. } if query.decision == Verdict::Deny => {
                self.once(format!("dns {}", query.name), || {
                let name = escape::text(&query.name);
                format!(
                    "airlock: no rule allows {name}: connections to it are refused; to allow it, add [[allow]] host = \"{name}\" {}",
                    self.add_to
                )
            })
            }
            Event::Request { exchange, .. } if exchange.decision == Verdict::Deny => {
                let HttpExchange {
                    method,
                    url,
                    rule,
                    reason,
                    status,
                    ..
                } = exchange.as_ref();
                let base = url.split('?').next().unwrap_or(url);
                // An MCP refusal is a JSON-RPC error, not a 403.
                let answer = match status {
                    Some(403) | None => "the 403 response".to_owned(),
                    Some(code) => format!("the {code} response"),
                };
                self.once(format!("http {method} {base}"), || {
                    format!(
                        "airlock: refused {} {}: {} (decided by {}; {answer} says what to change)",
                        escape::text(method),
                        escape::text(base),
                        escape::text(reason.as_deref().unwrap_or("denied")),
                        escape::text(rule.as_ref().map_or(self.policy_name.as_str(), RuleRef::as_str))
                    )
                })
            }
            Event::ApprovalRequested { held, .. } => {
                let n = self.held.fetch_add(1, Ordering::Relaxed);
                if n < MAX_NOTICES {
                    crate::terminal::eprint_line(&holding_line(&Held {
                        approval: &held.approval,
                        method: &held.method,
                        url: &held.url,
                        rule: held.rule.as_str(),
                        reason: held.reason.as_deref(),
                        within: std::time::Duration::from_millis(held.timeout_ms),
                    }));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// A request an `[[ask]]` rule holds, as its notice names it.
pub(crate) struct Held<'a> {
    pub approval: &'a str,
    pub method: &'a str,
    pub url: &'a str,
    pub rule: &'a str,
    pub reason: Option<&'a str>,
    /// How long until it is denied unless decided.
    pub within: std::time::Duration,
}

/// The line that tells the caller a request is held and how to decide it:
/// the same for `airlock run` and a live session's `session exec`.
pub(crate) fn holding_line(held: &Held<'_>) -> String {
    let reason = match held.reason {
        Some(reason) => format!(": {}", escape::text(reason)),
        None => String::new(),
    };
    let approval = escape::text(held.approval);
    format!(
        "airlock: holding {} {} for a person's approval (rule {}{reason}); decide with `airlock approve {approval}` or `airlock deny {approval}` within {}",
        escape::text(held.method),
        escape::text(held.url.split('?').next().unwrap_or(held.url)),
        escape::text(held.rule),
        humantime::format_duration(std::time::Duration::from_secs(held.within.as_secs())),
    )
}
