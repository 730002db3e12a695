//! Allow, deny and ask rules share one compiled request matcher, so the
//! same `host`, `port(s)`, `methods` and `paths` mean the same requests in
//! every kind. Only two differences are on purpose, and these tests pin
//! them down: a grant (allow) reads methods and paths narrowly while a
//! restriction (deny, ask) also catches other spellings of them, and a
//! deny rule without ports covers every port where allow and ask cover 80
//! and 443. Rule keys, which records and approvals name, are pinned too.

use super::{host, policy};
use crate::compile::{Compiled, compile};
use crate::error::SourceMap;
use crate::raw::RawPolicy;
use crate::{Decision, DenyReason, Policy, RequestInfo, Scheme};

/// The kinds of rule that matched a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Matched {
    allow: bool,
    deny: bool,
    ask: bool,
}

impl Matched {
    /// "allow deny ask", "deny ask", "deny" or "" (none).
    fn parse(kinds: &str) -> Self {
        let has = |kind| kinds.split_whitespace().any(|k| k == kind);
        Self {
            allow: has("allow"),
            deny: has("deny"),
            ask: has("ask"),
        }
    }
}

/// The same request fields as one policy of each kind, each left alone
/// with nothing else that could match.
struct Kinds {
    allow: Policy,
    deny: Policy,
    ask: Policy,
}

impl Kinds {
    fn of(fields: &str) -> Self {
        Self {
            allow: policy(&format!("version = 1\n[[allow]]\n{fields}\n")),
            deny: policy(&format!(
                "version = 1\ndefault = \"allow\"\n[[deny]]\n{fields}\n"
            )),
            ask: policy(&format!("version = 1\n[[ask]]\n{fields}\n")),
        }
    }

    fn matched(&self, host_name: &str, port: u16, method: &str, path: &str) -> Matched {
        let h = host(host_name);
        let req = RequestInfo {
            scheme: Scheme::Https,
            host: &h,
            port,
            method,
            path_and_query: path,
        };
        Matched {
            allow: matches!(self.allow.evaluate(&req, None), Decision::Allow(a) if a.rule.is_some()),
            deny: matches!(
                self.deny.evaluate(&req, None),
                Decision::Deny(d) if d.reason == DenyReason::DeniedByRule
            ),
            ask: matches!(self.ask.evaluate(&req, None), Decision::Ask(_)),
        }
    }
}

