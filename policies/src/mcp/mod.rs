//! MCP (Model Context Protocol) servers as a policy names them: which
//! tools an allow rule grants (with argument constraints and a per-session
//! quota), which tool calls an ask rule holds, and the reading of one
//! JSON-RPC body the proxy decides message by message. No I/O.

mod compile;
mod decide;
mod lint;
mod message;
mod name_glob;

pub(crate) use compile::{McpAllow, McpAsk, compile_allow, compile_ask};
pub use decide::{McpDenial, McpDenyReason, McpServer, McpVerdict, ToolQuota};
pub(crate) use lint::lints;
pub use message::{KNOWN_METHODS, McpBody, McpKind, McpMessage, McpParseError, parse_body};
