//! What the proxy asks and what the policy answers.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::rule::RuleRef;
use crate::upgrade::UpgradeProtocol;

/// What happens to traffic no rule allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DefaultAction {
    /// Block it (the default).
    Deny,
    /// Let it through; rules only add quotas, body checks and credentials.
    Allow,
    /// Never block anything, but report what `deny` would have blocked.
    Report,
}

/// The scheme of an inspected request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Http,
    Https,
}

/// One HTTP request as the proxy saw it.
#[derive(Debug, Clone, Copy)]
pub struct RequestInfo<'a> {
    pub scheme: Scheme,
    pub host: &'a Host,
    pub port: u16,
    /// As sent, e.g. "GET"; compared case-sensitively (RFC 9110 §9.1).
    pub method: &'a str,
    /// Raw request target, e.g. "/repos/a/b?x=1".
    pub path_and_query: &'a str,
}

impl<'a> RequestInfo<'a> {
    /// An HTTPS request, as tests, fuzz targets and suggestions build one.
    pub fn https(host: &'a Host, port: u16, method: &'a str, path_and_query: &'a str) -> Self {
        RequestInfo {
            scheme: Scheme::Https,
            host,
            port,
            method,
            path_and_query,
        }
    }
}

/// The (possibly truncated) request body.
#[derive(Debug, Clone, Copy)]
pub struct BodyInput<'a> {
    /// Every `Content-Type` header value, in order. More than one is
    /// refused on rules with body constraints: servers disagree on which
    /// one counts. A value that is not visible ASCII should be passed as
    /// `""` (refused as an unknown type), not dropped.
    pub content_types: &'a [&'a str],
    pub bytes: &'a [u8],
    /// false if the proxy stopped buffering at the limit.
    pub complete: bool,
}

/// Connection-level decision, before any bytes are seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionDecision {
    /// Nothing could ever be allowed on host:port.
    Deny(Denial),
    /// `protocol = "tcp"`: opaque TCP tunnel.
    Tunnel { rule: RuleRef },
    /// `tls = "passthrough"`: TLS tunnel without interception; check SNI == host.
    Passthrough { rule: RuleRef },
    /// HTTP or TLS-intercepted HTTP: decide per request with `Policy::evaluate`.
    Inspect,
}

/// Request-level decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow(Allowance),
    Deny(Denial),
    /// An `[[ask]]` rule matched: hold the request until a person decides.
    Ask(Ask),
}

impl Decision {
    /// Whether the request may proceed.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Allow(_))
    }
}

/// The `[[ask]]` rule that holds a request, and what its approver needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub rule: RuleRef,
    /// The rule's `reason`, shown to the approver.
    pub reason: Option<String>,
    /// How long to wait for a decision; none in time is a denial.
    pub timeout: Duration,
    /// Who may decide (user or token names); empty = the session's owner.
    pub approvers: Vec<String>,
}

impl Ask {
    /// The timeout as a policy file writes it: "2m", "1m30s", "1h".
    pub fn timeout_text(&self) -> String {
        crate::duration::duration_text(self.timeout)
    }
}

/// Why and under which quota a request is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowance {
    /// None = allowed by `default = "allow"`/`"report"`.
    pub rule: Option<RuleRef>,
    /// The rule's per-session quota; the proxy counts.
    pub max_requests: Option<u64>,
    /// Report mode: what deny mode would have said.
    pub would_deny: Option<Denial>,
    /// The protocol the proxy may switch this request to (only from
    /// [`crate::Policy::evaluate_upgrade`]); None = forward no upgrade.
    pub upgrade: Option<UpgradeProtocol>,
}

/// Why something is denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The deny rule that matched, or the allow rule whose constraint failed.
    pub rule: Option<RuleRef>,
    pub reason: DenyReason,
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.rule {
            Some(rule) => write!(f, "{} ({rule})", self.reason),
            None => self.reason.fmt(f),
        }
    }
}

/// The reason for a denial; Display is a short human sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DenyReason {
    #[error("no rule allows this host")]
    NoRuleForHost,
    #[error("no rule allows this port for this host")]
    PortNotAllowed,
    #[error("no rule allows this method for this host")]
    MethodNotAllowed,
    #[error("no rule allows this path for this host and method")]
    PathNotAllowed,
    #[error("denied by a deny rule")]
    DeniedByRule,
    #[error("body field `{field}` {detail}")]
    BodyConstraint { field: String, detail: String },
    #[error("the rule constrains the body but the request has none")]
    BodyMissing,
    #[error("the body is too large to check its constraints")]
    BodyTooLarge,
    #[error("the body cannot be checked: {detail}")]
    BodyUnparseable { detail: String },
    #[error("ambiguous request path: {detail}")]
    AmbiguousPath { detail: String },
    /// A constrained field that common servers could read differently: it
    /// occurs more than once (case variants, query and body, the body read
    /// as a form and as JSON) and not every occurrence passes, or the
    /// `Content-Type` headers disagree with each other or with the body.
    #[error("ambiguous request: {detail}")]
    AmbiguousBody { detail: String },
    /// Report mode's account of an `[[ask]]` match (deny and allow mode
    /// hold the request instead).
    #[error("an [[ask]] rule holds this request for a person's approval")]
    NeedsApproval,
    #[error("no rule grants an upgrade to {protocol} for this request")]
    UpgradeNotGranted { protocol: UpgradeProtocol },
}
