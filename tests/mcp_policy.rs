//! MCP-aware policy, end to end: the official MCP Python SDK on both sides.
//! The upstream is a FastMCP server (streamable HTTP, or the older HTTP+SSE
//! transport) behind TLS that logs every request body it receives; the
//! agent is the SDK's client, through `airlock proxy` or inside
//! `airlock run`. The policy is the shipped `policies/examples/mcp.toml`.
//!
//! The SDK lives in a venv that `scripts/setup` makes (`mcp>=2.3,<3` from
//! PyPI): /opt/airlock-tests/mcp-venv, or AIRLOCK_MCP_VENV.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use airlock_test_support::client::{ClientOutput, curl};
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();
const EXAMPLE: &str = include_str!("../policies/examples/mcp.toml");
const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_policy");
const PATIENCE: Duration = Duration::from_secs(30);

fn venv() -> Option<PathBuf> {
    let dir = std::env::var_os("AIRLOCK_MCP_VENV").map_or_else(
        || PathBuf::from("/opt/airlock-tests/mcp-venv"),
        PathBuf::from,
    );
    dir.join("bin/python").exists().then_some(dir)
}

/// The venv, or None after skipping (failing in CI) loudly.
fn need_venv() -> Option<PathBuf> {
    let found = venv();
    if found.is_none() {
        airlock_test_support::skip_or_fail(
            "the MCP Python SDK venv is missing; run scripts/setup (or set AIRLOCK_MCP_VENV)",
        );
    }
    found
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Streamable,
    Sse,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Self::Streamable => "streamable",
            Self::Sse => "sse",
        }
    }
}

/// The FastMCP upstream for pay.test, its log, and the policy for it.
struct Pay {
    venv: PathBuf,
    pki: TestPki,
    dir: tempfile::TempDir,
    port: u16,
    transport: Transport,
    server: tokio::process::Child,
}

impl Drop for Pay {
    fn drop(&mut self) {
        let _ = self.server.start_kill();
    }
}

