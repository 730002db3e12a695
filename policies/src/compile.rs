//! Turns the serde model into validated, matchable rules, rejecting
//! anything that could not be enforced as written.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use crate::body::BodyConstraints;
use crate::credential::{Credential, SecretTemplate, TemplatePart, is_token};
use crate::decision::DefaultAction;
use crate::duration::{DurationError, duration_text, parse_duration};
use crate::error::{PolicyError, SourceMap};
use crate::matcher::{RequestMatcher, host_patterns};
use crate::mcp::{compile_allow, compile_ask};
use crate::raw::{
    Protocol, RawAllow, RawAsk, RawBody, RawCredential, RawDeny, RawPolicy, Strings, TlsMode,
};
use crate::rule::{AllowRule, AskRule, DenyRule, RuleKind, RuleSite, Transport};
use crate::upgrade::{UpgradeProtocol, UpgradeToken};

/// Ports an HTTP allow rule covers when it names none.
pub(crate) const DEFAULT_HTTP_PORTS: [u16; 2] = [80, 443];
/// Ports a passthrough rule covers when it names none: TLS only.
pub(crate) const DEFAULT_PASSTHROUGH_PORTS: [u16; 1] = [443];
/// How long an ask rule holds a request when it names no `timeout`.
pub(crate) const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(120);
/// Shorter than this, nobody could read the request before it is denied.
pub(crate) const MIN_ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// A held request keeps its client connection open, so waits are bounded.
pub(crate) const MAX_ASK_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// The validated content of a policy file.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub default: DefaultAction,
    pub default_span: Option<Range<usize>>,
    pub allow: Vec<AllowRule>,
    pub deny: Vec<DenyRule>,
    pub ask: Vec<AskRule>,
    pub credentials: Vec<Credential>,
    pub credential_spans: Vec<Range<usize>>,
}

impl Compiled {
    /// No rules and no credentials, with `default` (written nowhere).
    pub(crate) fn empty(default: DefaultAction) -> Self {
        Self {
            default,
            default_span: None,
            allow: Vec::new(),
            deny: Vec::new(),
            ask: Vec::new(),
            credentials: Vec::new(),
            credential_spans: Vec::new(),
        }
    }
}

pub(crate) fn compile(map: &SourceMap, raw: RawPolicy) -> Result<Compiled, PolicyError> {
    if let Some(version) = &raw.version
        && *version.get_ref() != 1
    {
        return Err(map.error(
            version.span(),
            format!(
                "unsupported version {}; this airlock understands `version = 1`",
                version.get_ref()
            ),
        ));
    }
    let allow = rules(map, RuleKind::Allow, &raw.allow, allow_rule)?;
    let deny = rules(map, RuleKind::Deny, &raw.deny, deny_rule)?;
    let ask = rules(map, RuleKind::Ask, &raw.ask, ask_rule)?;
    let mut credentials: Vec<Credential> = Vec::new();
    for raw_credential in &raw.credential {
        let credential = credential(map, raw_credential)?;
        if credentials.iter().any(|c| c.name == credential.name) {
            return Err(map.error(
                raw_credential.get_ref().name.span(),
                format!(
                    "duplicate credential name {:?}; names must be unique",
                    credential.name
                ),
            ));
        }
        credentials.push(credential);
    }
    Ok(Compiled {
        default: raw
            .default
            .as_ref()
            .map_or(DefaultAction::Deny, |d| *d.get_ref()),
        default_span: raw.default.as_ref().map(Spanned::span),
        allow,
        deny,
        ask,
        credentials,
        credential_spans: raw.credential.iter().map(Spanned::span).collect(),
    })
}

