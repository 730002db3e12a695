//! Validated, matchable rules and the references decisions carry.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::body::BodyConstraints;
use crate::decision::{Ask, BodyInput};
use crate::error::SourceMap;
use crate::matcher::RequestMatcher;
use crate::mcp::{McpAllow, McpAsk};
use crate::upgrade::UpgradeProtocol;

/// Which list a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleKind {
    Allow,
    Deny,
    Ask,
}

impl RuleKind {
    /// "allow", "deny" or "ask": the name of the rule's table, and the
    /// prefix of its key.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Ask => "ask",
        }
    }
}

/// Where a rule is written: what its compiler needs to point errors at it
/// and to name it.
#[derive(Debug)]
pub(crate) struct RuleSite<'a> {
    pub map: &'a SourceMap,
    pub kind: RuleKind,
    /// 0-based among rules of that kind.
    pub index: usize,
    /// Span of the rule's table.
    pub table: Range<usize>,
}

impl RuleSite<'_> {
    /// The reference decisions carry; `canonical` is the rule's matching
    /// content as text, which its key is a hash of.
    pub(crate) fn rule_ref(&self, canonical: &str) -> RuleRef {
        RuleRef::new(
            self.kind,
            self.index,
            self.map.line(self.table.start),
            self.map.name().clone(),
            canonical,
        )
    }
}

/// Points at one rule of a policy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct RuleRef {
    pub kind: RuleKind,
    /// 0-based among rules of that kind.
    pub index: usize,
    /// Line of the rule's `[[allow]]`/`[[deny]]`/`[[ask]]` header.
    pub line: u32,
    /// The policy's source name.
    pub source: Arc<str>,
    #[serde(skip)]
    content_key: Arc<str>,
}

impl RuleRef {
    fn new(kind: RuleKind, index: usize, line: u32, source: Arc<str>, canonical: &str) -> Self {
        let prefix = kind.name();
        Self {
            kind,
            index,
            line,
            source,
            content_key: format!("{prefix}-{:016x}", fnv1a64(canonical.as_bytes())).into(),
        }
    }

    /// The same reference at another position among rules of its kind:
    /// layering merges several files' rules into one list.
    pub(crate) fn reindexed(mut self, index: usize) -> Self {
        self.index = index;
        self
    }

    /// Stable across reloads while the rule's matching content (hosts,
    /// ports, methods, paths, transport, quota, body constraints) is
    /// unchanged; position, description and file name do not affect it.
    /// An ask rule's key also covers its `approvers` (an approval given
    /// under one list of approvers is not carried over to another), but
    /// not its `reason` or `timeout`.
    /// Format: "allow-", "deny-" or "ask-" and 16 hex digits (FNV-1a 64 of
    /// a canonical text of the rule).
    pub fn key(&self) -> String {
        self.content_key.to_string()
    }
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.source, self.line)
    }
}

/// FNV-1a, 64 bit: tiny, deterministic across builds and platforms.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// How an allow rule's traffic is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// HTTP(S), inspected per request.
    Http,
    /// Opaque TCP.
    Tcp,
    /// TLS without interception.
    Passthrough,
}

/// A validated `[[allow]]`.
#[derive(Debug, Clone)]
pub(crate) struct AllowRule {
    pub rule_ref: RuleRef,
    /// Span of the rule's table, for lints.
    pub span: Range<usize>,
    /// Read narrowly: a grant.
    pub matcher: RequestMatcher,
    pub max_requests: Option<u64>,
    pub body: Option<BodyConstraints>,
    pub transport: Transport,
    /// Protocols this rule grants an HTTP/1.1 upgrade to; empty = none.
    pub upgrade: Vec<UpgradeProtocol>,
    /// The MCP server this rule grants, and its tools.
    pub mcp: Option<McpAllow>,
    pub description: Option<String>,
}

impl AllowRule {
    pub(crate) fn grants_upgrade(&self, protocol: UpgradeProtocol) -> bool {
        self.upgrade.contains(&protocol)
    }
}

/// A validated `[[ask]]`. Like a deny rule it restricts, so its matcher
/// reads requests as broadly as a deny rule's, and it holds a body it
/// cannot judge exactly.
#[derive(Debug, Clone)]
pub(crate) struct AskRule {
    pub rule_ref: RuleRef,
    /// Span of the rule's table, for lints.
    pub span: Range<usize>,
    /// Read broadly: a restriction.
    pub matcher: RequestMatcher,
    pub body: Option<BodyConstraints>,
    pub reason: Option<String>,
    pub timeout: Duration,
    /// As written (lint reports repeats); empty = the session's owner.
    pub approvers: Vec<String>,
    /// Set: the rule holds these MCP tool calls, not HTTP requests.
    pub mcp: Option<McpAsk>,
    pub description: Option<String>,
}

impl AskRule {
    /// Whether the body puts the request in this rule's hands. Only a body
    /// every server reads the same way, and outside the constraints, lets
    /// it go by: otherwise a client could send a body it knows to be
    /// ambiguous or unreadable to skip the approval and reach a broader
    /// allow rule.
    pub(crate) fn holds_body(&self, query: Option<&str>, body: Option<&BodyInput<'_>>) -> bool {
        self.body
            .as_ref()
            .is_none_or(|constraints| constraints.holds_for_ask(query, body))
    }

    /// What the proxy needs to hold a request for this rule.
    pub(crate) fn ask(&self) -> Ask {
        let mut approvers: Vec<String> = Vec::with_capacity(self.approvers.len());
        for name in &self.approvers {
            if !approvers.contains(name) {
                approvers.push(name.clone());
            }
        }
        Ask {
            rule: self.rule_ref.clone(),
            reason: self.reason.clone(),
            timeout: self.timeout,
            approvers,
        }
    }
}

/// A validated `[[deny]]`.
#[derive(Debug, Clone)]
pub(crate) struct DenyRule {
    pub rule_ref: RuleRef,
    /// Span of the rule's table, for lints.
    pub span: Range<usize>,
    /// Read broadly: a restriction. Without `ports`, every port.
    pub matcher: RequestMatcher,
    pub description: Option<String>,
}
