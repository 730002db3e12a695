//! `[[ask]]` rules: parsing and validation, precedence in every mode, the
//! body failing closed, upgrades, connections, DNS, keys and descriptions.

use std::net::IpAddr;
use std::time::Duration;

use super::{decide, decide_json, host, parse_error, policy, request};
use crate::{
    Ask, BodyInput, ConnectionDecision, Decision, DenyReason, MAX_BODY_BYTES, Policy, RequestInfo,
    RuleKind, UpgradeProtocol,
};

/// Line 4: allow everything on Stripe; line 9: ask for charges; line 18:
/// deny accounts. `{default}` is replaced by the mode.
const STRIPE: &str = r#"version = 1
default = "{default}"

[[allow]]
description = "Stripe, any request"
host = "api.stripe.com"
ports = [443]

[[ask]]
description = "charges need a person"
host = "api.stripe.com"
methods = ["POST"]
paths = ["/v1/charges"]
reason = "a charge moves real money"
timeout = "5m"
approvers = ["alice", "bob"]

[[deny]]
host = "api.stripe.com"
paths = ["/v1/accounts/**"]
"#;

fn stripe(default: &str) -> Policy {
    policy(&STRIPE.replace("{default}", default))
}

fn ask_of(d: &Decision) -> &Ask {
    match d {
        Decision::Ask(ask) => ask,
        other => panic!("expected ask, got {other:?}"),
    }
}

fn is_ask(d: &Decision) -> bool {
    matches!(d, Decision::Ask(_))
}

fn deny_reason(d: &Decision) -> Option<DenyReason> {
    match d {
        Decision::Deny(denial) => Some(denial.reason.clone()),
        Decision::Allow(_) | Decision::Ask(_) => None,
    }
}

fn body<'a>(content_types: &'a [&'a str], bytes: &'a str) -> BodyInput<'a> {
    BodyInput {
        content_types,
        bytes: bytes.as_bytes(),
        complete: true,
    }
}

// --- Parsing and validation -------------------------------------------------

#[test]
fn an_ask_rule_carries_its_reason_timeout_and_approvers_into_the_decision() {
    let p = stripe("deny");
    let d = decide(&p, "api.stripe.com", "POST", "/v1/charges");
    let ask = ask_of(&d);
    assert_eq!(
        (ask.rule.kind, ask.rule.index, ask.rule.line),
        (RuleKind::Ask, 0, 9)
    );
    assert_eq!(ask.rule.to_string(), "policy.toml:9");
    assert_eq!(ask.reason.as_deref(), Some("a charge moves real money"));
    assert_eq!(ask.timeout, Duration::from_secs(300));
    assert_eq!(ask.timeout_text(), "5m");
    assert_eq!(ask.approvers, ["alice", "bob"]);
    assert!(!d.is_allowed(), "a held request is not allowed yet");
}

#[test]
fn an_ask_rule_defaults_to_ports_80_and_443_two_minutes_and_the_sessions_owner() {
    let p = policy("version = 1\n[[ask]]\nhost = \"a.com\"\n");
    let ask = ask_of(&decide(&p, "a.com", "GET", "/")).clone();
    assert_eq!(ask.reason, None);
    assert_eq!(ask.timeout, Duration::from_secs(120));
    assert_eq!(ask.timeout_text(), "2m");
    assert!(ask.approvers.is_empty());
    let h = host("a.com");
    let on = |port| RequestInfo {
        port,
        ..request(&h, "GET", "/")
    };
    assert!(is_ask(&p.evaluate(&on(80), None)));
    assert_eq!(
        deny_reason(&p.evaluate(&on(8080), None)),
        Some(DenyReason::NoRuleForHost)
    );
    let on_port = policy("version = 1\n[[ask]]\nhost = \"a.com\"\nport = 8080\n");
    assert!(is_ask(&on_port.evaluate(&on(8080), None)));
    assert!(!is_ask(&on_port.evaluate(&on(443), None)));
}

