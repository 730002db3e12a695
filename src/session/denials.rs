//! What the policy refused in a live session, kept so that whoever drives a
//! step (the CLI, the SDK, the MCP server, an agent) learns what it was
//! missing and the rule that would allow it, without reading the record;
//! and, the same way, which of its requests an `[[ask]]` rule held for a
//! person, how that ended and how long it waited.
//!
//! Each refusal is attributed to the step whose process owned the socket.
//! The proxy hands its events over once it has answered (proxy/src/outlet.rs),
//! when a refused client may already be gone: a connection is therefore
//! attributed when it is accepted, while its client waits for it (one look
//! through the sandbox's sockets per connection, as the record's own
//! attribution does); a name as soon as its query is heard of, which may be
//! too late (then it counts for the steps that ran at the time). Identical
//! refusals in one step are counted, not repeated, and what is kept is
//! bounded: a program that asks for endless distinct names, or long ones,
//! cannot grow the server without limit.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use airlock_auditor::{DnsQuery, HttpExchange, TcpConnection};
use airlock_proxy::events::{ConnId, Event, EventSink, SinkError, Verdict};
use airlock_shim::{Attributor, StepId};

use super::protocol::{Denial, DenialKind, Held};

impl DenialKind {
    /// Of the refusals one attempt can cause, which says the most.
    fn specificity(self) -> u8 {
        match self {
            Self::Dns => 0,
            Self::Connection => 1,
            Self::Request => 2,
        }
    }
}

/// Distinct refusals kept per session: past it the oldest go (counted as
/// dropped), so that one step's flood never hides a later step's refusals.
const MAX_KEPT: usize = 1000;
/// Refusals in one step's report (the `denials` request has them all):
/// with the field bounds below, a report stays far under a frame's 1 MiB.
const MAX_PER_STEP: usize = 100;
/// Longest URL or host kept (a request line may be tens of KiB), and the
/// longest suggested rule (past it there is none: a cut rule is no rule).
const MAX_FIELD: usize = 1024;
const MAX_RULE: usize = 2048;

/// The session's refusals, fed by the proxy's events.
pub(super) struct DenialLog {
    /// "POLICY (default: deny)", for refusals no rule decided.
    default_decider: String,
    attributor: Option<Attributor>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The step each open connection came from: a refused request names
    /// only its connection.
    connections: HashMap<ConnId, Option<u64>>,
    kept: Vec<Kept>,
    dropped: u64,
    /// The `[[ask]]` rule of each request still held, by approval id.
    asking: HashMap<String, String>,
    /// Requests whose wait is over, oldest first, at most [`MAX_KEPT`].
    held: Vec<(Held, Instant)>,
}

struct Kept {
    denial: Denial,
    at: Instant,
}

/// Every refusal kept so far, and how many more were not kept.
#[derive(Debug)]
pub(super) struct Refusals {
    pub denials: Vec<Denial>,
    pub dropped: u64,
}

