//! A session's MCP tool calls (`mcp_call` records): the tool-call view.
//! Each message's latest record (decided, then answered), in order, with
//! the tool, its arguments, the verdict, the rule, the answer, and for a
//! `tools/list` answer the tools offered, hidden and changed. Every string
//! is the sandbox's or the server's: the page shows it as text.

use airlock_record::{AuditEvent, EventKind, McpCall, collapse_exchanges};
use http::Response;
use serde_json::{Value, json};

use super::resolve;
use crate::ConsoleError;
use crate::respond::{self, Body};
use crate::server::State;

pub(super) fn list(state: &State, id: &str) -> Result<Response<Body>, ConsoleError> {
    let id = resolve(state, id)?;
    let events = state.store.events(&id, Some(&[EventKind::McpCall]))?;
    let calls: Vec<Value> = collapse_exchanges(&events)
        .iter()
        .filter_map(|ev| match &ev.event {
            AuditEvent::McpCall(call) => Some(row(ev.seq.get(), ev.ts_us, call)),
            _ => None,
        })
        .collect();
    let changed = calls
        .iter()
        .filter(|c| c["changed"].as_array().is_some_and(|a| !a.is_empty()))
        .count();
    Ok(respond::json(&json!({
        "session": id.as_str(),
        "calls": calls,
        "lists_with_changed_tools": changed,
    })))
}

fn row(seq: u64, ts_us: i64, c: &McpCall) -> Value {
    let (offered, hidden, changed) = match &c.tools {
        Some(list) => (
            list.tools
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "description": t.description,
                        "changed": list.changed.contains(&t.name),
                        "hidden": list.hidden.contains(&t.name),
                    })
                })
                .collect::<Vec<_>>(),
            list.hidden.clone(),
            list.changed.clone(),
        ),
        None => (Vec::new(), Vec::new(), Vec::new()),
    };
    json!({
        "seq": seq,
        "ts_us": ts_us,
        "exec_id": c.exec_id,
        "exchange": c.exchange,
        "server": format!("{}:{}{}", c.server.host, c.server.port, c.server.path),
        "mcp_session": c.mcp_session,
        "rpc_id": c.rpc_id,
        "method": c.method,
        "tool": c.tool,
        "arguments": c.arguments,
        "arguments_truncated": c.arguments_truncated,
        "arguments_bytes": c.arguments_bytes,
        "channel": c.channel,
        "decision": c.decision,
        "rule": c.rule,
        "reason": c.reason,
        "approval": c.approval,
        "result": c.result,
        "is_tool_list": c.tools.is_some(),
        "offered": offered,
        "hidden": hidden,
        "changed": changed,
    })
}