#[test]
fn timeouts_are_whole_numbers_with_a_unit_from_one_second_to_a_day() {
    for (text, seconds, shown) in [
        ("1s", 1, "1s"),
        ("30s", 30, "30s"),
        ("90s", 90, "1m30s"),
        ("2m", 120, "2m"),
        ("1m30s", 90, "1m30s"),
        ("1h", 3600, "1h"),
        ("1h30m", 5400, "1h30m"),
        ("1h0m5s", 3605, "1h5s"),
        ("24h", 86_400, "24h"),
        ("1440m", 86_400, "24h"),
    ] {
        let p = policy(&format!(
            "version = 1\n[[ask]]\nhost = \"a.com\"\ntimeout = \"{text}\"\n"
        ));
        let ask = ask_of(&decide(&p, "a.com", "GET", "/")).clone();
        assert_eq!(ask.timeout, Duration::from_secs(seconds), "{text}");
        assert_eq!(ask.timeout_text(), shown, "{text}");
    }
}

#[test]
fn a_bad_timeout_is_one_line_that_names_the_fix() {
    let err = |value: &str| {
        parse_error(&format!(
            "version = 1\n[[ask]]\nhost = \"a.com\"\ntimeout = {value}\n"
        ))
    };
    assert_eq!(
        err("\"2 minutes\""),
        "policy.toml:4:11: invalid timeout \"2 minutes\": write a whole number and a unit (s, m or h), like \"30s\", \"2m\", \"1h\" or \"1m30s\", from \"1s\" to \"24h\""
    );
    assert_eq!(
        err("\"0s\""),
        "policy.toml:4:11: timeout \"0s\" is out of range; a request can wait from \"1s\" to \"24h\""
    );
    assert_eq!(
        err("\"24h1s\""),
        "policy.toml:4:11: timeout \"24h1s\" is out of range; a request can wait from \"1s\" to \"24h\""
    );
    assert_eq!(
        err("30"),
        "policy.toml:4:11: `timeout = 30` has no unit; write it as a string with one, like \"30s\" or \"30m\""
    );
    assert_eq!(
        err("true"),
        "policy.toml:4:11: `timeout` must be a string like \"30s\", \"2m\" or \"1h\", not boolean"
    );
    for malformed in [
        "\"\"",
        "\"30\"",
        "\"1.5m\"",
        "\"500ms\"",
        "\"30s1m\"",
        "\"1m1m\"",
        "\"2M\"",
        "\" 2m\"",
        "\"m\"",
        "\"-1s\"",
        "\"2d\"",
    ] {
        let e = err(malformed);
        assert!(e.contains("invalid timeout"), "{malformed}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
    // Numbers too large for any duration are out of range, not a panic.
    for huge in ["\"99999999999999999999h\"", "\"9999999999999999h\""] {
        let e = err(huge);
        assert!(e.contains("is out of range"), "{e}");
    }
}

#[test]
fn approvers_are_non_empty_names_and_an_empty_list_is_refused() {
    let err = |value: &str| {
        parse_error(&format!(
            "version = 1\n[[ask]]\nhost = \"a.com\"\napprovers = {value}\n"
        ))
    };
    assert_eq!(
        err("[]"),
        "policy.toml:4:13: `approvers` is empty; list who may decide, like [\"alice\"], or remove it to let the session's owner decide"
    );
    assert_eq!(
        err("[\"alice\", \" \"]"),
        "policy.toml:4:23: approver name is empty; write a user or token name, like \"alice\""
    );
    assert_eq!(
        err("[\" bob\"]"),
        "policy.toml:4:14: approver name \" bob\" has spaces around it or control characters; write it as \"bob\""
    );
    assert!(err("[\"a\\nb\"]").contains("control characters"));
    assert!(err("\"alice\"").contains("expected a sequence"));
}

#[test]
fn an_empty_reason_is_refused() {
    let err = parse_error("version = 1\n[[ask]]\nhost = \"a.com\"\nreason = \"  \"\n");
    assert_eq!(
        err,
        "policy.toml:4:10: `reason` is empty; say why a person must approve these requests, or remove it"
    );
}

#[test]
fn unknown_fields_on_an_ask_rule_are_refused_with_advice() {
    let err = parse_error("version = 1\n[[ask]]\nhost = \"a.com\"\ntimout = \"1m\"\n");
    assert_eq!(
        err,
        "policy.toml:4:1: unknown field `timout` in [[ask]]; did you mean `timeout`? (valid fields: host, hosts, port, ports, methods, paths, body, reason, timeout, approvers, mcp, description)"
    );
    for field in [
        "protocol = \"tcp\"",
        "tls = \"passthrough\"",
        "upgrade = [\"websocket\"]",
        "max_requests = 1",
    ] {
        let err = parse_error(&format!(
            "version = 1\n[[ask]]\nhost = \"a.com\"\n{field}\n"
        ));
        let name = field.split(' ').next().unwrap_or_default();
        assert!(
            err.starts_with(&format!(
                "policy.toml:4:1: unknown field `{name}` in [[ask]]"
            )),
            "{err}"
        );
    }
    let err = parse_error("version = 1\n[[ask]]\nmethods = [\"POST\"]\n");
    assert_eq!(
        err,
        "policy.toml:2:1: [[ask]] needs `host = \"...\"` or `hosts = [...]` (use \"*\" for any host)"
    );
    let err = parse_error("version = 1\n[ask]\nhost = \"a.com\"\n");
    assert!(err.contains("write [[allow]], [[deny]], [[ask]]"), "{err}");
}

#[test]
fn ask_rules_validate_hosts_ports_methods_paths_and_body_as_allow_rules_do() {
    let ask = |body: &str| parse_error(&format!("version = 1\n[[ask]]\n{body}"));
    assert!(ask("host = \"a..b\"\n").contains("invalid host \"a..b\""));
    assert!(ask("host = \"a.com\"\nport = 0\n").contains("port 0 is not a real port"));
    assert!(ask("host = \"a.com\"\nmethods = []\n").contains("`methods` is empty"));
    assert!(
        ask("host = \"a.com\"\npaths = [\"v1\"]\n").contains("invalid path pattern"),
        "paths"
    );
    assert!(
        ask("host = \"a.com\"\n[ask.body]\namount = { mx = 1 }\n")
            .contains("unknown field `mx` in [ask.body]; did you mean `max`?")
    );
    // A rule key written after [ask.body] lands in the body table.
    assert_eq!(
        ask("host = \"a.com\"\n[ask.body]\namount = { max = 1 }\ntimeout = \"1m\"\n"),
        "policy.toml:6:11: `timeout` is written after [ask.body], so it belongs to the body table (keys after [ask.body] are body fields); move rule keys like `timeout` above [ask.body]"
    );
}

// --- Precedence ---------------------------------------------------------------

#[test]
fn deny_beats_ask_and_ask_beats_allow_in_deny_and_allow_mode() {
    for mode in ["deny", "allow"] {
        let p = stripe(mode);
        // 1. A deny rule refuses, whatever the ask and allow rules say.
        let d = decide(&p, "api.stripe.com", "POST", "/v1/accounts/acct_1");
        assert_eq!(deny_reason(&d), Some(DenyReason::DeniedByRule), "{mode}");
        // 2. The ask rule holds what the broader allow rule would allow.
        assert!(
            is_ask(&decide(&p, "api.stripe.com", "POST", "/v1/charges")),
            "{mode}"
        );
        // 3. Everything else on Stripe is allowed by the allow rule.
        let d = decide(&p, "api.stripe.com", "GET", "/v1/charges");
        let Decision::Allow(a) = &d else {
            panic!("{mode}: {d:?}")
        };
        assert_eq!(a.rule.as_ref().map(|r| r.line), Some(4), "{mode}");
    }
    // 4. The default: deny mode refuses other hosts, allow mode forwards.
    assert_eq!(
        deny_reason(&decide(&stripe("deny"), "example.com", "GET", "/")),
        Some(DenyReason::NoRuleForHost)
    );
    assert!(decide(&stripe("allow"), "example.com", "GET", "/").is_allowed());
}

#[test]
fn an_ask_rule_holds_requests_no_allow_rule_covers() {
    let p = policy("version = 1\n[[ask]]\nhost = \"a.com\"\nmethods = [\"DELETE\"]\n");
    assert!(is_ask(&decide(&p, "a.com", "DELETE", "/x")));
    assert_eq!(
        deny_reason(&decide(&p, "a.com", "GET", "/x")),
        Some(DenyReason::NoRuleForHost)
    );
}

#[test]
fn report_mode_forwards_what_an_ask_rule_would_hold_and_names_the_rule() {
    let p = stripe("report");
    let d = decide(&p, "api.stripe.com", "POST", "/v1/charges");
    let Decision::Allow(a) = d else {
        panic!("{d:?}")
    };
    assert_eq!((a.rule, a.max_requests, a.upgrade), (None, None, None));
    let would = a.would_deny.unwrap_or_else(|| panic!("would_deny"));
    assert_eq!(would.reason, DenyReason::NeedsApproval);
    let rule = would.rule.unwrap_or_else(|| panic!("rule"));
    assert_eq!((rule.kind, rule.line), (RuleKind::Ask, 9));
    // Deny rules still come first in the record.
    let Decision::Allow(a) = decide(&p, "api.stripe.com", "POST", "/v1/accounts/x") else {
        panic!()
    };
    assert_eq!(
        a.would_deny.map(|d| d.reason),
        Some(DenyReason::DeniedByRule)
    );
}

#[test]
fn the_first_matching_ask_rule_in_file_order_decides() {
    let p = policy(
        "version = 1\n[[ask]]\nhost = \"a.com\"\npaths = [\"/pay/**\"]\nreason = \"first\"\n[[ask]]\nhost = \"a.com\"\nreason = \"second\"\n",
    );
    let first = decide(&p, "a.com", "POST", "/pay/1");
    assert_eq!(ask_of(&first).reason.as_deref(), Some("first"));
    let second = decide(&p, "a.com", "POST", "/other");
    assert_eq!(ask_of(&second).reason.as_deref(), Some("second"));
    assert_eq!(ask_of(&second).rule.index, 1);
}

#[test]
fn an_ask_rule_cannot_be_dodged_by_spelling_the_method_or_path_differently() {
    // A server that routes "post" or "/v1/charges/" like the real thing
    // must not receive them unapproved through the broader allow rule.
    let p = stripe("deny");
    for (method, path) in [
        ("post", "/v1/charges"),
        ("Post", "/v1/charges"),
        ("POST", "/v1/charges/"),
        ("POST", "/V1/Charges"),
        ("POST", "/v1/%63harges"),
        ("POST", "/v1/charges;jsessionid=1"),
        ("POST", "/v1/charges?expand=1"),
    ] {
        assert!(
            is_ask(&decide(&p, "api.stripe.com", method, path)),
            "{method} {path}"
        );
    }
    assert!(decide(&p, "api.stripe.com", "POST", "/v1/refunds").is_allowed());
}

// --- Body constraints fail closed ----------------------------------------------

/// Asks for charges of 100.00 or more; smaller ones fall to the allow rule.
const LARGE_CHARGES: &str = r#"version = 1
[[allow]]
host = "api.stripe.com"
methods = ["POST"]

[[ask]]
host = "api.stripe.com"
methods = ["POST"]
paths = ["/v1/charges"]
reason = "large charge"
[ask.body]
amount = { min = 10000 }
"#;

#[test]
fn a_body_that_cleanly_fails_the_ask_constraints_goes_on_to_the_allow_rules() {
    let p = policy(LARGE_CHARGES);
    let small = decide_json(&p, "api.stripe.com", "/v1/charges", r#"{"amount": 500}"#);
    let Decision::Allow(a) = small else {
        panic!("{small:?}")
    };
    assert_eq!(a.rule.map(|r| r.kind), Some(RuleKind::Allow));
    let large = decide_json(&p, "api.stripe.com", "/v1/charges", r#"{"amount": 25000}"#);
    assert_eq!(ask_of(&large).reason.as_deref(), Some("large charge"));
    // Absent everywhere: every server reads "no amount", outside the rule.
    assert!(
        decide_json(
            &p,
            "api.stripe.com",
            "/v1/charges",
            r#"{"currency": "usd"}"#
        )
        .is_allowed()
    );
}

#[test]
fn a_hostile_body_cannot_skip_the_approval_and_reach_a_broader_allow_rule() {
    let p = policy(LARGE_CHARGES);
    let h = host("api.stripe.com");
    let json = ["application/json"];
    let form = ["application/x-www-form-urlencoded"];
    let cases: Vec<(&str, &str, BodyInput<'_>)> = vec![
        // Two readings of `amount`: one large, one small.
        (
            "duplicate key",
            "/v1/charges",
            body(&json, r#"{"amount": 25000, "amount": 1}"#),
        ),
        (
            "case variant",
            "/v1/charges",
            body(&json, r#"{"amount": 1, "AMOUNT": 25000}"#),
        ),
        (
            "body and query",
            "/v1/charges?amount=25000",
            body(&json, r#"{"amount": 1}"#),
        ),
        // Not in the body at all, but a merging server finds it in the query.
        (
            "only in the query",
            "/v1/charges?amount=25000",
            body(&json, r#"{"currency": "usd"}"#),
        ),
        (
            "form array",
            "/v1/charges",
            body(&form, "amount=1&amount[]=25000"),
        ),
        (
            "two content types",
            "/v1/charges",
            body(&["application/json", "text/plain"], r#"{"amount": 1}"#),
        ),
        ("not JSON", "/v1/charges", body(&json, r#"{"amount": 1"#)),
        ("a NUL byte", "/v1/charges", body(&json, "\u{0}")),
        (
            "unknown type",
            "/v1/charges",
            body(&["text/plain"], "amount=1"),
        ),
        (
            "form declared, JSON sent",
            "/v1/charges",
            body(&form, r#"{"amount": 1}"#),
        ),
        ("empty body", "/v1/charges", body(&json, "")),
    ];
    for (what, target, input) in cases {
        let d = p.evaluate(&request(&h, "POST", target), Some(&input));
        assert!(is_ask(&d), "{what}: {d:?}");
    }
    let latin1 = BodyInput {
        bytes: b"{\"amount\": 1, \"note\": \"\xe9\"}",
        ..body(&json, "")
    };
    assert!(is_ask(
        &p.evaluate(&request(&h, "POST", "/v1/charges"), Some(&latin1))
    ));
    // No body at all, and a body cut off at the buffering limit.
    assert!(is_ask(
        &p.evaluate(&request(&h, "POST", "/v1/charges"), None)
    ));
    let truncated = BodyInput {
        complete: false,
        ..body(&json, r#"{"amount": 1"#)
    };
    assert!(is_ask(&p.evaluate(
        &request(&h, "POST", "/v1/charges"),
        Some(&truncated)
    )));
}

// --- Upgrades -------------------------------------------------------------------

#[test]
fn an_upgrade_an_ask_rule_matches_is_refused_naming_the_ask_rule() {
    let text = "version = 1\ndefault = \"{default}\"\n[[allow]]\nhost = \"a.com\"\nupgrade = [\"websocket\"]\n[[ask]]\nhost = \"a.com\"\npaths = [\"/ws\"]\n";
    let h = host("a.com");
    let ws = UpgradeProtocol::WebSocket;
    for mode in ["deny", "allow"] {
        let p = policy(&text.replace("{default}", mode));
        let d = p.evaluate_upgrade(&request(&h, "GET", "/ws"), None, ws);
        let Decision::Deny(denial) = d else {
            panic!("{mode}: {d:?}")
        };
        assert_eq!(
            denial.reason,
            DenyReason::UpgradeNotGranted { protocol: ws },
            "{mode}"
        );
        let rule = denial.rule.unwrap_or_else(|| panic!("rule"));
        assert_eq!((rule.kind, rule.line), (RuleKind::Ask, 6), "{mode}");
        // Elsewhere the allow rule still grants it.
        assert!(
            p.evaluate_upgrade(&request(&h, "GET", "/other"), None, ws)
                .is_allowed()
        );
    }
    // Report mode forwards it and records what deny mode would have done.
    let p = policy(&text.replace("{default}", "report"));
    let Decision::Allow(a) = p.evaluate_upgrade(&request(&h, "GET", "/ws"), None, ws) else {
        panic!()
    };
    assert_eq!(a.upgrade, Some(ws));
    let would = a.would_deny.unwrap_or_else(|| panic!("would_deny"));
    assert_eq!(would.reason, DenyReason::UpgradeNotGranted { protocol: ws });
    assert_eq!(would.rule.map(|r| r.kind), Some(RuleKind::Ask));
}

// --- Body buffering, connections, DNS ----------------------------------------

#[test]
fn the_proxy_must_buffer_the_whole_body_of_a_request_an_ask_rule_may_hold() {
    let p = stripe("deny");
    let h = host("api.stripe.com");
    assert_eq!(
        p.needs_body(&request(&h, "POST", "/v1/charges")),
        Some(MAX_BODY_BYTES)
    );
    assert_eq!(
        p.needs_body(&request(&h, "post", "/v1/charges/")),
        Some(MAX_BODY_BYTES)
    );
    // The ask rule does not match, and the allow rule has no body constraints.
    assert_eq!(p.needs_body(&request(&h, "GET", "/v1/charges")), None);
    // A deny rule decides without the body.
    let deny_first = policy(
        "version = 1\n[[ask]]\nhost = \"a.com\"\n[[deny]]\nhost = \"a.com\"\npaths = [\"/admin\"]\n",
    );
    let a = host("a.com");
    assert_eq!(deny_first.needs_body(&request(&a, "POST", "/admin")), None);
    assert_eq!(
        deny_first.needs_body(&request(&a, "POST", "/x")),
        Some(MAX_BODY_BYTES)
    );
}

#[test]
fn connections_an_ask_rule_matches_are_inspected_never_tunnelled_or_refused() {
    let p = policy(
        r#"version = 1
[[allow]]
host = "git.example.com"
port = 22
protocol = "tcp"

[[allow]]
host = "pinned.example.com"
tls = "passthrough"

[[ask]]
hosts = ["git.example.com", "pinned.example.com", "held.example.com"]
ports = [22, 443]

[[deny]]
host = "held.example.com"
port = 22
"#,
    );
    for (name, port) in [
        ("git.example.com", 22),
        ("pinned.example.com", 443),
        ("held.example.com", 443),
        ("git.example.com", 443),
    ] {
        assert_eq!(
            p.connection(&host(name), port),
            ConnectionDecision::Inspect,
            "{name}:{port}"
        );
        assert_eq!(p.connection_summary(&host(name), port), None);
    }
    // A host-wide deny rule still refuses first.
    assert!(matches!(
        p.connection(&host("held.example.com"), 22),
        ConnectionDecision::Deny(_)
    ));
    // Ports the ask rule does not name keep deny mode's answer.
    assert!(matches!(
        p.connection(&host("held.example.com"), 80),
        ConnectionDecision::Deny(_)
    ));
    let report = policy(
        "version = 1\ndefault = \"report\"\n[[allow]]\nhost = \"a.com\"\nport = 22\nprotocol = \"tcp\"\n[[ask]]\nhost = \"a.com\"\nport = 22\n",
    );
    assert_eq!(
        report.connection(&host("a.com"), 22),
        ConnectionDecision::Inspect
    );
}

#[test]
fn names_an_ask_rule_matches_resolve_unless_a_host_wide_deny_blocks_them() {
    let p = policy(
        "version = 1\n[[ask]]\nhosts = [\"*.held.example\", \"blocked.example\"]\n[[deny]]\nhost = \"blocked.example\"\n",
    );
    assert!(p.resolvable(&host("api.held.example")));
    assert!(!p.resolvable(&host("held.example")));
    assert!(!p.resolvable(&host("blocked.example")));
}

#[test]
fn an_ip_an_ask_rule_names_may_be_reached_once_approved() {
    let p = policy("version = 1\n[[ask]]\nhost = \"10.1.2.3\"\n");
    let ip = |s: &str| s.parse::<IpAddr>().unwrap_or_else(|e| panic!("{e}"));
    assert!(p.allows_private_address(ip("10.1.2.3")));
    assert!(!p.allows_private_address(ip("10.1.2.4")));
}

#[test]
fn has_ask_rules_says_whether_anything_could_be_held() {
    assert!(stripe("deny").has_ask_rules());
    assert!(!policy("version = 1\n[[allow]]\nhost = \"a.com\"\n").has_ask_rules());
    assert!(!Policy::deny_all().has_ask_rules());
}

// --- Keys and descriptions --------------------------------------------------------

fn ask_key(text: &str) -> String {
    let p = policy(text);
    ask_of(&decide(&p, "a.com", "POST", "/pay")).rule.key()
}

#[test]
fn ask_rule_keys_start_with_ask_and_follow_matching_content_and_approvers() {
    let base = ask_key("version = 1\n[[ask]]\nhost = \"a.com\"\napprovers = [\"alice\"]\n");
    assert!(base.starts_with("ask-"), "{base}");
    assert_eq!(base.len(), "ask-".len() + 16);
    // Position, description, reason and timeout do not change it.
    let moved = ask_key(
        "version = 1\n\n[[allow]]\nhost = \"b.com\"\n[[ask]]\ndescription = \"d\"\nhost = \"A.com\"\nreason = \"r\"\ntimeout = \"1h\"\napprovers = [\"alice\", \"alice\"]\n",
    );
    assert_eq!(base, moved);
    // Approvers, paths and body constraints do.
    let others = [
        "version = 1\n[[ask]]\nhost = \"a.com\"\n",
        "version = 1\n[[ask]]\nhost = \"a.com\"\napprovers = [\"bob\"]\n",
        "version = 1\n[[ask]]\nhost = \"a.com\"\napprovers = [\"alice\"]\npaths = [\"/pay\"]\n",
        "version = 1\n[[ask]]\nhost = \"a.com\"\napprovers = [\"alice\"]\n[ask.body]\nx = { optional = true, max = 1 }\n",
    ];
    for text in others {
        assert_ne!(base, ask_key(text), "{text}");
    }
}

#[test]
fn approvers_written_twice_are_listed_once_in_the_decision() {
    let p = policy(
        "version = 1\n[[ask]]\nhost = \"a.com\"\napprovers = [\"bob\", \"alice\", \"bob\"]\n",
    );
    assert_eq!(
        ask_of(&decide(&p, "a.com", "GET", "/")).approvers,
        ["bob", "alice"]
    );
}

#[test]
fn an_ask_rules_description_is_looked_up_by_reference() {
    let p = stripe("deny");
    let d = decide(&p, "api.stripe.com", "POST", "/v1/charges");
    let rule = ask_of(&d).rule.clone();
    assert_eq!(p.rule_description(&rule), Some("charges need a person"));
    let other = policy("version = 1\n[[ask]]\nhost = \"b.com\"\n");
    assert_eq!(other.rule_description(&rule), None);
}

#[test]
fn the_schema_describes_ask_rules() {
    let schema = Policy::json_schema();
    let value: serde_json::Value = serde_json::from_str(&schema).unwrap_or_else(|e| panic!("{e}"));
    assert!(value["properties"].get("ask").is_some(), "{schema}");
    for word in ["RawAsk", "approvers", "timeout", "reason"] {
        assert!(schema.contains(word), "schema lacks {word}");
    }
}
