//! One MCP (Model Context Protocol) message the proxy decided: a tool call,
//! a `tools/list` answer, or any other JSON-RPC method sent to a server a
//! policy names with `mcp = { ... }`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ExchangeId, ExecId, RuleRef, Verdict};

/// One JSON-RPC message to an MCP server, as the proxy decided it, and
/// (for a request that was forwarded) a summary of its answer.
///
/// Like `Http`, a call is recorded when it is decided (before anything is
/// forwarded) and again, with `result`, when its answer has been read:
/// readers show the latest record of each (`exchange`, `rpc_id`) pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpCall {
    /// Filled by the binary's attribution, as for `Http`.
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    /// The HTTP exchange the message rode on (see `Http::exchange`).
    #[serde(default)]
    pub exchange: Option<ExchangeId>,
    /// The server, as the policy names it.
    pub server: McpServer,
    /// The `Mcp-Session-Id` the client sent, if any (the server's session,
    /// not airlock's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_session: Option<String>,
    /// The JSON-RPC id as the client sent it (a string or a number); `None`
    /// for a notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc_id: Option<Value>,
    /// The JSON-RPC method exactly as sent (escaped by readers, like all
    /// text the sandbox chose), e.g. "tools/call".
    pub method: String,
    /// For `tools/call`: `params.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// For `tools/call`: `params.arguments`, secrets already redacted by
    /// the producer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The arguments were larger than the capture cap: `arguments` is then
    /// absent, and only their size is kept in `arguments_bytes`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub arguments_truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_bytes: Option<u64>,
    /// Where the message travelled: "post" (sent by the client in a POST,
    /// alone or in a batch; or, for an answer, read from the POST's
    /// response), "response" (the client's answer to a request of the
    /// server's), "sse" (an answer read from the GET stream, as the older
    /// HTTP+SSE transport sends every answer).
    pub channel: String,
    /// "allow" | "deny" | "report".
    pub decision: Verdict,
    /// The policy rule that decided, e.g. "policy.toml:12".
    #[serde(default)]
    pub rule: Option<RuleRef>,
    /// Why a refused message was refused (what the client was told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The approval that held this call (see `ApprovalRequested`), if an
    /// `[[ask]]` rule held it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// A summary of the server's answer to this message, once read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<McpResult>,
    /// For `tools/list`: every tool the server offered, before filtering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<McpToolList>,
}

impl McpCall {
    /// What the decided record of this message said that this later
    /// record of it leaves out (the arguments, the approval, the reason a
    /// report-mode call would have been refused: the proxy's answered
    /// record carries only the answer and the verdict), so that a
    /// reader showing the latest record still shows what was called.
    /// Nothing the later record says is replaced.
    pub fn fill_from_decided(&mut self, decided: &Self) {
        if self.arguments.is_none() && !self.arguments_truncated {
            self.arguments.clone_from(&decided.arguments);
            self.arguments_truncated = decided.arguments_truncated;
        }
        if self.arguments_bytes.is_none() {
            self.arguments_bytes = decided.arguments_bytes;
        }
        if self.approval.is_none() {
            self.approval.clone_from(&decided.approval);
        }
        if self.reason.is_none() {
            self.reason.clone_from(&decided.reason);
        }
    }
}

/// The MCP server a message was sent to: where the policy grants it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServer {
    pub host: String,
    pub port: u16,
    /// The request's path, without the query.
    pub path: String,
}

/// What the server answered to one message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpResult {
    /// Size of the JSON-RPC response message, as received.
    pub bytes: u64,
    /// A JSON-RPC error, or a tool result with `isError: true`.
    pub is_error: bool,
    /// The response message's first bytes (escaped text), for a reader.
    pub first_bytes: String,
}

/// A `tools/list` answer, in full, as the server sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolList {
    pub tools: Vec<McpTool>,
    /// Tools the client was not shown (the policy does not allow them).
    #[serde(default)]
    pub hidden: Vec<String>,
    /// Tools whose description or input schema differs from the same
    /// session's previous list of this server: how a poisoned tool shows
    /// itself.
    #[serde(default)]
    pub changed: Vec<String>,
}

/// One tool a server offered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpTool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub input_schema: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AuditEvent;

    #[test]
    fn a_later_record_of_a_call_keeps_what_it_says_and_takes_only_what_it_left_out() {
        let decided = McpCall {
            exec_id: None,
            exchange: Some(ExchangeId(1)),
            server: McpServer {
                host: "pay.test".into(),
                port: 443,
                path: "/mcp".into(),
            },
            mcp_session: None,
            rpc_id: Some(serde_json::json!(1)),
            method: "tools/call".into(),
            tool: Some("refund".into()),
            arguments: Some(serde_json::json!({"amount": 5})),
            arguments_truncated: false,
            arguments_bytes: Some(12),
            channel: "post".into(),
            decision: Verdict::Allow,
            rule: None,
            reason: Some("held".into()),
            approval: Some("ab12".into()),
            result: None,
            tools: None,
        };
        let mut answered = McpCall {
            arguments: None,
            arguments_bytes: None,
            reason: None,
            approval: None,
            result: Some(McpResult {
                bytes: 3,
                is_error: true,
                first_bytes: "{}".into(),
            }),
            ..decided.clone()
        };
        answered.fill_from_decided(&decided);
        assert_eq!(answered.arguments, decided.arguments);
        assert_eq!(answered.arguments_bytes, Some(12));
        assert_eq!(answered.approval.as_deref(), Some("ab12"));
        assert_eq!(answered.reason.as_deref(), Some("held"));
        assert!(answered.result.as_ref().is_some_and(|r| r.is_error));
        // Arguments over the cap stay "not kept", never filled.
        let mut big = McpCall {
            arguments: None,
            arguments_truncated: true,
            ..decided.clone()
        };
        big.fill_from_decided(&decided);
        assert_eq!(big.arguments, None);
    }

    #[test]
    fn an_mcp_call_is_stored_with_kind_mcp_call_and_reads_back_unchanged() {
        let call = AuditEvent::McpCall(McpCall {
            exec_id: Some(ExecId::new("3")),
            exchange: Some(ExchangeId(7)),
            server: McpServer {
                host: "pay.test".into(),
                port: 443,
                path: "/mcp".into(),
            },
            mcp_session: Some("abc".into()),
            rpc_id: Some(serde_json::json!(4)),
            method: "tools/call".into(),
            tool: Some("transfer".into()),
            arguments: Some(serde_json::json!({"amount": 5, "currency": "USD"})),
            arguments_truncated: false,
            arguments_bytes: Some(31),
            channel: "post".into(),
            decision: Verdict::Allow,
            rule: Some(RuleRef::new("policy.toml:3")),
            reason: None,
            approval: None,
            result: Some(McpResult {
                bytes: 80,
                is_error: false,
                first_bytes: "{\"jsonrpc\"".into(),
            }),
            tools: None,
        });
        let text = serde_json::to_string(&call).unwrap();
        assert!(text.starts_with("{\"kind\":\"mcp_call\""), "{text}");
        let back: AuditEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(back, call);
        assert_eq!(back.kind().as_str(), "mcp_call");
    }
}
