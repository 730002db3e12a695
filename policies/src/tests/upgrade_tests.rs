//! `upgrade = [...]` on allow rules: validation, the decision, suggestion and lint.

use super::{decide, host, parse_error, policy, request};
use crate::{Decision, DefaultAction, DenyReason, Policy, UpgradeProtocol, UpgradeToken};

const WS: UpgradeProtocol = UpgradeProtocol::WebSocket;

fn decide_upgrade(p: &Policy, host_name: &str, path: &str) -> Decision {
    let h = host(host_name);
    p.evaluate_upgrade(&request(&h, "GET", path), None, WS)
}

fn reason(d: &Decision) -> Option<DenyReason> {
    match d {
        Decision::Deny(denial) => Some(denial.reason.clone()),
        Decision::Allow(a) => a.would_deny.as_ref().map(|d| d.reason.clone()),
        Decision::Ask(_) => None,
    }
}

#[test]
fn a_rule_grants_websocket_written_in_any_case() {
    let p = policy(
        "version = 1\n[[allow]]\nhost = \"a.com\"\npaths = [\"/ws\"]\nupgrade = [\"WebSocket\", \"websocket\"]\n",
    );
    match decide_upgrade(&p, "a.com", "/ws") {
        Decision::Allow(a) => {
            assert_eq!(a.upgrade, Some(WS));
            assert!(a.rule.is_some());
        }
        d => panic!("{d:?}"),
    }
    // The plain request is still allowed, with no upgrade.
    match decide(&p, "a.com", "GET", "/ws") {
        Decision::Allow(a) => assert_eq!(a.upgrade, None),
        d => panic!("{d:?}"),
    }
}

#[test]
fn h2c_is_refused_at_load_with_the_reason_and_the_fix() {
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nupgrade = [\"h2c\"]\n");
    assert!(
        err.starts_with(
            "policy.toml:3:12: \"h2c\" cannot be granted: the proxy speaks HTTP/2 itself"
        ),
        "{err}"
    );
    assert!(err.contains("remove it"), "{err}");
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nupgrade = [\"websocket\", \"H2C\"]\n");
    assert!(err.starts_with("policy.toml:3:25: \"h2c\" cannot"), "{err}");
}

#[test]
fn an_unknown_protocol_is_one_line_naming_the_allowed_values() {
    let err = parse_error("[[allow]]\nhost = \"a.com\"\nupgrade = [\"spdy/3\"]\n");
    assert_eq!(
        err,
        "policy.toml:3:12: unknown upgrade protocol \"spdy/3\"; the allowed values are \"websocket\""
    );
    assert!(!err.contains('\n'));
}

#[test]
fn upgrade_cannot_be_set_on_opaque_rules() {
    let err = parse_error(
        "[[allow]]\nhost = \"a.com\"\nprotocol = \"tcp\"\nport = 5432\nupgrade = [\"websocket\"]\n",
    );
    assert!(
        err.starts_with(
            "policy.toml:5:11: `upgrade` cannot be enforced on a `protocol = \"tcp\"` rule"
        ),
        "{err}"
    );
    let err = parse_error(
        "[[allow]]\nhost = \"a.com\"\ntls = \"passthrough\"\nupgrade = [\"websocket\"]\n",
    );
    assert!(
        err.starts_with(
            "policy.toml:4:11: `upgrade` cannot be enforced on a `tls = \"passthrough\"` rule"
        ),
        "{err}"
    );
}

#[test]
fn an_upgrade_needs_a_rule_that_grants_it_even_when_another_allows_the_request() {
    // The first rule allows GET /ws but grants nothing; the second grants.
    let p = policy(
        "version = 1\n[[allow]]\nhost = \"a.com\"\n\n[[allow]]\nhost = \"a.com\"\npaths = [\"/ws\"]\nupgrade = [\"websocket\"]\n",
    );
    match decide_upgrade(&p, "a.com", "/ws") {
        Decision::Allow(a) => assert_eq!(a.rule.map(|r| r.line), Some(5)),
        d => panic!("{d:?}"),
    }
    // Elsewhere on the host nothing grants it: refused, naming the rule that
    // would have allowed the plain request.
    let d = decide_upgrade(&p, "a.com", "/other");
    match &d {
        Decision::Deny(denial) => {
            assert_eq!(denial.rule.as_ref().map(|r| r.line), Some(2));
            assert_eq!(
                denial.reason,
                DenyReason::UpgradeNotGranted { protocol: WS }
            );
            assert_eq!(
                denial.to_string(),
                "no rule grants an upgrade to websocket for this request (policy.toml:2)"
            );
        }
        d => panic!("{d:?}"),
    }
}