impl Pay {
    async fn start(venv: PathBuf, transport: Transport) -> Self {
        let pki = TestPki::new();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pki.cert_and_key_pem(&["pay.test"]);
        std::fs::write(dir.path().join("cert.pem"), cert).unwrap();
        std::fs::write(dir.path().join("key.pem"), key).unwrap();
        let mut server = tokio::process::Command::new(venv.join("bin/python"))
            .arg(format!("{SCRIPTS}/upstream.py"))
            .arg(dir.path().join("cert.pem"))
            .arg(dir.path().join("key.pem"))
            .arg(dir.path().join("upstream.log"))
            .arg(transport.name())
            .arg(dir.path().join("poison"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("the upstream said its port in time")
            .unwrap()
            .unwrap_or_default();
        let port = first
            .strip_prefix("port ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("upstream said {first:?}"));
        // Its further output is not read; keep the pipe drained.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            venv,
            pki,
            dir,
            port,
            transport,
            server,
        }
    }

    /// The shipped example, for this upstream's port (and, for the SSE
    /// transport, its two endpoints).
    fn policy(&self) -> String {
        let mut policy = EXAMPLE.replace(
            "host = \"pay.test\"\n",
            &format!("host = \"pay.test\"\nport = {}\n", self.port),
        );
        if self.transport == Transport::Sse {
            policy = policy.replace("paths = [\"/mcp\"]", "paths = [\"/sse\", \"/messages/\"]");
        }
        policy
    }

    fn url(&self) -> String {
        match self.transport {
            Transport::Streamable => format!("https://pay.test:{}/mcp", self.port),
            Transport::Sse => format!("https://pay.test:{}/sse", self.port),
        }
    }

    fn proxy(&self) -> AirlockProxy {
        let policy = self.policy();
        let mut opts = ProxyOptions::new(&policy);
        opts.upstream_ca = Some(&self.pki.ca_pem);
        opts.resolve = vec!["pay.test:127.0.0.1".into()];
        AirlockProxy::start(AIRLOCK, opts)
    }

    /// The official client through the proxy: one JSON line per step.
    async fn agent(&self, proxy: &AirlockProxy, steps: &[&str]) -> Vec<Value> {
        let out = tokio::process::Command::new(self.venv.join("bin/python"))
            .arg(format!("{SCRIPTS}/agent.py"))
            .arg(self.url())
            .arg(self.transport.name())
            .args(steps)
            .env("HTTPS_PROXY", proxy.proxy_url())
            .env("SSL_CERT_FILE", &proxy.ca_pem)
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .output();
        let out = ClientOutput::from(
            tokio::time::timeout(PATIENCE * 4, out)
                .await
                .unwrap()
                .unwrap(),
        );
        lines(&out)
    }

    /// Every request the upstream received, with its body.
    fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("upstream.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The tool calls that reached the upstream: (tool, arguments).
    fn calls(&self) -> Vec<(String, Value)> {
        self.log()
            .iter()
            .filter_map(|r| serde_json::from_str::<Value>(r["body"].as_str()?).ok())
            .flat_map(|b| match b {
                Value::Array(items) => items,
                one => vec![one],
            })
            .filter(|m| m["method"] == "tools/call")
            .map(|m| {
                (
                    m["params"]["name"].as_str().unwrap_or_default().to_owned(),
                    m["params"]["arguments"].clone(),
                )
            })
            .collect()
    }

    fn poison(&self) -> PathBuf {
        self.dir.path().join("poison")
    }
}

fn lines(out: &ClientOutput) -> Vec<Value> {
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(!lines.is_empty(), "the agent printed nothing: {out:?}");
    lines
}

fn mcp_calls(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|e| e["kind"] == "mcp_call").collect()
}

/// The decided records (not the answers) of `tool`.
fn decided<'a>(events: &'a [Value], tool: &str) -> Vec<&'a Value> {
    mcp_calls(events)
        .into_iter()
        .filter(|e| e["tool"] == tool && e.get("result").is_none())
        .collect()
}

async fn events_with(proxy: &AirlockProxy, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    proxy.events_when(check).await
}

const OK_TRANSFER: &str = r#"call:transfer:{"amount":5,"currency":"USD"}"#;