impl DenialLog {
    pub(super) fn new(policy_name: &str, attributor: Option<Attributor>) -> Arc<Self> {
        Arc::new(Self {
            default_decider: format!("{policy_name} (default: deny)"),
            attributor,
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The refusals of `step`: those attributed to it, and those attributed
    /// to no step that happened while it ran (from `since`, its start).
    pub(super) fn of_step(&self, step: StepId, since: Instant) -> Vec<Denial> {
        let state = self.state();
        let of_step: Vec<&Denial> = state
            .kept
            .iter()
            .filter(|k| match k.denial.step {
                Some(s) => s == step.0,
                None => k.at >= since,
            })
            .map(|k| &k.denial)
            .collect();
        let mut reported = most_specific(&of_step);
        reported.truncate(MAX_PER_STEP);
        reported
    }

    /// The held requests of `step` whose wait is over, attributed as
    /// [`DenialLog::of_step`] attributes refusals.
    pub(super) fn held_of_step(&self, step: StepId, since: Instant) -> Vec<Held> {
        self.state()
            .held
            .iter()
            .filter(|(h, at)| match h.step {
                Some(s) => s == step.0,
                None => *at >= since,
            })
            .map(|(h, _)| h.clone())
            .take(MAX_PER_STEP)
            .collect()
    }

    pub(super) fn all(&self) -> Refusals {
        let state = self.state();
        let all: Vec<&Denial> = state.kept.iter().map(|k| &k.denial).collect();
        Refusals {
            denials: most_specific(&all),
            dropped: state.dropped,
        }
    }

    fn step_of(&self, client: SocketAddr, udp: bool) -> Option<u64> {
        let attributor = self.attributor.as_ref()?;
        attributor
            .step_for_peer(client, udp)
            .or_else(|| {
                udp.then(|| attributor.step_for_peer(client, false))
                    .flatten()
            })
            .map(|s| s.0)
    }

    fn keep(&self, mut denial: Denial) {
        denial.host = bounded(denial.host);
        denial.url = denial.url.map(bounded);
        denial.rule = denial.rule.filter(|rule| rule.len() <= MAX_RULE);
        let mut state = self.state();
        let same = state.kept.iter().position(|k| {
            let d = &k.denial;
            (d.step, d.kind, &d.method, &d.url, &d.host)
                == (
                    denial.step,
                    denial.kind,
                    &denial.method,
                    &denial.url,
                    &denial.host,
                )
        });
        match same {
            Some(i) => {
                let kept = &mut state.kept[i];
                kept.denial.count += 1;
                kept.at = Instant::now();
            }
            None => {
                if state.kept.len() >= MAX_KEPT {
                    state.kept.remove(0);
                    state.dropped += 1;
                }
                state.kept.push(Kept {
                    denial,
                    at: Instant::now(),
                });
            }
        }
    }
}

impl EventSink for DenialLog {
    /// Refusals, held requests, and connections (to name a refusal's step).
    fn wants(&self, event: &Event) -> bool {
        match event {
            Event::Dns { .. } | Event::Request { .. } => event.is_refusal(),
            Event::Response { .. } => false,
            _ => true,
        }
    }

    fn emit(&self, event: Event) -> Result<(), SinkError> {
        match event {
            Event::Connection {
                conn,
                client,
                target,
                connection,
                ..
            } => {
                let step = self.step_of(client, false);
                self.state().connections.insert(conn, step);
                let TcpConnection {
                    decision,
                    rule,
                    reason,
                    ..
                } = *connection;
                if decision == Verdict::Deny {
                    self.keep(Denial {
                        kind: DenialKind::Connection,
                        method: None,
                        url: None,
                        host: target,
                        reason: reason.unwrap_or_else(|| "denied".into()),
                        decided_by: rule
                            .map_or_else(|| self.default_decider.clone(), |r| r.to_string()),
                        // What a connection needs depends on its protocol;
                        // the reason says it (e.g. a `protocol = "tcp"` rule).
                        rule: None,
                        step,
                        count: 1,
                    });
                }
            }
            Event::ApprovalRequested { held, .. } => {
                let mut state = self.state();
                // Bounded as the proxy bounds what it holds at once.
                if state.asking.len() < MAX_KEPT {
                    state
                        .asking
                        .insert(held.approval, bounded(held.rule.to_string()));
                }
            }
            Event::ApprovalDecided { conn, decided, .. } => {
                let d = *decided;
                let mut state = self.state();
                let step = state.connections.get(&conn).copied().flatten();
                let rule = state.asking.remove(&d.approval);
                if state.held.len() >= MAX_KEPT {
                    state.held.remove(0);
                }
                let held = Held {
                    approval: bounded(d.approval),
                    method: bounded(d.method),
                    url: bounded(d.url.split('?').next().unwrap_or(&d.url).to_owned()),
                    rule,
                    outcome: d.outcome,
                    scope: d.scope,
                    by: d.by.map(bounded),
                    note: d.note.map(bounded),
                    waited_ms: d.waited_ms,
                    step,
                };
                state.held.push((held, Instant::now()));
            }
            Event::ConnectionClosed { conn, .. } => {
                self.state().connections.remove(&conn);
            }
            Event::Request {
                conn,
                rule_to_add,
                exchange,
                ..
            } if exchange.decision == Verdict::Deny => {
                let HttpExchange {
                    method,
                    url,
                    rule,
                    reason,
                    ..
                } = *exchange;
                let step = self.state().connections.get(&conn).copied().flatten();
                self.keep(Denial {
                    kind: DenialKind::Request,
                    host: host_of_url(&url).to_owned(),
                    method: Some(method),
                    // The query may carry what a refused request tried to
                    // send; the record has it, the caller needs only where.
                    url: Some(url.split('?').next().unwrap_or(&url).to_owned()),
                    reason: reason.unwrap_or_else(|| "denied".into()),
                    decided_by: rule
                        .map_or_else(|| self.default_decider.clone(), |r| r.to_string()),
                    rule: rule_to_add,
                    step,
                    count: 1,
                });
            }
            Event::Dns { client, query, .. } if query.decision == Verdict::Deny => {
                let DnsQuery {
                    name, rule: reason, ..
                } = *query;
                self.keep(Denial {
                    kind: DenialKind::Dns,
                    method: None,
                    url: None,
                    rule: Some(allow_host_rule(&name)),
                    reason: reason.unwrap_or_else(|| "no rule allows this name".into()),
                    decided_by: self.default_decider.clone(),
                    step: self.step_of(client, true),
                    host: name,
                    count: 1,
                });
            }
            _ => {}
        }
        Ok(())
    }
}

/// One refusal is often seen three times: a refused name still resolves
/// (to an address of the proxy's), and a refused connection is still read,
/// so that what speaks HTTP or TLS gets a 403 that explains itself. The
/// caller is told once, by the most specific: a name whose connection was
/// refused in the same step is reported as that connection, a connection
/// whose requests were refused as those requests. A name that nothing
/// connected to (a lookup alone, a name carrying data out), or a connection
/// that never spoke HTTP, is reported as itself.
fn most_specific(denials: &[&Denial]) -> Vec<Denial> {
    let explained = |coarse: &Denial| {
        denials.iter().any(|d| {
            d.kind.specificity() > coarse.kind.specificity()
                && d.step == coarse.step
                && host_of_url(&d.host).eq_ignore_ascii_case(host_of_url(&coarse.host))
        })
    };
    denials
        .iter()
        .filter(|d| !explained(d))
        .map(|d| (*d).clone())
        .collect()
}

/// At most [`MAX_FIELD`] bytes, cut on a character boundary and marked.
fn bounded(mut text: String) -> String {
    if text.len() > MAX_FIELD {
        let mut end = MAX_FIELD;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// `https://host:port/path` -> `host`.
fn host_of_url(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    }
}

/// The rule that lets a name resolve (and its HTTPS/HTTP traffic through).
/// The name is the sandbox's own text: quoted as a TOML basic string, whose
/// escapes JSON's are a subset of.
fn allow_host_rule(name: &str) -> String {
    let quoted = serde_json::to_string(name.trim_end_matches('.')).unwrap_or_default();
    format!("[[allow]]\nhost = {quoted}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_come_out_of_urls() {
        assert_eq!(host_of_url("https://api.test:8443/x?y"), "api.test");
        assert_eq!(host_of_url("http://example.com"), "example.com");
        assert_eq!(host_of_url("https://[::1]:443/"), "::1");
    }

    #[test]
    fn a_hostile_name_cannot_break_out_of_the_suggested_rule() {
        let rule = allow_host_rule("evil\"\n[[allow]]\nhost = \"*");
        let parsed: toml::Value = toml::from_str(&rule).unwrap();
        let rules = parsed["allow"].as_array().unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0]["host"].as_str(),
            Some("evil\"\n[[allow]]\nhost = \"*")
        );
    }

    #[test]
    fn a_held_request_is_kept_with_its_rule_and_wait_and_what_is_kept_is_bounded() {
        use airlock_proxy::events::{ConnId, RequestId, TimestampUs};
        let log = DenialLog::new("p.toml", None);
        let asked = |approval: String| Event::ApprovalRequested {
            ts: TimestampUs(0),
            conn: ConnId(1),
            request: RequestId(1),
            held: Box::new(airlock_auditor::ApprovalRequested {
                approval,
                exec_id: None,
                exchange: Some(RequestId(1)),
                method: "POST".into(),
                url: "https://api.test/pay?card=4242".into(),
                request_headers: Vec::new(),
                body_bytes: 0,
                body_sha256: String::new(),
                rule: "p.toml:3".into(),
                reason: None,
                timeout_ms: 1000,
                approvers: Vec::new(),
            }),
        };
        let decided = |approval: String| Event::ApprovalDecided {
            ts: TimestampUs(0),
            conn: ConnId(1),
            request: RequestId(1),
            decided: Box::new(airlock_auditor::ApprovalDecided {
                approval,
                exec_id: None,
                exchange: Some(RequestId(1)),
                outcome: "denied".into(),
                scope: None,
                by: Some("root".into()),
                note: Some("no".into()),
                waited_ms: 1500,
                body_sha256: String::new(),
                method: "POST".into(),
                url: "https://api.test/pay?card=4242".into(),
            }),
        };
        let since = Instant::now();
        log.emit(asked("a1".into())).unwrap();
        log.emit(decided("a1".into())).unwrap();
        let held = log.held_of_step(StepId(1), since);
        assert_eq!(held.len(), 1);
        let h = &held[0];
        assert_eq!(
            (h.approval.as_str(), h.url.as_str(), h.rule.as_deref()),
            ("a1", "https://api.test/pay", Some("p.toml:3")),
            "the query stays in the record"
        );
        assert_eq!(
            (h.outcome.as_str(), h.waited_ms, h.step),
            ("denied", 1500, None)
        );
        for i in 0..MAX_KEPT + 5 {
            log.emit(decided(format!("n{i}"))).unwrap();
        }
        assert_eq!(log.state().held.len(), MAX_KEPT);
        assert_eq!(log.held_of_step(StepId(1), since).len(), MAX_PER_STEP);
    }

    #[test]
    fn identical_refusals_are_counted_and_the_kept_list_is_bounded() {
        let log = DenialLog::new("p.toml", None);
        let dns = |name: String| Event::Dns {
            ts: airlock_proxy::events::TimestampUs(0),
            client: "10.0.0.2:5353".parse().unwrap(),
            query: Box::new(DnsQuery {
                exec_id: None,
                name,
                qtype: "A".into(),
                answer: Vec::new(),
                decision: Verdict::Deny,
                rule: None,
            }),
        };
        log.emit(dns("a.test".into())).unwrap();
        log.emit(dns("a.test".into())).unwrap();
        let all = log.all();
        assert_eq!(all.denials.len(), 1);
        assert_eq!(all.denials[0].count, 2);
        for i in 0..MAX_KEPT + 5 {
            log.emit(dns(format!("n{i}.test"))).unwrap();
        }
        let all = log.all();
        assert_eq!(all.denials.len(), MAX_KEPT);
        assert_eq!(all.dropped, 6, "the oldest went");
        assert_eq!(
            all.denials[MAX_KEPT - 1].host,
            format!("n{}.test", MAX_KEPT + 4)
        );
        let long = format!("{}.test", "é".repeat(MAX_FIELD));
        log.emit(dns(long)).unwrap();
        let kept = log.all().denials.pop().unwrap();
        assert!(kept.host.len() <= MAX_FIELD + '…'.len_utf8() && kept.host.ends_with('…'));
        assert!(kept.rule.is_none_or(|r| r.len() <= MAX_RULE));
    }
}
