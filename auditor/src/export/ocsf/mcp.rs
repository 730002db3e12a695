//! MCP messages (`mcp_call`) as OCSF API Activity (6003): the tool (or, for
//! another method, the JSON-RPC method) is `api.operation`, the server
//! `api.service` and `dst_endpoint`, the JSON-RPC id `api.request.uid` with
//! the scrubbed arguments as `api.request.data`, the answer's summary
//! `api.response`. A `tools/list` answer whose tools changed since the
//! session's previous list is an alert (`is_alert`, severity High): that is
//! how a poisoned tool shows itself.

use serde_json::{Map, Value, json};

use super::envelope::{API_ACTIVITY, Activity, Context, Event};
use super::network::{device_host, endpoint};
use crate::{McpCall, RuleRef};

/// API Activity's activities are Create/Read/Update/Delete: listing tools
/// reads; a tool call is none of them (99, named for what it is).
fn activity(method: &str) -> Activity {
    match method {
        "tools/list" => Activity(2, "Read"),
        "tools/call" => Activity(99, "Tool Call"),
        _ => Activity(99, "Other"),
    }
}

/// The JSON-RPC id as text (it is a string or a number).
fn rpc_uid(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(super) fn call(cx: &Context<'_>, m: &McpCall) -> Value {
    let mut e = Event::new(*cx, API_ACTIVITY, activity(&m.method));
    let operation = m.tool.as_deref().unwrap_or(&m.method);
    let mut api = Map::new();
    api.insert("operation".into(), operation.into());
    api.insert(
        "service".into(),
        json!({"name": format!("{}:{}{}", m.server.host, m.server.port, m.server.path)}),
    );
    if let Some(id) = &m.rpc_id {
        let mut request = Map::new();
        request.insert("uid".into(), rpc_uid(id).into());
        if let Some(args) = &m.arguments {
            request.insert("data".into(), args.clone());
        }
        api.insert("request".into(), Value::Object(request));
    }
    if let Some(r) = &m.result {
        let mut response = Map::new();
        response.insert("message".into(), r.first_bytes.clone().into());
        if r.is_error {
            response.insert("error".into(), "error".into());
        }
        api.insert("response".into(), Value::Object(response));
    }
    e.verdict(m.decision)
        .rule(m.rule.as_ref().map(RuleRef::as_str), m.reason.as_deref())
        .set("api", Value::Object(api))
        .set("src_endpoint", json!({"hostname": device_host(cx)}))
        .set(
            "dst_endpoint",
            endpoint(Some(&m.server.host), Some(m.server.port)),
        )
        .keep("method", m.method.clone().into())
        .keep("tool", m.tool.clone().into())
        .keep("channel", m.channel.clone().into())
        .keep("rpc_id", m.rpc_id.clone().into())
        .keep("mcp_session", m.mcp_session.clone().into())
        .keep("exchange", m.exchange.map(|x| x.0).into())
        .keep("approval", m.approval.clone().into())
        .keep("arguments_bytes", m.arguments_bytes.into());
    if m.arguments_truncated {
        e.keep("arguments_truncated", true.into());
    }
    if let Some(r) = &m.result {
        e.keep("result", json!({"bytes": r.bytes, "is_error": r.is_error}));
    }
    let mut message = format!(
        "{} {} {} on {}{}",
        m.decision, m.method, operation, m.server.host, m.server.path
    );
    if let Some(list) = &m.tools {
        let offered: Vec<&str> = list.tools.iter().map(|t| t.name.as_str()).collect();
        e.keep(
            "tools",
            json!({"offered": offered, "hidden": list.hidden, "changed": list.changed}),
        );
        if !list.changed.is_empty() {
            e.set("is_alert", true.into())
                .set("severity_id", 4.into())
                .set("severity", "High".into());
            message.push_str(&format!(
                "; tools changed since the session's previous list: {}",
                list.changed.join(", ")
            ));
        }
    }
    e.message(message);
    e.build()
}
