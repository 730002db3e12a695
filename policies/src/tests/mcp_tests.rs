//! MCP rules: validation, and deciding messages by tool.

use super::{host, parse_error, policy};
use crate::{McpDenyReason, McpVerdict, Policy, parse_mcp_body};

const EXAMPLE: &str = include_str!("../../examples/mcp.toml");

fn verdict(policy: &Policy, body: &str) -> McpVerdict {
    let pay = host("pay.test");
    let server = policy
        .mcp_server(&pay, 443)
        .expect("pay.test is an MCP server");
    let body = parse_mcp_body(body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    server.decide(&body.messages[0])
}

fn call(tool: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
    )
}

#[test]
fn the_example_allows_transfer_within_its_constraints_under_a_quota_of_three() {
    let p = policy(EXAMPLE);
    match verdict(&p, &call("transfer", r#"{"amount":1000,"currency":"EUR"}"#)) {
        McpVerdict::Allow {
            quota: Some(quota), ..
        } => assert_eq!(quota.max, 3),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        verdict(&p, &call("list_invoices", "{}")),
        McpVerdict::Allow { quota: None, .. }
    ));
}

#[test]
fn the_example_refuses_transfers_outside_the_constraints_in_every_spelling() {
    let p = policy(EXAMPLE);
    for arguments in [
        r#"{"amount":1001,"currency":"USD"}"#,
        r#"{"amount":5,"currency":"GBP"}"#,
        r#"{"amount":5}"#,
        r#"{"amount":5,"currency":"USD","Amount":5000}"#,
        r#"{"amount":"5","currency":"USD"}"#,
    ] {
        match verdict(&p, &call("transfer", arguments)) {
            McpVerdict::Deny(denial) => {
                assert!(matches!(denial.reason, McpDenyReason::Arguments { .. }));
                assert!(
                    denial.reason.to_string().contains("policy.toml:"),
                    "{}",
                    denial.reason
                );
            }
            other => panic!("{arguments}: {other:?}"),
        }
    }
}

#[test]
fn tools_not_named_are_refused_with_the_rule_to_edit_and_hidden_from_lists() {
    let p = policy(EXAMPLE);
    let McpVerdict::Deny(denial) = verdict(&p, &call("delete_account", "{}")) else {
        panic!("allowed");
    };
    let text = denial.reason.to_string();
    assert!(text.contains("add \"delete_account\" to `tools`"), "{text}");
    assert!(text.contains("policy.toml:9"), "{text}");
    let pay = host("pay.test");
    let server = p.mcp_server(&pay, 443).unwrap();
    assert!(server.tool_visible("transfer"));
    assert!(server.tool_visible("refund"));
    assert!(!server.tool_visible("delete_account"));
    assert!(!server.tool_visible("Transfer"));
}

#[test]
fn refund_is_held_for_a_person_and_other_methods_are_allowed() {
    let p = policy(EXAMPLE);
    assert!(matches!(
        verdict(&p, &call("refund", r#"{"invoice":"i1"}"#)),
        McpVerdict::Ask(_)
    ));
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":9,"result":{}}"#,
    ] {
        assert!(
            matches!(verdict(&p, body), McpVerdict::Allow { .. }),
            "{body}"
        );
    }
}

#[test]
fn methods_restrict_what_else_the_server_may_be_sent() {
    let p = policy(
        r#"
[[allow]]
host = "pay.test"
[allow.mcp]
tools = ["a"]
methods = ["initialize", "tools/list", "notifications/initialized"]
"#,
    );
    let McpVerdict::Deny(denial) = verdict(
        &p,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x"}}"#,
    ) else {
        panic!("allowed");
    };
    assert!(
        denial
            .reason
            .to_string()
            .contains("add \"resources/read\" to `methods`")
    );
}

#[test]
fn an_mcp_ask_rule_holds_tool_calls_not_http_requests() {
    let p = policy(EXAMPLE);
    let pay = host("pay.test");
    let req = super::request(&pay, "POST", "/mcp");
    assert!(p.evaluate(&req, None).is_allowed());
}

#[test]
fn mcp_tables_that_cannot_be_enforced_as_written_are_refused() {
    for (text, expect) in [
        (
            "[[allow]]\nhost = \"a.test\"\n[allow.mcp]\nmethods = [\"tools/call\"]\n",
            "granted by `tools`",
        ),
        (
            "[[allow]]\nhost = \"a.test\"\n[allow.mcp]\nmethods = [\"Tools/List\"]\n",
            "unknown MCP method",
        ),
        (
            "[[allow]]\nhost = \"a.test\"\n[allow.mcp]\ntools = [\"a b\"]\n",
            "whitespace",
        ),
        (
            "[[allow]]\nhost = \"a.test\"\nbody = { a = { max = 1 } }\n[allow.mcp]\ntools = [\"a\"]\n",
            "cannot be combined with `mcp`",
        ),
        (
            "[[ask]]\nhost = \"a.test\"\n[ask.mcp]\ntools = []\n",
            "names no tool",
        ),
        (
            "[[ask]]\nhost = \"a.test\"\n[[ask.mcp.tool]]\nname = \"a\"\nmax_calls = 2\n",
            "`max_calls` cannot be set on an ask rule",
        ),
        (
            "[[allow]]\nhost = \"a.test\"\n[[allow.mcp.tool]]\nname = \"a\"\nmax_calls = 0\n",
            "allows no call",
        ),
        (
            "[[allow]]\nhost = \"a.test\"\n[allow.mcp]\ntool = \"a\"\n",
            "",
        ),
    ] {
        let error = parse_error(text);
        assert!(error.contains(expect), "{text}: {error}");
    }
}

#[test]
fn lint_warns_about_a_wildcard_tool_and_an_ask_rule_for_an_ungranted_server() {
    let p = policy("[[allow]]\nhost = \"a.test\"\n[allow.mcp]\ntools = [\"*\"]\n");
    let lints: Vec<String> = p.lint().iter().map(ToString::to_string).collect();
    assert!(lints.iter().any(|l| l.contains("every tool")), "{lints:?}");
    let p = policy("[[ask]]\nhost = \"b.test\"\n[ask.mcp]\ntools = [\"x\"]\n");
    let lints: Vec<String> = p.lint().iter().map(ToString::to_string).collect();
    assert!(
        lints
            .iter()
            .any(|l| l.contains("no allow rule with an `mcp` table")),
        "{lints:?}"
    );
}

#[test]
fn the_json_schema_describes_mcp_tables() {
    let schema = Policy::json_schema();
    for word in ["RawMcp", "max_calls", "arguments", "tools"] {
        assert!(schema.contains(word), "schema lacks {word}");
    }
}
