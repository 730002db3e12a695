//! Warnings about `mcp` tables that parse but probably do not mean what
//! their author thinks.

use crate::compile::Compiled;
use crate::error::{Lint, SourceMap};
use crate::rule::Transport;

pub(crate) fn lints(map: &SourceMap, policy: &Compiled, whole: &Compiled) -> Vec<Lint> {
    let mut lints = Vec::new();
    for rule in &policy.allow {
        let Some(mcp) = &rule.mcp else { continue };
        for grant in &mcp.tools {
            if !grant.glob.is_exact() && grant.glob.matches("") && grant.arguments.is_none() {
                lints.push(map.lint(
                    rule.span.clone(),
                    format!(
                        "tool entry {:?} allows every tool the server offers, including tools it adds later; name the tools",
                        grant.glob.as_str()
                    ),
                ));
            }
        }
        if !mcp.methods.iter().any(|m| m == "initialize") {
            lints.push(map.lint(
                rule.span.clone(),
                "this mcp table's `methods` leave out \"initialize\": a client cannot start an MCP session without it",
            ));
        }
    }
    for rule in &policy.ask {
        if rule.mcp.is_none() {
            continue;
        }
        let granted = whole.allow.iter().any(|a| {
            a.mcp.is_some()
                && a.transport == Transport::Http
                && a.matcher
                    .hosts()
                    .iter()
                    .any(|h| rule.matcher.hosts().iter().any(|m| m.overlaps(h)))
        });
        if !granted {
            lints.push(map.lint(
                rule.span.clone(),
                "no allow rule with an `mcp` table names this server, so its POSTs are refused before any tool call is held; add an [[allow]] rule for the server with `mcp = { tools = [...] }`",
            ));
        }
    }
    lints
}
