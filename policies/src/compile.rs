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
use crate::glob::PathGlob;
use crate::host::HostPattern;
use crate::path::{loosen_pattern, normalize_glob_text};
use crate::raw::{Protocol, RawAllow, RawAsk, RawBody, RawCredential, RawDeny, RawPolicy, TlsMode};
use crate::rule::{AllowRule, AskRule, DenyRule, RuleKind, RuleRef, Transport};
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
    let allow = raw
        .allow
        .iter()
        .enumerate()
        .map(|(index, rule)| allow_rule(map, index, rule))
        .collect::<Result<Vec<_>, _>>()?;
    let deny = raw
        .deny
        .iter()
        .enumerate()
        .map(|(index, rule)| deny_rule(map, index, rule))
        .collect::<Result<Vec<_>, _>>()?;
    let ask = raw
        .ask
        .iter()
        .enumerate()
        .map(|(index, rule)| ask_rule(map, index, rule))
        .collect::<Result<Vec<_>, _>>()?;
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

type Strings = Option<Spanned<Vec<Spanned<String>>>>;
type Ports = Option<Spanned<Vec<Spanned<u16>>>>;

fn allow_rule(
    map: &SourceMap,
    index: usize,
    spanned: &Spanned<RawAllow>,
) -> Result<AllowRule, PolicyError> {
    let raw = spanned.get_ref();
    let table = spanned.span();
    let hosts = host_patterns(map, &table, "[[allow]]", &raw.host, &raw.hosts)?;
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
    let ports = ports(map, &raw.port, &raw.ports)?;
    let ports = match (transport, ports) {
        (_, Some(ports)) => ports,
        (Transport::Tcp, None) => {
            return Err(map.error(
                table,
                "a `protocol = \"tcp\"` rule needs `port = N` or `ports = [..]`; there is no default port for raw TCP",
            ));
        }
        (Transport::Passthrough, None) => DEFAULT_PASSTHROUGH_PORTS.to_vec(),
        (Transport::Http, None) => DEFAULT_HTTP_PORTS.to_vec(),
    };
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
    let methods = methods(map, &raw.methods)?;
    let paths = paths(map, &raw.paths)?;
    let upgrade = upgrades(map, &raw.upgrade)?;
    let body = body(map, &raw.body)?;
    let max_requests = raw.max_requests.as_ref().map(|m| *m.get_ref());
    let mut canonical = format!(
        "{}|{ports:?}|{methods:?}|{}|{transport:?}|{max_requests:?}|{}",
        joined(&hosts),
        joined_paths(paths.iter().flatten()),
        body.as_ref()
            .map_or(String::new(), BodyConstraints::canonical),
    );
    // Only when set, so that the keys of rules without it stay as they were.
    if !upgrade.is_empty() {
        let tokens: Vec<&str> = upgrade.iter().map(|p| p.token()).collect();
        canonical.push_str(&format!("|upgrade={}", tokens.join(",")));
    }
    Ok(AllowRule {
        rule_ref: RuleRef::new(
            RuleKind::Allow,
            index,
            map.line(table.start),
            map.name().clone(),
            &canonical,
        ),
        span: table,
        hosts,
        ports,
        methods,
        paths,
        max_requests,
        body,
        transport,
        upgrade,
        description: raw.description.clone(),
    })
}

