//! `airlock policy replay FILE SESSION...`: re-decide every recorded DNS
//! query, connection, request and MCP message of some sessions under a
//! policy file, and say what would change. The record is only read (opened read-only).
//!
//! Text output prints recorded strings through `escape::text`: the program
//! under audit chose them. `--json` leaves them as data.

use airlock_auditor::{
    ApprovalRequested, DnsQuery, ExchangeId, HttpExchange, RuleRef, TcpConnection,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use airlock_auditor::{AuditEvent, EventKind, SessionId, StoredEvent, collapse_exchanges, escape};
use airlock_policy::{BodyInput, DefaultAction, Host, Policy, UpgradeProtocol, UpgradeToken};
use anyhow::Context;
use serde::Serialize;

use super::recorded::Recorded;
use super::request::{Decided, Outcome, Target, decide};
use crate::policy_file;

mod mcp;

#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// The policy to replay the sessions under.
    file: PathBuf,
    #[command(flatten)]
    recorded: Recorded,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// One side of a change: a decision and the rule that made it.
#[derive(Debug, Serialize)]
struct Side {
    decision: String,
    rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Change {
    /// Went through (allowed or reported) and would now be denied or held.
    Blocked,
    /// A body constraint applies but the body on record was cut short.
    Undecidable,
    /// Refused, reported or held, and would now be allowed: what turning a
    /// report-mode session into rules is for.
    #[serde(rename = "now_allowed")]
    NowAllowed,
    /// Any other different decision (e.g. allow → report, ask → deny).
    Other,
}

impl Change {
    /// The word the text report starts the change's line with.
    fn label(self) -> &'static str {
        match self {
            Self::Blocked => "blocked",
            Self::Undecidable => "undecidable",
            Self::NowAllowed => "allowed",
            Self::Other => "other",
        }
    }
}

/// A replayed record whose decision would differ.
#[derive(Debug, Serialize)]
struct Changed {
    session: String,
    seq: u64,
    kind: &'static str,
    host: String,
    /// "GET https://...", "A api.example.com", "api.example.com:22".
    what: String,
    was: Side,
    would_be: Side,
    change: Change,
}

/// One record re-decided.
struct Replayed {
    host: String,
    what: String,
    was: Side,
    would_be: Side,
}

#[derive(Debug, Default, Serialize)]
struct Counts {
    dns: u64,
    tcp: u64,
    http: u64,
    mcp: u64,
}

#[derive(Debug, Default, Serialize)]
struct HostCount {
    host: String,
    changes: u64,
    blocked: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    policy: String,
    sessions: Vec<String>,
    replayed: Counts,
    changes: Vec<Changed>,
    hosts: Vec<HostCount>,
    blocked: u64,
    undecidable: u64,
    now_allowed: u64,
    other: u64,
    unchanged: u64,
}

impl Report {
    /// Counts a re-decided record, and keeps it if its decision would change.
    fn add(&mut self, session: &str, event: &StoredEvent, r: Replayed) {
        let Some(change) = classify(&r.was.decision, &r.would_be.decision) else {
            self.unchanged += 1;
            return;
        };
        match change {
            Change::Blocked => self.blocked += 1,
            Change::Undecidable => self.undecidable += 1,
            Change::NowAllowed => self.now_allowed += 1,
            Change::Other => self.other += 1,
        }
        self.changes.push(Changed {
            session: session.to_owned(),
            seq: event.seq.get(),
            kind: event.kind.as_str(),
            host: r.host,
            what: r.what,
            was: r.was,
            would_be: r.would_be,
            change,
        });
    }
}

pub(super) fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let policy = policy_file::load(&args.file)?;
    let chosen = args.recorded.open()?;
    let (store, ids) = (&chosen.store, &chosen.ids);
    let mut report = Report {
        policy: args.file.display().to_string(),
        sessions: ids.iter().map(ToString::to_string).collect(),
        replayed: Counts::default(),
        changes: Vec::new(),
        hosts: Vec::new(),
        blocked: 0,
        undecidable: 0,
        now_allowed: 0,
        other: 0,
        unchanged: 0,
    };
    for id in ids {
        let events = chosen.within(
            store
                .events(id, Some(&KINDS))
                .with_context(|| format!("reading session {id}"))?,
        );
        Session::new(&policy, id).replay(&events, &mut report);
    }
    report.hosts = per_host(&report.changes);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(render_text(&report).as_bytes())?;
    }
    Ok(if report.blocked == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::REFUSED)
    })
}

