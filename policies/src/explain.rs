//! `policy check --explain`: each rule as the proxy reads it, one line
//! each, with what the file leaves unsaid spelt out. Most of all the ports:
//! a rule without `ports` covers 80 and 443 (443 for `tls = "passthrough"`),
//! so `https://host:8443` is not covered, and nothing in the file says so.

use crate::compile::{Compiled, DEFAULT_HTTP_PORTS, DEFAULT_PASSTHROUGH_PORTS};
use crate::decision::DefaultAction;
use crate::matcher::RequestMatcher;
use crate::rule::{RuleRef, Transport};

pub(crate) fn explain(policy: &Compiled) -> Vec<String> {
    let mut lines = Vec::new();
    for rule in &policy.allow {
        let what = match rule.transport {
            Transport::Http => "allow",
            Transport::Tcp => "allow tcp",
            Transport::Passthrough => "allow tls passthrough",
        };
        let default = match rule.transport {
            Transport::Passthrough => &DEFAULT_PASSTHROUGH_PORTS[..],
            _ => &DEFAULT_HTTP_PORTS[..],
        };
        let mut text = line(&rule.rule_ref, what, &rule.matcher, default);
        if rule.transport != Transport::Http {
            // Bytes, not requests: there is no method or path to see.
            text.truncate(text.find("; any method; any path").unwrap_or(text.len()));
            text.push_str("; not HTTP, so no methods or paths");
        }
        lines.push(text);
    }
    for rule in &policy.ask {
        lines.push(line(
            &rule.rule_ref,
            "ask",
            &rule.matcher,
            &DEFAULT_HTTP_PORTS,
        ));
    }
    for rule in &policy.deny {
        lines.push(line(&rule.rule_ref, "deny", &rule.matcher, &[]));
    }
    let default = match policy.default {
        DefaultAction::Deny => "deny",
        DefaultAction::Allow => "allow",
        DefaultAction::Report => "report (forwarded, and recorded as what deny would refuse)",
    };
    lines.push(format!("default: {default} for whatever no rule covers"));
    lines
}

/// The ports a rule covers; `default` is what it covers without `ports`.
fn ports(ports: Option<&[u16]>, default: &[u16]) -> String {
    let Some(ports) = ports else {
        return "every port".into();
    };
    let listed: Vec<String> = ports.iter().map(u16::to_string).collect();
    let mut text = format!("port{} {}", plural(ports.len()), listed.join(", "));
    if !default.is_empty() && ports == default {
        text.push_str(&format!(
            " only (the default without `ports`: https://HOST:8443 is not covered; add ports = [{}, 8443] for it)",
            listed.join(", ")
        ));
    }
    text
}

/// One rule; `default_ports` is what its kind covers without `ports`.
fn line(rule: &RuleRef, what: &str, matcher: &RequestMatcher, default_ports: &[u16]) -> String {
    let hosts: Vec<String> = matcher.hosts().iter().map(ToString::to_string).collect();
    let ports = ports(matcher.ports(), default_ports);
    let methods = matcher
        .methods()
        .map_or_else(|| "any method".to_owned(), |m| m.join(", "));
    let paths = matcher.path_globs().map_or_else(
        || "any path".to_owned(),
        |p| p.iter().map(|g| g.as_str()).collect::<Vec<_>>().join(", "),
    );
    format!(
        "{rule}: {what} {}, {ports}; {methods}; {paths}",
        hosts.join(", ")
    )
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
