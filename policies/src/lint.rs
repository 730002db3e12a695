//! Warnings about policies that parse but probably do not mean what their
//! author thinks. Kept few and specific so they are worth reading.

use crate::compile::Compiled;
use crate::decision::DefaultAction;
use crate::error::{Lint, SourceMap};
use crate::glob::PathGlob;
use crate::host::HostPattern;
use crate::matcher::RequestMatcher;
use crate::rule::{AllowRule, AskRule, DenyRule, Transport};

/// The methods of IANA's HTTP Method Registry (RFC 9110, RFC 5789's PATCH,
/// WebDAV and its kin, QUERY). A method outside it is almost always a typo,
/// which would match nothing a client sends.
const REGISTERED_METHODS: [&str; 40] = [
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "DELETE",
    "CONNECT",
    "OPTIONS",
    "TRACE",
    "PATCH",
    "ACL",
    "BASELINE-CONTROL",
    "BIND",
    "CHECKIN",
    "CHECKOUT",
    "COPY",
    "LABEL",
    "LINK",
    "LOCK",
    "MERGE",
    "MKACTIVITY",
    "MKCALENDAR",
    "MKCOL",
    "MKREDIRECTREF",
    "MKWORKSPACE",
    "MOVE",
    "ORDERPATCH",
    "PRI",
    "PROPFIND",
    "PROPPATCH",
    "QUERY",
    "REBIND",
    "REPORT",
    "SEARCH",
    "UNBIND",
    "UNCHECKOUT",
    "UNLINK",
    "UNLOCK",
    "UPDATE",
    "UPDATEREDIRECTREF",
    "VERSION-CONTROL",
];
/// The methods a typo is most likely of.
const STANDARD_METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

/// Methods that normally carry no request body (RFC 9110 §9.3).
const BODILESS_METHODS: [&str; 4] = ["GET", "HEAD", "OPTIONS", "TRACE"];

pub(crate) fn lint(map: &SourceMap, policy: &Compiled) -> Vec<Lint> {
    lint_layer(map, policy, policy)
}

/// The lints of one file of a layered policy, `whole` being all layers
/// merged: whether anything is blocked and whether a credential is ever
/// used depend on every file, not just the one that says it.
pub(crate) fn lint_layer(map: &SourceMap, policy: &Compiled, whole: &Compiled) -> Vec<Lint> {
    let mut lints = Vec::new();
    // Ask rules restrict too (they hold requests), so they silence this one.
    if policy.default == DefaultAction::Allow && whole.deny.is_empty() && whole.ask.is_empty() {
        let span = policy.default_span.clone().unwrap_or(0..0);
        lints.push(map.lint(
            span,
            "default allow: rules only add quotas/credentials; nothing is blocked",
        ));
    }
    for (index, rule) in policy.allow.iter().enumerate() {
        if let Some(deny) = policy.deny.iter().find(|d| blocks(d, rule)) {
            lints.push(map.lint(
                rule.span.clone(),
                format!(
                    "this allow rule can never match: the deny rule at line {} blocks all of its hosts and ports",
                    deny.rule_ref.line
                ),
            ));
        } else if let Some(earlier) = policy.allow[..index].iter().find(|e| shadows(e, rule)) {
            lints.push(map.lint(
                rule.span.clone(),
                format!(
                    "this allow rule can never match: the allow rule at line {} already allows everything it does",
                    earlier.rule_ref.line
                ),
            ));
        }
        if let Some(message) = tunnelled(&policy.allow, rule) {
            lints.push(map.lint(rule.span.clone(), message));
        }
        if !rule.upgrade.is_empty() && !rule.matcher.matches_method("GET") {
            // RFC 6455 §4.1: the opening handshake is a GET; HTTP/1.1
            // upgrades in practice are too.
            lints.push(map.lint(
                rule.span.clone(),
                "`upgrade` on a rule that does not allow GET: a WebSocket handshake is a GET request (RFC 6455 §4.1), so the upgrade is never granted; add \"GET\" to `methods`",
            ));
        }
        if rule.body.is_some() && takes_bodiless(rule.matcher.methods()) {
            lints.push(map.lint(
                rule.span.clone(),
                "`body` constraints on a rule that allows methods without a body (or any method): such requests are denied as BodyMissing; set `methods`, e.g. [\"POST\"]",
            ));
        }
    }
    lints.extend(crate::mcp::lints(map, policy, whole));
    for (index, rule) in policy.ask.iter().enumerate() {
        lints.extend(
            ask_lints(policy, &policy.ask[..index], rule)
                .into_iter()
                .map(|message| map.lint(rule.span.clone(), message)),
        );
    }
    let methods = policy
        .allow
        .iter()
        .map(|r| (&r.span, &r.matcher))
        .chain(policy.deny.iter().map(|r| (&r.span, &r.matcher)))
        .chain(policy.ask.iter().map(|r| (&r.span, &r.matcher)));
    for (span, matcher) in methods {
        for method in matcher.methods().into_iter().flatten() {
            if let Some(message) = unregistered_method(method) {
                lints.push(map.lint(span.clone(), message));
            }
        }
    }
    for (credential, span) in policy.credentials.iter().zip(&policy.credential_spans) {
        if credential.value.reference_count() == 0 {
            lints.push(map.lint(
                span.clone(),
                format!(
                    "credential {:?}: secret literal in policy file; use ${{env:NAME}} or ${{file:PATH}}",
                    credential.name
                ),
            ));
        }
        if whole.default == DefaultAction::Deny {
            let unused: Vec<&HostPattern> = credential
                .hosts
                .iter()
                .filter(|h| {
                    // A request an ask rule holds is forwarded once approved,
                    // with the credential.
                    !whole.allow.iter().any(|r| {
                        r.transport == Transport::Http
                            && r.matcher.hosts().iter().any(|a| a.overlaps(h))
                    }) && !whole
                        .ask
                        .iter()
                        .any(|r| r.matcher.hosts().iter().any(|a| a.overlaps(h)))
                })
                .collect();
            if !unused.is_empty() {
                let names: Vec<String> = unused.iter().map(ToString::to_string).collect();
                lints.push(map.lint(
                    span.clone(),
                    format!(
                        "credential {:?} is never used: no HTTP allow rule allows {} (credentials cannot be injected into tcp/passthrough tunnels)",
                        credential.name,
                        names.join(", ")
                    ),
                ));
            }
        }
    }
    lints
}