/// What a replay reads: what was decided, and which requests a person was asked about.
const KINDS: [EventKind; 5] = [
    EventKind::Dns,
    EventKind::Tcp,
    EventKind::Http,
    EventKind::ApprovalRequested,
    EventKind::McpCall,
];

/// One session's replay: quotas count per session, as the proxy's do.
struct Session<'a> {
    policy: &'a Policy,
    id: String,
    used: HashMap<String, u64>,
}

impl<'a> Session<'a> {
    fn new(policy: &'a Policy, id: &SessionId) -> Self {
        Session {
            policy,
            id: id.to_string(),
            used: HashMap::new(),
        }
    }

    fn replay(&mut self, events: &[StoredEvent], report: &mut Report) {
        // A held request's Http record says how the wait ended; it was an ask.
        let asked: HashSet<ExchangeId> = events
            .iter()
            .filter_map(|e| match &e.event {
                AuditEvent::ApprovalRequested(ApprovalRequested { exchange, .. }) => *exchange,
                _ => None,
            })
            .collect();
        // The record keeps two records per exchange and connection; the latest counts.
        for event in collapse_exchanges(events) {
            let replayed = match &event.event {
                AuditEvent::Dns(DnsQuery {
                    name,
                    qtype,
                    decision,
                    ..
                }) => {
                    report.replayed.dns += 1;
                    self.dns(name, qtype, decision.as_str())
                }
                AuditEvent::Tcp(TcpConnection {
                    host,
                    dst,
                    port,
                    decision,
                    rule,
                    ..
                }) => {
                    report.replayed.tcp += 1;
                    // Older records may lack the host: the address ("ip:port") stands in.
                    let host = host.as_deref().unwrap_or_else(|| address_of(dst));
                    self.tcp(host, *port, decision.as_str(), rule.as_ref())
                }
                AuditEvent::Http(HttpExchange {
                    exchange,
                    method,
                    url,
                    request_headers,
                    request_body,
                    request_body_truncated,
                    decision,
                    rule,
                    http_version,
                    websocket,
                    ..
                }) => {
                    report.replayed.http += 1;
                    let was = if exchange.is_some_and(|x| asked.contains(&x)) {
                        "ask"
                    } else {
                        decision.as_str()
                    };
                    let body = RecordedBody {
                        headers: request_headers,
                        bytes: request_body.as_deref().unwrap_or_default(),
                        complete: !request_body_truncated,
                        upgrade: websocket.is_some()
                            || asks_websocket(http_version, request_headers),
                    };
                    self.http(method, url, &body, was, rule.as_ref())
                }
                AuditEvent::McpCall(call) => {
                    report.replayed.mcp += 1;
                    // A call an [[ask]] rule held names its approval.
                    let was = if call.approval.is_some() {
                        "ask"
                    } else {
                        call.decision.as_str()
                    };
                    self.mcp(call, was)
                }
                _ => continue,
            };
            report.add(&self.id, &event, replayed);
        }
    }

    fn dns(&self, name: &str, qtype: &str, was: &str) -> Replayed {
        let host = name.trim_end_matches('.');
        let would_be = match Host::parse(host) {
            Ok(h) if self.policy.resolvable(&h) => side(Outcome::Allow, None, None),
            Ok(_) => side(Outcome::Deny, None, Some("no rule allows this name".into())),
            Err(e) => side(Outcome::Deny, None, Some(e.to_string())),
        };
        let was = Side {
            decision: was.to_owned(),
            rule: None,
            reason: None,
        };
        Replayed {
            host: host.to_owned(),
            what: format!("{qtype} {host}"),
            was,
            would_be,
        }
    }

