//! Regression tests for the review findings: each fails on the crate as it
//! was before the fix.

use super::{decide, host, parse_error, policy};
use crate::{Decision, DenyReason};

fn lints(text: &str) -> Vec<String> {
    policy(text)
        .lint()
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn denied_by_rule(d: &Decision) -> bool {
    matches!(d, Decision::Deny(denial) if denial.reason == DenyReason::DeniedByRule)
}

// 1. Raw non-ASCII rule paths match the percent-encoded request path.
#[test]
fn non_ascii_rule_paths_match_percent_encoded_requests() {
    let p = policy("version = 1\n[[allow]]\nhost = \"a.com\"\npaths = [\"/café\", \"/ü/*\"]\n");
    assert!(decide(&p, "a.com", "GET", "/caf%C3%A9").is_allowed());
    assert!(decide(&p, "a.com", "GET", "/caf%c3%a9").is_allowed());
    assert!(decide(&p, "a.com", "GET", "/%C3%BC/x").is_allowed());
    // A client sending raw UTF-8 reaches the server as the same bytes.
    assert!(decide(&p, "a.com", "GET", "/café").is_allowed());
    assert!(!decide(&p, "a.com", "GET", "/cafe").is_allowed());
    let p = policy(
        "version = 1\ndefault = \"allow\"\n[[deny]]\nhost = \"a.com\"\npaths = [\"/café/**\"]\n",
    );
    assert!(denied_by_rule(&decide(&p, "a.com", "GET", "/caf%C3%A9/x")));
    assert!(denied_by_rule(&decide(&p, "a.com", "GET", "/CAF%C3%A9/x")));
    assert!(denied_by_rule(&decide(&p, "a.com", "GET", "/café/x")));
    assert!(decide(&p, "a.com", "GET", "/cafe/x").is_allowed());
}

// 2. Credentials refuse hosts that are not named one by one.
#[test]
fn credential_hosts_must_be_named() {
    let cred = |hosts: &str| {
        format!(
            "version = 1\n[[allow]]\nhost = \"*\"\n[[credential]]\nname = \"x\"\nhosts = [\"api.example.com\", {hosts}]\nheader = \"A\"\nvalue = \"${{env:A}}\"\n"
        )
    };
    for (bad, problem) in [
        ("*.com", "covers a whole top-level domain"),
        ("*.co", "covers a whole top-level domain"),
        ("0.0.0.0/0", "is an address range, not a host"),
        ("::/0", "is an address range, not a host"),
        ("10.0.0.0/8", "is an address range, not a host"),
        ("*", "would send the secret to every host"),
    ] {
        let err = parse_error(&cred(&format!("{bad:?}")));
        assert!(
            err.starts_with(&format!(
                "policy.toml:6:29: credential host {bad:?} {problem}; a secret needs named hosts"
            )),
            "{err}"
        );
        assert!(err.contains("\"*.example.com\""), "{err}");
    }
    let err = parse_error(
        "[[credential]]\nname = \"x\"\nhost = \"*.com\"\nheader = \"A\"\nvalue = \"${env:A}\"\n",
    );
    assert!(
        err.starts_with("policy.toml:3:8: credential host \"*.com\""),
        "{err}"
    );
    for good in [
        "*.example.com",
        "*.co.uk",
        "10.1.2.3",
        "::1",
        "api.example.com",
    ] {
        let p = policy(&cred(&format!("{good:?}")));
        assert_eq!(p.credentials().len(), 1, "{good}");
    }
}

// 3. Body constraints must be tables; misplaced rule keys are explained.
#[test]
fn body_constraints_must_be_tables() {
    let body = |rest: &str| {
        format!("[[allow]]\nhost = \"a.com\"\nmethods = [\"POST\"]\n[allow.body]\n{rest}\n")
    };
    assert_eq!(
        parse_error(&body("amount = [100, 1]")),
        "policy.toml:5:10: body constraint for `amount` must be a table like { max = 100 }, not an array"
    );
    assert_eq!(
        parse_error(&body("\"customer.id\" = 5")),
        "policy.toml:5:17: body constraint for `customer.id` must be a table like { max = 100 }, not integer `5`"
    );
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nbody = { amount = [1] }\n");
    assert_eq!(
        err,
        "policy.toml:3:19: body constraint for `amount` must be a table like { max = 100 }, not an array"
    );
    assert_eq!(
        parse_error(&body("amount = { max = 100 }\nmethods = [\"GET\"]")),
        "policy.toml:6:11: `methods` is written after [allow.body], so it belongs to the body table (keys after [allow.body] are body fields); move rule keys like `methods` above [allow.body]"
    );
    let err = parse_error(&body("amount = { max = 100 }\nmax_requests = 5"));
    assert!(
        err.starts_with("policy.toml:6:16: `max_requests` is written after [allow.body]"),
        "{err}"
    );
    // The table form still works, and a body field may be called "methods".
    let p = policy(&body(
        "amount = { max = 100 }\nmethods = { one_of = [\"card\"] }",
    ));
    assert!(p.lint().is_empty(), "{:?}", p.lint());
}

// 4. Deny rules also catch the path with a trailing slash removed.
#[test]
fn deny_paths_ignore_a_trailing_slash() {
    let p = policy(
        "version = 1\ndefault = \"allow\"\n[[deny]]\nhost = \"a.com\"\npaths = [\"/admin\", \"/api/*/secret\"]\n",
    );
    for path in [
        "/admin",
        "/admin/",
        "/admin//",
        "/ADMIN/",
        "/admin;x=1/",
        "/admin/?q=1",
        "/api/v1/secret/",
    ] {
        assert!(denied_by_rule(&decide(&p, "a.com", "GET", path)), "{path}");
    }
    assert!(decide(&p, "a.com", "GET", "/admin/x").is_allowed());
    assert!(decide(&p, "a.com", "GET", "/").is_allowed());
    // "/" itself is not stripped to "": a deny on "/" still only means "/".
    let root =
        policy("version = 1\ndefault = \"allow\"\n[[deny]]\nhost = \"a.com\"\npaths = [\"/\"]\n");
    assert!(denied_by_rule(&decide(&root, "a.com", "GET", "/")));
    assert!(decide(&root, "a.com", "GET", "/x").is_allowed());
    // Allow rules stay exact.
    let exact = policy("version = 1\n[[allow]]\nhost = \"a.com\"\npaths = [\"/user\"]\n");
    assert!(!decide(&exact, "a.com", "GET", "/user/").is_allowed());
}

// 5. methods = ["*"] is refused.
#[test]
fn star_method_is_refused() {
    for kind in ["allow", "deny"] {
        let err = parse_error(&format!(
            "version = 1\n[[{kind}]]\nhost = \"a.com\"\nmethods = [\"GET\", \"*\"]\n"
        ));
        assert_eq!(
            err,
            "policy.toml:4:19: \"*\" is not an HTTP method and would never match; omit `methods` to allow any method"
        );
    }
}

// 6. HTTP rules on a tunnelled host and port are flagged.
#[test]
fn lint_http_rules_behind_a_tunnel() {
    let l = lints(
        "version = 1\n[[allow]]\nhost = \"api.x.com\"\ntls = \"passthrough\"\n\n[[allow]]\nhost = \"api.x.com\"\nmethods = [\"GET\"]\npaths = [\"/v1/**\"]\n",
    );
    assert_eq!(
        l,
        vec![
            "policy.toml:6:1: warning: the passthrough rule at line 2 tunnels api.x.com:443 without inspection, so this rule's methods/paths are never enforced"
        ]
    );
    // File order does not matter: the connection is tunnelled first.
    let l = lints(
        "version = 1\n[[allow]]\nhost = \"db.x.com\"\nport = 8080\nmax_requests = 5\n[[allow]]\nhosts = [\"*.x.com\"]\nports = [8080]\nprotocol = \"tcp\"\n",
    );
    assert_eq!(
        l,
        vec![
            "policy.toml:2:1: warning: the tcp rule at line 6 tunnels db.x.com:8080 without inspection, so this rule's max_requests is never enforced"
        ]
    );
    // A narrower tunnel is named as the tunnelled part.
    let l = lints(
        "version = 1\n[[allow]]\nhost = \"*.x.com\"\nmethods = [\"GET\"]\n[[allow]]\nhost = \"pin.x.com\"\ntls = \"passthrough\"\n",
    );
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(
        l[0].contains("tunnels pin.x.com:443 without inspection"),
        "{l:?}"
    );
    // Different port, different host, or nothing request-level: no warning.
    assert!(lints("version = 1\n[[allow]]\nhost = \"a.com\"\ntls = \"passthrough\"\n[[allow]]\nhost = \"a.com\"\nport = 80\nmethods = [\"GET\"]\n").is_empty());
    assert!(lints("version = 1\n[[allow]]\nhost = \"a.com\"\ntls = \"passthrough\"\n[[allow]]\nhost = \"b.com\"\nmethods = [\"GET\"]\n").is_empty());
    assert!(lints("version = 1\n[[allow]]\nhost = \"a.com\"\ntls = \"passthrough\"\n[[allow]]\nhost = \"a.com\"\nport = 80\n").is_empty());
}

// 7. connection_summary tells a tester when evaluate() is not the answer.
#[test]
fn connection_summary_names_the_tunnel_rule() {
    let p = policy(
        "version = 1\n[[allow]]\nhost = \"api.x.com\"\nmethods = [\"GET\"]\n[[allow]]\nhost = \"api.x.com\"\ntls = \"passthrough\"\n[[allow]]\nhost = \"db.x.com\"\nport = 5432\nprotocol = \"tcp\"\n",
    );
    assert_eq!(
        p.connection_summary(&host("api.x.com"), 443).as_deref(),
        Some("tunnelled without inspection by the passthrough rule at policy.toml:5")
    );
    assert_eq!(
        p.connection_summary(&host("db.x.com"), 5432).as_deref(),
        Some("tunnelled without inspection by the tcp rule at policy.toml:8")
    );
    assert_eq!(p.connection_summary(&host("api.x.com"), 80), None);
    assert_eq!(p.connection_summary(&host("other.com"), 443), None);
}