/// `upgrade = [...]`: known protocols only, lower-cased, each once.
fn upgrades(map: &SourceMap, upgrade: &Strings) -> Result<Vec<UpgradeProtocol>, PolicyError> {
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

fn deny_rule(
    map: &SourceMap,
    index: usize,
    spanned: &Spanned<RawDeny>,
) -> Result<DenyRule, PolicyError> {
    let raw = spanned.get_ref();
    let table = spanned.span();
    let hosts = host_patterns(map, &table, "[[deny]]", &raw.host, &raw.hosts)?;
    let ports = ports(map, &raw.port, &raw.ports)?;
    let methods = methods(map, &raw.methods)?;
    let paths = paths(map, &raw.paths)?.map(with_loose_forms);
    let canonical = format!(
        "{}|{ports:?}|{methods:?}|{}",
        joined(&hosts),
        joined_paths(paths.iter().flatten().map(|(g, _)| g)),
    );
    Ok(DenyRule {
        rule_ref: RuleRef::new(
            RuleKind::Deny,
            index,
            map.line(table.start),
            map.name().clone(),
            &canonical,
        ),
        span: table,
        hosts,
        ports,
        methods,
        paths,
        description: raw.description.clone(),
    })
}

fn ask_rule(
    map: &SourceMap,
    index: usize,
    spanned: &Spanned<RawAsk>,
) -> Result<AskRule, PolicyError> {
    let raw = spanned.get_ref();
    let table = spanned.span();
    let hosts = host_patterns(map, &table, "[[ask]]", &raw.host, &raw.hosts)?;
    let ports = ports(map, &raw.port, &raw.ports)?.unwrap_or_else(|| DEFAULT_HTTP_PORTS.to_vec());
    let methods = methods(map, &raw.methods)?;
    let paths = paths(map, &raw.paths)?.map(with_loose_forms);
    let body = body(map, &raw.body)?;
    let reason = reason(map, raw.reason.as_ref())?;
    let timeout = match &raw.timeout {
        Some(timeout) => ask_timeout(map, timeout)?,
        None => DEFAULT_ASK_TIMEOUT,
    };
    let approvers = approvers(map, raw.approvers.as_ref())?;
    let mut canonical = format!(
        "{}|{ports:?}|{methods:?}|{}|{}",
        joined(&hosts),
        joined_paths(paths.iter().flatten().map(|(g, _)| g)),
        body.as_ref()
            .map_or(String::new(), BodyConstraints::canonical),
    );
    if !approvers.is_empty() {
        let mut names: Vec<&str> = approvers.iter().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        canonical.push_str(&format!("|approvers={names:?}"));
    }
    Ok(AskRule {
        rule_ref: RuleRef::new(
            RuleKind::Ask,
            index,
            map.line(table.start),
            map.name().clone(),
            &canonical,
        ),
        span: table,
        hosts,
        ports,
        methods,
        paths,
        body,
        reason,
        timeout,
        approvers,
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
fn approvers(
    map: &SourceMap,
    approvers: Option<&Spanned<Vec<Spanned<String>>>>,
) -> Result<Vec<String>, PolicyError> {
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

/// Each glob with the form deny and ask rules also match: lower-cased,
/// fully decoded, without `;params` (section 6 of docs/policy.md).
fn with_loose_forms(globs: Vec<PathGlob>) -> Vec<(PathGlob, PathGlob)> {
    globs
        .into_iter()
        .map(|g| {
            let loose = PathGlob::new(&loosen_pattern(g.as_str()));
            (g, loose)
        })
        .collect()
}

/// "*" when a rule names no paths, for rule keys.
fn joined_paths<'a>(globs: impl Iterator<Item = &'a PathGlob>) -> String {
    let globs: Vec<&str> = globs.map(PathGlob::as_str).collect();
    if globs.is_empty() {
        "*".to_owned()
    } else {
        globs.join(",")
    }
}

fn joined(hosts: &[HostPattern]) -> String {
    hosts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn host_patterns(
    map: &SourceMap,
    table: &Range<usize>,
    kind: &str,
    host: &Option<Spanned<String>>,
    hosts: &Strings,
) -> Result<Vec<HostPattern>, PolicyError> {
    let list: Vec<&Spanned<String>> = match (host, hosts) {
        (Some(_), Some(hosts)) => {
            return Err(map.error(
                hosts.span(),
                format!("{kind} has both `host` and `hosts`; keep one"),
            ));
        }
        (Some(host), None) => vec![host],
        (None, Some(hosts)) if hosts.get_ref().is_empty() => {
            return Err(map.error(hosts.span(), "`hosts` is empty; list at least one host"));
        }
        (None, Some(hosts)) => hosts.get_ref().iter().collect(),
        (None, None) => {
            return Err(map.error(
                table.clone(),
                format!(
                    "{kind} needs `host = \"...\"` or `hosts = [...]` (use \"*\" for any host)"
                ),
            ));
        }
    };
    list.into_iter()
        .map(|h| HostPattern::parse(h.get_ref()).map_err(|e| map.error(h.span(), e.to_string())))
        .collect()
}

fn ports(
    map: &SourceMap,
    port: &Option<Spanned<u16>>,
    ports: &Ports,
) -> Result<Option<Vec<u16>>, PolicyError> {
    let list: Vec<&Spanned<u16>> = match (port, ports) {
        (Some(_), Some(ports)) => {
            return Err(map.error(ports.span(), "both `port` and `ports` are set; keep one"));
        }
        (Some(port), None) => vec![port],
        (None, Some(ports)) if ports.get_ref().is_empty() => {
            return Err(map.error(
                ports.span(),
                "`ports` is empty; list at least one port or remove it",
            ));
        }
        (None, Some(ports)) => ports.get_ref().iter().collect(),
        (None, None) => return Ok(None),
    };
    let mut out = Vec::new();
    for port in list {
        if *port.get_ref() == 0 {
            return Err(map.error(port.span(), "port 0 is not a real port; use 1..=65535"));
        }
        if !out.contains(port.get_ref()) {
            out.push(*port.get_ref());
        }
    }
    Ok(Some(out))
}

fn methods(map: &SourceMap, methods: &Strings) -> Result<Option<Vec<String>>, PolicyError> {
    let Some(methods) = methods else {
        return Ok(None);
    };
    if methods.get_ref().is_empty() {
        return Err(map.error(methods.span(), "`methods` is empty, so nothing could match; list methods or remove the key to allow any"));
    }
    methods
        .get_ref()
        .iter()
        .map(|m| {
            // "*" is a valid token, so it would be taken as a method literally
            // named "*" and silently never match.
            if m.get_ref() == "*" {
                Err(map.error(
                    m.span(),
                    "\"*\" is not an HTTP method and would never match; omit `methods` to allow any method",
                ))
            } else if is_token(m.get_ref()) {
                Ok(m.get_ref().to_ascii_uppercase())
            } else {
                Err(map.error(
                    m.span(),
                    format!(
                        "{:?} is not an HTTP method; write methods like \"GET\" or \"POST\"",
                        m.get_ref()
                    ),
                ))
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn paths(map: &SourceMap, paths: &Strings) -> Result<Option<Vec<PathGlob>>, PolicyError> {
    let Some(paths) = paths else {
        return Ok(None);
    };
    if paths.get_ref().is_empty() {
        return Err(map.error(
            paths.span(),
            "`paths` is empty, so nothing could match; list paths or remove the key to allow any",
        ));
    }
    paths
        .get_ref()
        .iter()
        .map(|p| {
            let text = p.get_ref();
            normalize_glob_text(text)
                .map(|normal| PathGlob::new(&normal))
                .map_err(|problem| {
                    map.error(
                        p.span(),
                        format!(
                            "invalid path pattern: {problem}; paths look like \"/v1/items/**\""
                        ),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
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
    let hosts = host_patterns(map, &table, "[[credential]]", &raw.host, &raw.hosts)?;
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
