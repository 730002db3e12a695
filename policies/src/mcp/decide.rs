//! Deciding one MCP message against the rules that name its server.

use super::compile::ToolGrant;
use super::message::{McpKind, McpMessage};
use crate::decision::{Ask, DefaultAction, DenyReason};
use crate::host::Host;
use crate::policy::Policy;
use crate::rule::{AllowRule, AskRule, RuleRef, Transport};

/// The MCP server at one host and port, and every rule that names it.
#[derive(Debug)]
pub struct McpServer<'p> {
    allow: Vec<&'p AllowRule>,
    ask: Vec<&'p AskRule>,
    default: DefaultAction,
}

/// A per-session call quota: `max` calls, counted under `key` (the rule's
/// key and the tool entry's position, so an edited rule starts afresh).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolQuota {
    pub key: String,
    pub max: u64,
}

/// What to do with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpVerdict {
    /// Forward it. `rule` is None for a response to the server's request.
    Allow {
        rule: Option<RuleRef>,
        quota: Option<ToolQuota>,
    },
    /// Hold the tool call for a person.
    Ask(Ask),
    /// Answer it with a JSON-RPC error (forward nothing).
    Deny(McpDenial),
}

/// A refused message: the rule that refused it (or the server's first
/// rule, whose mcp table would grant it), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpDenial {
    pub rule: Option<RuleRef>,
    pub reason: McpDenyReason,
}

/// Why a message is refused; each ends with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpDenyReason {
    #[error(
        "MCP tool {tool:?} is not allowed on this server; to allow it add \"{tool}\" to `tools` in the mcp table of the allow rule{}",
        at(rule)
    )]
    ToolNotAllowed { tool: String, rule: Option<RuleRef> },
    #[error(
        "MCP tool {tool:?}: arguments refused: {reason}; the arguments must satisfy the constraints of the tool's entry{}",
        at(rule)
    )]
    Arguments {
        tool: String,
        reason: DenyReason,
        rule: Option<RuleRef>,
    },
    #[error(
        "MCP method {method:?} is not allowed on this server; to allow it add \"{method}\" to `methods` in the mcp table of the allow rule{}",
        at(rule)
    )]
    MethodNotAllowed {
        method: String,
        rule: Option<RuleRef>,
    },
}

fn at(rule: &Option<RuleRef>) -> String {
    rule.as_ref()
        .map(|r| format!(" at {r}"))
        .unwrap_or_default()
}

impl Policy {
    /// The MCP server at host:port, when an allow or ask rule's `mcp`
    /// table names it: then every POST to it must be read as MCP
    /// ([`super::parse_body`]) and each message decided by
    /// [`McpServer::decide`].
    pub fn mcp_server(&self, host: &Host, port: u16) -> Option<McpServer<'_>> {
        let allow: Vec<&AllowRule> = self
            .allow_rules()
            .iter()
            .filter(|r| {
                r.mcp.is_some()
                    && r.transport == Transport::Http
                    && r.matcher.matches_host_port(host, port)
            })
            .collect();
        let ask: Vec<&AskRule> = self
            .ask_rules()
            .iter()
            .filter(|r| r.mcp.is_some() && r.matcher.matches_host_port(host, port))
            .collect();
        if allow.is_empty() && ask.is_empty() {
            return None;
        }
        Some(McpServer {
            allow,
            ask,
            default: self.default_action(),
        })
    }
}

impl McpServer<'_> {
    /// Whether refusals are only reported (`default = "report"`).
    pub fn report_only(&self) -> bool {
        self.default == DefaultAction::Report
    }

    /// May the client see (and so try to call) this tool?
    pub fn tool_visible(&self, name: &str) -> bool {
        self.allow_grants().any(|(_, g)| g.glob.matches(name))
            || self.ask_grants().any(|(_, g)| g.glob.matches(name))
    }

    /// The decision for one message. Tool calls: the first ask rule whose
    /// tool entry names the tool and does not cleanly exclude its
    /// arguments holds it; otherwise the first allow entry that names it
    /// and whose argument constraints pass allows it; otherwise it is
    /// refused, with the first constraint failure if an entry named it.
    pub fn decide(&self, message: &McpMessage) -> McpVerdict {
        let first_rule = self.allow.first().map(|r| r.rule_ref.clone());
        let Some(method) = message.method.as_deref() else {
            // The client's answer to the server's own request.
            return McpVerdict::Allow {
                rule: first_rule,
                quota: None,
            };
        };
        if !message.is_tool_call() {
            let granting = self.allow.iter().find(|r| {
                r.mcp
                    .as_ref()
                    .is_some_and(|m| m.methods.iter().any(|x| x == method))
            });
            return match granting {
                Some(rule) => McpVerdict::Allow {
                    rule: Some(rule.rule_ref.clone()),
                    quota: None,
                },
                None => McpVerdict::Deny(McpDenial {
                    rule: first_rule.clone(),
                    reason: McpDenyReason::MethodNotAllowed {
                        method: method.to_owned(),
                        rule: first_rule,
                    },
                }),
            };
        }
        debug_assert_eq!(message.kind, McpKind::Request);
        let tool = message.tool.as_deref().unwrap_or_default();
        let arguments = message.arguments.as_ref();
        for (rule, grant) in self.ask_grants() {
            if !grant.glob.matches(tool) {
                continue;
            }
            // Fail closed: only a clean violation lets the call go by.
            let holds = match (&grant.arguments, arguments) {
                (None, _) => true,
                (Some(c), Some(a)) => {
                    !matches!(c.check_arguments(a), Err(DenyReason::BodyConstraint { .. }))
                }
                (Some(_), None) => true,
            };
            if holds {
                return McpVerdict::Ask(rule.ask());
            }
        }
        let mut failure: Option<McpDenial> = None;
        for (rule, grant) in self.allow_grants() {
            if !grant.glob.matches(tool) {
                continue;
            }
            let checked = match (&grant.arguments, arguments) {
                (None, _) => Ok(()),
                (Some(c), Some(a)) => c.check_arguments(a),
                (Some(_), None) => Err(DenyReason::BodyMissing),
            };
            match checked {
                Ok(()) => {
                    return McpVerdict::Allow {
                        rule: Some(rule.rule_ref.clone()),
                        quota: grant.max_calls.map(|max| ToolQuota {
                            key: format!("{}/mcp-tool-{}", rule.rule_ref.key(), grant.index),
                            max,
                        }),
                    };
                }
                Err(reason) => {
                    failure.get_or_insert(McpDenial {
                        rule: Some(rule.rule_ref.clone()),
                        reason: McpDenyReason::Arguments {
                            tool: tool.to_owned(),
                            reason,
                            rule: Some(rule.rule_ref.clone()),
                        },
                    });
                }
            }
        }
        McpVerdict::Deny(failure.unwrap_or_else(|| McpDenial {
            rule: first_rule.clone(),
            reason: McpDenyReason::ToolNotAllowed {
                tool: tool.to_owned(),
                rule: first_rule,
            },
        }))
    }

    fn allow_grants(&self) -> impl Iterator<Item = (&AllowRule, &ToolGrant)> {
        self.allow.iter().flat_map(|r| {
            r.mcp
                .iter()
                .flat_map(move |m| m.tools.iter().map(move |g| (*r, g)))
        })
    }

    fn ask_grants(&self) -> impl Iterator<Item = (&AskRule, &ToolGrant)> {
        self.ask.iter().flat_map(|r| {
            r.mcp
                .iter()
                .flat_map(move |m| m.tools.iter().map(move |g| (*r, g)))
        })
    }
}
