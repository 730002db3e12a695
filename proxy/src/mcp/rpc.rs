//! JSON-RPC error messages: how a refused message is answered, so that the
//! client's MCP library reads a failed call, not a broken session.

use serde_json::{Value, json};

/// The JSON-RPC error code of a refusal: in the range JSON-RPC reserves
/// for implementation-defined server errors.
const REFUSED: i64 = -32001;

/// One error message answering the request with `id` (null when the
/// request could not be read).
pub(crate) fn error_message(id: Option<Value>, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": {"code": REFUSED, "message": message},
    })
}

/// The body answering a whole POST: one error, or (for a batch) an array.
pub(crate) fn error_body(errors: Vec<Value>, batch: bool) -> Vec<u8> {
    let value = if batch {
        Value::Array(errors)
    } else {
        errors.into_iter().next().unwrap_or(Value::Null)
    };
    value.to_string().into_bytes()
}
