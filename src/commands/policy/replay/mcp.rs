//! Re-deciding a recorded MCP message (`mcp_call`) under a candidate
//! policy, with the policy crate's own MCP decision: the recorded message
//! is spelled again as the JSON-RPC body it was and read by the same strict
//! reader the proxy uses, then decided by the server's rules. Tool quotas
//! (`max_calls`) count per session, in record order, as the proxy's do.

use airlock_auditor::McpCall;
use airlock_policy::{Host, McpVerdict, parse_mcp_body};
use serde_json::{Value, json};

use super::super::request::{Outcome, Target, decide};
use super::{Replayed, Session, Side, side};

impl Session<'_> {
    pub(super) fn mcp(&mut self, call: &McpCall, was: &str) -> Replayed {
        let was = Side {
            decision: was.to_owned(),
            rule: call.rule.as_ref().map(ToString::to_string),
            reason: None,
        };
        let what = match &call.tool {
            Some(tool) => format!("MCP {} {tool}", call.method),
            None => format!("MCP {}", call.method),
        };
        let host = call.server.host.clone();
        let would_be = self.mcp_would_be(call);
        Replayed {
            host,
            what,
            was,
            would_be,
        }
    }

    fn mcp_would_be(&mut self, call: &McpCall) -> Side {
        let host = match Host::parse(&call.server.host) {
            Ok(h) => h,
            Err(e) => return side(Outcome::Undecidable, None, Some(e.to_string())),
        };
        let Some(server) = self.policy.mcp_server(&host, call.server.port) else {
            // No mcp table names the server: the proxy would not read the
            // body as MCP, and the message goes wherever its POST goes.
            return self.plain_post(call);
        };
        if call.arguments_truncated {
            return side(
                Outcome::Undecidable,
                None,
                Some("the call's arguments were over the capture cap, so the record has only their size".into()),
            );
        }
        let body = body(call);
        let message = match parse_mcp_body(body.to_string().as_bytes()) {
            Ok(parsed) => match parsed.messages.into_iter().next() {
                Some(m) => m,
                None => return side(Outcome::Undecidable, None, Some("no message".into())),
            },
            Err(e) => return side(Outcome::Deny, None, Some(e.to_string())),
        };
        let report = server.report_only();
        match server.decide(&message) {
            McpVerdict::Allow { rule, quota } => {
                let rule = rule.map(|r| r.to_string());
                let Some(quota) = quota else {
                    return side(Outcome::Allow, rule, None);
                };
                let used = self.used.entry(quota.key).or_insert(0);
                if *used < quota.max {
                    *used += 1;
                    return side(Outcome::Allow, rule, None);
                }
                let reason = format!(
                    "the tool's max_calls of {} per session is used up",
                    quota.max
                );
                side(refused(report), rule, Some(reason))
            }
            McpVerdict::Ask(ask) => side(
                if report {
                    Outcome::Report
                } else {
                    Outcome::Ask
                },
                Some(ask.rule.to_string()),
                ask.reason,
            ),
            McpVerdict::Deny(denial) => side(
                refused(report),
                denial.rule.map(|r| r.to_string()),
                Some(denial.reason.to_string()),
            ),
        }
    }

    /// The decision for the POST the message rode on, when no mcp table
    /// names its server.
    fn plain_post(&mut self, call: &McpCall) -> Side {
        let scheme = if call.server.port == 80 {
            "http"
        } else {
            "https"
        };
        let url = format!(
            "{scheme}://{}:{}{}",
            call.server.host, call.server.port, call.server.path
        );
        let target = match Target::parse(&url) {
            Ok(t) => t,
            Err(e) => return side(Outcome::Undecidable, None, Some(e.to_string())),
        };
        let decided = decide(self.policy, &target, "POST", None, None);
        let mut reason = String::from(
            "no rule's mcp table names this server: its POST is decided as plain HTTP, the tool is not checked",
        );
        if let Some(r) = decided.reason {
            reason.push_str(&format!("; {r}"));
        }
        side(
            decided.outcome,
            decided.rule.map(|r| r.to_string()),
            Some(reason),
        )
    }
}

fn refused(report: bool) -> Outcome {
    if report {
        Outcome::Report
    } else {
        Outcome::Deny
    }
}

/// The JSON-RPC message the record describes. The client's answer to a
/// request of the server (channel `response`) has no method: it is spelled
/// as a result, which is what the decision looks at (none of its content).
fn body(call: &McpCall) -> Value {
    if call.channel == "response" && call.method.is_empty() {
        return json!({"jsonrpc": "2.0", "id": call.rpc_id, "result": {}});
    }
    let mut message = json!({"jsonrpc": "2.0", "method": call.method});
    let Some(obj) = message.as_object_mut() else {
        return message;
    };
    if let Some(id) = &call.rpc_id {
        obj.insert("id".into(), id.clone());
    }
    if call.tool.is_some() || call.arguments.is_some() {
        let mut params = serde_json::Map::new();
        if let Some(tool) = &call.tool {
            params.insert("name".into(), tool.clone().into());
        }
        params.insert(
            "arguments".into(),
            call.arguments.clone().unwrap_or_else(|| json!({})),
        );
        obj.insert("params".into(), Value::Object(params));
    }
    message
}
