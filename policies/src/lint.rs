//! Warnings about policies that parse but probably do not mean what their
//! author thinks. Kept few and specific so they are worth reading.

use crate::compile::Compiled;
use crate::decision::DefaultAction;
use crate::error::{Lint, SourceMap};
use crate::glob::PathGlob;
use crate::host::HostPattern;
use crate::rule::{AllowRule, DenyRule, Transport};

/// Methods that normally carry no request body (RFC 9110 §9.3).
const BODILESS_METHODS: [&str; 4] = ["GET", "HEAD", "OPTIONS", "TRACE"];

pub(crate) fn lint(map: &SourceMap, policy: &Compiled) -> Vec<Lint> {
    let mut lints = Vec::new();
    if policy.default == DefaultAction::Allow && policy.deny.is_empty() {
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
        if !rule.upgrade.is_empty() && !rule.matches_method("GET") {
            // RFC 6455 §4.1: the opening handshake is a GET; HTTP/1.1
            // upgrades in practice are too.
            lints.push(map.lint(
                rule.span.clone(),
                "`upgrade` on a rule that does not allow GET: a WebSocket handshake is a GET request (RFC 6455 §4.1), so the upgrade is never granted; add \"GET\" to `methods`",
            ));
        }
        if rule.body.is_some() {
            let bodiless = match &rule.methods {
                None => true,
                Some(methods) => methods
                    .iter()
                    .any(|m| BODILESS_METHODS.contains(&m.as_str())),
            };
            if bodiless {
                lints.push(map.lint(
                    rule.span.clone(),
                    "`body` constraints on a rule that allows methods without a body (or any method): such requests are denied as BodyMissing; set `methods`, e.g. [\"POST\"]",
                ));
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
        if policy.default == DefaultAction::Deny {
            let unused: Vec<&HostPattern> = credential
                .hosts
                .iter()
                .filter(|h| {
                    !policy.allow.iter().any(|r| {
                        r.transport == Transport::Http && r.hosts.iter().any(|a| a.overlaps(h))
                    })
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

/// An HTTP rule's request-level conditions on a host and port that a tcp
/// or passthrough rule also covers: the proxy decides to tunnel at
/// connection time (tcp before passthrough, whatever the file order), so no
/// request there is ever seen and those conditions are never checked.
fn tunnelled(rules: &[AllowRule], rule: &AllowRule) -> Option<String> {
    if rule.transport != Transport::Http {
        return None;
    }
    let fields: Vec<&str> = [
        ("methods", rule.methods.is_some()),
        ("paths", rule.paths.is_some()),
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
    [(Transport::Tcp, "tcp"), (Transport::Passthrough, "passthrough")]
        .into_iter()
        .find_map(|(transport, kind)| {
            rules.iter().filter(|t| t.transport == transport).find_map(|tunnel| {
                let port = rule.ports.iter().find(|p| tunnel.ports.contains(p))?;
                // Name the narrower of the two overlapping patterns: that
                // is the part of this rule that really is tunnelled.
                let host = rule.hosts.iter().find_map(|mine| {
                    tunnel.hosts.iter().find_map(|theirs| {
                        if theirs.covers(mine) {
                            Some(mine)
                        } else if mine.overlaps(theirs) {
                            Some(theirs)
                        } else {
                            None
                        }
                    })
                })?;
                let verb = if fields.len() == 1
                    && matches!(fields[0], "body" | "max_requests" | "upgrade")
                {
                    "is"
                } else {
                    "are"
                };
                Some(format!(
                    "the {kind} rule at line {} tunnels {host}:{port} without inspection, so this rule's {} {verb} never enforced",
                    tunnel.rule_ref.line,
                    fields.join("/"),
                ))
            })
        })
}

/// A host-wide deny covering every host and port of the allow rule.
fn blocks(deny: &DenyRule, rule: &AllowRule) -> bool {
    deny.is_host_wide()
        && rule
            .hosts
            .iter()
            .all(|h| deny.hosts.iter().any(|d| d.covers(h)))
        && deny
            .ports
            .as_ref()
            .is_none_or(|ports| rule.ports.iter().all(|p| ports.contains(p)))
}

/// An earlier rule without quota or body constraints that matches every
/// request the later one could. Upgrade requests are only matched by rules
/// granting the upgrade, so the earlier rule must grant every upgrade the
/// later one does.
fn shadows(earlier: &AllowRule, later: &AllowRule) -> bool {
    later.upgrade.iter().all(|u| earlier.upgrade.contains(u))
        && earlier.body.is_none()
        && earlier.max_requests.is_none()
        && earlier.transport == later.transport
        && later
            .hosts
            .iter()
            .all(|h| earlier.hosts.iter().any(|e| e.covers(h)))
        && later.ports.iter().all(|p| earlier.ports.contains(p))
        && match (&earlier.methods, &later.methods) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(e), Some(l)) => l.iter().all(|m| e.contains(m)),
        }
        && match (&earlier.paths, &later.paths) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(e), Some(l)) => l.iter().all(|p| e.iter().any(|g| glob_covers(g, p))),
        }
}

fn glob_covers(earlier: &PathGlob, later: &PathGlob) -> bool {
    earlier == later || earlier.as_str() == "/**"
}
