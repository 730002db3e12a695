//! Reading one POSTed JSON-RPC body as MCP carries it: one message or a
//! batch, each classified as a request, a notification or a response.
//!
//! The reading is strict because the server reads it after the proxy does:
//! anything a lenient server could read differently from this reader is
//! refused, never guessed at. Duplicate keys anywhere (so in `params` and
//! `arguments` too), keys the protocol does not define (a server that binds
//! keys case-insensitively would take `Method` for `method`), a method that
//! is not exactly one MCP defines (another case, whitespace, a NUL), a
//! request method without an id (a `tools/call` shaped as a notification),
//! and ids repeated inside one batch are all refused.

use std::collections::BTreeMap;

use crate::json::{self, Json};

/// Every method a client sends a server in the MCP specification
/// (2025-06-18), requests first, then notifications.
pub const KNOWN_METHODS: [&str; 17] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
];

/// Most messages one POSTed batch may carry.
const MAX_BATCH: usize = 64;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpKind {
    /// Has a method and an id: the server answers it.
    Request,
    /// Has a method and no id.
    Notification,
    /// Has an id and a result or an error: the client answering a request
    /// of the server's (sampling, roots, elicitation).
    Response,
}

/// One JSON-RPC message, as read.
#[derive(Debug, Clone)]
pub struct McpMessage {
    pub kind: McpKind,
    /// The id as JSON text (`7`, `"a"`); None for a notification.
    pub id: Option<String>,
    /// Exactly one of [`KNOWN_METHODS`] for a request or notification.
    pub method: Option<String>,
    /// For `tools/call`: `params.name`.
    pub tool: Option<String>,
    /// For `tools/call`: `params.arguments` (an empty object when absent).
    pub(crate) arguments: Option<Json>,
    /// The size of `params.arguments` as JSON text.
    pub arguments_bytes: usize,
}

impl McpMessage {
    /// The arguments as a `serde_json` value, for the record.
    pub fn arguments_value(&self) -> Option<serde_json::Value> {
        self.arguments.as_ref().map(to_value)
    }

    /// The id as a `serde_json` value, for the record and the answer.
    pub fn id_value(&self) -> Option<serde_json::Value> {
        self.id
            .as_deref()
            .and_then(|id| serde_json::from_str(id).ok())
    }

    pub fn is_tool_call(&self) -> bool {
        self.method.as_deref() == Some("tools/call")
    }
}

/// A POSTed body: one message or a batch.
#[derive(Debug, Clone)]
pub struct McpBody {
    pub messages: Vec<McpMessage>,
    pub batch: bool,
}

/// Why a body is not MCP the proxy can decide. Display is the whole
/// reason, ending with what to send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpParseError {
    #[error("the body is not valid UTF-8; send JSON-RPC as UTF-8 JSON")]
    NotUtf8,
    #[error("the body is not JSON ({0}); send one JSON-RPC message or a batch")]
    NotJson(String),
    #[error("the body is neither a JSON-RPC message nor a batch of them")]
    NotMessage,
    #[error("the batch is empty")]
    EmptyBatch,
    #[error("the batch has {0} messages; send at most {MAX_BATCH} in one POST")]
    BatchTooLarge(usize),
    #[error("message {index}: {why}")]
    Message { index: usize, why: String },
}

/// Reads a POSTed body. Refuses anything this reader cannot read exactly
/// as every server would (see the module's documentation).
pub fn parse_body(bytes: &[u8]) -> Result<McpBody, McpParseError> {
    let text = std::str::from_utf8(bytes).map_err(|_| McpParseError::NotUtf8)?;
    let doc = json::parse(text).map_err(|e| McpParseError::NotJson(e.to_string()))?;
    let (docs, batch) = match doc {
        Json::Array(items) => {
            if items.is_empty() {
                return Err(McpParseError::EmptyBatch);
            }
            if items.len() > MAX_BATCH {
                return Err(McpParseError::BatchTooLarge(items.len()));
            }
            (items, true)
        }
        Json::Object(_) => (vec![doc], false),
        _ => return Err(McpParseError::NotMessage),
    };
    let mut messages = Vec::with_capacity(docs.len());
    for (index, doc) in docs.iter().enumerate() {
        let message = message(doc).map_err(|why| McpParseError::Message { index, why })?;
        if let Some(id) = &message.id
            && messages
                .iter()
                .any(|m: &McpMessage| m.id.as_ref() == Some(id))
        {
            return Err(McpParseError::Message {
                index,
                why: format!("id {id} is used twice in one batch; give each message its own id"),
            });
        }
        messages.push(message);
    }
    Ok(McpBody { messages, batch })
}

