//! The request matcher every kind of rule shares: host patterns, ports,
//! methods and paths, compiled by one function from the fields allow,
//! deny and ask rules all have, and matched by one set of methods. What
//! differs between the kinds is said here once, as the two ways a rule
//! reads a request (a grant narrowly, a restriction broadly) and the
//! ports a kind covers when it lists none.

use std::ops::Range;

use toml::Spanned;

use crate::credential::is_token;
use crate::decision::RequestInfo;
use crate::error::{PolicyError, SourceMap};
use crate::glob::PathGlob;
use crate::host::{Host, HostPattern};
use crate::path::{NormalPath, loosen_pattern, normalize_glob_text};
use crate::raw::{RawRequest, Strings};
use crate::rule::{RuleKind, RuleSite};

/// What a rule asks of a request's host, port, method and path.
#[derive(Debug, Clone)]
pub(crate) struct RequestMatcher {
    /// Whose matcher this is, which decides how it reads methods and paths
    /// (see [`RequestMatcher::reads_broadly`]).
    kind: RuleKind,
    hosts: Vec<HostPattern>,
    /// None = every port (a deny rule that lists none).
    ports: Option<Vec<u16>>,
    /// Upper-cased; None = any.
    methods: Option<Vec<String>>,
    /// None = any.
    paths: Option<Vec<PathPattern>>,
}

/// One `paths` entry in the two forms a rule may match it in.
#[derive(Debug, Clone)]
struct PathPattern {
    /// As written, normalized: matched against the request's exact path.
    glob: PathGlob,
    /// Lower-cased, fully decoded, without `;params` (section 6 of
    /// docs/policy.md): a restriction also matches it against the loose
    /// path. A grant never reads it.
    loose: PathGlob,
}

impl RequestMatcher {
    /// Compiles the request fields of a rule of any kind. `default_ports`
    /// is what the rule covers when it lists none; None = every port.
    pub(crate) fn compile(
        site: &RuleSite<'_>,
        raw: RawRequest<'_>,
        default_ports: Option<&[u16]>,
    ) -> Result<Self, PolicyError> {
        let header = format!("[[{}]]", site.kind.name());
        let map = site.map;
        Ok(Self {
            kind: site.kind,
            hosts: host_patterns(map, &site.table, &header, raw.host, raw.hosts)?,
            ports: ports(map, raw.port, raw.ports)?.or_else(|| default_ports.map(<[u16]>::to_vec)),
            methods: methods(map, raw.methods)?,
            paths: paths(map, raw.paths)?,
        })
    }

    pub(crate) fn hosts(&self) -> &[HostPattern] {
        &self.hosts
    }

    /// None = every port.
    pub(crate) fn ports(&self) -> Option<&[u16]> {
        self.ports.as_deref()
    }

    /// Upper-cased; None = any method.
    pub(crate) fn methods(&self) -> Option<&[String]> {
        self.methods.as_deref()
    }

    /// The globs as written (normalized); None = any path.
    pub(crate) fn path_globs(&self) -> Option<Vec<&PathGlob>> {
        self.paths
            .as_ref()
            .map(|paths| paths.iter().map(|p| &p.glob).collect())
    }

    /// No method or path condition (ports may still apply).
    pub(crate) fn is_host_wide(&self) -> bool {
        self.methods.is_none() && self.paths.is_none()
    }

    /// The matching content as text, for rule keys; each kind adds its own
    /// fields after it.
    pub(crate) fn key(&self) -> String {
        // Keys name rules in records and approvals, so this is the text
        // each kind has always written: a deny rule its ports as listed
        // or not (`None` = every port), allow and ask their ports after
        // the default is applied.
        let ports = match self.kind {
            RuleKind::Deny => format!("{:?}", self.ports),
            RuleKind::Allow | RuleKind::Ask => format!("{:?}", self.ports().unwrap_or_default()),
        };
        let hosts: Vec<String> = self.hosts.iter().map(ToString::to_string).collect();
        let paths = self
            .path_globs()
            .map_or_else(|| "*".to_owned(), |globs| joined_globs(&globs));
        format!("{}|{ports}|{:?}|{paths}", hosts.join(","), self.methods)
    }

