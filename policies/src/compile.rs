//! Turns the serde model into validated, matchable rules, rejecting
//! anything that could not be enforced as written.

use std::ops::Range;

use toml::Spanned;

use crate::body::BodyConstraints;
use crate::credential::{Credential, SecretTemplate, TemplatePart, is_token};
use crate::decision::DefaultAction;
use crate::error::{PolicyError, SourceMap};
use crate::glob::PathGlob;
use crate::host::HostPattern;
use crate::path::{loosen_pattern, normalize_pattern_text};
use crate::raw::{Protocol, RawAllow, RawCredential, RawDeny, RawPolicy, TlsMode};
use crate::rule::{AllowRule, DenyRule, RuleKind, RuleRef, Transport};
use crate::upgrade::{UpgradeProtocol, UpgradeToken};

/// Ports an HTTP allow rule covers when it names none.
pub(crate) const DEFAULT_HTTP_PORTS: [u16; 2] = [80, 443];
/// Ports a passthrough rule covers when it names none: TLS only.
pub(crate) const DEFAULT_PASSTHROUGH_PORTS: [u16; 1] = [443];

/// The validated content of a policy file.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub default: DefaultAction,
    pub default_span: Option<Range<usize>>,
    pub allow: Vec<AllowRule>,
    pub deny: Vec<DenyRule>,
    pub credentials: Vec<Credential>,
    pub credential_spans: Vec<Range<usize>>,
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
    let body = match &raw.body {
        Some(body) => Some(
            BodyConstraints::compile(body.get_ref())
                .map_err(|(span, message)| map.error(span, message))?,
        ),
        None => None,
    };
    let max_requests = raw.max_requests.as_ref().map(|m| *m.get_ref());
    let mut canonical = format!(
        "{}|{ports:?}|{methods:?}|{}|{transport:?}|{max_requests:?}|{}",
        joined(&hosts),
        paths.as_ref().map_or("*".to_owned(), |p| p
            .iter()
            .map(PathGlob::as_str)
            .collect::<Vec<_>>()
            .join(",")),
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
    let paths = paths(map, &raw.paths)?.map(|globs| {
        globs
            .into_iter()
            .map(|g| {
                let loose = PathGlob::new(&loosen_pattern(g.as_str()));
                (g, loose)
            })
            .collect::<Vec<_>>()
    });
    let canonical = format!(
        "{}|{ports:?}|{methods:?}|{}",
        joined(&hosts),
        paths.as_ref().map_or("*".to_owned(), |p| p
            .iter()
            .map(|(g, _)| g.as_str())
            .collect::<Vec<_>>()
            .join(",")),
    );
    Ok(DenyRule {
        rule_ref: RuleRef::new(
            RuleKind::Deny,
            index,
            map.line(table.start),
            map.name().clone(),
            &canonical,
        ),
        hosts,
        ports,
        methods,
        paths,
        description: raw.description.clone(),
    })
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
            normalize_pattern_text(text)
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