fn message(doc: &Json) -> Result<McpMessage, String> {
    let Json::Object(map) = doc else {
        return Err("not a JSON object".to_owned());
    };
    only_keys(
        map,
        &["jsonrpc", "id", "method", "params", "result", "error"],
        "a message",
    )?;
    match map.get("jsonrpc") {
        Some(Json::String(v)) if v == "2.0" => {}
        _ => return Err("`jsonrpc` is not \"2.0\"".to_owned()),
    }
    let id = match map.get("id") {
        None => None,
        Some(Json::String(s)) => Some(json_string(s)),
        Some(Json::Number(n)) if n.bytes().all(|b| b.is_ascii_digit() || b == b'-') => {
            Some(n.clone())
        }
        Some(_) => return Err("`id` is neither a string nor an integer".to_owned()),
    };
    let Some(method) = map.get("method") else {
        // A response to a request of the server's.
        let Some(_) = &id else {
            return Err("a message with no method needs an id (a response)".to_owned());
        };
        if map.contains_key("result") == map.contains_key("error") || map.contains_key("params") {
            return Err("a response has exactly one of `result` and `error`".to_owned());
        }
        return Ok(McpMessage {
            kind: McpKind::Response,
            id,
            method: None,
            tool: None,
            arguments: None,
            arguments_bytes: 0,
        });
    };
    if map.contains_key("result") || map.contains_key("error") {
        return Err("a request has no `result` or `error`".to_owned());
    }
    let Json::String(method) = method else {
        return Err("`method` is not a string".to_owned());
    };
    // Exact spelling only: a server that trims, case-folds or stops at a
    // NUL would run a method the policy never decided.
    if !KNOWN_METHODS.contains(&method.as_str()) {
        return Err(format!(
            "method {} is not one MCP defines (methods are matched exactly: case, whitespace and NUL bytes count)",
            json_string(method)
        ));
    }
    let is_notification = method.starts_with("notifications/");
    let kind = match (&id, is_notification) {
        (Some(_), false) => McpKind::Request,
        (None, true) => McpKind::Notification,
        (None, false) => {
            return Err(format!(
                "{method} is a request but has no id (sent as a notification); give it an id"
            ));
        }
        (Some(_), true) => return Err(format!("{method} is a notification but has an id")),
    };
    let params = match map.get("params") {
        None => None,
        Some(Json::Object(params)) => Some(params),
        Some(_) => return Err("`params` is not an object".to_owned()),
    };
    let (tool, arguments, arguments_bytes) = if method == "tools/call" {
        let Some(params) = params else {
            return Err("tools/call has no params".to_owned());
        };
        only_keys(params, &["name", "arguments", "_meta"], "tools/call params")?;
        let Some(Json::String(name)) = params.get("name") else {
            return Err("tools/call params have no string `name`".to_owned());
        };
        let arguments = match params.get("arguments") {
            None => Json::Object(BTreeMap::new()),
            Some(a @ Json::Object(_)) => a.clone(),
            Some(_) => return Err("tools/call `arguments` is not an object".to_owned()),
        };
        let size = to_value(&arguments).to_string().len();
        (Some(name.clone()), Some(arguments), size)
    } else {
        (None, None, 0)
    };
    Ok(McpMessage {
        kind,
        id,
        method: Some(method.clone()),
        tool,
        arguments,
        arguments_bytes,
    })
}

/// Refuses keys other than `allowed`: a server that binds keys
/// case-insensitively, or reads an unknown one, would see what this
/// reader did not decide.
fn only_keys(map: &BTreeMap<String, Json>, allowed: &[&str], what: &str) -> Result<(), String> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(format!(
            "{what} has a key {} that MCP does not define; send only {}",
            json_string(key),
            allowed.join(", ")
        )),
        None => Ok(()),
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// A strictly read JSON value as a `serde_json` value (numbers keep their
/// value; one too large for `serde_json` becomes its text).
pub(crate) fn to_value(json: &Json) -> serde_json::Value {
    use serde_json::Value;
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => serde_json::from_str(n).unwrap_or_else(|_| Value::String(n.clone())),
        Json::String(s) => Value::String(s.clone()),
        Json::Array(items) => Value::Array(items.iter().map(to_value).collect()),
        Json::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), to_value(v))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Result<McpMessage, McpParseError> {
        parse_body(text.as_bytes()).map(|b| b.messages.into_iter().next().unwrap())
    }

    #[test]
    fn a_tool_call_is_read_with_its_name_and_arguments() {
        let m = one(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"transfer","arguments":{"amount":5}}}"#).unwrap();
        assert_eq!(m.kind, McpKind::Request);
        assert_eq!(m.id.as_deref(), Some("3"));
        assert_eq!(m.tool.as_deref(), Some("transfer"));
        assert_eq!(m.arguments_value(), Some(serde_json::json!({"amount": 5})));
    }

    #[test]
    fn every_spelling_a_lenient_server_could_read_differently_is_refused() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"Tools/Call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call ","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":" tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call\u0000","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"ping","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","name":"y"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","Name":"y"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":1,"a":2}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            r#"[]"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\n",
        ] {
            assert!(parse_body(body.as_bytes()).is_err(), "accepted {body}");
        }
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":{{"a":{deep}}}}}}}"#
        );
        assert!(parse_body(body.as_bytes()).is_err());
    }
}