/// A method no registry knows, with the standard one it is probably a typo
/// of.
fn unregistered_method(method: &str) -> Option<String> {
    if REGISTERED_METHODS.contains(&method) {
        return None;
    }
    let mut message = format!(
        "method \"{method}\" is not a standard HTTP method, so this rule matches only a client that sends exactly that"
    );
    match crate::error::closest(method, &STANDARD_METHODS) {
        Some(best) => message.push_str(&format!("; did you mean \"{best}\"?")),
        None => message.push_str(&format!(
            " (standard methods: {})",
            STANDARD_METHODS.join(", ")
        )),
    }
    Some(message)
}

/// Warnings about one ask rule; `earlier` are the ask rules before it.
fn ask_lints(policy: &Compiled, earlier: &[AskRule], rule: &AskRule) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(deny) = policy
        .deny
        .iter()
        .find(|d| covers(&d.matcher, &rule.matcher))
    {
        out.push(format!(
            "this ask rule can never match: the deny rule at line {} refuses every request it covers (deny rules come first); narrow or remove one of them",
            deny.rule_ref.line
        ));
    } else if let Some(first) = earlier
        .iter()
        .find(|e| e.body.is_none() && covers(&e.matcher, &rule.matcher))
    {
        out.push(format!(
            "this ask rule can never match: the ask rule at line {} already holds every request it does (the first matching ask rule decides); merge the two or remove this one",
            first.rule_ref.line
        ));
    }
    if let Some(message) = inspected_instead(&policy.allow, rule) {
        out.push(message);
    }
    if let Some(name) = repeated(&rule.approvers) {
        out.push(format!(
            "`approvers` lists {name:?} more than once; list each name once"
        ));
    }
    if rule.body.is_some() && takes_bodiless(rule.matcher.methods()) {
        out.push("`body` constraints on an ask rule that matches methods without a body (or any method): such requests are always held, since a missing body cannot be judged; set `methods`, e.g. [\"POST\"]".to_owned());
    }
    out
}

