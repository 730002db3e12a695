//! Why the proxy refused something, and how it says so.
//!
//! A refusal must be clear to a person reading curl's output and to an agent
//! reading the body: what was refused, why, which rule decided it, and the
//! policy change that would allow it. `X-Airlock-Decision: deny` marks it for
//! programs.

use std::time::Duration;

use airlock_policy::{Denial, DenyReason, Policy, RuleKind, RuleRef};
use http::{HeaderValue, Response, StatusCode};

use crate::body::{ProxyBody, full};
use crate::upgrade::UpgradeRefusal;

#[derive(Debug, Clone)]
pub(crate) enum Refusal {
    /// The policy denied it.
    Policy(Denial),
    /// The rule allowed it but its `max_requests` are used up.
    Quota { rule: RuleRef, max: u64 },
    /// The Host header, :authority or absolute URL names another host than the connection.
    HostMismatch { named: String, connection: String },
    /// CONNECT inside an already intercepted connection.
    NestedConnect,
    /// The upstream address is not public and nothing allowed it explicitly.
    NonPublicAddress(String),
    /// The audit record could not be written, so nothing is forwarded.
    AuditUnavailable(String),
    /// The request cannot be handled as sent (e.g. https:// in absolute form without CONNECT).
    BadRequest(String),
    /// An upgrade no rule can grant (h2c, a protocol Airlock cannot inspect).
    Upgrade(UpgradeRefusal),
    /// An `[[ask]]` rule held it and it was not approved.
    NotApproved { rule: RuleRef, why: NotApproved },
    /// A POST to an MCP server the `mcp` rules refused (a message, a tool,
    /// its arguments, a quota) or could not read; answered as JSON-RPC.
    Mcp {
        rule: Option<RuleRef>,
        reason: String,
        status: StatusCode,
    },
}

/// Why a request an `[[ask]]` rule held did not go out.
#[derive(Debug, Clone)]
pub(crate) enum NotApproved {
    Denied {
        id: String,
        by: String,
        note: Option<String>,
    },
    Expired {
        id: String,
        after: Duration,
    },
    /// The session's cap on waiting requests was reached.
    Full(String),
    /// Too large to hold whole, and only a whole request can be approved.
    BodyTooLarge,
}

