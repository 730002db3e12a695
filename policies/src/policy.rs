//! The parsed, validated policy and the decisions the proxy asks for.

use std::net::IpAddr;
use std::sync::Arc;

use crate::compile::{Compiled, compile};
use crate::credential::Credential;
use crate::decision::{
    Allowance, BodyInput, ConnectionDecision, Decision, DefaultAction, Denial, DenyReason,
    RequestInfo,
};
use crate::error::{Lint, PolicyError, SourceMap};
use crate::host::{Host, HostPattern};
use crate::layers::{Layer, LoadError, Loaded, merge, read_layers};
use crate::path::{AmbiguousPath, NormalPath, normalize};
use crate::raw::RawPolicy;
use crate::rule::{AllowRule, AskRule, DenyRule, RuleKind, RuleRef, Transport};
use crate::upgrade::UpgradeProtocol;

/// The source name of [`Policy::deny_all`].
const DENY_ALL_NAME: &str = "<deny-all>";

/// How many body bytes the proxy buffers to check body constraints.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A parsed, validated policy. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Policy(Arc<Inner>);

pub(crate) struct Inner {
    pub map: SourceMap,
    pub text: Arc<str>,
    pub compiled: Compiled,
    /// Every file of a layered policy, bases first, the top file last;
    /// empty for a single file.
    pub layers: Vec<Layer>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("source", &self.source_name())
            .field("default", &self.default_action())
            .field("allow_rules", &self.0.compiled.allow.len())
            .field("deny_rules", &self.0.compiled.deny.len())
            .field("ask_rules", &self.0.compiled.ask.len())
            .finish()
    }
}

