//! Reading one message a server sent back: a `tools/list` result is
//! filtered to the tools the client may call and recorded in full (with
//! the tools whose description changed), and the answer to a forwarded
//! call is summarised in the record.

use std::sync::Arc;

use airlock_policy::Host;
use airlock_record::{
    ExchangeId, ExecId, McpCall, McpResult, McpServer, McpTool, McpToolList, RuleRef, Verdict,
};
use serde_json::Value;

use crate::credentials::Credentials;
use crate::engine::Engine;
use crate::events::{ConnId, Event, RequestId, TimestampUs};
use crate::rules::Rules;

/// First bytes of an answer kept in its record.
const FIRST_BYTES: usize = 256;

/// A call forwarded to the server, waiting for its answer.
#[derive(Debug, Clone)]
pub(crate) struct Forwarded {
    pub(crate) method: String,
    pub(crate) tool: Option<String>,
    pub(crate) rule: Option<RuleRef>,
    pub(crate) decision: Verdict,
    pub(crate) exchange: ExchangeId,
}

/// Who is reading a server's answers, and for which server.
pub(crate) struct AnswerContext {
    pub(crate) engine: Arc<Engine>,
    pub(crate) conn: ConnId,
    pub(crate) exec: Option<ExecId>,
    pub(crate) request: RequestId,
    /// The rules in force when the exchange began.
    pub(crate) rules: Arc<Rules>,
    pub(crate) host: Host,
    pub(crate) server: McpServer,
    pub(crate) mcp_session: Option<String>,
    /// "post" (the answer to a POST) or "sse" (the GET stream).
    pub(crate) channel: &'static str,
}

impl AnswerContext {
    /// The key the session's memory keeps this server under.
    pub(crate) fn server_key(&self) -> String {
        format!("{}:{}", self.server.host, self.server.port)
    }

    /// One JSON text the server sent (a message or a batch): Some(new text)
    /// when it had to be changed (a tool list filtered).
    pub(crate) fn message(&self, text: &[u8]) -> Option<Vec<u8>> {
        let mut value: Value = serde_json::from_slice(text).ok()?;
        let changed = match &mut value {
            Value::Array(items) => {
                let mut any = false;
                for item in items {
                    any |= self.one(item, text.len());
                }
                any
            }
            other => self.one(other, text.len()),
        };
        changed.then(|| value.to_string().into_bytes())
    }

    fn one(&self, message: &mut Value, bytes: usize) -> bool {
        let Value::Object(map) = message else {
            return false;
        };
        if map.contains_key("method") || !map.contains_key("id") {
            // The server's own requests and notifications pass as they are.
            return false;
        }
        let id = map.get("id").cloned().unwrap_or(Value::Null);
        let forwarded = self
            .engine
            .mcp_lists
            .answered(&self.server_key(), &id.to_string());
        let is_error = map.contains_key("error")
            || map
                .get("result")
                .and_then(|r| r.get("isError"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
        let first_bytes = {
            let text = Value::Object(map.clone()).to_string();
            let mut cut = text.len().min(FIRST_BYTES);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text[..cut].to_owned()
        };
        let result = McpResult {
            bytes: bytes as u64,
            is_error,
            first_bytes,
        };
        let tools = map
            .get_mut("result")
            .and_then(|r| r.get_mut("tools"))
            .and_then(Value::as_array_mut);
        let (listed, filtered) = match tools {
            Some(tools) => {
                let all = tools.iter().map(tool_of).collect::<Vec<_>>();
                let server = self.rules.policy.mcp_server(&self.host, self.server.port);
                let before = tools.len();
                tools.retain(|t| {
                    let name = t.get("name").and_then(Value::as_str);
                    match (&server, name) {
                        (Some(server), Some(name)) => server.tool_visible(name),
                        _ => false,
                    }
                });
                let kept: Vec<&str> = tools
                    .iter()
                    .filter_map(|t| t.get("name").and_then(Value::as_str))
                    .collect();
                let hidden: Vec<String> = all
                    .iter()
                    .filter(|t| !kept.contains(&t.name.as_str()))
                    .map(|t| t.name.clone())
                    .collect();
                let changed = self.engine.mcp_lists.observe(&self.server_key(), &all);
                let filtered = tools.len() != before;
                (
                    Some(McpToolList {
                        tools: all,
                        hidden,
                        changed,
                    }),
                    filtered,
                )
            }
            None => (None, false),
        };
        if forwarded.is_none() && listed.is_none() {
            return filtered;
        }
        let call = McpCall {
            exec_id: self.exec.clone(),
            exchange: forwarded
                .as_ref()
                .map(|f| f.exchange)
                .or(Some(self.request)),
            server: self.server.clone(),
            mcp_session: self.mcp_session.clone(),
            rpc_id: Some(id),
            method: forwarded
                .as_ref()
                .map_or_else(|| "tools/list".to_owned(), |f| f.method.clone()),
            tool: forwarded.as_ref().and_then(|f| f.tool.clone()),
            arguments: None,
            arguments_truncated: false,
            arguments_bytes: None,
            channel: self.channel.to_owned(),
            decision: forwarded.as_ref().map_or(Verdict::Allow, |f| f.decision),
            rule: forwarded.as_ref().and_then(|f| f.rule.clone()),
            reason: None,
            approval: None,
            result: Some(result),
            tools: listed,
        };
        self.engine.record_lossy(Event::McpCall {
            ts: TimestampUs::now(),
            conn: self.conn,
            request: self.request,
            call: Box::new(redacted(&self.rules.credentials, call)),
        });
        filtered
    }
}

fn tool_of(tool: &Value) -> McpTool {
    McpTool {
        name: tool
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        description: tool
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
        input_schema: tool.get("inputSchema").cloned(),
    }
}

/// The call with every credential's secret replaced by its marker (an
/// upstream may echo one; the recorder scrubs again).
pub(crate) fn redacted(credentials: &Credentials, call: McpCall) -> McpCall {
    let Ok(text) = serde_json::to_string(&call) else {
        return call;
    };
    let clean = credentials.redact(&text);
    if clean == text {
        return call;
    }
    serde_json::from_str(&clean).unwrap_or(call)
}