async fn allowed_and_refused_tools(transport: Transport) {
    let Some(venv) = need_venv() else { return };
    let pay = Pay::start(venv, transport).await;
    let proxy = pay.proxy();
    let out = pay
        .agent(
            &proxy,
            &[
                "list",
                OK_TRANSFER,
                r#"call:transfer:{"amount":5000,"currency":"USD"}"#,
                r#"call:transfer:{"amount":5,"currency":"GBP"}"#,
                "call:delete_account:{}",
                "call:list_invoices:{}",
            ],
        )
        .await;
    // The list shows only what may be called; the refund is held, so shown.
    assert_eq!(
        out[0]["tools"],
        serde_json::json!(["list_invoices", "refund", "transfer"]),
        "{out:?}"
    );
    assert_eq!(out[1]["text"], "transferred 5.0 USD", "{out:?}");
    let over = out[2]["error"].as_str().unwrap_or_default();
    assert!(
        over.contains("amount")
            && over.contains("exceeds max 1000")
            && over.contains("policy.toml:"),
        "{out:?}"
    );
    let currency = out[3]["error"].as_str().unwrap_or_default();
    assert!(currency.contains("currency"), "{out:?}");
    let unnamed = out[4]["error"].as_str().unwrap_or_default();
    assert!(
        unnamed.contains("add \"delete_account\" to `tools`"),
        "{out:?}"
    );
    // The session goes on after refusals.
    assert_eq!(out[5]["text"], "invoice-1, invoice-2", "{out:?}");
    // Only the allowed calls reached the server.
    let calls: Vec<String> = pay.calls().into_iter().map(|(t, _)| t).collect();
    assert_eq!(calls, ["transfer", "list_invoices"], "{:#?}", pay.log());

    let events = events_with(&proxy, |e| {
        mcp_calls(e)
            .iter()
            .filter(|c| c.get("result").is_some())
            .count()
            >= 3
    })
    .await;
    let refused = decided(&events, "delete_account");
    assert_eq!(refused.len(), 1, "{events:#?}");
    assert_eq!(refused[0]["decision"], "deny");
    assert_eq!(refused[0]["method"], "tools/call");
    assert!(
        refused[0]["rule"]
            .as_str()
            .unwrap()
            .contains("policy.toml:")
    );
    let over = decided(&events, "transfer");
    assert_eq!(over.len(), 3, "{events:#?}");
    assert_eq!(over[1]["arguments"]["amount"], 5000);
    assert_eq!(over[1]["decision"], "deny");
    // The allowed transfer's answer, summarised.
    let answered: Vec<&Value> = mcp_calls(&events)
        .into_iter()
        .filter(|e| e["tool"] == "transfer" && e.get("result").is_some())
        .collect();
    assert_eq!(answered.len(), 1, "{events:#?}");
    assert_eq!(answered[0]["result"]["is_error"], false);
    assert!(
        answered[0]["result"]["first_bytes"]
            .as_str()
            .unwrap()
            .contains("transferred")
    );
    // The full list is on record, with what the client did not see.
    let listed = mcp_calls(&events)
        .into_iter()
        .find(|e| e.get("tools").is_some())
        .unwrap_or_else(|| panic!("no tools/list record: {events:#?}"));
    let names: Vec<&str> = listed["tools"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 4, "{listed}");
    assert_eq!(
        listed["tools"]["hidden"],
        serde_json::json!(["delete_account"])
    );
    assert!(
        listed["tools"]["tools"][0]["input_schema"].is_object(),
        "{listed}"
    );
}

#[tokio::test]
async fn an_mcp_client_calls_allowed_tools_and_reads_every_refusal_as_a_failed_call() {
    allowed_and_refused_tools(Transport::Streamable).await;
}

#[tokio::test]
async fn the_older_sse_transport_is_decided_and_filtered_the_same_way() {
    allowed_and_refused_tools(Transport::Sse).await;
}

#[tokio::test]
async fn max_calls_allows_exactly_three_transfers_of_eight_sent_at_once() {
    let Some(venv) = need_venv() else { return };
    let pay = Pay::start(venv, Transport::Streamable).await;
    let proxy = pay.proxy();
    let out = pay
        .agent(
            &proxy,
            &[
                r#"parallel:8:transfer:{"amount":1,"currency":"EUR"}"#,
                "call:list_invoices:{}",
            ],
        )
        .await;
    let results = out[0]["parallel"].as_array().unwrap();
    let passed = results
        .iter()
        .filter(|r| r["text"] == "transferred 1.0 EUR")
        .count();
    assert_eq!(passed, 3, "{out:?}");
    for refused in results.iter().filter(|r| r.get("error").is_some()) {
        assert!(
            refused["error"].as_str().unwrap().contains("max_calls"),
            "{out:?}"
        );
    }
    assert_eq!(out[1]["text"], "invoice-1, invoice-2", "{out:?}");
    let transfers = pay
        .calls()
        .into_iter()
        .filter(|(t, _)| t == "transfer")
        .count();
    assert_eq!(transfers, 3, "{:#?}", pay.log());
}

#[tokio::test]
async fn a_changed_tool_description_is_flagged_in_the_record() {
    let Some(venv) = need_venv() else { return };
    let pay = Pay::start(venv, Transport::Streamable).await;
    let proxy = pay.proxy();
    let poison = pay.poison();
    let touch = format!("touch:{}", poison.display());
    let out = pay.agent(&proxy, &["list", &touch, "list"]).await;
    assert_eq!(out.len(), 2, "{out:?}");
    let events = events_with(&proxy, |e| {
        mcp_calls(e)
            .iter()
            .filter(|c| c.get("tools").is_some())
            .count()
            >= 2
    })
    .await;
    let lists: Vec<&Value> = mcp_calls(&events)
        .into_iter()
        .filter(|e| e.get("tools").is_some())
        .collect();
    assert_eq!(lists.len(), 2, "{events:#?}");
    assert_eq!(lists[0]["tools"]["changed"], serde_json::json!([]));
    assert_eq!(
        lists[1]["tools"]["changed"],
        serde_json::json!(["list_invoices"])
    );
    let poisoned = lists[1]["tools"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "list_invoices")
        .unwrap();
    assert!(
        poisoned["description"]
            .as_str()
            .unwrap()
            .contains("evil.test"),
        "{poisoned}"
    );
}