/// The rules of one kind, in file order, each compiled by `one`.
fn rules<Raw, Rule>(
    map: &SourceMap,
    kind: RuleKind,
    written: &[Spanned<Raw>],
    one: fn(RuleSite<'_>, &Raw) -> Result<Rule, PolicyError>,
) -> Result<Vec<Rule>, PolicyError> {
    written
        .iter()
        .enumerate()
        .map(|(index, rule)| {
            let site = RuleSite {
                map,
                kind,
                index,
                table: rule.span(),
            };
            one(site, rule.get_ref())
        })
        .collect()
}

fn allow_rule(site: RuleSite<'_>, raw: &RawAllow) -> Result<AllowRule, PolicyError> {
    let map = site.map;
    let transport = transport(&site, raw)?;
    let default_ports: &[u16] = match transport {
        Transport::Http => &DEFAULT_HTTP_PORTS,
        Transport::Passthrough => &DEFAULT_PASSTHROUGH_PORTS,
        // `transport` refused a tcp rule without ports; none matches none.
        Transport::Tcp => &[],
    };
    let matcher = RequestMatcher::compile(&site, raw.request(), Some(default_ports))?;
    let upgrade = upgrades(map, raw.upgrade.as_ref())?;
    let body = body(map, &raw.body)?;
    let max_requests = raw.max_requests.as_ref().map(|m| *m.get_ref());
    let mcp = match &raw.mcp {
        Some(mcp) => {
            if let Some(body) = &raw.body {
                return Err(map.error(
                    body.span(),
                    "`body` cannot be combined with `mcp`: constrain a tool's arguments with `arguments` in its `[[allow.mcp.tool]]` table",
                ));
            }
            if let Some(upgrade) = &raw.upgrade {
                return Err(map.error(
                    upgrade.span(),
                    "`upgrade` cannot be combined with `mcp`: after a switch no message would be decided; remove it",
                ));
            }
            Some(compile_allow(map, mcp)?)
        }
        None => None,
    };
    let mut canonical = format!(
        "{}|{transport:?}|{max_requests:?}|{}",
        matcher.key(),
        body.as_ref()
            .map_or(String::new(), BodyConstraints::canonical),
    );
    // Only when set, so that the keys of rules without it stay as they were.
    if !upgrade.is_empty() {
        let tokens: Vec<&str> = upgrade.iter().map(|p| p.token()).collect();
        canonical.push_str(&format!("|upgrade={}", tokens.join(",")));
    }
    if let Some(mcp) = &mcp {
        canonical.push_str(&mcp.canonical());
    }
    Ok(AllowRule {
        rule_ref: site.rule_ref(&canonical),
        span: site.table,
        matcher,
        max_requests,
        body,
        transport,
        upgrade,
        mcp,
        description: raw.description.clone(),
    })
}

/// How an allow rule's traffic is carried, and what that rules out. It is
/// checked before the request fields: a tcp rule needs a port, and a tcp
/// or passthrough rule can have no field the proxy could only enforce on
/// requests it sees.
fn transport(site: &RuleSite<'_>, raw: &RawAllow) -> Result<Transport, PolicyError> {
    let map = site.map;
    let transport = match (&raw.protocol, &raw.tls) {
        (Some(p), Some(t))
            if *p.get_ref() == Protocol::Tcp && *t.get_ref() == TlsMode::Passthrough =>
        {
            return Err(map.error(
                t.span(),
                "`tls = \"passthrough\"` cannot be combined with `protocol = \"tcp\"`; a tcp rule already tunnels bytes unchanged",
            ));
        }
        (Some(p), _) if *p.get_ref() == Protocol::Tcp => Transport::Tcp,
        (_, Some(t)) if *t.get_ref() == TlsMode::Passthrough => Transport::Passthrough,
        _ => Transport::Http,
    };
    if transport == Transport::Tcp && raw.port.is_none() && raw.ports.is_none() {
        return Err(map.error(
            site.table.clone(),
            "a `protocol = \"tcp\"` rule needs `port = N` or `ports = [..]`; there is no default port for raw TCP",
        ));
    }
    if transport != Transport::Http {
        let what = if transport == Transport::Tcp {
            "`protocol = \"tcp\"`"
        } else {
            "`tls = \"passthrough\"`"
        };
        let opaque = [
            ("methods", raw.methods.as_ref().map(Spanned::span)),
            ("paths", raw.paths.as_ref().map(Spanned::span)),
            ("body", raw.body.as_ref().map(Spanned::span)),
            ("max_requests", raw.max_requests.as_ref().map(Spanned::span)),
            ("upgrade", raw.upgrade.as_ref().map(Spanned::span)),
        ];
        if let Some((field, Some(span))) = opaque.into_iter().find(|(_, s)| s.is_some()) {
            return Err(map.error(
                span,
                format!("`{field}` cannot be enforced on a {what} rule (the proxy never sees requests on an opaque stream); remove it, or drop {what} to inspect HTTP"),
            ));
        }
    }
    Ok(transport)
}

/// `upgrade = [...]`: known protocols only, lower-cased, each once.
fn upgrades(
    map: &SourceMap,
    upgrade: Option<&Strings>,
) -> Result<Vec<UpgradeProtocol>, PolicyError> {
    let Some(list) = upgrade else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for written in list.get_ref() {
        let protocol = match UpgradeProtocol::classify(written.get_ref()) {
            UpgradeToken::Grantable(protocol) => protocol,
            UpgradeToken::H2c => {
                return Err(map.error(
                    written.span(),
                    "\"h2c\" cannot be granted: the proxy speaks HTTP/2 itself (negotiated with ALPN on both sides), and after an h2c switch the connection would carry requests the policy never sees; remove it (clients keep HTTP/2 through TLS, or HTTP/1.1)",
                ));
            }
            UpgradeToken::Unknown(_) => {
                return Err(map.error(
                    written.span(),
                    format!(
                        "unknown upgrade protocol {:?}; the allowed values are {}",
                        written.get_ref(),
                        UpgradeProtocol::allowed_values()
                    ),
                ));
            }
        };
        if !out.contains(&protocol) {
            out.push(protocol);
        }
    }
    Ok(out)
}

fn deny_rule(site: RuleSite<'_>, raw: &RawDeny) -> Result<DenyRule, PolicyError> {
    let matcher = RequestMatcher::compile(&site, raw.request(), None)?;
    Ok(DenyRule {
        rule_ref: site.rule_ref(&matcher.key()),
        span: site.table,
        matcher,
        description: raw.description.clone(),
    })
}

fn ask_rule(site: RuleSite<'_>, raw: &RawAsk) -> Result<AskRule, PolicyError> {
    let map = site.map;
    let matcher = RequestMatcher::compile(&site, raw.request(), Some(&DEFAULT_HTTP_PORTS))?;
    let body = body(map, &raw.body)?;
    let reason = reason(map, raw.reason.as_ref())?;
    let timeout = match &raw.timeout {
        Some(timeout) => ask_timeout(map, timeout)?,
        None => DEFAULT_ASK_TIMEOUT,
    };
    let approvers = approvers(map, raw.approvers.as_ref())?;
    let mcp = match &raw.mcp {
        Some(mcp) => {
            if let Some(body) = &raw.body {
                return Err(map.error(
                    body.span(),
                    "`body` cannot be combined with `mcp`: constrain a tool's arguments with `arguments` in its `[[ask.mcp.tool]]` table",
                ));
            }
            Some(compile_ask(map, mcp)?)
        }
        None => None,
    };
    let mut canonical = format!(
        "{}|{}",
        matcher.key(),
        body.as_ref()
            .map_or(String::new(), BodyConstraints::canonical),
    );
    if !approvers.is_empty() {
        let mut names: Vec<&str> = approvers.iter().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        canonical.push_str(&format!("|approvers={names:?}"));
    }
    if let Some(mcp) = &mcp {
        canonical.push_str(&mcp.canonical());
    }
    Ok(AskRule {
        rule_ref: site.rule_ref(&canonical),
        span: site.table,
        matcher,
        body,
        reason,
        timeout,
        approvers,
        mcp,
        description: raw.description.clone(),
    })
}

/// `reason = "..."`: shown to the approver, so it must say something.
fn reason(
    map: &SourceMap,
    reason: Option<&Spanned<String>>,
) -> Result<Option<String>, PolicyError> {
    let Some(reason) = reason else {
        return Ok(None);
    };
    if reason.get_ref().trim().is_empty() {
        return Err(map.error(
            reason.span(),
            "`reason` is empty; say why a person must approve these requests, or remove it",
        ));
    }
    Ok(Some(reason.get_ref().clone()))
}

/// `timeout = "2m"`: a duration text within the bounds a held request may wait.
fn ask_timeout(map: &SourceMap, timeout: &Spanned<toml::Value>) -> Result<Duration, PolicyError> {
    let error = |message: String| map.error(timeout.span(), message);
    let bounds = format!(
        "from {:?} to {:?}",
        duration_text(MIN_ASK_TIMEOUT),
        duration_text(MAX_ASK_TIMEOUT)
    );
    let text = match timeout.get_ref() {
        toml::Value::String(text) => text,
        toml::Value::Integer(n) => {
            return Err(error(format!(
                "`timeout = {n}` has no unit; write it as a string with one, like \"{n}s\" or \"{n}m\""
            )));
        }
        other => {
            return Err(error(format!(
                "`timeout` must be a string like \"30s\", \"2m\" or \"1h\", not {}",
                other.type_str()
            )));
        }
    };
    let out_of_range = || format!("timeout {text:?} is out of range; a request can wait {bounds}");
    match parse_duration(text) {
        Ok(duration) if (MIN_ASK_TIMEOUT..=MAX_ASK_TIMEOUT).contains(&duration) => Ok(duration),
        Ok(_) | Err(DurationError::Overflow) => Err(error(out_of_range())),
        Err(DurationError::Malformed) => Err(error(format!(
            "invalid timeout {text:?}: write a whole number and a unit (s, m or h), like \"30s\", \"2m\", \"1h\" or \"1m30s\", {bounds}"
        ))),
    }
}

/// `approvers = [...]`: names as the approval service knows them. An
/// empty list would read as "nobody", which is not what omitting it means.
fn approvers(map: &SourceMap, approvers: Option<&Strings>) -> Result<Vec<String>, PolicyError> {
    let Some(list) = approvers else {
        return Ok(Vec::new());
    };
    if list.get_ref().is_empty() {
        return Err(map.error(
            list.span(),
            "`approvers` is empty; list who may decide, like [\"alice\"], or remove it to let the session's owner decide",
        ));
    }
    list.get_ref()
        .iter()
        .map(|name| approver(map, name))
        .collect()
}

/// One approver name, exactly as the approval service will compare it:
/// stray spaces or control characters would make it match nobody.
fn approver(map: &SourceMap, name: &Spanned<String>) -> Result<String, PolicyError> {
    let text = name.get_ref();
    let clean = text.trim().replace(char::is_control, "");
    if clean.is_empty() {
        return Err(map.error(
            name.span(),
            "approver name is empty; write a user or token name, like \"alice\"",
        ));
    }
    if clean != *text {
        return Err(map.error(
            name.span(),
            format!(
                "approver name {text:?} has spaces around it or control characters; write it as {clean:?}"
            ),
        ));
    }
    Ok(clean)
}

/// `body = {...}` of an allow or ask rule.
fn body(map: &SourceMap, body: &RawBody) -> Result<Option<BodyConstraints>, PolicyError> {
    body.as_ref()
        .map(|body| {
            BodyConstraints::compile(body.get_ref())
                .map_err(|(span, message)| map.error(span, message))
        })
        .transpose()
}

fn credential(
    map: &SourceMap,
    spanned: &Spanned<RawCredential>,
) -> Result<Credential, PolicyError> {
    let raw = spanned.get_ref();
    let table = spanned.span();
    let name = raw.name.get_ref().trim();
    if name.is_empty() {
        return Err(map.error(
            raw.name.span(),
            "credential `name` is empty; give it a name like \"github\"",
        ));
    }
    let hosts = host_patterns(
        map,
        &table,
        "[[credential]]",
        raw.host.as_ref(),
        raw.hosts.as_ref(),
    )?;
    // A secret must only ever reach hosts someone named: refuse patterns
    // that hand it to a range of machines or a whole TLD.
    let written: Vec<&Spanned<String>> = match (&raw.host, &raw.hosts) {
        (Some(host), _) => vec![host],
        (None, Some(hosts)) => hosts.get_ref().iter().collect(),
        (None, None) => Vec::new(),
    };
    for (pattern, text) in hosts.iter().zip(written) {
        if let Some(problem) = pattern.too_broad_for_secret() {
            return Err(map.error(
                text.span(),
                format!(
                    "credential host {:?} {problem}; a secret needs named hosts: exact names (\"api.example.com\"), IP literals, or wildcards like \"*.example.com\"",
                    text.get_ref()
                ),
            ));
        }
    }
    let header = raw.header.get_ref();
    if !is_token(header) {
        return Err(map.error(
            raw.header.span(),
            format!("{header:?} is not a valid header name; write it like \"Authorization\""),
        ));
    }
    let value = SecretTemplate::parse(raw.value.get_ref())
        .map_err(|e| map.error(raw.value.span(), e.to_string()))?;
    let bad_literal = value.parts.iter().any(
        |p| matches!(p, TemplatePart::Literal(s) if s.chars().any(|c| c.is_control() && c != '\t')),
    );
    if bad_literal {
        return Err(map.error(
            raw.value.span(),
            "header value contains control characters (e.g. a newline); remove them",
        ));
    }
    let placeholder = match &raw.placeholder {
        Some(placeholder) => {
            let text = placeholder.get_ref();
            if text.is_empty() || text.chars().any(|c| c.is_control() || c == ' ') {
                return Err(map.error(
                    placeholder.span(),
                    "placeholder must be non-empty without spaces or control characters",
                ));
            }
            if value.reference_count() != 1 {
                return Err(map.error(
                    placeholder.span(),
                    format!(
                        "a placeholder stands for exactly one ${{...}} secret, but the value has {}; split the credential or drop the placeholder",
                        value.reference_count()
                    ),
                ));
            }
            Some(text.clone())
        }
        None => None,
    };
    Ok(Credential {
        name: name.to_owned(),
        hosts,
        header: header.clone(),
        value,
        placeholder,
        line: map.line(table.start),
    })
}