#[test]
fn default_allow_does_not_grant_upgrades_and_report_mode_reports_them() {
    let allow = policy("version = 1\ndefault = \"allow\"\n");
    assert_eq!(allow.default_action(), DefaultAction::Allow);
    assert_eq!(
        reason(&decide_upgrade(&allow, "a.com", "/ws")),
        Some(DenyReason::UpgradeNotGranted { protocol: WS })
    );
    assert!(!decide_upgrade(&allow, "a.com", "/ws").is_allowed());
    let report = policy("version = 1\ndefault = \"report\"\n");
    match decide_upgrade(&report, "a.com", "/ws") {
        Decision::Allow(a) => {
            assert_eq!(a.upgrade, Some(WS));
            assert_eq!(a.rule, None);
            assert_eq!(
                a.would_deny.map(|d| d.reason),
                Some(DenyReason::NoRuleForHost)
            );
        }
        d => panic!("{d:?}"),
    }
    // Deny mode with no rule for the host: the most specific reason.
    let deny = policy("version = 1\n");
    assert_eq!(
        reason(&decide_upgrade(&deny, "a.com", "/ws")),
        Some(DenyReason::NoRuleForHost)
    );
}

#[test]
fn the_suggested_rule_grants_the_upgrade_and_parses_back() {
    let h = host("api.test");
    let req = request(&h, "GET", "/ws");
    let suggestion = Policy::suggest_upgrade_rule(&req, WS);
    assert_eq!(
        suggestion,
        "[[allow]]\nhost = \"api.test\"\nmethods = [\"GET\"]\npaths = [\"/ws\"]\nupgrade = [\"websocket\"]\n"
    );
    let p = policy(&format!("version = 1\n{suggestion}"));
    assert!(p.evaluate_upgrade(&req, None, WS).is_allowed());
}

#[test]
fn upgrade_lints_a_rule_without_get_and_keeps_granting_rules_unshadowed() {
    let p = policy(
        "version = 1\n[[allow]]\nhost = \"a.com\"\nmethods = [\"POST\"]\nupgrade = [\"websocket\"]\n",
    );
    let lints: Vec<String> = p.lint().iter().map(ToString::to_string).collect();
    assert_eq!(lints.len(), 1, "{lints:?}");
    assert!(lints[0].contains("does not allow GET"), "{lints:?}");
    // A broad earlier rule does not shadow a later rule that grants an upgrade.
    let p = policy(
        "version = 1\n[[allow]]\nhost = \"a.com\"\n[[allow]]\nhost = \"a.com\"\npaths = [\"/ws\"]\nupgrade = [\"websocket\"]\n",
    );
    assert!(p.lint().is_empty(), "{:?}", p.lint());
    // A tcp rule on the same port means the upgrade is never decided.
    let p = policy(
        "version = 1\n[[allow]]\nhost = \"a.com\"\nupgrade = [\"websocket\"]\n[[allow]]\nhost = \"a.com\"\nprotocol = \"tcp\"\nport = 443\n",
    );
    let lints: Vec<String> = p.lint().iter().map(ToString::to_string).collect();
    assert!(
        lints
            .iter()
            .any(|l| l.ends_with("this rule's upgrade is never enforced")),
        "{lints:?}"
    );
}

#[test]
fn the_rule_key_changes_with_upgrade_and_is_unchanged_without_it() {
    let plain = policy("version = 1\n[[allow]]\nhost = \"a.com\"\n");
    let granting = policy("version = 1\n[[allow]]\nhost = \"a.com\"\nupgrade = [\"websocket\"]\n");
    let key = |p: &Policy| match decide(p, "a.com", "GET", "/") {
        Decision::Allow(a) => a.rule.map(|r| r.key()),
        d => panic!("{d:?}"),
    };
    assert_ne!(key(&plain), key(&granting));
    // The key of a rule without `upgrade` is what it was before the field existed.
    assert_eq!(key(&plain).as_deref(), Some(PLAIN_KEY));
}

/// The key of `host = "a.com"` as computed before `upgrade` existed.
const PLAIN_KEY: &str = "allow-2ca76cd8f31baf6c";

#[test]
fn upgrade_header_tokens_are_classified_case_insensitively() {
    assert_eq!(
        UpgradeProtocol::classify("WebSocket"),
        UpgradeToken::Grantable(WS)
    );
    assert_eq!(UpgradeProtocol::classify(" h2C "), UpgradeToken::H2c);
    assert_eq!(
        UpgradeProtocol::classify("websocket/13"),
        UpgradeToken::Unknown("websocket/13".into())
    );
}

#[test]
fn the_schema_lists_upgrade_and_its_values() {
    let schema = Policy::json_schema();
    assert!(schema.contains("\"upgrade\""), "{schema}");
    assert!(schema.contains("\"websocket\""), "{schema}");
}