/// A POST of `body` (with extra curl arguments) to the MCP endpoint.
async fn post(proxy: &AirlockProxy, url: &str, body: &str, extra: &[&str]) -> (u16, String) {
    let mut args = vec![
        "-X",
        "POST",
        "-H",
        "accept: application/json, text/event-stream",
        "--data-binary",
        body,
    ];
    args.extend_from_slice(extra);
    args.push(url);
    let (code, text, _) = curl(proxy, &args).await;
    (code, text)
}

const JSON: [&str; 2] = ["-H", "content-type: application/json"];

fn call_body(id: &str, method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
}

#[tokio::test]
async fn every_hostile_spelling_of_a_tool_call_is_refused_before_the_server_sees_it() {
    let Some(venv) = need_venv() else { return };
    let pay = Pay::start(venv, Transport::Streamable).await;
    let proxy = pay.proxy();
    let url = pay.url();
    let delete = r#"{"name":"delete_account","arguments":{}}"#;
    let deep = format!(
        r#"{{"name":"transfer","arguments":{{"amount":1,"currency":"USD","memo":{}1{}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let large = format!(
        r#"{{"name":"transfer","arguments":{{"amount":1,"currency":"USD","memo":"{}"}}}}"#,
        "x".repeat(1_100_000)
    );
    let large_path = pay.dir.path().join("large.json");
    std::fs::write(&large_path, call_body("9", "tools/call", &large)).unwrap();
    let large_arg = format!("@{}", large_path.display());
    let gz_path = pay.dir.path().join("body.json");
    std::fs::write(&gz_path, call_body("9", "tools/call", delete)).unwrap();
    let gz = std::process::Command::new("gzip")
        .arg("-kf")
        .arg(&gz_path)
        .status()
        .unwrap();
    assert!(gz.success());
    let gz_arg = format!("@{}.gz", gz_path.display());
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "a refused call inside a batch",
            format!(
                "[{},{}]",
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
                call_body("2", "tools/call", delete)
            ),
            JSON.to_vec(),
        ),
        ("the method in another case", call_body("3", "Tools/Call", delete), JSON.to_vec()),
        ("the method with a trailing space", call_body("3", "tools/call ", delete), JSON.to_vec()),
        ("the method with a leading tab", call_body("3", "\\ttools/call", delete), JSON.to_vec()),
        ("the method with a NUL byte", call_body("3", "tools/call\\u0000", delete), JSON.to_vec()),
        (
            "a duplicate name in params",
            call_body("4", "tools/call", r#"{"name":"list_invoices","name":"delete_account"}"#),
            JSON.to_vec(),
        ),
        (
            "a second spelling of name in params",
            call_body("4", "tools/call", r#"{"name":"list_invoices","Name":"delete_account"}"#),
            JSON.to_vec(),
        ),
        (
            "a duplicate key in arguments",
            call_body(
                "5",
                "tools/call",
                r#"{"name":"transfer","arguments":{"amount":5,"currency":"USD","amount":5000}}"#,
            ),
            JSON.to_vec(),
        ),
        (
            "a case variant of a constrained argument",
            call_body(
                "5",
                "tools/call",
                r#"{"name":"transfer","arguments":{"amount":5,"currency":"USD","Amount":5000}}"#,
            ),
            JSON.to_vec(),
        ),
        (
            "a call shaped as a notification",
            format!(r#"{{"jsonrpc":"2.0","method":"tools/call","params":{delete}}}"#),
            JSON.to_vec(),
        ),
        (
            "a second Method key",
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/list","Method":"tools/call","params":{"name":"delete_account"}}"#
                .to_owned(),
            JSON.to_vec(),
        ),
        (
            "an SSE-framed body",
            format!("data: {}\n\n", call_body("7", "tools/call", delete)),
            vec!["-H", "content-type: text/event-stream"],
        ),
        (
            "JSON sent as text/plain",
            call_body("7", "tools/call", delete),
            vec!["-H", "content-type: text/plain"],
        ),
        (
            "a gzip-encoded body",
            gz_arg.clone(),
            vec!["-H", "content-type: application/json", "-H", "content-encoding: gzip"],
        ),
        (
            "a chunked body",
            call_body("8", "tools/call", delete),
            vec!["-H", "content-type: application/json", "-H", "transfer-encoding: chunked"],
        ),
        ("deeply nested arguments", call_body("9", "tools/call", &deep), JSON.to_vec()),
        ("arguments over 1 MiB", large_arg.clone(), JSON.to_vec()),
    ];
    for (what, body, extra) in &cases {
        let (code, text) = post(&proxy, &url, body, extra).await;
        assert!(
            text.contains("airlock"),
            "{what}: not refused by airlock ({code}): {text}"
        );
        let answer: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{what}: the refusal is not JSON-RPC ({e}): {text}"));
        let errors = match &answer {
            Value::Array(items) => items.clone(),
            one => vec![one.clone()],
        };
        assert!(
            errors.iter().all(|e| e["error"]["code"] == -32001),
            "{what}: {text}"
        );
    }
    // Nothing of it reached the server.
    assert!(pay.log().is_empty(), "{:#?}", pay.log());

    // Decided exactly as the plain form: chunked and allowed goes through,
    // and ids reused across calls are each decided (and counted).
    for n in 0..4 {
        let body = call_body(
            "7",
            "tools/call",
            r#"{"name":"transfer","arguments":{"amount":1,"currency":"USD"}}"#,
        );
        let extra = if n == 0 {
            vec![
                "-H",
                "content-type: application/json",
                "-H",
                "transfer-encoding: chunked",
            ]
        } else {
            JSON.to_vec()
        };
        let (_, text) = post(&proxy, &url, &body, &extra).await;
        if n == 3 {
            assert!(
                text.contains("max_calls"),
                "the fourth reuse of id 7: {text}"
            );
        }
    }
    assert_eq!(pay.calls().len(), 3, "{:#?}", pay.log());

    let events = events_with(&proxy, |e| mcp_calls(e).len() >= cases.len()).await;
    let refused = mcp_calls(&events)
        .into_iter()
        .filter(|e| e["decision"] == "deny")
        .count();
    assert!(refused >= cases.len(), "{events:#?}");
}

// ---------------------------------------------------------------------------
// Inside `airlock run`, with a person deciding the held refunds.
// ---------------------------------------------------------------------------

async fn airlock(args: &[&str]) -> ClientOutput {
    let out = tokio::process::Command::new(AIRLOCK)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    ClientOutput::from(out)
}

/// The one held request to pay.test, once it is held.
async fn await_held(url_part: &str) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = airlock(&["approvals", "--json"]).await;
        let list: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
        if let Some(held) = list
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["url"].as_str().is_some_and(|u| u.contains(url_part)))
        {
            return held["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "nothing held: {out:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn run_args(pay: &Pay, venv: &Path, policy: &Path) -> Vec<String> {
    let p = |p: &Path| p.to_string_lossy().into_owned();
    let dir = pay.dir.path();
    vec![
        "run".into(),
        "--policy".into(),
        p(policy),
        "--workspace".into(),
        p(&dir.join("ws")),
        "--upstream-ca".into(),
        p(&pay.pki.ca_pem),
        "--resolve".into(),
        "pay.test:127.0.0.1".into(),
        "--audit-db".into(),
        p(&dir.join("audit/audit.db")),
        "--audit-key".into(),
        p(&dir.join("audit/audit.key")),
        "--ro".into(),
        p(venv),
        "--ro".into(),
        SCRIPTS.into(),
        "--timeout".into(),
        "120s".into(),
        "--no-tty".into(),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn inside_airlock_run_a_held_refund_goes_out_once_approved_and_not_when_denied() {
    let Some(venv) = need_venv() else { return };
    let pay = Pay::start(venv.clone(), Transport::Streamable).await;
    let dir = pay.dir.path();
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, pay.policy()).unwrap();
    let mut args = run_args(&pay, &venv, &policy);
    args.extend([
        "--".into(),
        venv.join("bin/python").to_string_lossy().into_owned(),
        format!("{SCRIPTS}/agent.py"),
        pay.url(),
        "streamable".into(),
        "list".into(),
        OK_TRANSFER.into(),
        "call:delete_account:{}".into(),
        r#"call:refund:{"invoice":"inv-approved"}"#.into(),
        r#"call:refund:{"invoice":"inv-denied"}"#.into(),
    ]);
    let run = tokio::process::Command::new(AIRLOCK)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let first = await_held("pay.test").await;
    let out = airlock(&["approve", &first]).await;
    assert_eq!(out.status, 0, "{out:?}");
    // The second refund is held as a new request.
    let deadline = Instant::now() + PATIENCE;
    let second = loop {
        let id = await_held("pay.test").await;
        if id != first {
            break id;
        }
        assert!(Instant::now() < deadline, "the second refund was not held");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let out = airlock(&["deny", &second, "--note", "not this one"]).await;
    assert_eq!(out.status, 0, "{out:?}");
    let done = tokio::time::timeout(PATIENCE * 4, run.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let out = ClientOutput::from(done);
    let steps = lines(&out);
    assert_eq!(
        steps[0]["tools"],
        serde_json::json!(["list_invoices", "refund", "transfer"]),
        "{out:?}"
    );
    assert_eq!(steps[1]["text"], "transferred 5.0 USD", "{out:?}");
    assert!(
        steps[2]["error"]
            .as_str()
            .unwrap()
            .contains("delete_account"),
        "{out:?}"
    );
    assert_eq!(steps[3]["text"], "refunded inv-approved", "{out:?}");
    let denied = steps[4]["error"].as_str().unwrap_or_default();
    assert!(
        denied.contains("not approved") && denied.contains("not this one"),
        "{out:?}"
    );
    let calls: Vec<String> = pay
        .calls()
        .into_iter()
        .map(|(t, a)| format!("{t} {a}"))
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[1].contains("inv-approved"), "{calls:?}");

    // The record: every call, with its exec, verdict and rule.
    let id = airlock_test_support::audit_cli::first_session_id(
        AIRLOCK,
        &dir.join("audit/audit.db"),
        &out,
    );
    let events =
        airlock_test_support::audit_cli::export_jsonl(AIRLOCK, &dir.join("audit/audit.db"), &id);
    let refunds = decided(&events, "refund");
    assert_eq!(refunds.len(), 2, "{events:#?}");
    assert_eq!(refunds[0]["decision"], "allow");
    // The approved call names its approval, as the approval's records do.
    assert_eq!(
        refunds[0]["approval"].as_str(),
        Some(first.as_str()),
        "{refunds:#?}"
    );
    assert_eq!(refunds[1]["decision"], "deny");
    assert!(
        refunds.iter().all(|r| r["exec_id"].is_string()),
        "{refunds:#?}"
    );
    assert_eq!(decided(&events, "delete_account")[0]["decision"], "deny");
    assert!(
        events.iter().any(|e| e["kind"] == "approval_requested"),
        "{events:#?}"
    );
}

/// A live session (`airlock session start`), stopped when dropped.
struct LiveSession(String);

impl Drop for LiveSession {
    fn drop(&mut self) {
        let _ = std::process::Command::new(AIRLOCK)
            .args(["session", "stop", &self.0])
            .stdin(Stdio::null())
            .output();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn inside_a_live_session_each_step_is_held_to_the_tool_policy_and_the_quota_spans_steps() {
    let Some(venv) = need_venv() else { return };
    let pay = Pay::start(venv.clone(), Transport::Streamable).await;
    let dir = pay.dir.path();
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, pay.policy()).unwrap();
    let mut args = run_args(&pay, &venv, &policy);
    // `session start` takes the sandbox's options, not run's.
    args[0] = "start".into();
    args.insert(0, "session".into());
    let timeout = args.iter().position(|a| a == "--timeout").unwrap();
    args.drain(timeout..timeout + 2);
    args.retain(|a| a != "--no-tty");
    let out = airlock(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_eq!(out.status, 0, "session start: {out:?}");
    let session = LiveSession(out.stdout.trim().to_owned());
    let step = |steps: &[&str]| {
        let mut argv = vec![
            "session".to_owned(),
            "exec".to_owned(),
            session.0.clone(),
            "--".to_owned(),
            venv.join("bin/python").to_string_lossy().into_owned(),
            format!("{SCRIPTS}/agent.py"),
            pay.url(),
            "streamable".to_owned(),
        ];
        argv.extend(steps.iter().map(|s| (*s).to_owned()));
        argv
    };
    let first = step(&["list", OK_TRANSFER, OK_TRANSFER, "call:delete_account:{}"]);
    let out = airlock(&first.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let steps = lines(&out);
    assert_eq!(
        steps[0]["tools"],
        serde_json::json!(["list_invoices", "refund", "transfer"]),
        "{out:?}"
    );
    assert_eq!(steps[1]["text"], "transferred 5.0 USD", "{out:?}");
    assert_eq!(steps[2]["text"], "transferred 5.0 USD", "{out:?}");
    assert!(
        steps[3]["error"]
            .as_str()
            .unwrap()
            .contains("delete_account"),
        "{out:?}"
    );
    // A later step, a new MCP session: the session's quota is what is left.
    let second = step(&[OK_TRANSFER, OK_TRANSFER]);
    let out = airlock(&second.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let steps = lines(&out);
    assert_eq!(steps[0]["text"], "transferred 5.0 USD", "{out:?}");
    assert!(
        steps[1]["error"].as_str().unwrap().contains("max_calls"),
        "{out:?}"
    );
    let transfers = pay
        .calls()
        .into_iter()
        .filter(|(t, _)| t == "transfer")
        .count();
    assert_eq!(transfers, 3, "{:#?}", pay.log());
    assert!(!pay.calls().iter().any(|(t, _)| t == "delete_account"));
}

#[tokio::test]
async fn a_message_sent_with_another_method_than_post_is_refused_where_a_rule_allows_any_method() {
    let Some(venv) = need_venv() else { return };
    let pay = Pay::start(venv, Transport::Streamable).await;
    let policy = pay
        .policy()
        .replace("methods = [\"POST\", \"GET\", \"DELETE\"]\n", "");
    let mut opts = ProxyOptions::new(&policy);
    opts.upstream_ca = Some(&pay.pki.ca_pem);
    opts.resolve = vec!["pay.test:127.0.0.1".into()];
    let proxy = AirlockProxy::start(AIRLOCK, opts);
    let body = call_body(
        "1",
        "tools/call",
        r#"{"name":"delete_account","arguments":{}}"#,
    );
    for method in ["PUT", "PATCH", "GET", "DELETE"] {
        let mut extra = JSON.to_vec();
        extra.extend(["-X", method]);
        let (code, text) = post(&proxy, &pay.url(), &body, &extra).await;
        assert_eq!(code, 400, "{method}: {text}");
        assert!(
            text.contains("MCP messages are sent with POST"),
            "{method}: {text}"
        );
    }
    assert!(pay.log().is_empty(), "{:#?}", pay.log());
}
