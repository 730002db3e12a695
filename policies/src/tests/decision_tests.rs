use std::net::IpAddr;

use super::{decide, host, policy, request};
use crate::{ConnectionDecision, Decision, DenyReason, Policy, RequestInfo, RuleKind, Scheme};

const GITHUB: &str = r#"
version = 1
default = "deny"

[[allow]]
host = "api.github.com"
methods = ["GET", "HEAD", "DELETE"]
paths = ["/repos/**", "/user"]

[[allow]]
host = "github.com"
port = 22
protocol = "tcp"

[[allow]]
host = "pinned.example.com"
tls = "passthrough"

[[allow]]
host = "*.pypi.org"

[[deny]]
host = "api.github.com"
methods = ["DELETE"]

[[deny]]
host = "evil.pypi.org"
"#;

fn reason(d: &Decision) -> Option<DenyReason> {
    match d {
        Decision::Deny(denial) => Some(denial.reason.clone()),
        Decision::Allow(_) | Decision::Ask(_) => None,
    }
}

#[test]
fn deny_overrides_allow() {
    let p = policy(GITHUB);
    assert!(decide(&p, "api.github.com", "GET", "/repos/a/b").is_allowed());
    let d = decide(&p, "api.github.com", "DELETE", "/repos/a/b");
    let Decision::Deny(denial) = &d else {
        panic!("{d:?}")
    };
    assert_eq!(denial.reason, DenyReason::DeniedByRule);
    let rule = denial.rule.clone().unwrap_or_else(|| panic!("rule"));
    assert_eq!((rule.kind, rule.index, rule.line), (RuleKind::Deny, 0, 22));
    // Deny rules compare methods case-insensitively.
    assert_eq!(
        reason(&decide(&p, "api.github.com", "delete", "/repos/a/b")),
        Some(DenyReason::DeniedByRule)
    );
    assert_eq!(
        reason(&decide(&p, "evil.pypi.org", "GET", "/")),
        Some(DenyReason::DeniedByRule)
    );
    assert!(decide(&p, "files.pypi.org", "GET", "/").is_allowed());
}

#[test]
fn most_specific_reason_in_deny_mode() {
    let p = policy(GITHUB);
    assert_eq!(
        reason(&decide(&p, "example.org", "GET", "/")),
        Some(DenyReason::NoRuleForHost)
    );
    assert_eq!(
        reason(&decide(&p, "api.github.com", "POST", "/repos/a")),
        Some(DenyReason::MethodNotAllowed)
    );
    assert_eq!(
        reason(&decide(&p, "api.github.com", "GET", "/orgs/a")),
        Some(DenyReason::PathNotAllowed)
    );
    let h = host("api.github.com");
    let on_8443 = RequestInfo {
        port: 8443,
        ..request(&h, "GET", "/user")
    };
    assert_eq!(
        reason(&p.evaluate(&on_8443, None)),
        Some(DenyReason::PortNotAllowed)
    );
    // tcp/passthrough rules never allow inspected requests.
    assert_eq!(
        reason(&decide(&p, "pinned.example.com", "GET", "/")),
        Some(DenyReason::NoRuleForHost)
    );
    let plain = RequestInfo {
        scheme: Scheme::Http,
        port: 80,
        ..request(&h, "GET", "/user")
    };
    assert!(p.evaluate(&plain, None).is_allowed());
}

