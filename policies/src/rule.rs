//! Validated, matchable rules and the references decisions carry.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::body::BodyConstraints;
use crate::decision::{Ask, BodyInput, RequestInfo};
use crate::glob::PathGlob;
use crate::host::{Host, HostPattern};
use crate::path::NormalPath;
use crate::upgrade::UpgradeProtocol;

/// Which list a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleKind {
    Allow,
    Deny,
    Ask,
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
    pub(crate) fn new(
        kind: RuleKind,
        index: usize,
        line: u32,
        source: Arc<str>,
        canonical: &str,
    ) -> Self {
        let prefix = match kind {
            RuleKind::Allow => "allow",
            RuleKind::Deny => "deny",
            RuleKind::Ask => "ask",
        };
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
    pub hosts: Vec<HostPattern>,
    pub ports: Vec<u16>,
    /// Upper-cased; None = any.
    pub methods: Option<Vec<String>>,
    /// None = any.
    pub paths: Option<Vec<PathGlob>>,
    pub max_requests: Option<u64>,
    pub body: Option<BodyConstraints>,
    pub transport: Transport,
    /// Protocols this rule grants an HTTP/1.1 upgrade to; empty = none.
    pub upgrade: Vec<UpgradeProtocol>,
    pub description: Option<String>,
}

impl AllowRule {
    pub(crate) fn matches_host(&self, host: &Host) -> bool {
        any_host(&self.hosts, host)
    }

    pub(crate) fn matches_method(&self, method: &str) -> bool {
        method_listed(self.methods.as_deref(), method)
    }

    pub(crate) fn grants_upgrade(&self, protocol: UpgradeProtocol) -> bool {
        self.upgrade.contains(&protocol)
    }

    pub(crate) fn matches_path(&self, path: &NormalPath) -> bool {
        path_listed(self.paths.as_deref(), path)
    }
}

/// A validated `[[ask]]`. Like a deny rule it restricts, so it matches
/// as broadly as one: methods in any case, paths in their loose form and
/// without a trailing `/`, and a body it cannot judge exactly. Otherwise a
/// client could write the request differently (`post`, `/v1/charges/`)
/// to skip the approval and reach a broader allow rule.
#[derive(Debug, Clone)]
pub(crate) struct AskRule {
    pub rule_ref: RuleRef,
    /// Span of the rule's table, for lints.
    pub span: Range<usize>,
    pub hosts: Vec<HostPattern>,
    pub ports: Vec<u16>,
    /// Upper-cased; None = any.
    pub methods: Option<Vec<String>>,
    /// (exact, loosened) globs; None = any.
    pub paths: Option<Vec<(PathGlob, PathGlob)>>,
    pub body: Option<BodyConstraints>,
    pub reason: Option<String>,
    pub timeout: Duration,
    /// As written (lint reports repeats); empty = the session's owner.
    pub approvers: Vec<String>,
    pub description: Option<String>,
}

impl AskRule {
    pub(crate) fn matches_host(&self, host: &Host) -> bool {
        any_host(&self.hosts, host)
    }

    pub(crate) fn matches_host_port(&self, host: &Host, port: u16) -> bool {
        self.matches_host(host) && self.ports.contains(&port)
    }

    /// Host, port, method and path: everything but the body. Cheapest
    /// first: every request of the session is checked against every ask
    /// rule, and most fail on the port or the method.
    pub(crate) fn matches_head(&self, req: &RequestInfo<'_>, path: &NormalPath) -> bool {
        self.ports.contains(&req.port)
            && method_listed_any_case(self.methods.as_deref(), req.method)
            && self.matches_host(req.host)
            && path_listed_loosely(self.paths.as_deref(), path)
    }

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

fn any_host(patterns: &[HostPattern], host: &Host) -> bool {
    patterns.iter().any(|p| p.matches(host))
}

/// Allow rules compare methods exactly (RFC 9110 §9.1): "get" is not a
/// GET to them.
fn method_listed(methods: Option<&[String]>, method: &str) -> bool {
    methods.is_none_or(|methods| methods.iter().any(|m| m == method))
}

/// Allow rules match the exact normalized path, case-sensitively, and the
/// path as a server that strips `;params` routes it.
fn path_listed(paths: Option<&[PathGlob]>, path: &NormalPath) -> bool {
    paths.is_none_or(|paths| paths.iter().any(|g| g.allows(path)))
}

/// A validated `[[deny]]`.
#[derive(Debug, Clone)]
pub(crate) struct DenyRule {
    pub rule_ref: RuleRef,
    /// Span of the rule's table, for lints.
    pub span: Range<usize>,
    pub hosts: Vec<HostPattern>,
    /// None = every port.
    pub ports: Option<Vec<u16>>,
    /// Upper-cased; None = any.
    pub methods: Option<Vec<String>>,
    /// (exact, loosened) globs; None = any.
    pub paths: Option<Vec<(PathGlob, PathGlob)>>,
    pub description: Option<String>,
}

impl DenyRule {
    pub(crate) fn matches_host_port(&self, host: &Host, port: u16) -> bool {
        self.hosts.iter().any(|p| p.matches(host))
            && self
                .ports
                .as_ref()
                .is_none_or(|ports| ports.contains(&port))
    }

    /// Host-wide: no method or path condition (ports may still apply).
    pub(crate) fn is_host_wide(&self) -> bool {
        self.methods.is_none() && self.paths.is_none()
    }

    pub(crate) fn matches_method(&self, method: &str) -> bool {
        method_listed_any_case(self.methods.as_deref(), method)
    }

    pub(crate) fn matches_path(&self, path: &NormalPath) -> bool {
        path_listed_loosely(self.paths.as_deref(), path)
    }
}

/// Deny and ask rules match methods case-insensitively: a server that
/// accepts "delete" must not get past a DELETE deny.
fn method_listed_any_case(methods: Option<&[String]>, method: &str) -> bool {
    methods.is_none_or(|methods| methods.iter().any(|m| m.eq_ignore_ascii_case(method)))
}

/// Deny and ask rules match the exact path or its loosened form, each also
/// without a trailing `/`: most servers route "/admin/" to "/admin", so a
/// deny on "/admin" must not be dodged by adding a slash.
fn path_listed_loosely(paths: Option<&[(PathGlob, PathGlob)]>, path: &NormalPath) -> bool {
    paths.is_none_or(|paths| {
        let exact = [
            Some(path.exact.as_str()),
            without_trailing_slash(&path.exact),
        ];
        let loose = [
            Some(path.loose.as_str()),
            without_trailing_slash(&path.loose),
        ];
        paths.iter().any(|(exact_glob, loose_glob)| {
            exact.iter().flatten().any(|p| exact_glob.matches(p))
                || loose.iter().flatten().any(|p| loose_glob.matches(p))
        })
    })
}

/// "/admin/" → "/admin"; None for "/" itself and paths without one.
fn without_trailing_slash(path: &str) -> Option<&str> {
    path.strip_suffix('/').filter(|rest| !rest.is_empty())
}