    fn tcp(&self, host: &str, port: u16, was: &str, rule: Option<&RuleRef>) -> Replayed {
        let would_be = match Host::parse(host) {
            Ok(h) => match self.policy.connection(&h, port) {
                airlock_policy::ConnectionDecision::Deny(d) => side(
                    Outcome::Deny,
                    d.rule.map(|r| r.to_string()),
                    Some(d.reason.to_string()),
                ),
                airlock_policy::ConnectionDecision::Tunnel { rule }
                | airlock_policy::ConnectionDecision::Passthrough { rule } => {
                    side(Outcome::Allow, Some(rule.to_string()), None)
                }
                airlock_policy::ConnectionDecision::Inspect => side(Outcome::Allow, None, None),
            },
            Err(e) => side(Outcome::Undecidable, None, Some(e.to_string())),
        };
        let was = Side {
            decision: was.to_owned(),
            rule: rule.map(RuleRef::to_string),
            reason: None,
        };
        Replayed {
            host: host.to_owned(),
            what: format!("{host}:{port}"),
            was,
            would_be,
        }
    }

    fn http(
        &mut self,
        method: &str,
        url: &str,
        body: &RecordedBody<'_>,
        was: &str,
        rule: Option<&RuleRef>,
    ) -> Replayed {
        let was = Side {
            decision: was.to_owned(),
            rule: rule.map(RuleRef::to_string),
            reason: None,
        };
        let what = format!("{method} {url}");
        let target = match Target::parse(url) {
            Ok(t) => t,
            Err(e) => {
                let would_be = side(Outcome::Undecidable, None, Some(e.to_string()));
                return Replayed {
                    host: String::new(),
                    what,
                    was,
                    would_be,
                };
            }
        };
        let content_types = body.content_types();
        let input = BodyInput {
            content_types: &content_types,
            bytes: body.bytes,
            complete: body.complete,
        };
        let upgrade = body.upgrade.then_some(UpgradeProtocol::WebSocket);
        let decided = decide(self.policy, &target, method, Some(&input), upgrade);
        let decided = self.count(decided);
        let would_be = side(
            decided.outcome,
            decided.rule.map(|r| r.to_string()),
            decided.reason,
        );
        Replayed {
            host: target.host.to_string(),
            what,
            was,
            would_be,
        }
    }

    /// Takes one request from the allowing rule's quota, in record order,
    /// as the proxy does: keyed by the rule's content, per session.
    fn count(&mut self, mut decided: Decided) -> Decided {
        let Some((rule, max)) = decided.quota.take() else {
            return decided;
        };
        let used = self.used.entry(rule.key()).or_insert(0);
        if *used < max {
            *used += 1;
            return decided;
        }
        let reason = format!("the rule's quota of {max} requests per session is used up");
        decided.outcome = if self.policy.default_action() == DefaultAction::Report {
            Outcome::Report
        } else {
            Outcome::Deny
        };
        decided.reason = Some(reason);
        decided
    }
}

/// A recorded request's body and headers, as far as the record kept them.
struct RecordedBody<'a> {
    headers: &'a [(String, String)],
    bytes: &'a [u8],
    complete: bool,
    /// It asked to switch to WebSocket (the only protocol a rule can grant).
    upgrade: bool,
}

/// Whether the recorded headers ask for a WebSocket upgrade (HTTP/1.1,
/// `Upgrade: websocket`), so the replay asks the policy as the proxy did:
/// only rules whose `upgrade` list names it may allow it.
pub(super) fn asks_websocket(http_version: &str, headers: &[(String, String)]) -> bool {
    http_version.eq_ignore_ascii_case("HTTP/1.1")
        && headers.iter().any(|(name, value)| {
            name.eq_ignore_ascii_case("upgrade")
                && matches!(
                    UpgradeProtocol::classify(value),
                    UpgradeToken::Grantable(UpgradeProtocol::WebSocket)
                )
        })
}

impl RecordedBody<'_> {
    fn content_types(&self) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case("content-type"))
            .map(|(_, value)| value.as_str())
            .collect()
    }
}

/// "10.0.0.1" of "10.0.0.1:443", "::1" of "[::1]:443".
pub(super) fn address_of(dst: &str) -> &str {
    dst.rsplit_once(':')
        .map_or(dst, |(addr, _)| addr)
        .trim_start_matches('[')
        .trim_end_matches(']')
}

fn side(outcome: Outcome, rule: Option<String>, reason: Option<String>) -> Side {
    Side {
        decision: outcome.as_str().to_owned(),
        rule,
        reason,
    }
}