#[test]
fn connection_decisions() {
    let p = policy(GITHUB);
    assert!(
        matches!(p.connection(&host("github.com"), 22), ConnectionDecision::Tunnel { rule } if rule.index == 1)
    );
    assert!(
        matches!(p.connection(&host("pinned.example.com"), 443), ConnectionDecision::Passthrough { rule } if rule.index == 2)
    );
    assert_eq!(
        p.connection(&host("api.github.com"), 443),
        ConnectionDecision::Inspect
    );
    assert_eq!(
        p.connection(&host("api.github.com"), 80),
        ConnectionDecision::Inspect
    );
    let deny_reason = |h: &str, port| match p.connection(&host(h), port) {
        ConnectionDecision::Deny(d) => Some(d.reason),
        _ => None,
    };
    assert_eq!(
        deny_reason("api.github.com", 22),
        Some(DenyReason::PortNotAllowed)
    );
    assert_eq!(
        deny_reason("github.com", 443),
        Some(DenyReason::PortNotAllowed)
    );
    assert_eq!(
        deny_reason("pinned.example.com", 80),
        Some(DenyReason::PortNotAllowed)
    );
    assert_eq!(
        deny_reason("example.org", 443),
        Some(DenyReason::NoRuleForHost)
    );
    assert_eq!(
        deny_reason("evil.pypi.org", 443),
        Some(DenyReason::DeniedByRule)
    );
    let open = policy(
        "version = 1\ndefault = \"allow\"\n[[deny]]\nhost = \"bad.example\"\nports = [443]\n",
    );
    assert_eq!(
        open.connection(&host("anything.example"), 5432),
        ConnectionDecision::Inspect
    );
    assert!(matches!(
        open.connection(&host("bad.example"), 443),
        ConnectionDecision::Deny(_)
    ));
    assert_eq!(
        open.connection(&host("bad.example"), 80),
        ConnectionDecision::Inspect
    );
}

#[test]
fn resolvable() {
    let p = policy(GITHUB);
    assert!(p.resolvable(&host("api.github.com")));
    assert!(p.resolvable(&host("github.com")));
    assert!(p.resolvable(&host("pinned.example.com")));
    assert!(p.resolvable(&host("files.pypi.org")));
    assert!(!p.resolvable(&host("pypi.org")));
    assert!(!p.resolvable(&host("evil.pypi.org")));
    assert!(!p.resolvable(&host("example.org")));
    let open = policy(
        "version = 1\ndefault = \"allow\"\n[[deny]]\nhost = \"bad.example\"\n[[deny]]\nhost = \"semi.example\"\nmethods = [\"POST\"]\n",
    );
    assert!(open.resolvable(&host("example.org")));
    assert!(!open.resolvable(&host("bad.example")));
    assert!(open.resolvable(&host("semi.example")));
    let report = policy("version = 1\ndefault = \"report\"\n[[deny]]\nhost = \"bad.example\"\n");
    assert!(report.resolvable(&host("bad.example")));
    assert!(!Policy::deny_all().resolvable(&host("example.org")));
}

