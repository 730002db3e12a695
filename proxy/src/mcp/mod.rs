//! MCP over HTTP, as the proxy enforces it: the answers of a server a
//! policy's `mcp` rules name are read message by message (a JSON body or an
//! SSE stream), `tools/list` results are filtered to the tools the client
//! may call and recorded in full, and each forwarded call's result is
//! summarised in the record. The request side (deciding each message) is
//! the exchange's `mcp` step.

mod answer;
mod body;
mod rpc;
mod sse;
mod tool_lists;

pub(crate) use answer::{AnswerContext, Forwarded, redacted};
pub(crate) use body::{AnswerMode, McpAnswerBody};
pub(crate) use rpc::{error_body, error_message};
pub(crate) use tool_lists::ToolLists;