/// A tcp or passthrough rule sharing a host and port with an ask rule: the
/// proxy inspects those connections so that the ask rule can hold their
/// requests, so the tunnel never happens (fail closed).
fn inspected_instead(rules: &[AllowRule], ask: &AskRule) -> Option<String> {
    let shared = tunnel_sharing(rules, &ask.matcher)?;
    Some(format!(
        "the {} rule at line {} would tunnel {}:{}, but this ask rule must see requests there, so those connections are inspected and never tunnelled; narrow the hosts or ports of one of the two rules",
        shared.kind, shared.tunnel.rule_ref.line, shared.host, shared.port,
    ))
}

/// A tcp or passthrough rule and the host and port it shares with another
/// rule.
struct SharedTunnel<'a> {
    /// "tcp" or "passthrough".
    kind: &'static str,
    tunnel: &'a AllowRule,
    /// The narrower of the two rules' overlapping patterns.
    host: &'a HostPattern,
    port: u16,
}

/// The first tcp rule, else the first passthrough rule, that tunnels a
/// host and port `matcher` covers (in that order, as the proxy decides).
fn tunnel_sharing<'a>(
    rules: &'a [AllowRule],
    matcher: &'a RequestMatcher,
) -> Option<SharedTunnel<'a>> {
    [
        (Transport::Tcp, "tcp"),
        (Transport::Passthrough, "passthrough"),
    ]
    .into_iter()
    .find_map(|(transport, kind)| {
        rules
            .iter()
            .filter(|t| t.transport == transport)
            .find_map(|tunnel| {
                // Neither is a deny rule, so both list their ports.
                let theirs = tunnel.matcher.ports().unwrap_or_default();
                let port = matcher
                    .ports()
                    .unwrap_or_default()
                    .iter()
                    .copied()
                    .find(|p| theirs.contains(p))?;
                let host = shared_host(matcher.hosts(), tunnel.matcher.hosts())?;
                Some(SharedTunnel {
                    kind,
                    tunnel,
                    host,
                    port,
                })
            })
    })
}

/// Name the narrower of two overlapping patterns, if any overlap: that is
/// where both rules apply.
fn shared_host<'a>(mine: &'a [HostPattern], theirs: &'a [HostPattern]) -> Option<&'a HostPattern> {
    mine.iter().find_map(|m| {
        theirs.iter().find_map(|t| {
            if t.covers(m) {
                Some(m)
            } else if m.overlaps(t) {
                Some(t)
            } else {
                None
            }
        })
    })
}

/// The first name written twice.
fn repeated(names: &[String]) -> Option<&str> {
    names
        .iter()
        .enumerate()
        .find(|(i, name)| names[..*i].contains(name))
        .map(|(_, name)| name.as_str())
}

/// Whether a rule's `methods` (None = any) include one that normally has
/// no body.
fn takes_bodiless(methods: Option<&[String]>) -> bool {
    methods.is_none_or(|methods| {
        methods
            .iter()
            .any(|m| BODILESS_METHODS.contains(&m.as_str()))
    })
}

