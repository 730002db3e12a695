//! One request as the policy commands decide it: its URL taken apart, then
//! the proxy's order of checks (connection, body, request) applied to it,
//! so `policy test` and `policy replay` answer what the proxy would.

use airlock_policy::{
    BodyInput, ConnectionDecision, Decision, DenyReason, Host, HostError, Policy, RequestInfo,
    RuleRef, Scheme, UpgradeProtocol,
};
use serde::Serialize;

/// The parts of an absolute http(s) URL the policy looks at.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub scheme: Scheme,
    pub host: Host,
    pub port: u16,
    pub path_and_query: String,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum UrlError {
    #[error("invalid URL {url:?}; expected e.g. https://api.example.com/path")]
    Invalid {
        url: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("URL {0:?} needs an http:// or https:// scheme")]
    Scheme(String),
    #[error("URL {0:?} has no host")]
    NoHost(String),
    #[error("URL {url:?}")]
    Host {
        url: String,
        #[source]
        source: HostError,
    },
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Self, UrlError> {
        let uri: http::Uri = url.parse().map_err(|source| UrlError::Invalid {
            url: url.into(),
            source,
        })?;
        let scheme = match uri.scheme_str() {
            Some("https") => Scheme::Https,
            Some("http") => Scheme::Http,
            _ => return Err(UrlError::Scheme(url.into())),
        };
        let host = uri.host().ok_or_else(|| UrlError::NoHost(url.into()))?;
        let host =
            Host::parse(host.trim_start_matches('[').trim_end_matches(']')).map_err(|source| {
                UrlError::Host {
                    url: url.into(),
                    source,
                }
            })?;
        let port = uri.port_u16().unwrap_or(match scheme {
            Scheme::Https => 443,
            Scheme::Http => 80,
        });
        let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        Ok(Self {
            scheme,
            host,
            port,
            path_and_query,
        })
    }

    pub(crate) fn info<'a>(&'a self, method: &'a str) -> RequestInfo<'a> {
        RequestInfo {
            scheme: self.scheme,
            host: &self.host,
            port: self.port,
            method,
            path_and_query: &self.path_and_query,
        }
    }
}

/// What happens to a request, in the words the record uses ("allow",
/// "deny", "report"), plus "ask" and "undecidable".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Outcome {
    Allow,
    /// Allowed by report mode; deny mode would have refused or held it.
    Report,
    Deny,
    Ask,
    /// A body constraint applies but the recorded body was cut short.
    Undecidable,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Report => "report",
            Self::Deny => "deny",
            Self::Ask => "ask",
            Self::Undecidable => "undecidable",
        }
    }
}

/// A decision with the rule that made it.
#[derive(Debug, Clone)]
pub(crate) struct Decided {
    pub outcome: Outcome,
    /// For `Report`, the rule deny mode would have applied (as the proxy
    /// records it); None = the policy's default, or an inspected connection.
    pub rule: Option<RuleRef>,
    pub reason: Option<String>,
    /// The allowing rule's `max_requests`, for whoever counts.
    pub quota: Option<(RuleRef, u64)>,
    /// For `Report`: `Deny` or `Ask`, what deny mode would do.
    pub enforced: Option<Outcome>,
}

impl Decided {
    fn new(outcome: Outcome, rule: Option<RuleRef>, reason: Option<String>) -> Self {
        Self {
            outcome,
            rule,
            reason,
            quota: None,
            enforced: None,
        }
    }
}

/// The proxy's decision for `method target` with `body` (None: no body
/// was given), asking to switch to `upgrade` if Some. A body that is not `complete` where a body constraint or
/// ask rule needs it makes the request undecidable: the record kept only
/// its start.
pub(crate) fn decide(
    policy: &Policy,
    target: &Target,
    method: &str,
    body: Option<&BodyInput<'_>>,
    upgrade: Option<UpgradeProtocol>,
) -> Decided {
    match policy.connection(&target.host, target.port) {
        ConnectionDecision::Deny(d) => {
            return Decided::new(Outcome::Deny, d.rule, Some(d.reason.to_string()));
        }
        // Nothing inside such a connection is seen, so no request-level rule applies.
        ConnectionDecision::Tunnel { rule } | ConnectionDecision::Passthrough { rule } => {
            let reason = "tunnelled without inspection".to_owned();
            return Decided::new(Outcome::Allow, Some(rule), Some(reason));
        }
        ConnectionDecision::Inspect => {}
    }
    let info = target.info(method);
    let body = match policy.needs_body(&info) {
        None => None,
        Some(_) if body.is_some_and(|b| !b.complete) => {
            let reason = "a body constraint applies and the recorded body was truncated";
            return Decided::new(Outcome::Undecidable, None, Some(reason.into()));
        }
        Some(_) => body,
    };
    from_decision(match upgrade {
        Some(protocol) => policy.evaluate_upgrade(&info, body, protocol),
        None => policy.evaluate(&info, body),
    })
}

fn from_decision(decision: Decision) -> Decided {
    match decision {
        Decision::Allow(a) => match a.would_deny {
            Some(d) => Decided {
                enforced: Some(if d.reason == DenyReason::NeedsApproval {
                    Outcome::Ask
                } else {
                    Outcome::Deny
                }),
                ..Decided::new(Outcome::Report, d.rule, Some(d.reason.to_string()))
            },
            None => Decided {
                quota: a.rule.clone().zip(a.max_requests),
                ..Decided::new(Outcome::Allow, a.rule, None)
            },
        },
        Decision::Deny(d) => Decided::new(Outcome::Deny, d.rule, Some(d.reason.to_string())),
        Decision::Ask(ask) => Decided::new(Outcome::Ask, Some(ask.rule), ask.reason),
    }
}

/// "policy.toml:4", or "policy.toml (default)" when no rule decided.
pub(crate) fn rule_text(policy: &Policy, rule: Option<&RuleRef>) -> String {
    rule.map_or_else(
        || format!("{} (default)", policy.source_name()),
        ToString::to_string,
    )
}