/// What deny mode would decide, before the default action is applied.
enum Verdict<'a> {
    Allowed(&'a AllowRule),
    /// An ask rule holds it for a person: enforced in allow mode too.
    Held(&'a AskRule),
    /// A deny rule or a failed body constraint: enforced in allow mode too.
    DeniedByRules(Denial),
    /// No rule allows it: only enforced in deny mode.
    NotAllowed(Denial),
}

impl Policy {
    /// Parses and validates a policy. Errors read
    /// "policy.toml:12:5: unknown field `hots` in [[allow]]; did you mean `host`? (...)".
    pub fn parse(source_name: &str, text: &str) -> Result<Self, PolicyError> {
        let text: Arc<str> = text.into();
        let map = SourceMap::new(source_name.into(), text.clone());
        let raw: RawPolicy = toml::from_str(&text).map_err(|e| map.toml_error(&e))?;
        if let Some(extends) = &raw.extends {
            return Err(map.error(
                extends.span(),
                "`extends` names other files, which this caller cannot read; load the policy with `Policy::parse_layered`",
            ));
        }
        let compiled = compile(&map, raw)?;
        Ok(Self(Arc::new(Inner {
            map,
            text,
            compiled,
            layers: Vec::new(),
        })))
    }

    /// Parses a policy that may `extend` base files (see `layers.rs` for
    /// how layers combine). `load(from, entry)` reads the `extends` entry
    /// `entry` written in the file named `from` (a path relative to that
    /// file, for the binary) and returns its name and text; the same file
    /// must always get the same name. Errors name the file and line of the
    /// offending `extends` entry, rule or credential.
    pub fn parse_layered(
        source_name: &str,
        text: &str,
        mut load: impl FnMut(&str, &str) -> Result<Loaded, LoadError>,
    ) -> Result<Self, PolicyError> {
        let layers = read_layers(source_name, text, &mut load)?;
        let compiled = merge(&layers)?;
        let top = layers.last().map(|l| l.map.clone());
        let map = top.unwrap_or_else(|| SourceMap::new(source_name.into(), text.into()));
        Ok(Self(Arc::new(Inner {
            map,
            text: text.into(),
            compiled,
            layers,
        })))
    }

    /// The names of the files this policy was read from: the top file and
    /// every base it extends, directly or not (bases first). A single-file
    /// policy has just its own name.
    pub fn files(&self) -> Vec<&str> {
        if self.0.layers.is_empty() {
            return vec![self.source_name()];
        }
        self.0.layers.iter().map(|l| &**l.map.name()).collect()
    }

    /// Each file this policy was read from, by name, with the exact text
    /// that was parsed (bases first, the top file last, as [`Self::files`]):
    /// what a record says came into force, without reading the disk again.
    pub fn sources(&self) -> Vec<(&str, &str)> {
        if self.0.layers.is_empty() {
            return vec![(self.source_name(), self.text())];
        }
        self.0
            .layers
            .iter()
            .map(|l| (&**l.map.name(), &**l.map.text()))
            .collect()
    }

    /// Version 1, default deny, no rules.
    pub fn deny_all() -> Self {
        let text: Arc<str> = "version = 1\ndefault = \"deny\"\n".into();
        Self(Arc::new(Inner {
            map: SourceMap::new(DENY_ALL_NAME.into(), text.clone()),
            text,
            compiled: Compiled::empty(DefaultAction::Deny),
            layers: Vec::new(),
        }))
    }

    pub fn source_name(&self) -> &str {
        self.0.map.name()
    }

    /// Whether this is [`Policy::deny_all`], the policy in force when no file
    /// was given: advice then says to pass one rather than to edit it.
    pub fn is_builtin(&self) -> bool {
        self.source_name() == DENY_ALL_NAME
    }

    /// The exact source text.
    pub fn text(&self) -> &str {
        &self.0.text
    }

    pub fn default_action(&self) -> DefaultAction {
        self.0.compiled.default
    }

    /// Warnings about rules that can never match, unused credentials, etc.;
    /// for a layered policy, each file's own and errors for project rules
    /// that a base deny overrides.
    pub fn lint(&self) -> Vec<Lint> {
        if self.0.layers.is_empty() {
            return crate::lint::lint(&self.0.map, &self.0.compiled);
        }
        crate::layers::lint(&self.0.layers, &self.0.compiled)
    }

    /// Each rule as the proxy reads it, one line each (`policy check
    /// --explain`): the ports a rule covers without `ports`, any method
    /// and any path spelt out; then the default.
    pub fn explain(&self) -> Vec<String> {
        crate::explain::explain(&self.0.compiled)
    }

    pub fn credentials(&self) -> &[Credential] {
        &self.0.compiled.credentials
    }

    pub(crate) fn allow_rules(&self) -> &[AllowRule] {
        &self.0.compiled.allow
    }

    fn deny_rules(&self) -> &[DenyRule] {
        &self.0.compiled.deny
    }

    pub(crate) fn ask_rules(&self) -> &[AskRule] {
        &self.0.compiled.ask
    }

    /// Whether any request could be held for a person's approval, so the
    /// caller knows to set up a way to ask one.
    pub fn has_ask_rules(&self) -> bool {
        !self.ask_rules().is_empty()
    }

    /// May the sandbox resolve this name? Report mode never blocks.
    pub fn resolvable(&self, name: &Host) -> bool {
        let default = self.default_action();
        if default == DefaultAction::Report {
            return true;
        }
        let denied = self.deny_rules().iter().any(|d| {
            d.matcher.is_host_wide() && d.matcher.ports().is_none() && d.matcher.matches_host(name)
        });
        if denied {
            return false;
        }
        default == DefaultAction::Allow
            || self
                .allow_rules()
                .iter()
                .any(|r| r.matcher.matches_host(name))
            || self
                .ask_rules()
                .iter()
                .any(|r| r.matcher.matches_host(name))
    }

    /// Connection-level decision for a new TCP connection to host:port.
    pub fn connection(&self, host: &Host, port: u16) -> ConnectionDecision {
        let default = self.default_action();
        if default != DefaultAction::Report
            && let Some(deny) = self
                .deny_rules()
                .iter()
                .find(|d| d.matcher.is_host_wide() && d.matcher.matches_host_port(host, port))
        {
            return ConnectionDecision::Deny(Denial {
                rule: Some(deny.rule_ref.clone()),
                reason: DenyReason::DeniedByRule,
            });
        }
        // An ask rule can only hold requests the proxy sees: a tcp or
        // passthrough tunnel would carry them past the approval, so
        // inspection wins over both (fail closed), in every mode.
        if self
            .ask_rules()
            .iter()
            .any(|r| r.matcher.matches_host_port(host, port))
        {
            return ConnectionDecision::Inspect;
        }
        let on_port = |transport: Transport| {
            self.allow_rules()
                .iter()
                .find(|r| r.transport == transport && r.matcher.matches_host_port(host, port))
        };
        if let Some(rule) = on_port(Transport::Tcp) {
            return ConnectionDecision::Tunnel {
                rule: rule.rule_ref.clone(),
            };
        }
        if let Some(rule) = on_port(Transport::Passthrough) {
            return ConnectionDecision::Passthrough {
                rule: rule.rule_ref.clone(),
            };
        }
        if on_port(Transport::Http).is_some() || default != DefaultAction::Deny {
            return ConnectionDecision::Inspect;
        }
        let reason = if self
            .allow_rules()
            .iter()
            .any(|r| r.matcher.matches_host(host))
        {
            DenyReason::PortNotAllowed
        } else {
            DenyReason::NoRuleForHost
        };
        ConnectionDecision::Deny(Denial { rule: None, reason })
    }

    /// One line for tools such as `airlock policy test`: Some when
    /// [`Policy::connection`] would tunnel host:port without inspection, so
    /// a request-level verdict from [`Policy::evaluate`] would be
    /// misleading (the proxy never sees the requests), e.g.
    /// "tunnelled without inspection by the passthrough rule at policy.toml:4".
    /// None when connections are inspected or denied.
    pub fn connection_summary(&self, host: &Host, port: u16) -> Option<String> {
        let (kind, rule) = match self.connection(host, port) {
            ConnectionDecision::Tunnel { rule } => ("tcp", rule),
            ConnectionDecision::Passthrough { rule } => ("passthrough", rule),
            ConnectionDecision::Inspect | ConnectionDecision::Deny(_) => return None,
        };
        Some(format!(
            "tunnelled without inspection by the {kind} rule at {rule}"
        ))
    }

    /// HTTP allow rules that match everything but the body, in file order.
    fn candidates(&self, req: &RequestInfo<'_>, path: &NormalPath) -> Vec<&AllowRule> {
        self.allow_rules()
            .iter()
            .filter(|r| r.transport == Transport::Http && r.matcher.matches(req, path))
            .collect()
    }

    fn matching_deny<'a>(
        &'a self,
        req: &RequestInfo<'_>,
        path: &NormalPath,
    ) -> Option<&'a DenyRule> {
        self.deny_rules()
            .iter()
            .find(|d| d.matcher.matches(req, path))
    }

    /// The first ask rule that holds this request, body included.
    fn matching_ask<'a>(
        &'a self,
        req: &RequestInfo<'_>,
        path: &NormalPath,
        body: Option<&BodyInput<'_>>,
    ) -> Option<&'a AskRule> {
        let query = query_of(req);
        // An ask rule with an mcp table holds tool calls, not requests.
        self.ask_rules()
            .iter()
            .find(|r| r.mcp.is_none() && r.matcher.matches(req, path) && r.holds_body(query, body))
    }

    /// Some(limit) if the proxy must buffer up to `limit` body bytes before
    /// asking [`Policy::evaluate`]: when an ask rule matches everything but
    /// the body (what a person approves is the whole request, and its body
    /// may decide whether the rule holds it), or when the first rule that
    /// could allow the request constrains the body.
    pub fn needs_body(&self, req: &RequestInfo<'_>) -> Option<usize> {
        let path = normalize(req.path_and_query).ok()?;
        if self.default_action() != DefaultAction::Report
            && self.matching_deny(req, &path).is_some()
        {
            return None;
        }
        if self
            .ask_rules()
            .iter()
            .any(|r| r.mcp.is_none() && r.matcher.matches(req, &path))
        {
            return Some(MAX_BODY_BYTES);
        }
        let candidates = self.candidates(req, &path);
        let first = candidates.first()?;
        first.body.as_ref().map(|_| MAX_BODY_BYTES)
    }

    /// Request-level decision. See the crate docs for precedence.
    pub fn evaluate(&self, req: &RequestInfo<'_>, body: Option<&BodyInput<'_>>) -> Decision {
        self.decide(req, body, None)
    }

    /// The decision for a request that asks to switch to `protocol`
    /// (HTTP/1.1 `Connection: upgrade`): as [`Policy::evaluate`], but only
    /// rules whose `upgrade` list names the protocol can allow it. A rule
    /// that would allow the request without the upgrade does not: the
    /// upgrade is refused (`UpgradeNotGranted`) in deny and allow mode
    /// alike, because after the switch no per-request check applies.
    /// Report mode allows it and says what deny mode would have done.
    pub fn evaluate_upgrade(
        &self,
        req: &RequestInfo<'_>,
        body: Option<&BodyInput<'_>>,
        protocol: UpgradeProtocol,
    ) -> Decision {
        self.decide(req, body, Some(protocol))
    }

    fn decide(
        &self,
        req: &RequestInfo<'_>,
        body: Option<&BodyInput<'_>>,
        upgrade: Option<UpgradeProtocol>,
    ) -> Decision {
        let path = match normalize(req.path_and_query) {
            Ok(path) => path,
            Err(AmbiguousPath(detail)) => {
                return Decision::Deny(Denial {
                    rule: None,
                    reason: DenyReason::AmbiguousPath { detail },
                });
            }
        };
        let verdict = self.verdict(req, &path, body, upgrade);
        match (self.default_action(), verdict) {
            (_, Verdict::Allowed(rule)) => Decision::Allow(Allowance {
                rule: Some(rule.rule_ref.clone()),
                max_requests: rule.max_requests,
                would_deny: None,
                upgrade,
            }),
            // Report mode holds nothing; it records whose approval deny
            // mode would have waited for, as it records deny rules.
            (DefaultAction::Report, Verdict::Held(rule)) => Decision::Allow(Allowance {
                rule: None,
                max_requests: None,
                would_deny: Some(Denial {
                    rule: Some(rule.rule_ref.clone()),
                    reason: DenyReason::NeedsApproval,
                }),
                upgrade,
            }),
            (_, Verdict::Held(rule)) => Decision::Ask(rule.ask()),
            (
                DefaultAction::Report,
                Verdict::DeniedByRules(denial) | Verdict::NotAllowed(denial),
            ) => Decision::Allow(Allowance {
                rule: None,
                max_requests: None,
                would_deny: Some(denial),
                upgrade,
            }),
            (DefaultAction::Allow, Verdict::NotAllowed(_)) => Decision::Allow(Allowance {
                rule: None,
                max_requests: None,
                would_deny: None,
                upgrade: None,
            }),
            (_, Verdict::DeniedByRules(denial) | Verdict::NotAllowed(denial)) => {
                Decision::Deny(denial)
            }
        }
    }

    fn verdict(
        &self,
        req: &RequestInfo<'_>,
        path: &NormalPath,
        body: Option<&BodyInput<'_>>,
        upgrade: Option<UpgradeProtocol>,
    ) -> Verdict<'_> {
        if let Some(deny) = self.matching_deny(req, path) {
            return Verdict::DeniedByRules(Denial {
                rule: Some(deny.rule_ref.clone()),
                reason: DenyReason::DeniedByRule,
            });
        }
        if let Some(ask) = self.matching_ask(req, path, body) {
            return match upgrade {
                // A person approves one request they can read; after a
                // switch the connection carries what nobody approved.
                Some(protocol) => Verdict::DeniedByRules(Denial {
                    rule: Some(ask.rule_ref.clone()),
                    reason: DenyReason::UpgradeNotGranted { protocol },
                }),
                None => Verdict::Held(ask),
            };
        }
        let mut candidates = self.candidates(req, path);
        if let Some(protocol) = upgrade {
            let without = candidates.first().map(|r| r.rule_ref.clone());
            candidates.retain(|r| r.grants_upgrade(protocol));
            if candidates.is_empty() {
                // Enforced in allow mode too: the switch takes the rest of
                // the connection out of reach of every per-request rule.
                // With no rule for the request at all, deny and report mode
                // give deny mode's most specific reason.
                let reason = DenyReason::UpgradeNotGranted { protocol };
                return match without {
                    Some(rule) => Verdict::DeniedByRules(Denial {
                        rule: Some(rule),
                        reason,
                    }),
                    None if self.default_action() != DefaultAction::Allow => {
                        Verdict::NotAllowed(Denial {
                            rule: None,
                            reason: self.most_specific_reason(req, path),
                        })
                    }
                    None => Verdict::DeniedByRules(Denial { rule: None, reason }),
                };
            }
        }
        let mut first_failure: Option<Denial> = None;
        for rule in candidates {
            let Some(constraints) = &rule.body else {
                return Verdict::Allowed(rule);
            };
            match constraints.check(query_of(req), body) {
                Ok(()) => return Verdict::Allowed(rule),
                Err(reason) => {
                    first_failure.get_or_insert(Denial {
                        rule: Some(rule.rule_ref.clone()),
                        reason,
                    });
                }
            }
        }
        if let Some(denial) = first_failure {
            return Verdict::DeniedByRules(denial);
        }
        Verdict::NotAllowed(Denial {
            rule: None,
            reason: self.most_specific_reason(req, path),
        })
    }

    fn most_specific_reason(&self, req: &RequestInfo<'_>, path: &NormalPath) -> DenyReason {
        let for_host: Vec<&AllowRule> = self
            .allow_rules()
            .iter()
            .filter(|r| r.transport == Transport::Http && r.matcher.matches_host(req.host))
            .collect();
        if for_host.is_empty() {
            return DenyReason::NoRuleForHost;
        }
        let on_port: Vec<&&AllowRule> = for_host
            .iter()
            .filter(|r| r.matcher.matches_port(req.port))
            .collect();
        if on_port.is_empty() {
            return DenyReason::PortNotAllowed;
        }
        let with_method: Vec<&&&AllowRule> = on_port
            .iter()
            .filter(|r| r.matcher.matches_method(req.method))
            .collect();
        if with_method.is_empty() {
            return DenyReason::MethodNotAllowed;
        }
        debug_assert!(with_method.iter().all(|r| !r.matcher.matches_path(path)));
        DenyReason::PathNotAllowed
    }

    /// The `description` of the rule a decision names, for 403 bodies and logs.
    pub fn rule_description(&self, rule: &RuleRef) -> Option<&str> {
        let (own, description) = match rule.kind {
            RuleKind::Allow => {
                let r = self.allow_rules().get(rule.index)?;
                (&r.rule_ref, r.description.as_deref())
            }
            RuleKind::Deny => {
                let r = self.deny_rules().get(rule.index)?;
                (&r.rule_ref, r.description.as_deref())
            }
            RuleKind::Ask => {
                let r = self.ask_rules().get(rule.index)?;
                (&r.rule_ref, r.description.as_deref())
            }
        };
        // Only answer for a reference into this very policy.
        if own == rule { description } else { None }
    }

    /// May the proxy connect to this non-public address? Only when an
    /// allow or ask rule names the IP literal or a CIDR containing it (an
    /// approved request must be able to go where its rule says).
    pub fn allows_private_address(&self, ip: IpAddr) -> bool {
        let named = |hosts: &[HostPattern]| hosts.iter().any(|p| p.names_ip(ip));
        self.allow_rules().iter().any(|r| named(r.matcher.hosts()))
            || self.ask_rules().iter().any(|r| named(r.matcher.hosts()))
    }

    /// The TOML a user would add to allow this request.
    pub fn suggest_rule(req: &RequestInfo<'_>) -> String {
        crate::suggest::suggest_rule(req)
    }

    /// The TOML a user would add to allow this request to switch to `protocol`.
    pub fn suggest_upgrade_rule(req: &RequestInfo<'_>, protocol: UpgradeProtocol) -> String {
        crate::suggest::suggest_upgrade_rule(req, protocol)
    }

    /// JSON Schema (draft 2020-12) of the policy file, pretty-printed.
    pub fn json_schema() -> String {
        let schema = schemars::schema_for!(RawPolicy);
        let mut value = serde_json::to_value(&schema).unwrap_or_default();
        strip_null_defaults(&mut value);
        serde_json::to_string_pretty(&value).unwrap_or_else(|_| "{}".to_owned())
    }
}

/// The query string of a request target, after `?`: servers that merge
/// query and body parameters read body fields there too.
fn query_of<'a>(req: &RequestInfo<'a>) -> Option<&'a str> {
    req.path_and_query.split_once('?').map(|(_, query)| query)
}

/// TOML has no null: optional keys are simply absent, so `"default": null`
/// (what schemars derives for `Option` fields) would only confuse editors.
fn strip_null_defaults(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            if map.get("default").is_some_and(serde_json::Value::is_null) {
                map.remove("default");
            }
            map.values_mut().for_each(strip_null_defaults);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_null_defaults),
        _ => {}
    }
}