    /// Host, port, method and path: everything a rule asks of a request
    /// but the body. Cheapest first: every request is checked against
    /// every deny and ask rule, and most fail on the port or the method.
    pub(crate) fn matches(&self, req: &RequestInfo<'_>, path: &NormalPath) -> bool {
        self.matches_port(req.port)
            && self.matches_method(req.method)
            && self.matches_host(req.host)
            && self.matches_path(path)
    }

    pub(crate) fn matches_host(&self, host: &Host) -> bool {
        self.hosts.iter().any(|p| p.matches(host))
    }

    pub(crate) fn matches_port(&self, port: u16) -> bool {
        self.ports
            .as_ref()
            .is_none_or(|ports| ports.contains(&port))
    }

    pub(crate) fn matches_host_port(&self, host: &Host, port: u16) -> bool {
        self.matches_port(port) && self.matches_host(host)
    }

    /// A grant compares methods exactly (RFC 9110 §9.1: "get" is not a
    /// GET). A restriction compares them in any case: a server that
    /// accepts "delete" must not get past a DELETE deny, nor a "post" past
    /// the approval a POST needs.
    pub(crate) fn matches_method(&self, method: &str) -> bool {
        let Some(methods) = &self.methods else {
            return true;
        };
        if self.reads_broadly() {
            methods.iter().any(|m| m.eq_ignore_ascii_case(method))
        } else {
            methods.iter().any(|m| m == method)
        }
    }

    /// A grant matches the exact normalized path, case-sensitively, and
    /// the path as a server that strips `;params` routes it. A restriction
    /// matches the exact path or its loose form, each also without a
    /// trailing `/`: most servers route "/admin/" to "/admin", so a deny
    /// on "/admin" must not be dodged by adding a slash.
    pub(crate) fn matches_path(&self, path: &NormalPath) -> bool {
        let Some(patterns) = &self.paths else {
            return true;
        };
        if !self.reads_broadly() {
            return patterns.iter().any(|p| p.glob.allows(path));
        }
        let exact = [
            Some(path.exact.as_str()),
            without_trailing_slash(&path.exact),
        ];
        let loose = [
            Some(path.loose.as_str()),
            without_trailing_slash(&path.loose),
        ];
        patterns.iter().any(|p| {
            exact.iter().flatten().any(|e| p.glob.matches(e))
                || loose.iter().flatten().any(|l| p.loose.matches(l))
        })
    }

    /// A deny or ask rule restricts, so it reads a request as broadly as
    /// any server might: otherwise a client could write the request
    /// differently (`post`, `/v1/charges/`) to skip the deny or the
    /// approval and reach a broader allow rule. An allow rule grants, so
    /// it reads the request narrowly.
    fn reads_broadly(&self) -> bool {
        match self.kind {
            RuleKind::Allow => false,
            RuleKind::Deny | RuleKind::Ask => true,
        }
    }
}

/// "/admin/" → "/admin"; None for "/" itself and paths without one.
fn without_trailing_slash(path: &str) -> Option<&str> {
    path.strip_suffix('/').filter(|rest| !rest.is_empty())
}

fn joined_globs(globs: &[&PathGlob]) -> String {
    globs
        .iter()
        .map(|g| g.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// `host` or `hosts` of a rule or a credential; `kind` is its table
/// header ("[[allow]]"), for messages.
pub(crate) fn host_patterns(
    map: &SourceMap,
    table: &Range<usize>,
    kind: &str,
    host: Option<&Spanned<String>>,
    hosts: Option<&Strings>,
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

/// `port` or `ports`, each port once; None when the rule lists none.
fn ports(
    map: &SourceMap,
    port: Option<&Spanned<u16>>,
    ports: Option<&Spanned<Vec<Spanned<u16>>>>,
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

/// `methods`, upper-cased.
fn methods(map: &SourceMap, methods: Option<&Strings>) -> Result<Option<Vec<String>>, PolicyError> {
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

/// `paths`, each with the loose form a restriction also matches.
fn paths(
    map: &SourceMap,
    paths: Option<&Strings>,
) -> Result<Option<Vec<PathPattern>>, PolicyError> {
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
            let normal = normalize_glob_text(p.get_ref()).map_err(|problem| {
                map.error(
                    p.span(),
                    format!("invalid path pattern: {problem}; paths look like \"/v1/items/**\""),
                )
            })?;
            Ok(PathPattern {
                glob: PathGlob::new(&normal),
                loose: PathGlob::new(&loosen_pattern(&normal)),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}