#[test]
fn default_allow_and_report_modes() {
    let rules = "[[allow]]\nhost = \"a.example\"\nmethods = [\"GET\"]\nmax_requests = 5\n[[deny]]\nhost = \"a.example\"\npaths = [\"/admin/**\"]\n";
    let allow = policy(&format!("version = 1\ndefault = \"allow\"\n{rules}"));
    match decide(&allow, "other.example", "POST", "/x") {
        Decision::Allow(a) => {
            assert_eq!((a.rule, a.max_requests, a.would_deny), (None, None, None))
        }
        other => panic!("{other:?}"),
    }
    match decide(&allow, "a.example", "GET", "/x") {
        Decision::Allow(a) => assert_eq!(a.max_requests, Some(5)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        reason(&decide(&allow, "a.example", "GET", "/admin/x")),
        Some(DenyReason::DeniedByRule)
    );

    let report = policy(&format!("version = 1\ndefault = \"report\"\n{rules}"));
    match decide(&report, "other.example", "POST", "/x") {
        Decision::Allow(a) => {
            assert_eq!(a.rule, None);
            assert_eq!(
                a.would_deny.map(|d| d.reason),
                Some(DenyReason::NoRuleForHost)
            );
        }
        other => panic!("{other:?}"),
    }
    match decide(&report, "a.example", "GET", "/admin/x") {
        Decision::Allow(a) => {
            let would = a.would_deny.unwrap_or_else(|| panic!("would_deny"));
            assert_eq!(would.reason, DenyReason::DeniedByRule);
            assert_eq!(would.rule.map(|r| r.kind), Some(RuleKind::Deny));
        }
        other => panic!("{other:?}"),
    }
    match decide(&report, "a.example", "GET", "/ok") {
        Decision::Allow(a) => assert!(a.would_deny.is_none() && a.max_requests == Some(5)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        report.connection(&host("a.example"), 9999),
        ConnectionDecision::Inspect
    );
}

#[test]
fn private_addresses_need_explicit_ip_rules() {
    let p = policy(
        "version = 1\n[[allow]]\nhost = \"127.0.0.1\"\nport = 8080\n[[allow]]\nhost = \"10.0.0.0/8\"\n[[allow]]\nhost = \"*\"\n[[allow]]\nhost = \"[fd00::1]\"\n",
    );
    let ip = |s: &str| s.parse::<IpAddr>().unwrap_or_else(|e| panic!("{e}"));
    assert!(p.allows_private_address(ip("127.0.0.1")));
    assert!(p.allows_private_address(ip("10.9.8.7")));
    assert!(p.allows_private_address(ip("::ffff:10.9.8.7")));
    assert!(p.allows_private_address(ip("fd00::1")));
    assert!(!p.allows_private_address(ip("169.254.169.254")));
    assert!(!p.allows_private_address(ip("192.168.1.1")));
    assert!(!p.allows_private_address(ip("::1")));
    let any_only = policy("version = 1\n[[allow]]\nhost = \"*\"\n");
    assert!(!any_only.allows_private_address(ip("127.0.0.1")));
}

#[test]
fn suggested_rules_parse_back_and_allow_the_request() {
    let hosts = [host("api.example.com"), host("bücher.example"), host("::1")];
    let cases = [
        (&hosts[0], 443, "POST", "/v1/x?key=1"),
        (&hosts[0], 8443, "GET", "/a//b/%7Ec/%3A\"quote"),
        (&hosts[1], 80, "PATCH", "/items/42"),
        (&hosts[2], 3000, "GET", "/"),
        (&hosts[0], 443, "GET", "/**"),
        (&hosts[0], 443, "GET", "/a*/b?c"),
    ];
    for (h, port, method, path) in cases {
        let req = RequestInfo {
            scheme: Scheme::Https,
            host: h,
            port,
            method,
            path_and_query: path,
        };
        let deny = Policy::deny_all();
        assert!(!deny.evaluate(&req, None).is_allowed());
        let snippet = Policy::suggest_rule(&req);
        let text = format!("version = 1\n{snippet}");
        let p = Policy::parse("suggested.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(p.evaluate(&req, None).is_allowed(), "{text}");
        assert!(p.lint().is_empty(), "{text}");
        // It allows this request, not others.
        let other = RequestInfo {
            method: "DELETE",
            ..req
        };
        assert!(!p.evaluate(&other, None).is_allowed(), "{text}");
        let admin = RequestInfo {
            path_and_query: "/admin/users/all",
            ..req
        };
        assert!(!p.evaluate(&admin, None).is_allowed(), "{text}");
    }
    let h = host("api.example.com");
    // No rule allows these without allowing every path or another method.
    for (method, path, why) in [
        ("OPTIONS", "*", "asterisk-form"),
        ("DELETE", "*", "asterisk-form"),
        ("delete", "/x", "upper case"),
        ("GET", "/a/../admin", "ambiguous path"),
    ] {
        let snippet = Policy::suggest_rule(&request(&h, method, path));
        assert!(
            snippet.starts_with("# no rule is suggested for this request: ")
                && snippet.contains(why),
            "{method} {path}: {snippet}"
        );
        assert_eq!(snippet.lines().count(), 1, "{snippet}");
    }
    assert_eq!(
        Policy::suggest_rule(&request(&h, "POST", "/v1/x?y=2")),
        "[[allow]]\nhost = \"api.example.com\"\nmethods = [\"POST\"]\npaths = [\"/v1/x\"]\n"
    );
}