/// An HTTP rule's request-level conditions on a host and port that a tcp
/// or passthrough rule also covers: the proxy decides to tunnel at
/// connection time (tcp before passthrough, whatever the file order), so no
/// request there is ever seen and those conditions are never checked.
fn tunnelled(rules: &[AllowRule], rule: &AllowRule) -> Option<String> {
    if rule.transport != Transport::Http {
        return None;
    }
    let fields: Vec<&str> = [
        ("methods", rule.matcher.methods().is_some()),
        ("paths", rule.matcher.path_globs().is_some()),
        ("body", rule.body.is_some()),
        ("max_requests", rule.max_requests.is_some()),
        ("upgrade", !rule.upgrade.is_empty()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    if fields.is_empty() {
        return None;
    }
    // The shared host is the part of this rule that really is tunnelled.
    let shared = tunnel_sharing(rules, &rule.matcher)?;
    let verb = if fields.len() == 1 && matches!(fields[0], "body" | "max_requests" | "upgrade") {
        "is"
    } else {
        "are"
    };
    Some(format!(
        "the {} rule at line {} tunnels {}:{} without inspection, so this rule's {} {verb} never enforced",
        shared.kind,
        shared.tunnel.rule_ref.line,
        shared.host,
        shared.port,
        fields.join("/"),
    ))
}

/// Allow and ask rules of a file that a base's deny rule overrides, in
/// whole or in part: the deny wins in every layer, so the rule cannot do
/// (all of) what it says. Spans are the overridden rule's table.
pub(crate) fn overridden(
    base_denies: &[DenyRule],
    policy: &Compiled,
) -> Vec<(std::ops::Range<usize>, String)> {
    let mut out = Vec::new();
    let mut check = |kind: &str, span: &std::ops::Range<usize>, matcher: &RequestMatcher| {
        for deny in base_denies {
            let extent = if covers(&deny.matcher, matcher) {
                "every request"
            } else if overlaps(&deny.matcher, matcher) {
                "some requests"
            } else {
                continue;
            };
            out.push((
                span.clone(),
                format!(
                    "this {kind} rule cannot override the base policy's deny rule at {}, which denies {extent} it matches; a project can only add rules a base does not deny: narrow this rule or remove it",
                    deny.rule_ref
                ),
            ));
        }
    };
    for rule in &policy.allow {
        check("allow", &rule.span, &rule.matcher);
    }
    for rule in &policy.ask {
        check("ask", &rule.span, &rule.matcher);
    }
    out
}

/// A host-wide deny covering every host and port of the allow rule. (A
/// deny with methods or paths cannot reach into tcp or passthrough rules,
/// and the message speaks of hosts and ports.)
fn blocks(deny: &DenyRule, rule: &AllowRule) -> bool {
    deny.matcher.is_host_wide() && covers(&deny.matcher, &rule.matcher)
}

/// An earlier rule without quota or body constraints that matches every
/// request the later one could. Upgrade requests are only matched by rules
/// granting the upgrade, so the earlier rule must grant every upgrade the
/// later one does.
fn shadows(earlier: &AllowRule, later: &AllowRule) -> bool {
    later.upgrade.iter().all(|u| earlier.upgrade.contains(u))
        && earlier.body.is_none()
        && earlier.max_requests.is_none()
        // Every mcp rule for a server counts, whatever the order.
        && earlier.mcp.is_none()
        && later.mcp.is_none()
        && earlier.transport == later.transport
        && covers(&earlier.matcher, &later.matcher)
}

/// Whether every request `other` matches is matched by `wide` too
/// (conservatively: unsure means no). Methods are upper-cased in every
/// kind; paths are compared by their globs as written (a deny or ask
/// rule's loose form follows from them).
fn covers(wide: &RequestMatcher, other: &RequestMatcher) -> bool {
    other
        .hosts()
        .iter()
        .all(|h| wide.hosts().iter().any(|s| s.covers(h)))
        && match (wide.ports(), other.ports()) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(s), Some(o)) => o.iter().all(|p| s.contains(p)),
        }
        && match (wide.methods(), other.methods()) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(s), Some(o)) => o.iter().all(|m| s.contains(m)),
        }
        && match (wide.path_globs(), other.path_globs()) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(s), Some(o)) => o.iter().all(|p| s.iter().any(|g| glob_covers(g, p))),
        }
}

/// Whether some request could match both (conservatively: unsure means
/// no, since this feeds an error).
fn overlaps(one: &RequestMatcher, other: &RequestMatcher) -> bool {
    shared_host(one.hosts(), other.hosts()).is_some()
        && match (one.ports(), other.ports()) {
            (None, _) | (_, None) => true,
            (Some(s), Some(o)) => o.iter().any(|p| s.contains(p)),
        }
        && match (one.methods(), other.methods()) {
            (None, _) | (_, None) => true,
            (Some(s), Some(o)) => o.iter().any(|m| s.contains(m)),
        }
        && match (one.path_globs(), other.path_globs()) {
            (None, _) | (_, None) => true,
            (Some(s), Some(o)) => s.iter().any(|a| o.iter().any(|b| glob_overlaps(a, b))),
        }
}

/// Whether two path globs share a path: one covers the other, or one
/// matches the other's text read as a path (`/api/*` and `/api/keys`).
fn glob_overlaps(a: &PathGlob, b: &PathGlob) -> bool {
    glob_covers(a, b) || glob_covers(b, a) || a.matches(b.as_str()) || b.matches(a.as_str())
}

fn glob_covers(earlier: &PathGlob, later: &PathGlob) -> bool {
    earlier == later
        || earlier.as_str() == "/**"
        // A literal path is covered by any glob that matches it.
        || (!later.as_str().contains(['*', '?']) && earlier.matches(later.as_str()))
}
