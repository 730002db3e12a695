//! Airlock's egress policy: the TOML model, its validation, the matcher the
//! proxy asks, and lint. This crate does no I/O of any kind.
//!
//! # Decision precedence (`Policy::evaluate`)
//! 1. The request path is normalised; an ambiguous path (dot segments,
//!    encoded `/` or `\`, control characters, double encoding, ...) is
//!    denied in every mode, even `default = "allow"`/`"report"`.
//! 2. A matching `[[deny]]` rule denies. Deny rules also match the path
//!    fully decoded, lower-cased and without `;params`, each also without
//!    a trailing `/`, and methods case-insensitively.
//! 3. Otherwise the first `[[ask]]` rule (file order) that holds the
//!    request gives `Decision::Ask`: the proxy holds it until a person
//!    decides. Ask rules match host, port, method and path as broadly as
//!    deny rules do, and fail closed on the body: only a clean constraint
//!    violation (`BodyConstraint`) means "not held"; a missing, too large,
//!    unparseable or ambiguous body is held.
//! 4. Otherwise the first HTTP `[[allow]]` rule (file order) matching host,
//!    port, method and path whose body constraints pass allows. If rules
//!    matched but all failed their body constraints, the first failure
//!    denies.
//! 5. Otherwise the default applies: `deny` denies with the most specific
//!    reason; `allow` allows with no rule.
//!
//! Steps 2 and 3 apply with `default = "allow"` too.
//!
//! A request asking to upgrade (`Policy::evaluate_upgrade`) is decided the
//! same way, except that an ask rule that holds it refuses it
//! (`UpgradeNotGranted`, naming the ask rule: nobody can approve what a
//! switched connection carries), step 4 only tries rules whose `upgrade`
//! list names the protocol, and a request other rules would allow is
//! denied (`UpgradeNotGranted`) in `allow` mode too.
//!
//! `default = "report"` never blocks or holds anything except ambiguous
//! paths: whatever deny mode would have denied (including deny rules and
//! failed body constraints) or held (`NeedsApproval`, naming the ask rule)
//! is allowed with `would_deny` set; DNS and connections are never refused.
//! That is the policy's view: the proxy still refuses non-public upstream
//! addresses and domain fronting in every mode.
//!
//! Connections (`Policy::connection`) to a host and port an ask rule
//! matches are always inspected, even where a tcp or passthrough rule
//! would tunnel them: an ask rule can only hold requests the proxy sees.

#![forbid(unsafe_code)]
// Not in the workspace's lints yet: the shim's pty::RawMode has no Debug.
#![warn(missing_debug_implementations)]

mod binding;
mod body;
mod cases;
mod compile;
mod credential;
mod decimal;
mod decision;
mod duration;
mod error;
mod explain;
mod form;
mod glob;
mod host;
mod json;
mod layers;
mod lint;
mod matcher;
mod mcp;
mod path;
mod policy;
mod raw;
mod rule;
mod suggest;
mod upgrade;

#[cfg(test)]
mod tests;

pub use cases::{Case, Expect, parse_cases};
pub use credential::{Credential, SecretTemplate, SecretTemplateError, TemplatePart};
pub use decision::{
    Allowance, Ask, BodyInput, ConnectionDecision, Decision, DefaultAction, Denial, DenyReason,
    RequestInfo, Scheme,
};
pub use error::{Lint, PolicyError, Severity};
pub use host::{Host, HostError, HostPattern};
pub use layers::{LoadError, Loaded};
pub use mcp::{
    KNOWN_METHODS as MCP_METHODS, McpBody, McpDenial, McpDenyReason, McpKind, McpMessage,
    McpParseError, McpServer, McpVerdict, ToolQuota, parse_body as parse_mcp_body,
};
pub use policy::{MAX_BODY_BYTES, Policy};
pub use rule::{RuleKind, RuleRef};
pub use suggest::{Draft, NotSuggested, Piece, Tunnel, collapse_path, segment_pieces, shown_by};
pub use upgrade::{UpgradeProtocol, UpgradeToken};
