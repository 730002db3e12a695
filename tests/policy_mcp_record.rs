//! `airlock policy replay` and `airlock policy suggest` over recorded MCP
//! tool calls (`mcp_call` events written through the real recorder, see
//! airlock-test-support's `mcp_record`), run as the real CLI: replay
//! re-decides each call with the policy crate's MCP decision, and suggest
//! writes tool rules exactly as tight as what was called.

use std::path::Path;
use std::process::{Command, Output};

use airlock_auditor::{AuditEvent, RecordStore, Verdict};
use airlock_test_support::audit_store::{Env, env, exec, info};
use airlock_test_support::mcp_record::{mcp_call, recorded_mcp_session};
use serde_json::{Value, json};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// The policy the issue asks for, as shipped.
fn example_policy() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/examples/mcp.toml"),
    )
    .unwrap()
}

fn policy_cmd(e: &Env, args: &[&str]) -> Output {
    Command::new(AIRLOCK)
        .arg("policy")
        .args(args)
        .arg("--audit-db")
        .arg(&e.db)
        .env("HOME", e.dir.path())
        .output()
        .unwrap()
}

fn replay(e: &Env, policy: &str, session: &str) -> (i32, Value) {
    let file = e.dir.path().join("candidate.toml");
    std::fs::write(&file, policy).unwrap();
    let out = policy_cmd(e, &["replay", file.to_str().unwrap(), session, "--json"]);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("replay --json: {err}: {out:?}"));
    (out.status.code().unwrap_or(-1), report)
}