/// None when the decision is the same (a different rule deciding alike is
/// not a change: line numbers move with every edit).
fn classify(was: &str, would_be: &str) -> Option<Change> {
    if would_be == Outcome::Undecidable.as_str() {
        return Some(Change::Undecidable);
    }
    if was == would_be {
        return None;
    }
    let went_through = matches!(was, "allow" | "report");
    let stopped = matches!(would_be, "deny" | "ask");
    Some(if went_through && stopped {
        Change::Blocked
    } else if would_be == "allow" {
        Change::NowAllowed
    } else {
        Change::Other
    })
}

fn per_host(changes: &[Changed]) -> Vec<HostCount> {
    let mut hosts: BTreeMap<&str, HostCount> = BTreeMap::new();
    for c in changes {
        let entry = hosts.entry(&c.host).or_insert_with(|| HostCount {
            host: c.host.clone(),
            ..HostCount::default()
        });
        entry.changes += 1;
        entry.blocked += u64::from(c.change == Change::Blocked);
    }
    hosts.into_values().collect()
}

fn render_side(side: &Side) -> String {
    let mut out = side.decision.clone();
    match &side.rule {
        Some(rule) => out.push_str(&format!(" by {}", escape::text(rule))),
        // No rule on a refusal or a report: the policy's default decided.
        None if matches!(side.decision.as_str(), "deny" | "report") => out.push_str(" by default"),
        None => {}
    }
    if let Some(reason) = &side.reason {
        out.push_str(&format!(" ({})", escape::text(reason)));
    }
    out
}

fn render_text(report: &Report) -> String {
    let mut out = String::new();
    for c in &report.changes {
        let short: String = c.session.chars().take(8).collect();
        out.push_str(&format!(
            "{:<11} {short} #{} {} {}\n            {} → {}\n",
            c.change.label(),
            c.seq,
            c.kind,
            escape::text(&c.what),
            render_side(&c.was),
            render_side(&c.would_be),
        ));
    }
    if !report.hosts.is_empty() {
        out.push_str("by host:\n");
        for h in &report.hosts {
            out.push_str(&format!(
                "  {}: {} change{}, {} newly blocked\n",
                escape::text(&h.host),
                h.changes,
                if h.changes == 1 { "" } else { "s" },
                h.blocked
            ));
        }
    }
    let r = &report.replayed;
    let n = report.sessions.len();
    out.push_str(&format!(
        "replayed {} records ({} dns, {} tcp, {} http{}) of {n} session{} under {}: {} newly blocked, {} would now be allowed, {} undecidable, {} other changes, {} unchanged\n",
        r.dns + r.tcp + r.http + r.mcp,
        r.dns,
        r.tcp,
        r.http,
        // Named only when there were any: most sessions talk no MCP.
        match r.mcp {
            0 => String::new(),
            n => format!(", {n} mcp"),
        },
        if n == 1 { "" } else { "s" },
        report.policy,
        report.blocked,
        report.now_allowed,
        report.undecidable,
        report.other,
        report.unchanged,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_went_through_and_would_now_stop_counts_as_blocked() {
        assert_eq!(classify("allow", "allow"), None);
        assert_eq!(classify("report", "report"), None);
        assert_eq!(classify("allow", "deny"), Some(Change::Blocked));
        assert_eq!(classify("report", "deny"), Some(Change::Blocked));
        assert_eq!(classify("allow", "ask"), Some(Change::Blocked));
        assert_eq!(classify("ask", "deny"), Some(Change::Other));
        assert_eq!(classify("deny", "allow"), Some(Change::NowAllowed));
        assert_eq!(classify("report", "allow"), Some(Change::NowAllowed));
        assert_eq!(classify("ask", "allow"), Some(Change::NowAllowed));
        assert_eq!(classify("allow", "report"), Some(Change::Other));
        assert_eq!(classify("allow", "undecidable"), Some(Change::Undecidable));
    }

    #[test]
    fn a_recorded_address_loses_its_port_and_brackets() {
        assert_eq!(address_of("10.0.0.1:443"), "10.0.0.1");
        assert_eq!(address_of("[::1]:443"), "::1");
        assert_eq!(address_of("example.com"), "example.com");
    }
}
