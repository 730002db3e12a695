//! MCP tool calls (`mcp_call` events) as a reader of the record sees them
//! through the real `airlock audit` CLI: the timeline, `audit search
//! --tool`, and the JSONL and HAR exports, over a session written through
//! the real recorder (airlock-test-support's `mcp_record`).

use std::path::Path;

use airlock_auditor::{AuditEvent, RecordStore, Verdict};
use airlock_test_support::audit_cli::{audit_cli, audit_ok};
use airlock_test_support::audit_store::env;
use airlock_test_support::mcp_record::{mcp_call, recorded_mcp_session};
use serde_json::{Value, json};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn search(db: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["search"];
    all.extend_from_slice(args);
    let out = audit_cli(AIRLOCK, db, &all);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The tools `audit search ARGS --json` found, in order.
fn tools_found(db: &Path, args: &[&str]) -> Vec<String> {
    let mut all = vec!["search", "--json"];
    all.extend_from_slice(args);
    let out = audit_cli(AIRLOCK, db, &all);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            let e = &v["event"];
            format!(
                "{} {} {}",
                e["method"].as_str().unwrap_or("-"),
                e["tool"].as_str().unwrap_or("-"),
                e["decision"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

#[test]
fn the_timeline_shows_each_tool_call_with_its_arguments_verdict_rule_and_answer() {
    let e = env();
    let id = recorded_mcp_session(&e.store());
    let text = audit_ok(AIRLOCK, &e.db, &["timeline", id.as_str()]);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("mcp   ")).collect();
    // One line per message: each call decided then answered shows once,
    // with its answer; the batch's two calls sharing id 7 both show.
    assert_eq!(
        lines.iter().filter(|l| l.contains("tools/call")).count(),
        4,
        "{text}"
    );
    let transfer = lines.iter().find(|l| l.contains("transfer(")).unwrap();
    assert!(
        transfer.contains("tools/call transfer(amount=5, currency=\"USD\")")
            && transfer.contains("pay.test/mcp")
            && transfer.contains("[allow by policy.toml:4]")
            && transfer.contains("-> ok"),
        "{transfer}"
    );
    let refund = lines.iter().find(|l| l.contains("refund(")).unwrap();
    assert!(
        refund.contains("[deny by policy.toml:1]")
            && refund.contains("tool refund is not allowed")
            && !refund.contains("-> ok"),
        "{refund}"
    );
    let delete = lines.iter().find(|l| l.contains("delete_all(")).unwrap();
    assert!(
        delete.contains("[deny") && delete.contains("(in a batch)"),
        "{delete}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("list_invoices()") && l.contains("[allow") && l.contains("-> ok")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("notifications/initialized") && l.contains("(notification)")),
        "{text}"
    );
    // The tools/list answers: what was hidden, and the changed tool loudly.
    assert!(
        text.contains("-> 4 tools offered, 1 hidden from the agent (delete_all)"),
        "{text}"
    );
    assert!(
        text.contains("1 CHANGED since this session's previous list")
            && text.contains("!! TOOL CHANGED: transfer")
            && text.contains("possible tool poisoning")
            && text.contains("read ~/.ssh/id_rsa"),
        "{text}"
    );
    assert_eq!(text.matches("!! TOOL CHANGED").count(), 1, "{text}");

    // `--kind mcp_call` keeps only them.
    let only = audit_ok(
        AIRLOCK,
        &e.db,
        &["timeline", id.as_str(), "--kind", "mcp_call"],
    );
    assert!(
        only.lines()
            .all(|l| !l.contains("http  ") && !l.contains("exec  ")),
        "{only}"
    );
    assert_eq!(only.matches("mcp   ").count(), 7, "{only}");
}

#[test]
fn a_hostile_tool_name_argument_or_answer_is_printed_escaped_and_cannot_forge_a_timeline_line() {
    let e = env();
    let store = e.store();
    let rec = store
        .begin_session(airlock_test_support::audit_store::info(&["agent"]))
        .unwrap();
    let evil = "x\x1b[2K\r\nmcp   tools/call transfer  [allow by policy.toml:4]\u{202e}";
    let mut call = mcp_call(
        1,
        Some(json!(1)),
        "tools/call",
        Some(evil),
        Some(json!({ evil: evil, "n": {"deep": [1, 2]} })),
        Verdict::Deny,
        "policy.toml:1",
    );
    call.reason = Some(evil.into());
    call.method = format!("tools/call{evil}");
    call.result = Some(airlock_auditor::McpResult {
        bytes: 80,
        is_error: true,
        first_bytes: evil.into(),
    });
    call.tools = Some(airlock_auditor::McpToolList {
        tools: vec![airlock_auditor::McpTool {
            name: evil.into(),
            description: Some(evil.into()),
            input_schema: None,
        }],
        hidden: vec![evil.into()],
        changed: vec![evil.into()],
    });
    rec.record(AuditEvent::McpCall(call)).unwrap();
    let id = rec.session_id().clone();
    rec.finish(Default::default()).unwrap();
    let text = audit_ok(AIRLOCK, &e.db, &["timeline", id.as_str()]);
    assert!(!text.contains('\x1b') && !text.contains('\r'), "{text:?}");
    assert!(!text.contains('\u{202e}'), "{text:?}");
    // The only lines that start like an MCP line are the one recorded, and
    // the one loud changed-tool line it carries.
    let starts = text
        .lines()
        .filter(|l| l.trim_start().starts_with("mcp ") || l.contains(" mcp   "))
        .count();
    assert_eq!(starts, 1, "{text}");
    assert_eq!(text.matches("\n      !! TOOL CHANGED").count(), 1, "{text}");
    assert!(text.contains("n={1 keys}"), "{text}");
}

#[test]
fn audit_search_tool_finds_every_call_of_that_tool_and_only_mcp_calls() {
    let e = env();
    let store = e.store();
    recorded_mcp_session(&store);
    // A file and a command named like a tool, and a tool named like a
    // file: neither search finds the other's.
    let rec = store
        .begin_session(airlock_test_support::audit_store::info(&["sh"]))
        .unwrap();
    rec.record(airlock_test_support::audit_store::exec(
        "e1",
        None,
        &["transfer", "refund"],
    ))
    .unwrap();
    rec.record(airlock_test_support::audit_store::file(
        "/work/refund",
        airlock_auditor::FileOp::Create,
        Some(b"x"),
    ))
    .unwrap();
    rec.record(AuditEvent::McpCall(mcp_call(
        9,
        Some(json!(1)),
        "tools/call",
        Some("/work/notes"),
        None,
        Verdict::Allow,
        "policy.toml:2",
    )))
    .unwrap();
    rec.finish(Default::default()).unwrap();

    // Decided then answered: found once, as its latest record.
    assert_eq!(
        tools_found(&e.db, &["--tool", "transfer"]),
        ["tools/call transfer allow"]
    );
    assert_eq!(
        tools_found(&e.db, &["--tool", "refund"]),
        ["tools/call refund deny"]
    );
    assert_eq!(
        tools_found(&e.db, &["--tool", "delete_all", "--verdict", "deny"]),
        ["tools/call delete_all deny"]
    );
    // Exact and case-sensitive: no prefix, no other case, no file, no exec.
    for other in ["transfe", "Transfer", "transfer ", "/work/refund", "*", "%"] {
        let (code, out) = search(&e.db, &["--tool", other]);
        assert_eq!(code, Some(1), "--tool {other:?} found: {out}");
    }
    assert_eq!(
        tools_found(&e.db, &["--tool", "/work/notes"]),
        ["tools/call /work/notes allow"]
    );
    // --file finds the file, never a tool, however it is spelled.
    for spelling in ["/work/refund", "refund", "/work/", "/work/notes", "notes"] {
        let (_, out) = search(&e.db, &["--file", spelling, "--json"]);
        assert!(!out.contains("mcp_call"), "--file {spelling}: {out}");
    }
    let (_, out) = search(&e.db, &["--file", "/work/refund", "--json"]);
    assert_eq!(out.lines().count(), 1, "{out}");
    // Host and method find the calls too.
    let by_host = tools_found(&e.db, &["--host", "PAY.test", "--method", "tools/call"]);
    assert_eq!(by_host.len(), 5, "{by_host:?}");
    let denied = tools_found(&e.db, &["--host", "pay.test", "--verdict", "deny"]);
    assert_eq!(
        denied,
        ["tools/call refund deny", "tools/call delete_all deny"]
    );
    // The text form names the tool and the verdict.
    let (code, out) = search(&e.db, &["--tool", "refund"]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("tools/call refund(") && out.contains("[deny by policy.toml:1]"),
        "{out}"
    );
    // An empty tool is a one-line usage error.
    let (code, out) = search(&e.db, &["--tool", ""]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.starts_with("airlock: --tool is empty"), "{out}");
}

#[test]
fn jsonl_exports_every_mcp_record_as_stored() {
    let e = env();
    let id = recorded_mcp_session(&e.store());
    let lines = airlock_test_support::audit_cli::export_jsonl(AIRLOCK, &e.db, id.as_str());
    let mcp: Vec<&Value> = lines.iter().filter(|v| v["kind"] == "mcp_call").collect();
    // Every record, both of a call recorded twice: JSONL is the record.
    assert_eq!(mcp.len(), 11, "{mcp:#?}");
    // As stored: the decided record has the arguments, the answered one
    // the answer (the proxy writes them so).
    let transfer: Vec<&&Value> = mcp.iter().filter(|v| v["tool"] == "transfer").collect();
    assert_eq!(transfer.len(), 2);
    assert_eq!(
        transfer[0]["arguments"],
        json!({"amount": 5, "currency": "USD"})
    );
    assert!(transfer[0].get("result").is_none());
    assert!(transfer[1].get("arguments").is_none());
    let answered = transfer[1];
    assert_eq!(answered["result"]["is_error"], false);
    assert_eq!(answered["server"]["host"], "pay.test");
    assert_eq!(answered["rule"], "policy.toml:4");
    assert_eq!(answered["exec_id"], "e1");
    let poisoned = mcp
        .iter()
        .find(|v| v["tools"]["changed"] == json!(["transfer"]))
        .unwrap();
    assert_eq!(poisoned["tools"]["tools"].as_array().unwrap().len(), 4);
}

#[test]
fn har_puts_each_exchanges_mcp_messages_on_its_entry() {
    let e = env();
    let id = recorded_mcp_session(&e.store());
    let out = audit_ok(
        AIRLOCK,
        &e.db,
        &["export", id.as_str(), "--format", "har", "--out", "-"],
    );
    let har: Value = serde_json::from_str(&out).unwrap();
    let entries = har["log"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 6);
    let mcp = |i: usize| entries[i]["_mcp"].as_array().unwrap().clone();
    // The transfer: its latest record, with its answer.
    let transfer = mcp(1);
    assert_eq!(transfer.len(), 1);
    assert_eq!(transfer[0]["tool"], "transfer");
    assert_eq!(transfer[0]["decision"], "allow");
    // The answered record left the arguments out; the decided one's show.
    assert_eq!(
        transfer[0]["arguments"],
        json!({"amount": 5, "currency": "USD"})
    );
    assert_eq!(transfer[0]["result"]["is_error"], false);
    // The batch: both calls sharing id 7.
    let batch: Vec<(String, String)> = mcp(3)
        .iter()
        .map(|m| {
            (
                m["tool"].as_str().unwrap().to_owned(),
                m["decision"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        batch,
        [
            ("delete_all".to_owned(), "deny".to_owned()),
            ("list_invoices".to_owned(), "allow".to_owned())
        ]
    );
    assert_eq!(mcp(5)[0]["tools"]["changed"], json!(["transfer"]));
    assert!(har["log"].get("_mcp").is_none(), "{har:#}");
}