/// The MCP changes of a replay: (what, was, would be, change).
fn mcp_changes(report: &Value) -> Vec<(String, String, String, String)> {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "mcp_call")
        .map(|c| {
            (
                c["what"].as_str().unwrap().to_owned(),
                c["was"]["decision"].as_str().unwrap().to_owned(),
                c["would_be"]["decision"].as_str().unwrap().to_owned(),
                c["change"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn change(what: &str, was: &str, would_be: &str, change: &str) -> (String, String, String, String) {
    (what.into(), was.into(), would_be.into(), change.into())
}

/// A session of `calls` (tool, arguments, verdict), each on its own exchange.
fn session_of(e: &Env, calls: &[(&str, Value, Verdict)]) -> String {
    let store = e.store();
    let rec = store.begin_session(info(&["python3", "agent.py"])).unwrap();
    rec.record(exec("e1", None, &["python3", "agent.py"]))
        .unwrap();
    for (i, (tool, args, verdict)) in calls.iter().enumerate() {
        rec.record(AuditEvent::McpCall(mcp_call(
            i as u64 + 1,
            Some(json!(i + 1)),
            "tools/call",
            Some(tool),
            Some(args.clone()),
            *verdict,
            "policy.toml:1",
        )))
        .unwrap();
    }
    let id = rec.session_id().to_string();
    rec.finish(Default::default()).unwrap();
    id
}

#[test]
fn replay_re_decides_every_recorded_tool_call_under_the_candidates_mcp_rules() {
    let e = env();
    let id = recorded_mcp_session(&e.store()).to_string();

    // The shipped example: transfer and list_invoices stay allowed,
    // delete_all stays refused, refund would now wait for a person.
    let (code, report) = replay(&e, &example_policy(), &id);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["replayed"]["mcp"], 7, "{report:#}");
    assert_eq!(
        mcp_changes(&report),
        [change("MCP tools/call refund", "deny", "ask", "other")],
        "{report:#}"
    );

    // A stricter candidate: transfer capped at 1, list_invoices not named.
    let strict = example_policy()
        .replace("amount = { max = 1000 }", "amount = { max = 1 }")
        .replace("tools = [\"list_invoices\"]", "tools = []");
    let (code, report) = replay(&e, &strict, &id);
    assert_eq!(code, 1, "newly blocked calls exit 1: {report:#}");
    assert_eq!(
        mcp_changes(&report),
        [
            change("MCP tools/call transfer", "allow", "deny", "blocked"),
            change("MCP tools/call refund", "deny", "ask", "other"),
            change("MCP tools/call list_invoices", "allow", "deny", "blocked"),
        ],
        "{report:#}"
    );
    let blocked = &report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["what"] == "MCP tools/call transfer")
        .unwrap()["would_be"];
    assert!(
        blocked["reason"].as_str().unwrap().contains("amount"),
        "{blocked}"
    );

    // Text: one line per change, and the MCP count in the summary.
    let file = e.dir.path().join("strict.toml");
    std::fs::write(&file, &strict).unwrap();
    let out = policy_cmd(&e, &["replay", file.to_str().unwrap(), &id]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("blocked") && text.contains("mcp_call MCP tools/call transfer"),
        "{text}"
    );
    assert!(text.contains("http, 7 mcp) of 1 session"), "{text}");
}

#[test]
fn replay_counts_a_tools_max_calls_per_session_in_record_order() {
    let e = env();
    let usd = || json!({"amount": 5, "currency": "USD"});
    let id = session_of(
        &e,
        &[
            ("transfer", usd(), Verdict::Allow),
            ("transfer", usd(), Verdict::Allow),
            ("transfer", usd(), Verdict::Allow),
            ("transfer", usd(), Verdict::Allow),
        ],
    );
    let (code, report) = replay(&e, &example_policy(), &id);
    assert_eq!(code, 1, "{report:#}");
    let changes = report["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "only the fourth: {report:#}");
    assert_eq!(changes[0]["seq"], 5, "{report:#}");
    assert!(
        changes[0]["would_be"]["reason"]
            .as_str()
            .unwrap()
            .contains("max_calls of 3"),
        "{report:#}"
    );
}

#[test]
fn a_recorded_call_replay_cannot_read_exactly_is_refused_or_undecidable_never_allowed() {
    let e = env();
    let store = e.store();
    let rec = store.begin_session(info(&["agent"])).unwrap();
    // Spellings the proxy's reader refuses, recorded as allowed (as an
    // older proxy, or a report-mode session, would have let them by).
    for (n, method) in ["tools/call\0", "Tools/Call", " tools/call", "tools/call "]
        .iter()
        .enumerate()
    {
        rec.record(AuditEvent::McpCall(mcp_call(
            n as u64 + 1,
            Some(json!(n + 1)),
            method,
            Some("transfer"),
            Some(json!({"amount": 5, "currency": "USD"})),
            Verdict::Allow,
            "policy.toml:1",
        )))
        .unwrap();
    }
    // Arguments over the capture cap: only their size is on record.
    let mut big = mcp_call(
        9,
        Some(json!(9)),
        "tools/call",
        Some("transfer"),
        None,
        Verdict::Allow,
        "policy.toml:1",
    );
    big.arguments_truncated = true;
    big.arguments_bytes = Some(1 << 20);
    rec.record(AuditEvent::McpCall(big)).unwrap();
    let id = rec.session_id().to_string();
    rec.finish(Default::default()).unwrap();

    let (code, report) = replay(&e, &example_policy(), &id);
    assert_eq!(code, 1, "{report:#}");
    let decisions: Vec<&str> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["would_be"]["decision"].as_str().unwrap())
        .collect();
    assert_eq!(
        decisions,
        ["deny", "deny", "deny", "deny", "undecidable"],
        "{report:#}"
    );
    assert_eq!(report["undecidable"], 1);
}

#[test]
fn replay_under_a_policy_with_no_mcp_table_says_the_tool_is_not_checked() {
    let e = env();
    let id = recorded_mcp_session(&e.store()).to_string();
    let plain =
        "version = 1\n\n[[allow]]\nhost = \"pay.test\"\npaths = [\"/mcp\"]\nmethods = [\"POST\"]\n";
    let (code, report) = replay(&e, plain, &id);
    assert_eq!(code, 0, "{report:#}");
    let changes = mcp_changes(&report);
    assert_eq!(
        changes,
        [
            change("MCP tools/call refund", "deny", "allow", "now_allowed"),
            change("MCP tools/call delete_all", "deny", "allow", "now_allowed"),
        ],
        "{report:#}"
    );
    let reason = report["changes"][0]["would_be"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("no rule's mcp table names this server"),
        "{reason}"
    );
}

fn suggest(e: &Env, session: &str) -> String {
    let out = policy_cmd(e, &["suggest", session]);
    assert!(out.status.success(), "suggest: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn suggest_names_exactly_the_tools_and_methods_that_went_through_and_replay_of_it_changes_nothing()
{
    let e = env();
    let id = recorded_mcp_session(&e.store()).to_string();
    let text = suggest(&e, &id);
    // The server's POST rule: the two tools called and the two other
    // methods sent, nothing else (no glob, no refused tool).
    assert!(
        text.contains(
            "methods = [\"POST\"]\npaths = [\"/mcp\"]\n# MCP tools called: list_invoices ×1, transfer ×1\nmcp = { tools = [\"list_invoices\", \"transfer\"], methods = [\"initialize\", \"notifications/initialized\", \"tools/list\"] }\n"
        ),
        "{text}"
    );
    assert_eq!(text.matches("mcp = {").count(), 1, "{text}");
    // The refused calls are listed, still refused.
    assert!(
        text.contains("#   MCP tools/call refund on pay.test:443/mcp — tool refund is not allowed"),
        "{text}"
    );
    assert!(
        text.contains("#   MCP tools/call delete_all on pay.test:443/mcp"),
        "{text}"
    );
    // It is a valid policy, lint-clean.
    let file = e.dir.path().join("suggested.toml");
    std::fs::write(&file, &text).unwrap();
    let out = Command::new(AIRLOCK)
        .args(["policy", "check"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "lint: {out:?}\n{text}");
    // Replayed under itself, the session changes nothing.
    let (code, report) = replay(&e, &text, &id);
    assert_eq!(code, 0, "{report:#}\n{text}");
    assert_eq!(report["changes"], json!([]), "{report:#}\n{text}");
    assert_eq!(report["replayed"]["mcp"], 7);
}

#[test]
fn a_tool_no_rule_can_name_exactly_or_one_a_person_approved_is_listed_never_allowed() {
    let e = env();
    let store = e.store();
    let rec = store.begin_session(info(&["agent"])).unwrap();
    let names = [
        "list_*",
        "a?c",
        "pay\u{202e}lanoitan",
        "x\"]\n[[allow]]\nhost = \"evil.test\"",
        "two words",
        "",
    ];
    for (n, tool) in names.iter().enumerate() {
        rec.record(AuditEvent::McpCall(mcp_call(
            n as u64 + 1,
            Some(json!(n + 1)),
            "tools/call",
            Some(tool),
            Some(json!({})),
            Verdict::Allow,
            "policy.toml:1",
        )))
        .unwrap();
    }
    let mut held = mcp_call(
        20,
        Some(json!(20)),
        "tools/call",
        Some("refund"),
        Some(json!({"amount": 5})),
        Verdict::Allow,
        "policy.toml:9",
    );
    held.approval = Some("p8m2c4rt".into());
    rec.record(AuditEvent::McpCall(held)).unwrap();
    // A method MCP does not have, spelled oddly.
    rec.record(AuditEvent::McpCall(mcp_call(
        21,
        Some(json!(21)),
        "Tools/List",
        None,
        None,
        Verdict::Report,
        "policy.toml:1",
    )))
    .unwrap();
    let id = rec.session_id().to_string();
    rec.finish(Default::default()).unwrap();

    let text = suggest(&e, &id);
    assert!(!text.contains("\nmcp = {"), "{text}");
    assert!(!text.contains("evil.test\"\n"), "{text}");
    assert_eq!(text.matches("[[allow]]\n").count(), 0, "{text}");
    assert_eq!(
        text.matches("no rule names this tool exactly").count(),
        6,
        "{text}"
    );
    assert!(text.contains("pay\\u{202e}lanoitan"), "{text}");
    assert!(
        text.contains("MCP tools/call refund on pay.test:443/mcp — a person approved it"),
        "{text}"
    );
    assert!(
        text.contains("MCP Tools/List on pay.test:443/mcp — not an MCP method"),
        "{text}"
    );
    let file = e.dir.path().join("suggested.toml");
    std::fs::write(&file, &text).unwrap();
    let out = Command::new(AIRLOCK)
        .args(["policy", "check"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "lint: {out:?}\n{text}");
}

// ---------------------------------------------------------------------------
// Suggest, then replay, then enforce, on a session the official MCP SDK
// recorded inside `airlock run` (the mcp branch's FastMCP upstream and
// agent scripts, tests/mcp_policy/).
// ---------------------------------------------------------------------------

const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_policy");

/// The SDK's venv (scripts/setup), or None after skipping loudly.
fn mcp_venv() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("AIRLOCK_MCP_VENV").map_or_else(
        || std::path::PathBuf::from("/opt/airlock-tests/mcp-venv"),
        std::path::PathBuf::from,
    );
    if dir.join("bin/python").exists() {
        return Some(dir);
    }
    airlock_test_support::skip_or_fail(
        "the MCP Python SDK venv is missing; run scripts/setup (or set AIRLOCK_MCP_VENV)",
    );
    None
}

/// The FastMCP upstream for pay.test (streamable HTTP behind TLS), which
/// logs every request body it receives.
struct Upstream {
    pki: airlock_test_support::pki::TestPki,
    dir: tempfile::TempDir,
    port: u16,
    server: std::process::Child,
}

impl Drop for Upstream {
    /// A std `Child` outlives its handle: stop the server with the test.
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

impl Upstream {
    fn start(venv: &Path) -> Self {
        use std::io::BufRead;
        let pki = airlock_test_support::pki::TestPki::new();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pki.cert_and_key_pem(&["pay.test"]);
        std::fs::write(dir.path().join("cert.pem"), cert).unwrap();
        std::fs::write(dir.path().join("key.pem"), key).unwrap();
        let mut server = Command::new(venv.join("bin/python"))
            .arg(format!("{SCRIPTS}/upstream.py"))
            .arg(dir.path().join("cert.pem"))
            .arg(dir.path().join("key.pem"))
            .arg(dir.path().join("upstream.log"))
            .arg("streamable")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let port = first
            .strip_prefix("port ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("upstream said {first:?}"));
        std::thread::spawn(move || for _ in lines {});
        Self {
            pki,
            dir,
            port,
            server,
        }
    }

    /// The tools called that reached the upstream, in order.
    fn tools_called(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("upstream.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|r| serde_json::from_str::<Value>(r["body"].as_str()?).ok())
            .filter(|m| m["method"] == "tools/call")
            .map(|m| m["params"]["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// `airlock run` of the SDK agent at this upstream under `policy`,
    /// recording into `db`: one JSON line per step.
    fn agent(&self, venv: &Path, policy: &Path, db: &Path, steps: &[&str]) -> (Output, Vec<Value>) {
        let ws = self.dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let key = db.with_file_name("audit.key");
        let out = Command::new(AIRLOCK)
            .arg("run")
            .arg("--policy")
            .arg(policy)
            .arg("--workspace")
            .arg(&ws)
            .arg("--upstream-ca")
            .arg(&self.pki.ca_pem)
            .args(["--resolve", "pay.test:127.0.0.1"])
            .arg("--audit-db")
            .arg(db)
            .arg("--audit-key")
            .arg(&key)
            .arg("--ro")
            .arg(venv)
            .args(["--ro", SCRIPTS, "--timeout", "120s", "--no-tty", "--"])
            .arg(venv.join("bin/python"))
            .arg(format!("{SCRIPTS}/agent.py"))
            .arg(format!("https://pay.test:{}/mcp", self.port))
            .arg("streamable")
            .args(steps)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let steps = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (out, steps)
    }
}

#[test]
fn suggest_then_replay_then_enforce_on_a_session_the_official_mcp_sdk_recorded() {
    let Some(venv) = mcp_venv() else { return };
    let pay = Upstream::start(&venv);
    let e = env();
    std::fs::create_dir_all(e.dir.path()).unwrap();
    // Record in report mode: the server granted, every tool let through
    // and recorded.
    let report = format!(
        "version = 1\ndefault = \"report\"\n\n[[allow]]\nhost = \"pay.test\"\nport = {}\npaths = [\"/mcp\"]\nmethods = [\"POST\", \"GET\", \"DELETE\"]\nmcp = {{ tools = [\"list_invoices\"] }}\n",
        pay.port
    );
    let recording = e.dir.path().join("report.toml");
    std::fs::write(&recording, report).unwrap();
    let (out, steps) = pay.agent(
        &venv,
        &recording,
        &e.db,
        &[
            "list",
            r#"call:transfer:{"amount":5,"currency":"USD"}"#,
            "call:list_invoices:{}",
        ],
    );
    assert!(out.status.success(), "recording run: {out:?}");
    assert_eq!(steps.len(), 3, "{out:?}");
    assert_eq!(pay.tools_called(), ["transfer", "list_invoices"]);
    let id = airlock_test_support::audit_cli::first_session_id(AIRLOCK, &e.db, &out);

    // Suggest: exactly the two tools, and the methods the SDK sent.
    let text = suggest(&e, &id);
    let mcp_line = text
        .lines()
        .find(|l| l.starts_with("mcp = {"))
        .unwrap_or_else(|| panic!("no mcp table:\n{text}"));
    assert!(
        mcp_line.starts_with("mcp = { tools = [\"list_invoices\", \"transfer\"], methods = [")
            && mcp_line.contains("\"initialize\"")
            && mcp_line.contains("\"tools/list\""),
        "{text}"
    );
    let suggested = e.dir.path().join("suggested.toml");
    std::fs::write(&suggested, &text).unwrap();

    // Replay: under the suggestion nothing recorded is blocked; the one
    // call report mode let by (transfer, which the recording policy did
    // not name) would now be allowed by a rule.
    let (code, report) = replay(&e, &text, &id);
    assert_eq!(code, 0, "{report:#}\n{text}");
    assert_eq!(report["blocked"], 0, "{report:#}");
    assert!(
        report["replayed"]["mcp"].as_u64().unwrap() >= 4,
        "{report:#}"
    );
    assert_eq!(
        mcp_changes(&report),
        [change(
            "MCP tools/call transfer",
            "report",
            "allow",
            "now_allowed"
        )],
        "{report:#}"
    );

    // Under the shipped example (transfer only with amount <= 1000 in USD
    // or EUR): the recorded transfer passes its constraints, so nothing is
    // blocked either. (Its answered record carries no arguments: replay
    // takes them from the decided one.)
    let example = example_policy().replace(
        "host = \"pay.test\"\n",
        &format!("host = \"pay.test\"\nport = {}\n", pay.port),
    );
    let (code, report) = replay(&e, &example, &id);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(
        mcp_changes(&report),
        [change(
            "MCP tools/call transfer",
            "report",
            "allow",
            "now_allowed"
        )],
        "{report:#}"
    );

    // Enforce: the suggested policy lets the same calls through and
    // refuses a tool the session never called, before the server sees it.
    let enforced = e.dir.path().join("enforced.db");
    let (out, steps) = pay.agent(
        &venv,
        &suggested,
        &enforced,
        &[
            r#"call:transfer:{"amount":7,"currency":"EUR"}"#,
            "call:list_invoices:{}",
            r#"call:refund:{"invoice":"inv-1"}"#,
        ],
    );
    assert!(out.status.success(), "enforcing run: {out:?}");
    assert!(
        steps[0].get("error").is_none() && steps[1].get("error").is_none(),
        "{steps:?}"
    );
    let refused = steps[2]["error"].as_str().unwrap_or_default();
    assert!(refused.contains("refund"), "{steps:?}");
    assert_eq!(
        pay.tools_called(),
        ["transfer", "list_invoices", "transfer", "list_invoices"],
        "the refused call reached the server"
    );
}