/// (rule fields, "METHOD host port path", kinds that match).
// One row a line reads best as a table.
#[rustfmt::skip]
const TABLE: &[(&str, &str, &str)] = &[
    // Wildcard hosts: subdomains at any depth, never the apex; host names
    // compare case-insensitively and without a trailing dot.
    (r#"host = "*.example.com""#, "GET api.example.com 443 /", "allow deny ask"),
    (r#"host = "*.example.com""#, "GET a.b.example.com 443 /", "allow deny ask"),
    (r#"host = "*.example.com""#, "GET API.Example.COM. 443 /", "allow deny ask"),
    (r#"host = "*.example.com""#, "GET example.com 443 /", ""),
    (r#"host = "*.example.com""#, "GET badexample.com 443 /", ""),
    (r#"host = "*""#, "GET anything.test 443 /", "allow deny ask"),
    (r#"host = "*""#, "GET 192.0.2.1 443 /", "allow deny ask"),
    (r#"hosts = ["a.com", "b.com"]"#, "GET b.com 443 /", "allow deny ask"),
    (r#"hosts = ["a.com", "b.com"]"#, "GET c.com 443 /", ""),
    // IPv6, written with or without brackets and zeros, and as a CIDR.
    (r#"host = "2001:db8::1""#, "GET [2001:db8::1] 443 /", "allow deny ask"),
    (r#"host = "[2001:db8::1]""#, "GET 2001:0db8:0:0:0:0:0:1 443 /", "allow deny ask"),
    (r#"host = "2001:db8::1""#, "GET 2001:db8::2 443 /", ""),
    (r#"host = "2001:db8::/32""#, "GET 2001:db8:ffff::5 443 /", "allow deny ask"),
    (r#"host = "2001:db8::/32""#, "GET 2001:db9::5 443 /", ""),
    (r#"host = "10.0.0.0/8""#, "GET 10.1.2.3 443 /", "allow deny ask"),
    // Default ports: allow and ask cover 80 and 443; deny every port.
    (r#"host = "a.com""#, "GET a.com 443 /", "allow deny ask"),
    (r#"host = "a.com""#, "GET a.com 80 /", "allow deny ask"),
    (r#"host = "a.com""#, "GET a.com 8443 /", "deny"),
    // Listed ports, in either spelling, are the same in every kind.
    ("host = \"a.com\"\nports = [8443]", "GET a.com 8443 /", "allow deny ask"),
    ("host = \"a.com\"\nports = [8443]", "GET a.com 443 /", ""),
    ("host = \"a.com\"\nport = 8080", "GET a.com 8080 /", "allow deny ask"),
    ("host = \"a.com\"\nport = 8080", "GET a.com 80 /", ""),
    ("host = \"a.com\"\nports = [80, 80, 8080]", "GET a.com 8080 /", "allow deny ask"),
    // Method case: a grant compares exactly; a restriction in any case.
    ("host = \"a.com\"\nmethods = [\"GET\"]", "GET a.com 443 /", "allow deny ask"),
    ("host = \"a.com\"\nmethods = [\"GET\"]", "get a.com 443 /", "deny ask"),
    ("host = \"a.com\"\nmethods = [\"GET\"]", "POST a.com 443 /", ""),
    ("host = \"a.com\"\nmethods = [\"post\"]", "POST a.com 443 /", "allow deny ask"),
    ("host = \"a.com\"\nmethods = [\"post\"]", "Post a.com 443 /", "deny ask"),
    // Path globs: `*` one segment, `**` any depth, `?` one character.
    ("host = \"a.com\"\npaths = [\"/v1/*\"]", "GET a.com 443 /v1/items", "allow deny ask"),
    ("host = \"a.com\"\npaths = [\"/v1/*\"]", "GET a.com 443 /v1/items?x=1", "allow deny ask"),
    ("host = \"a.com\"\npaths = [\"/v1/*\"]", "GET a.com 443 /v1/items/x", ""),
    ("host = \"a.com\"\npaths = [\"/v1/**\"]", "GET a.com 443 /v1", "allow deny ask"),
    ("host = \"a.com\"\npaths = [\"/v1/**\"]", "GET a.com 443 /v1/a/b/c", "allow deny ask"),
    ("host = \"a.com\"\npaths = [\"/v1/**\"]", "GET a.com 443 /v2/a", ""),
    ("host = \"a.com\"\npaths = [\"/v?/x\"]", "GET a.com 443 /v3/x", "allow deny ask"),
    // Unreserved escapes are decoded before any rule sees the path, and an
    // ambiguous path (an encoded `/`) is refused before any rule reads it.
    ("host = \"a.com\"\npaths = [\"/admin\"]", "GET a.com 443 /%61dmin", "allow deny ask"),
    ("host = \"a.com\"\npaths = [\"/admin\"]", "GET a.com 443 /admin%2Fx", ""),
    // Spellings only a restriction catches: case, a trailing slash,
    // `;params` and escapes a lenient server decodes.
    ("host = \"a.com\"\npaths = [\"/admin\"]", "GET a.com 443 /ADMIN", "deny ask"),
    ("host = \"a.com\"\npaths = [\"/admin\"]", "GET a.com 443 /admin/", "deny ask"),
    ("host = \"a.com\"\npaths = [\"/admin\"]", "GET a.com 443 /admin;x=1", "deny ask"),
    ("host = \"a.com\"\npaths = [\"/admin\"]", "GET a.com 443 /admin%3Bx", "deny ask"),
    ("host = \"a.com\"\npaths = [\"/admin\"]", "GET a.com 443 /%41DMIN", "deny ask"),
    ("host = \"a.com\"\npaths = [\"/v1/**\"]", "GET a.com 443 /V1/a", "deny ask"),
    ("host = \"a.com\"\npaths = [\"/files/*.whl\"]", "GET a.com 443 /files/a.whl", "allow deny ask"),
    ("host = \"a.com\"\npaths = [\"/files/*.whl\"]", "GET a.com 443 /files/admin;.whl", "deny ask"),
    // Every field at once.
    ("host = \"*.example.com\"\nports = [443, 8443]\nmethods = [\"DELETE\"]\npaths = [\"/v1/**\"]", "DELETE x.example.com 8443 /v1/a", "allow deny ask"),
    ("host = \"*.example.com\"\nports = [443, 8443]\nmethods = [\"DELETE\"]\npaths = [\"/v1/**\"]", "delete x.example.com 8443 /V1/a/", "deny ask"),
];

#[test]
fn allow_deny_and_ask_match_each_spelling_of_host_port_method_and_path_alike() {
    let mut wrong = Vec::new();
    for &(fields, request, expected) in TABLE {
        let [method, host_name, port, path] = request.split(' ').collect::<Vec<_>>()[..] else {
            panic!("{request:?} is not \"METHOD host port path\"");
        };
        let port = port.parse().unwrap_or_else(|e| panic!("{request:?}: {e}"));
        let got = Kinds::of(fields).matched(host_name, port, method, path);
        if got != Matched::parse(expected) {
            wrong.push(format!(
                "{fields:?} with {request}: expected [{expected}], got {got:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every combination of these rule fields against every combination of
/// these request spellings.
const HOSTS: &[&str] = &[
    r#"host = "*.example.com""#,
    r#"host = "2001:db8::/32""#,
    r#"hosts = ["api.example.com", "2001:db8::1"]"#,
];
const PORTS: &[&str] = &["", "ports = [8443]"];
const METHODS: &[&str] = &["", "methods = [\"GET\", \"delete\"]"];
const PATHS: &[&str] = &[
    "",
    "paths = [\"/v1/*\"]",
    "paths = [\"/admin/**\", \"/files/*.whl\"]",
];
const REQUEST_HOSTS: &[&str] = &[
    "api.example.com",
    "Deep.API.example.com.",
    "example.com",
    "[2001:db8::1]",
    "2001:0db8::7",
];
const REQUEST_PORTS: &[u16] = &[80, 443, 8443];
const REQUEST_METHODS: &[&str] = &["GET", "get", "DELETE", "Delete", "POST"];
const REQUEST_PATHS: &[&str] = &[
    "/",
    "/v1/items",
    "/V1/items",
    "/v1/items/",
    "/v1/a/b",
    "/admin",
    "/Admin/",
    "/admin;jsessionid=1/keys",
    "/files/a.whl",
    "/files/admin;.whl",
    "/%61dmin/x",
];

/// The property the shared matcher gives: a restriction never reads a
/// request more narrowly than a grant with the same fields (or a client
/// could spell a request so that the grant lets it through and the
/// restriction misses it), and deny and ask read it exactly alike, apart
/// from deny's default of every port.
#[test]
fn a_restriction_catches_every_request_a_grant_with_the_same_fields_lets_through() {
    let mut wrong = Vec::new();
    let mut seen = [0_usize; 3];
    for hosts in HOSTS {
        for ports in PORTS {
            for methods in METHODS {
                for paths in PATHS {
                    let fields = [*hosts, ports, methods, paths].join("\n");
                    let kinds = Kinds::of(&fields);
                    for host_name in REQUEST_HOSTS {
                        for &port in REQUEST_PORTS {
                            for method in REQUEST_METHODS {
                                for path in REQUEST_PATHS {
                                    let got = kinds.matched(host_name, port, method, path);
                                    seen[0] += usize::from(got.allow);
                                    seen[1] += usize::from(got.deny);
                                    seen[2] += usize::from(got.ask);
                                    let default_port = ports.is_empty() && port == 8443;
                                    let consistent = (!got.allow || (got.deny && got.ask))
                                        && (got.deny == got.ask || (default_port && got.deny));
                                    if !consistent {
                                        wrong.push(format!(
                                            "{fields:?} with {method} {host_name}:{port}{path}: {got:?}"
                                        ));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The table is not vacuous: every kind matched many requests, and the
    // restrictions more than the grant.
    assert!(
        seen[0] > 100 && seen[1] > seen[0] && seen[2] > seen[0],
        "{seen:?}"
    );
}

/// Keys name rules in records and approvals, so they must not change when
/// the code that compiles rules does. These are the keys of today's rules.
#[test]
fn rule_keys_of_allow_deny_and_ask_rules_are_unchanged() {
    // The same request fields in a rule of each kind, and each kind's
    // simplest rule.
    let fields = r#"hosts = ["*.example.com", "2001:db8::/32"]
ports = [443, 8443]
methods = ["get", "POST"]
paths = ["/v1/**", "/files/*.whl"]"#;
    let p = compiled(&format!(
        r#"version = 1
default = "allow"

[[allow]]
{fields}
max_requests = 5

[[allow]]
host = "plain.test"

[[allow]]
host = "tunnel.test"
protocol = "tcp"
port = 22

[[deny]]
{fields}

[[deny]]
host = "blocked.test"

[[ask]]
{fields}
approvers = ["bob", "alice"]

[[ask]]
host = "held.test"
"#
    ));
    let keys: Vec<String> = p
        .allow
        .iter()
        .map(|r| r.rule_ref.key())
        .chain(p.deny.iter().map(|r| r.rule_ref.key()))
        .chain(p.ask.iter().map(|r| r.rule_ref.key()))
        .collect();
    assert_eq!(
        keys,
        [
            "allow-7d3aa79e7e66845b",
            "allow-faea65aa04d5c324",
            "allow-2a3e9d2fcf56c4de",
            "deny-f42c76cea09c3112",
            "deny-b5950138b119dfd5",
            "ask-e250652e2fa1e0c3",
            "ask-16b7935442bea785",
        ]
    );
}

fn compiled(text: &str) -> Compiled {
    let map = SourceMap::new("policy.toml".into(), text.into());
    let raw: RawPolicy = toml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
    compile(&map, raw).unwrap_or_else(|e| panic!("{e}"))
}
