//! MCP messages (`mcp_call`) in the timeline: one line per message with the
//! tool, its key arguments, the verdict and rule, and the answer's summary;
//! a `tools/list` answer says what the agent was not shown and, loudly, on
//! lines of their own, which tools changed since the session's previous
//! list (a changed description is how a poisoned tool shows itself).
//!
//! Everything here came from the sandbox or from the MCP server, both
//! untrusted: every name, value and preview goes through [`escape`].

use super::{PREVIEW_CHARS, decision};
use crate::{McpCall, McpResult, McpServer, McpToolList, RuleRef, escape, humanize};
use serde_json::Value;

/// How much of one argument's value a line shows.
const VALUE_CHARS: usize = 32;
/// How many arguments a line names before "…".
const ARGUMENTS_SHOWN: usize = 6;

/// `mcp   tools/call transfer(amount=5, currency="USD")  pay.test/mcp
/// [allow by policy.toml:3] -> ok 80 B: {"jsonrpc"...`, and for a
/// `tools/list` answer what was hidden and what changed.
pub(super) fn describe(call: &McpCall) -> String {
    let mut s = match (call.method.as_str(), call.channel.as_str()) {
        ("", "response") => "mcp   (the client's answer to a request of the server)".to_owned(),
        ("", _) => "mcp   (a body that is not MCP)".to_owned(),
        (method, _) => format!("mcp   {}", escape::text(method)),
    };
    if let Some(tool) = &call.tool {
        s.push(' ');
        s.push_str(&escape::text(tool));
        s.push_str(&arguments(call));
    }
    s.push_str(&format!(
        "  {}  {}",
        server(&call.server),
        decision(call.decision, call.rule.as_ref().map(RuleRef::as_str))
    ));
    if call.rpc_id.is_none() {
        s.push_str(" (notification)");
    }
    if !matches!(call.channel.as_str(), "post" | "response") {
        s.push_str(&format!(" (in a {})", escape::text(&call.channel)));
    }
    if let Some(approval) = &call.approval {
        s.push_str(&format!(" approval {}", escape::text(approval)));
    }
    if let Some(reason) = &call.reason {
        s.push_str(&format!("  ({})", escape::text(reason)));
    }
    // A tools/list answer is summarized by its tools, not its first bytes.
    match (&call.tools, &call.result) {
        (Some(list), _) => s.push_str(&tools(list)),
        (None, Some(result)) => s.push_str(&answer(result)),
        (None, None) => {}
    }
    s
}

/// `pay.test/mcp`, with the port when it is not 443.
fn server(server: &McpServer) -> String {
    let port = match server.port {
        443 => String::new(),
        p => format!(":{p}"),
    };
    format!(
        "{}{port}{}",
        escape::text(&server.host),
        escape::text(&server.path)
    )
}

/// `(amount=5, currency="USD")`: the top-level arguments, each value cut
/// to a few characters; `(arguments 40 KB, not kept)` when the producer
/// kept only their size.
fn arguments(call: &McpCall) -> String {
    if call.arguments_truncated {
        return match call.arguments_bytes {
            Some(n) => format!("(arguments {}, not kept)", humanize::size(n)),
            None => "(arguments not kept)".into(),
        };
    }
    match &call.arguments {
        None => "()".into(),
        Some(Value::Object(map)) => {
            let mut parts: Vec<String> = map
                .iter()
                .take(ARGUMENTS_SHOWN)
                .map(|(k, v)| format!("{}={}", escape::text(k), value(v)))
                .collect();
            if map.len() > ARGUMENTS_SHOWN {
                parts.push(format!("… {} more", map.len() - ARGUMENTS_SHOWN));
            }
            format!("({})", parts.join(", "))
        }
        // Not an object: the server gets it as sent; show it as one value.
        Some(other) => format!("({})", value(other)),
    }
}

/// A value as a reader needs it on one line: a string quoted and cut to
/// [`VALUE_CHARS`] (with `"` escaped, so it cannot end its own quote), a
/// number or boolean as it is, an object or array by its size.
fn value(v: &Value) -> String {
    match v {
        Value::String(text) => escape::preview(text.as_bytes(), VALUE_CHARS),
        Value::Object(map) => format!("{{{} keys}}", map.len()),
        Value::Array(items) => format!("[{} items]", items.len()),
        // A number, boolean or null has no character to escape.
        other => other.to_string(),
    }
}

/// ` -> ok 80 B: "{"jsonrpc"..."` or ` -> ERROR 80 B: ...`.
fn answer(result: &McpResult) -> String {
    format!(
        " -> {} {}: {}",
        if result.is_error { "ERROR" } else { "ok" },
        humanize::size(result.bytes),
        escape::preview(result.first_bytes.as_bytes(), PREVIEW_CHARS)
    )
}

/// ` -> 5 tools offered, 2 hidden (a, b)` and one loud line per changed
/// tool, with the start of its new description.
fn tools(list: &McpToolList) -> String {
    let names = |v: &[String]| {
        v.iter()
            .map(|n| escape::text(n).into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = format!(" -> {} tools offered", list.tools.len());
    if list.hidden.is_empty() {
        s.push_str(", none hidden");
    } else {
        s.push_str(&format!(
            ", {} hidden from the agent ({})",
            list.hidden.len(),
            names(&list.hidden)
        ));
    }
    if !list.changed.is_empty() {
        s.push_str(&format!(
            ", {} CHANGED since this session's previous list",
            list.changed.len()
        ));
    }
    for name in &list.changed {
        let now = list
            .tools
            .iter()
            .find(|t| &t.name == name)
            .and_then(|t| t.description.as_deref())
            .unwrap_or("");
        s.push_str(&format!(
            "\n      !! TOOL CHANGED: {} (description or input schema differs from this session's previous list: possible tool poisoning); description now {}",
            escape::text(name),
            escape::preview(now.as_bytes(), PREVIEW_CHARS)
        ));
    }
    s
}