impl Refusal {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::AuditUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Mcp { status, .. } => *status,
            _ => StatusCode::FORBIDDEN,
        }
    }

    /// One line for logs, events and the `X-Airlock-Reason` header.
    pub(crate) fn reason(&self) -> String {
        match self {
            Self::Policy(d) => d.reason.to_string(),
            Self::Quota { max, .. } => {
                format!("the rule's quota of {max} requests per session is used up")
            }
            Self::HostMismatch { named, connection } => format!(
                "request names host {named} but the connection is to {connection} (domain fronting refused)"
            ),
            Self::NestedConnect => "CONNECT inside an intercepted connection".into(),
            Self::NonPublicAddress(why) => why.clone(),
            Self::AuditUnavailable(why) => format!("audit store unavailable: {why}"),
            Self::BadRequest(why) => why.clone(),
            Self::Mcp { reason, .. } => reason.clone(),
            Self::Upgrade(why) => why.to_string(),
            Self::NotApproved { why, .. } => match why {
                NotApproved::Denied { id, by, note } => match note {
                    Some(note) => format!("{by} denied it (approval {id}): {note}"),
                    None => format!("{by} denied it (approval {id})"),
                },
                NotApproved::Expired { id, after } => format!(
                    "nobody approved it within {}s (approval {id})",
                    after.as_secs()
                ),
                NotApproved::Full(why) => why.clone(),
                NotApproved::BodyTooLarge => format!(
                    "the body is over {} KiB, too large to hold for approval",
                    airlock_policy::MAX_BODY_BYTES / 1024
                ),
            },
        }
    }

    pub(crate) fn rule(&self) -> Option<&RuleRef> {
        match self {
            Self::Policy(d) => d.rule.as_ref(),
            Self::Quota { rule, .. } | Self::NotApproved { rule, .. } => Some(rule),
            Self::Mcp { rule, .. } => rule.as_ref(),
            _ => None,
        }
    }

    /// The rule that would let this through, when adding one would: not
    /// when a `[[deny]]` rule matched, a body failed its constraints, the
    /// body or path was ambiguous, or airlock itself refused it.
    pub(crate) fn rule_to_add<'s>(&self, suggestion: Option<&'s str>) -> Option<&'s str> {
        match self {
            Self::Policy(Denial {
                reason: DenyReason::DeniedByRule,
                rule: Some(rule),
            }) if rule.kind == RuleKind::Deny => None,
            Self::Policy(Denial {
                reason:
                    DenyReason::BodyConstraint { .. }
                    | DenyReason::BodyMissing
                    | DenyReason::BodyTooLarge
                    | DenyReason::BodyUnparseable { .. }
                    | DenyReason::AmbiguousBody { .. }
                    | DenyReason::AmbiguousPath { .. },
                ..
            }) => None,
            Self::Policy(_) => suggestion,
            _ => None,
        }
    }

    /// What a user would change to get this through.
    fn advice(&self, policy: &Policy, suggestion: Option<&str>) -> String {
        let policy_name = policy.source_name();
        let builtin = policy.is_builtin();
        match self {
            Self::Policy(Denial {
                reason: DenyReason::DeniedByRule,
                rule: Some(rule),
            }) if rule.kind == RuleKind::Deny && *rule.source != *policy_name => format!(
                "It matches the [[deny]] rule at {rule}, and deny rules override allow rules.\n\
                 That rule is in a base policy {policy_name} extends: only that file can narrow it."
            ),
            Self::Policy(Denial {
                reason: DenyReason::DeniedByRule,
                rule: Some(rule),
            }) if rule.kind == RuleKind::Deny => format!(
                "It matches the [[deny]] rule at {rule}, and deny rules override allow rules.\n\
                 To allow it, narrow or remove that rule."
            ),
            Self::Policy(Denial {
                reason:
                    DenyReason::BodyConstraint { .. }
                    | DenyReason::BodyMissing
                    | DenyReason::BodyTooLarge
                    | DenyReason::BodyUnparseable { .. },
                rule,
            }) => format!(
                "The request body does not satisfy the [allow.body] constraints of the rule at {}.\n\
                 Change the request, or relax those constraints.",
                rule.as_ref()
                    .map_or_else(|| policy_name.to_owned(), ToString::to_string)
            ),
            Self::Policy(Denial {
                reason: DenyReason::AmbiguousBody { .. },
                ..
            }) => "Servers may read this request differently from the policy, so it is refused.\n\
                   Send each constrained field once, in the body, with one Content-Type that matches the body."
                .into(),
            Self::Policy(Denial {
                reason: DenyReason::AmbiguousPath { .. },
                ..
            }) => "Servers may read this path differently from the policy, so it is refused.\n\
                   Send the path in its plain form (no dot segments, encoded slashes or backslashes)."
                .into(),
            Self::Policy(_) => match (self.rule_to_add(suggestion), builtin) {
                (Some(rule), false) => {
                    format!("To allow it, add this rule to {policy_name}:\n\n{rule}")
                }
                (Some(rule), true) => {
                    format!("To allow it, pass --policy FILE with this rule:\n\n{rule}")
                }
                (None, false) => {
                    format!("To allow it, add an [[allow]] rule for it to {policy_name}.")
                }
                (None, true) => "To allow it, pass --policy FILE with an [[allow]] rule for it.".into(),
            },
            Self::Quota { rule, max } => format!(
                "The rule at {rule} allows {max} requests per session (max_requests), all used.\n\
                 Raise max_requests in that rule to allow more."
            ),
            Self::HostMismatch { .. } => {
                "Send the request on a connection to the host it names.".into()
            }
            Self::NestedConnect => "Open the tunnel with the proxy directly.".into(),
            Self::NonPublicAddress(_) => {
                "Pin the host with --resolve HOST:IP, or add an [[allow]] rule naming the address."
                    .into()
            }
            Self::AuditUnavailable(_) => {
                "Airlock refuses to forward anything it cannot record. Fix the audit store (disk space, permissions) and restart.".into()
            }
            Self::BadRequest(_) => "Fix the request and try again.".into(),
            Self::Mcp { .. } => "The reason names the mcp rule to change.".into(),
            Self::Upgrade(why) => why.advice(),
            Self::NotApproved { rule, why } => match why {
                NotApproved::Denied { .. } => format!(
                    "The [[ask]] rule at {rule} held it for a person, who said no.\n\
                     Do not retry it as it is: ask them, or change what you send."
                ),
                NotApproved::Expired { .. } => format!(
                    "The [[ask]] rule at {rule} held it for a person, and nobody decided in time.\n\
                     Ask an approver to watch `airlock approvals`, or raise the rule's `timeout`."
                ),
                NotApproved::Full(_) => "Decide the waiting requests (`airlock approvals`), then retry.".into(),
                NotApproved::BodyTooLarge => format!(
                    "The [[ask]] rule at {rule} holds requests for a person; send a smaller body."
                ),
            },
        }
    }

    /// The HTTP response for this refusal.
    pub(crate) fn response(
        &self,
        method: &str,
        url: &str,
        policy: &Policy,
        suggestion: Option<&str>,
    ) -> Response<ProxyBody> {
        let policy_name = policy.source_name();
        let decided_by = match (self.rule(), self) {
            (Some(rule), _) => match policy.rule_description(rule) {
                Some(description) => format!("{rule} ({description})"),
                None => rule.to_string(),
            },
            (
                None,
                Self::Policy(Denial {
                    reason: DenyReason::AmbiguousPath { .. },
                    ..
                }),
            ) => "airlock (ambiguous paths are refused whatever the policy says)".to_owned(),
            (None, Self::Upgrade(_)) => {
                "airlock (only upgrades a rule can grant are forwarded)".to_owned()
            }
            (
                None,
                Self::Policy(Denial {
                    reason: DenyReason::UpgradeNotGranted { .. },
                    ..
                }),
            ) => format!("{policy_name} (upgrades need a rule that grants them)"),
            (None, Self::Policy(_)) => format!("{policy_name} (default: deny)"),
            (None, _) => "airlock".to_owned(),
        };
        let text = format!(
            "Airlock refused this request.\n\n\
             request:    {method} {url}\n\
             reason:     {reason}\n\
             decided by: {decided_by}\n\n\
             {advice}\n",
            reason = self.reason(),
            advice = self.advice(policy, suggestion),
        );
        let mut response = Response::new(full(text));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            "content-type",
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert("x-airlock-decision", HeaderValue::from_static("deny"));
        if let Ok(v) = HeaderValue::from_str(&header_safe(&self.reason())) {
            headers.insert("x-airlock-reason", v);
        }
        if let Some(rule) = self.rule()
            && let Ok(v) = HeaderValue::from_str(&header_safe(&rule.to_string()))
        {
            headers.insert("x-airlock-rule", v);
        }
        headers.insert("cache-control", HeaderValue::from_static("no-store"));
        response
    }
}

/// An upstream failure, shown to the client as 502 with the reason.
pub(crate) fn bad_gateway(method: &str, url: &str, reason: &str) -> Response<ProxyBody> {
    let text = format!(
        "Airlock could not complete this request upstream.\n\n\
         request: {method} {url}\n\
         reason:  {reason}\n"
    );
    let mut response = Response::new(full(text));
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    let headers = response.headers_mut();
    headers.insert(
        "content-type",
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert("x-airlock-decision", HeaderValue::from_static("error"));
    if let Ok(v) = HeaderValue::from_str(&header_safe(reason)) {
        headers.insert("x-airlock-reason", v);
    }
    response
}

/// Header values must be visible ASCII; keep the message readable anyway.
fn header_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(512)
        .collect()
}
