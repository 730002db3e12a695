//! Human approval of high-risk requests (`[[ask]]` rules), tested the way
//! both sides meet it: real clients (curl, python3 `requests`) in real
//! sandboxes send requests the proxy holds, against a TLS upstream the test
//! starts, while the test plays the approver through `airlock approvals`,
//! `approve` and `deny`, the webhook and the HTTP API; then the signed
//! record is read back and verified.
//!
//! Tests run in parallel, and `airlock approvals` lists every running
//! session's held requests, so each test finds its own by a marker in the
//! URL's path that no other test uses.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use airlock_test_support::client::{ClientOutput, curl};
use airlock_test_support::disk::sha256_hex;
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::server::{TestServer, read_body, serve_http};
use airlock_test_support::upstream::Upstream;
use bytes::Bytes;
use http_body_util::Full;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// The ask rule's reason, shown to approvers.
const REASON: &str = "payments need a person";
/// How long a test waits for what it expects to happen (a sandbox to start
/// and its request to be held, a client to get its answer) on a busy machine.
const PATIENCE: Duration = Duration::from_secs(30);
/// Who decides in these tests, as the record names a local user.
const ROOT: &str = "root (uid 0)";

/// A marker no other test (or run) puts in its URLs.
fn marker(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{tag}-{}-{nanos:x}", std::process::id())
}

// ---------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------

/// The TLS upstream `api.test`, a policy that allows GET /echo/** and asks
/// a person about POST /echo/pay/**, a workspace and an audit store.
struct Env {
    _pki: TestPki,
    upstream: Upstream,
    dir: tempfile::TempDir,
    ca: PathBuf,
    /// The line of the `[[ask]]` rule in policy.toml.
    ask_line: usize,
    runs: AtomicUsize,
}

impl Env {
    /// The ask rule waits 60 s unless decided.
    async fn new() -> Self {
        Self::with_ask("timeout = \"60s\"\n").await
    }

    /// `more`: the ask rule's lines besides host, port, methods, paths and
    /// reason (its timeout, its approvers).
    async fn with_ask(more: &str) -> Self {
        Self::with_rules(more, "").await
    }

    /// As [`Env::with_ask`], with `rules` after the ask rule.
    async fn with_rules(more: &str, rules: &str) -> Self {
        let pki = TestPki::new();
        let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
        let dir = tempfile::tempdir().unwrap();
        let port = upstream.port();
        let allow = format!(
            "version = 1\n\n[[allow]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"GET\"]\npaths = [\"/echo\", \"/echo/**\"]\n\n"
        );
        let ask = format!(
            "[[ask]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"POST\"]\npaths = [\"/echo/pay/**\"]\nreason = \"{REASON}\"\n{more}\n{rules}"
        );
        let ask_line = allow.lines().count() + 1;
        std::fs::write(dir.path().join("policy.toml"), allow + &ask).unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        std::fs::create_dir_all(dir.path().join("audit")).unwrap();
        let ca = pki.ca_pem.clone();
        Self {
            _pki: pki,
            upstream,
            dir,
            ca,
            ask_line,
            runs: AtomicUsize::new(0),
        }
    }

    fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn policy(&self) -> PathBuf {
        self.dir.path().join("policy.toml")
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("audit/audit.db")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("audit/audit.key")
    }

    /// `https://api.test:PORT` + `path`.
    fn url(&self, path: &str) -> String {
        format!("https://api.test:{}{path}", self.upstream.port())
    }

    /// The ask rule as the views and the record name it.
    fn ask_rule(&self) -> String {
        format!("{}:{}", self.policy().display(), self.ask_line)
    }

    /// Options `airlock run` and `airlock session start` share: the
    /// policy, workspace, upstream trust and pin, the audit store.
    fn sandbox_args(&self) -> Vec<String> {
        let p = |p: PathBuf| p.to_string_lossy().into_owned();
        vec![
            "--policy".into(),
            p(self.policy()),
            "--workspace".into(),
            p(self.ws()),
            "--upstream-ca".into(),
            p(self.ca.clone()),
            "--resolve".into(),
            "api.test:127.0.0.1".into(),
            "--audit-db".into(),
            p(self.db()),
            "--audit-key".into(),
            p(self.key()),
        ]
    }

    /// `airlock run [extra] -- sh -c script` in the workspace, in the
    /// background; killed if the test ends first.
    fn run(&self, extra: &[&str], script: &str) -> Running {
        self.run_with(extra, script, &[])
    }

    /// As [`Env::run`], with `vars` in airlock's own environment (where
    /// credentials' secrets come from).
    fn run_with(&self, extra: &[&str], script: &str, vars: &[(&str, &str)]) -> Running {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let stdout = self.dir.path().join(format!("run{n}.stdout"));
        let stderr = self.dir.path().join(format!("run{n}.stderr"));
        let child = tokio::process::Command::new(AIRLOCK)
            .current_dir(self.ws())
            .arg("run")
            .args(self.sandbox_args())
            .args(["--timeout", "120s", "--no-tty"])
            .args(extra)
            .args(["--", "sh", "-c", script])
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Running {
            child,
            stdout,
            stderr,
        }
    }

    /// Write a file into the workspace (the sandbox sees it at the same path).
    fn put(&self, name: &str, content: &str) {
        std::fs::write(self.ws().join(name), content).unwrap();
    }

    /// A file the sandbox wrote into the workspace, once it exists.
    async fn await_file(&self, name: &str) -> String {
        let path = self.ws().join(name);
        eventually(&format!("{} to be written", path.display()), || {
            path.exists()
        })
        .await;
        std::fs::read_to_string(&path).unwrap()
    }

    /// The record of the only session in this test's audit store.
    fn record(&self) -> Record {
        let id = airlock_test_support::audit_cli::first_session_id(AIRLOCK, &self.db(), &"");
        self.record_of(&id)
    }

    fn record_of(&self, id: &str) -> Record {
        let events = airlock_test_support::audit_cli::export_jsonl(AIRLOCK, &self.db(), id);
        let timeline = self.audit(&["timeline", id]);
        Record {
            id: id.to_owned(),
            events,
            timeline,
        }
    }

    /// `airlock audit verify` passes for the session, with this test's key.
    fn assert_verifies(&self, record: &Record) {
        let key = self.key();
        self.audit(&["verify", &record.id, "--audit-key", key.to_str().unwrap()]);
    }

    /// `airlock audit ARGS` against this test's store, which must succeed.
    fn audit(&self, args: &[&str]) -> String {
        let out = airlock_test_support::audit_cli::audit_cli(AIRLOCK, &self.db(), args);
        assert!(out.status.success(), "airlock audit {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// An `airlock run` in the background.
struct Running {
    child: tokio::process::Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Running {
    /// What airlock has written to stderr so far (its notices).
    fn stderr_now(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Wait for the run to end (bounded); its exit status and output.
    async fn finish(mut self) -> ClientOutput {
        let status = tokio::time::timeout(PATIENCE * 4, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("airlock run did not end: {}", self.stderr_now()))
            .unwrap();
        ClientOutput {
            status: status.code().unwrap_or(-1),
            stdout: std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr: self.stderr_now(),
        }
    }
}

/// One session's record, read back through the CLI a responder uses.
struct Record {
    id: String,
    events: Vec<Value>,
    timeline: String,
}

impl Record {
    fn assert_timeline_has(&self, text: impl AsRef<str>) {
        let text = text.as_ref();
        assert!(
            self.timeline.contains(text),
            "{text:?} in {}",
            self.timeline
        );
    }

    /// The events of `kind` for approval `id`.
    fn approval_events(&self, kind: &str, id: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["kind"] == kind && e["approval"] == id)
            .collect()
    }

    /// The one event of `kind` for approval `id`.
    fn approval(&self, kind: &str, id: &str) -> &Value {
        let found = self.approval_events(kind, id);
        assert_eq!(found.len(), 1, "one {kind} for {id}: {}", self.brief());
        found[0]
    }

    /// The latest `http` record of each exchange whose URL contains `needle`.
    fn http(&self, needle: &str) -> Vec<&Value> {
        let mut latest: Vec<&Value> = Vec::new();
        for e in self.events.iter().filter(|e| {
            e["kind"] == "http" && e["url"].as_str().is_some_and(|u| u.contains(needle))
        }) {
            match latest
                .iter_mut()
                .find(|l| !e["exchange"].is_null() && l["exchange"] == e["exchange"])
            {
                Some(l) => *l = e,
                None => latest.push(e),
            }
        }
        latest
    }

    /// The approval and http events, for failure messages.
    fn brief(&self) -> String {
        self.events
            .iter()
            .filter(|e| {
                let kind = e["kind"].as_str().unwrap_or_default();
                kind.starts_with("approval") || kind == "http"
            })
            .map(|e| {
                let mut e = e.clone();
                if let Some(map) = e.as_object_mut() {
                    for k in [
                        "request_headers",
                        "response_headers",
                        "request_body",
                        "response_body",
                    ] {
                        map.remove(k);
                    }
                }
                e.to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A live session (`airlock session start`); stopped when dropped.
struct Session {
    id: String,
    stopped: bool,
}

impl Session {
    /// Started with `--name NAME`.
    async fn start(env: &Env, name: &str) -> Self {
        let mut args = vec!["session".to_owned(), "start".to_owned()];
        args.extend(env.sandbox_args());
        args.extend(["--name".to_owned(), name.to_owned()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = airlock(&args).await;
        assert_eq!(out.status, 0, "session start: {out:?}");
        Self {
            id: out.stdout.trim().to_owned(),
            stopped: false,
        }
    }

    /// `airlock session exec ID -- sh -c script` in the background (a step
    /// may wait for a person); killed if the test ends first.
    fn sh(&self, script: &str) -> tokio::process::Child {
        tokio::process::Command::new(AIRLOCK)
            .args(["session", "exec", &self.id, "--timeout", "100s", "--"])
            .args(["sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    }

    /// The id of the session's record.
    async fn audit_session(&self) -> String {
        let out = airlock(&["session", "ls", "--json"]).await;
        assert_eq!(out.status, 0, "session ls: {out:?}");
        let list: Value = serde_json::from_str(&out.stdout).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == self.id.as_str())
            .and_then(|s| s["audit_session"].as_str())
            .unwrap_or_else(|| panic!("session {} is listed: {out:?}", self.id))
            .to_owned()
    }

    async fn stop(&mut self) {
        self.stopped = true;
        let out = airlock(&["session", "stop", &self.id]).await;
        assert_eq!(out.status, 0, "session stop: {out:?}");
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = std::process::Command::new(AIRLOCK)
                .args(["session", "stop", &self.id])
                .output();
        }
    }
}

/// A step's (or any child's) output, once it ends (bounded).
async fn output_of(child: tokio::process::Child) -> ClientOutput {
    let out = tokio::time::timeout(PATIENCE * 4, child.wait_with_output())
        .await
        .expect("the step ended")
        .unwrap();
    ClientOutput::from(out)
}

/// One announcement as a webhook receiver got it.
#[derive(Debug, Clone, PartialEq)]
struct Hook {
    method: String,
    path: String,
    content_type: String,
    body: Value,
}

/// A webhook receiver on the host's loopback: every request it got,
/// answering 503 to the first `fail_first`.
struct Receiver {
    got: Arc<Mutex<Vec<Hook>>>,
    server: TestServer,
}

impl Receiver {
    async fn start(fail_first: usize) -> Self {
        let got: Arc<Mutex<Vec<Hook>>> = Arc::default();
        let log = got.clone();
        let server = TestServer::tcp(move |tcp| {
            let log = log.clone();
            serve_http(tcp, move |req: hyper::Request<hyper::body::Incoming>| {
                let log = log.clone();
                async move {
                    let method = req.method().to_string();
                    let path = req.uri().path().to_owned();
                    let content_type = req
                        .headers()
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let body = read_body(req.into_body()).await;
                    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let n = {
                        let mut log = log.lock().unwrap();
                        log.push(Hook {
                            method,
                            path,
                            content_type,
                            body,
                        });
                        log.len()
                    };
                    let status = if n <= fail_first { 503 } else { 200 };
                    Ok::<_, Infallible>(
                        hyper::Response::builder()
                            .status(status)
                            .body(Full::new(Bytes::new()))
                            .unwrap(),
                    )
                }
            })
        })
        .await;
        Self { got, server }
    }

    fn url(&self) -> String {
        format!("http://{}/airlock-hook", self.server.addr)
    }

    fn got(&self) -> Vec<Hook> {
        self.got.lock().unwrap().clone()
    }
}

// ---------------------------------------------------------------------------
// Helpers: the approver's CLI and API, the clients' scripts.
// ---------------------------------------------------------------------------

/// `airlock ARGS`, to completion.
async fn airlock(args: &[&str]) -> ClientOutput {
    let out = tokio::process::Command::new(AIRLOCK)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    ClientOutput::from(out)
}

/// Every held request `airlock approvals --json` lists, of every session.
async fn pending_all(extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["approvals", "--json"];
    args.extend_from_slice(extra);
    let out = airlock(&args).await;
    assert_eq!(out.status, 0, "airlock approvals --json: {out:?}");
    serde_json::from_str::<Value>(&out.stdout)
        .unwrap_or_else(|e| panic!("airlock approvals --json is not JSON ({e}): {out:?}"))
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("airlock approvals --json is not an array: {out:?}"))
}

/// The held requests whose URL contains `marker`, of the sessions the
/// `airlock approvals` options `listing` pick.
async fn pending_in(listing: &[&str], marker: &str) -> Vec<Value> {
    pending_all(listing)
        .await
        .into_iter()
        .filter(|p| p["url"].as_str().is_some_and(|u| u.contains(marker)))
        .collect()
}

/// The held requests whose URL contains `marker`.
async fn pending(marker: &str) -> Vec<Value> {
    pending_in(&[], marker).await
}

/// Wait (bounded) until `n` requests whose URL contains `marker` are held,
/// as `airlock approvals [listing]` shows them.
async fn await_listed(listing: &[&str], marker: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let found = pending_in(listing, marker).await;
        if found.len() >= n {
            assert_eq!(found.len(), n, "more held than sent: {found:#?}");
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{n} requests with {marker} held within {PATIENCE:?}; held: {found:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait (bounded) until `n` requests whose URL contains `marker` are held.
async fn await_pending(marker: &str, n: usize) -> Vec<Value> {
    await_listed(&[], marker, n).await
}

/// The one request held whose URL contains `marker`.
async fn await_one(marker: &str) -> Value {
    await_pending(marker, 1).await.remove(0)
}

fn id_of(view: &Value) -> String {
    view["id"].as_str().unwrap().to_owned()
}

/// `airlock approve ID [extra]`, which must succeed.
async fn approve(id: &str, extra: &[&str]) -> ClientOutput {
    let mut args = vec!["approve", id];
    args.extend_from_slice(extra);
    let out = airlock(&args).await;
    assert_eq!(out.status, 0, "airlock approve {id}: {out:?}");
    out
}

/// `airlock deny ID --note NOTE`, which must succeed.
async fn deny(id: &str, note: &str) -> ClientOutput {
    let out = airlock(&["deny", id, "--note", note]).await;
    assert_eq!(out.status, 0, "airlock deny {id}: {out:?}");
    out
}

/// Wait (bounded) for `check` to hold.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "{what} within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A curl POST of the workspace file `body` to `url`, printing the body
/// and then the status on a line of its own.
fn curl_post(url: &str, body: &str) -> String {
    format!(
        "curl -sS --max-time 100 -X POST -H 'content-type: application/json' --data-binary @{body} -w '\\n%{{http_code}}\\n' '{url}'"
    )
}

/// A record's request body, decoded (the export has it in base64).
fn request_body(http: &Value) -> Vec<u8> {
    use base64::Engine as _;
    let b64 = http["request_body"]
        .as_str()
        .unwrap_or_else(|| panic!("no request body on record: {http}"));
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap()
}

/// The status curl printed last (see `curl_post`), and the body before it.
fn status_and_body(text: &str) -> (u16, &str) {
    let text = text.trim_end_matches('\n');
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text));
    (code.trim().parse().unwrap_or(0), body)
}

/// The approvals socket of the session that holds a request whose URL
/// contains `marker`, asked directly (`GET /v1/approvals`).
async fn socket_holding(marker: &str) -> PathBuf {
    for entry in std::fs::read_dir("/run/airlock/approvals").unwrap() {
        let socket = entry.unwrap().path();
        let Ok(mut stream) = tokio::net::UnixStream::connect(&socket).await else {
            continue;
        };
        let ask = "GET /v1/approvals HTTP/1.1\r\nHost: airlock\r\nConnection: close\r\n\r\n";
        stream.write_all(ask.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer));
        if read.await.is_ok() && String::from_utf8_lossy(&answer).contains(marker) {
            return socket;
        }
    }
    panic!("no approvals socket holds {marker}");
}

/// One HTTP/1.1 request on a fresh connection to `addr`, with a bearer
/// token if given: the status and the JSON answer.
async fn http_json(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer))
        .await
        .expect("the API answers")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {answer}"));
    let json = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
    (status, json)
}

/// An approval token file (mode 0600) naming one token; its path.
fn token_file(dir: &Path, name: &str, token: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("approval-tokens");
    std::fs::write(&path, format!("# who may decide\n{name}:{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// The policy of [`Env`] for a proxy in front of the upstream at `port`.
fn proxy_policy(port: u16) -> String {
    format!(
        "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"GET\"]\npaths = [\"/echo/**\"]\n\n[[ask]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"POST\"]\npaths = [\"/echo/pay/**\"]\nreason = \"{REASON}\"\ntimeout = \"60s\"\n"
    )
}

/// Wait (bounded) until the admin endpoint's `/metrics` has the line `line`.
async fn await_metric(admin: SocketAddr, line: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let metrics = http_json(admin, "GET", "/metrics", None, "").await.1;
        let metrics = metrics.as_str().unwrap_or_default().to_owned();
        if metrics.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "no {line:?} in {metrics}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `airlock proxy` in front of `upstream` with the admin endpoint on an
/// ephemeral port (serving the approvals API with `tokens`): the proxy and
/// where its admin endpoint listens.
async fn proxy_with_admin(
    pki: &TestPki,
    upstream: &Upstream,
    tokens: Option<&Path>,
) -> (AirlockProxy, SocketAddr) {
    let policy = proxy_policy(upstream.port());
    let mut opts = ProxyOptions::new(&policy);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    opts.extra = vec!["--admin-listen".into(), "127.0.0.1:0".into()];
    if let Some(tokens) = tokens {
        opts.extra.push("--approval-token-file".into());
        opts.extra.push(tokens.to_string_lossy().into_owned());
    }
    let proxy = AirlockProxy::start(AIRLOCK, opts);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let said = proxy.stderr.lock().unwrap().iter().find_map(|l| {
            l.strip_prefix("airlock: admin endpoint on http://")
                .and_then(|a| a.trim().parse().ok())
        });
        if let Some(admin) = said {
            return (proxy, admin);
        }
        assert!(Instant::now() < deadline, "{:?}", proxy.stderr.lock());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------
// Deciding from the CLI.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_request_goes_out_once_a_person_approves_it() {
    let env = Env::new().await;
    let m = marker("once");
    let path = format!("/echo/pay/{m}");
    let url = env.url(&path);
    let body = format!("{{\"amount\": 42, \"to\": \"{m}\"}}");
    env.put("body.json", &body);
    let run = env.run(&[], &curl_post(&url, "body.json"));

    let view = await_one(&m).await;
    let id = id_of(&view);
    assert_eq!(view["method"], "POST", "{view:#}");
    assert_eq!(view["url"], url.as_str(), "{view:#}");
    assert_eq!(view["body_preview"], body.as_str(), "{view:#}");
    assert_eq!(view["body_preview_truncated"], false, "{view:#}");
    assert_eq!(view["body_bytes"], body.len(), "{view:#}");
    assert_eq!(view["body_sha256"], sha256_hex(body.as_bytes()), "{view:#}");
    assert_eq!(view["rule"], env.ask_rule().as_str(), "{view:#}");
    assert_eq!(view["reason"], REASON, "{view:#}");
    assert_eq!(view["approvers"], serde_json::json!([]), "{view:#}");
    assert_eq!(view["timeout_ms"], 60_000, "{view:#}");
    // The command that sent it, as the kernel has it.
    let sender = &view["sender"];
    assert_eq!(sender["command"][0], "curl", "{view:#}");
    assert_eq!(
        sender["command"].as_array().unwrap().last().unwrap(),
        url.as_str(),
        "{view:#}"
    );
    assert!(sender["exec"].is_string(), "{view:#}");
    assert!(sender["step"].is_null(), "{view:#}");
    let (requested, expires) = (
        view["requested_at_us"].as_u64().unwrap(),
        view["expires_at_us"].as_u64().unwrap(),
    );
    assert_eq!(expires - requested, 60_000_000, "{view:#}");
    assert!(
        view["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h[0] == "content-type" && h[1] == "application/json"),
        "{view:#}"
    );

    // Nothing went upstream while it waits, and the terminal said how to decide.
    assert_eq!(
        env.upstream.hits(),
        0,
        "a held request must not reach upstream"
    );
    // (The notice follows the record, which may trail the listing a little.)
    let notice = format!(
        "airlock: holding POST {url} for a person's approval (rule {}: {REASON}); decide with `airlock approve {id}` or `airlock deny {id}` within 1m\n",
        env.ask_rule()
    );
    eventually(&format!("airlock says {notice:?}"), || {
        run.stderr_now().contains(&notice)
    })
    .await;
    // The session's own listing (by its id) shows it for a person to read.
    let session = view["session"].as_str().unwrap();
    let listed = airlock(&["approvals", "--session", session]).await;
    assert_eq!(listed.status, 0, "{listed:?}");
    assert!(
        listed.stdout.starts_with(&format!("{id}  POST {url}\n")),
        "{listed:?}"
    );
    assert!(listed.stdout.contains(REASON), "{listed:?}");
    // The sender's command line (escaped, as everything the sandbox chose).
    let exec = sender["exec"].as_str().unwrap();
    assert!(
        listed
            .stdout
            .contains("sent by curl -sS --max-time 100 -X POST -H "),
        "{listed:?}"
    );
    assert!(
        listed.stdout.contains(&format!(" {url} (exec {exec})\n")),
        "{listed:?}"
    );
    assert!(
        listed.stdout.contains(&format!(
            "decide: airlock approve {id} [--scope session] | airlock deny {id}"
        )),
        "{listed:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        env.upstream.hits(),
        0,
        "a held request must not reach upstream"
    );

    let decided = approve(&id, &["--note", "invoice 7 checked"]).await;
    assert_eq!(
        decided.stdout,
        format!("approved once: POST {url} (approval {id}, by {ROOT}); note: invoice 7 checked\n"),
        "{decided:?}"
    );
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    let (code, echoed) = status_and_body(&out.stdout);
    assert_eq!(code, 200, "{out:?}");
    let echo: Value = serde_json::from_str(echoed).unwrap();
    assert_eq!(
        echo["body"],
        body.as_str(),
        "the upstream got the body approved"
    );
    assert_eq!(env.upstream.targets(), vec![path.clone()]);

    let record = env.record();
    let requested = record.approval("approval_requested", &id);
    assert_eq!(requested["method"], "POST");
    assert_eq!(requested["url"], url.as_str());
    assert_eq!(requested["body_sha256"], sha256_hex(body.as_bytes()));
    assert_eq!(requested["body_bytes"], body.len());
    assert_eq!(requested["rule"], env.ask_rule().as_str());
    assert_eq!(requested["reason"], REASON);
    assert_eq!(requested["exec_id"], view["sender"]["exec"], "{requested}");
    let decided = record.approval("approval_decided", &id);
    assert_eq!(decided["outcome"], "approved", "{decided}");
    assert_eq!(decided["scope"], "once", "{decided}");
    assert_eq!(decided["by"], ROOT, "{decided}");
    assert_eq!(decided["note"], "invoice 7 checked", "{decided}");
    assert_eq!(decided["body_sha256"], sha256_hex(body.as_bytes()));
    assert!(decided["waited_ms"].as_u64().unwrap() >= 300, "{decided}");
    // The request's own record says who let it through.
    let http = record.http(&m);
    assert_eq!(http.len(), 1, "{}", record.brief());
    assert_eq!(http[0]["status"], 200, "{}", record.brief());
    assert_eq!(
        http[0]["reason"],
        format!("approved once by {ROOT} (approval {id})").as_str(),
        "{}",
        record.brief()
    );
    record.assert_timeline_has(format!("approval {id} requested: POST {url}"));
    record.assert_timeline_has(format!("approval {id} approved once by {ROOT} after"));
    record.assert_timeline_has("\"invoice 7 checked\"");
    env.assert_verifies(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn approved_for_the_session_the_same_request_passes_and_another_path_still_asks() {
    let env = Env::new().await;
    let m = marker("session");
    let mut session = Session::start(&env, &m).await;
    env.put("body.json", "{\"amount\": 5}");
    let first = env.url(&format!("/echo/pay/{m}/a"));
    let other = env.url(&format!("/echo/pay/{m}/b"));

    let step = session.sh(&curl_post(&first, "body.json"));
    // Found through the session's own listing (by its name), as its owner would.
    let view = await_listed(&["--session", &m], &first, 1).await.remove(0);
    assert_eq!(view["session"], session.id.as_str(), "{view:#}");
    assert_eq!(
        view["sender"]["step"], 1,
        "the session's first step: {view:#}"
    );
    assert_eq!(view["sender"]["command"][0], "curl", "{view:#}");
    let id = id_of(&view);
    let decided = approve(&id, &["--scope", "session"]).await;
    assert!(
        decided
            .stdout
            .starts_with(&format!("approved for this session: POST {first}")),
        "{decided:?}"
    );
    let out = output_of(step).await;
    assert_eq!(status_and_body(&out.stdout).0, 200, "{out:?}");

    // The same method, host and path again: no one is asked.
    let again = tokio::time::timeout(
        Duration::from_secs(20),
        output_of(session.sh(&curl_post(&first, "body.json"))),
    )
    .await
    .expect("a request approved for the session is not held again");
    assert_eq!(status_and_body(&again.stdout).0, 200, "{again:?}");
    assert!(pending(&m).await.is_empty());

    // Another path under the same ask rule is held again.
    let step = session.sh(&curl_post(&other, "body.json"));
    let held = await_one(&m).await;
    assert_eq!(held["url"], other.as_str(), "{held:#}");
    let second_id = id_of(&held);
    assert_ne!(second_id, id);
    deny(&second_id, "only the first one").await;
    let out = output_of(step).await;
    assert_eq!(status_and_body(&out.stdout).0, 403, "{out:?}");

    let a = format!("/echo/pay/{m}/a");
    assert_eq!(env.upstream.targets(), vec![a.clone(), a]);
    let audit = session.audit_session().await;
    session.stop().await;
    let record = env.record_of(&audit);
    let requested: Vec<&Value> = record
        .events
        .iter()
        .filter(|e| e["kind"] == "approval_requested")
        .collect();
    assert_eq!(requested.len(), 2, "{}", record.brief());
    let decided = record.approval("approval_decided", &id);
    assert_eq!(decided["scope"], "session", "{decided}");
    assert_eq!(decided["by"], ROOT, "{decided}");
    let http = record.http(&format!("{m}/a"));
    assert_eq!(http.len(), 2, "{}", record.brief());
    assert_eq!(
        http[1]["reason"],
        format!("approved for the session by {ROOT}").as_str(),
        "{}",
        record.brief()
    );
    record.assert_timeline_has(format!("approval {id} approved for the session by {ROOT}"));
    env.assert_verifies(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_request_gets_a_403_with_the_note_and_never_leaves() {
    let env = Env::new().await;
    let m = marker("deny");
    let url = env.url(&format!("/echo/pay/{m}"));
    let python = format!(
        r#"
import requests
r = requests.post("{url}", json={{"amount": 1000000, "to": "{m}"}}, timeout=100)
print(r.status_code, r.headers.get("x-airlock-decision"))
print(r.text)
"#
    );
    env.put("client.py", &python);
    let run = env.run(&[], "python3 client.py");
    let view = await_one(&m).await;
    let id = id_of(&view);
    assert_eq!(
        serde_json::from_str::<Value>(view["body_preview"].as_str().unwrap()).unwrap()["to"],
        m.as_str(),
        "{view:#}"
    );
    let note = "not during the change freeze";
    let decided = deny(&id, note).await;
    assert_eq!(
        decided.stdout,
        format!("denied: POST {url} (approval {id}, by {ROOT}); note: {note}\n"),
        "{decided:?}"
    );

    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("403 deny\n"), "{out:?}");
    assert!(
        out.stdout.contains("Airlock refused this request."),
        "{out:?}"
    );
    assert!(
        out.stdout
            .contains(&format!("{ROOT} denied it (approval {id}): {note}")),
        "{out:?}"
    );
    assert_eq!(env.upstream.hits(), 0, "a denied request never leaves");

    let record = env.record();
    let decided = record.approval("approval_decided", &id);
    assert_eq!(decided["outcome"], "denied", "{decided}");
    assert_eq!(decided["by"], ROOT, "{decided}");
    assert_eq!(decided["note"], note, "{decided}");
    assert!(decided["scope"].is_null(), "{decided}");
    let http = record.http(&m);
    assert!(
        http.iter()
            .all(|h| h["decision"] == "deny" && h["status"] == 403),
        "{}",
        record.brief()
    );
    // What it tried to send is on record, whole.
    let sent: Value = serde_json::from_slice(&request_body(http[0])).unwrap();
    assert_eq!(sent["to"], m.as_str(), "{}", record.brief());
    assert_eq!(sent["amount"], 1000000);
    assert_eq!(http[0]["request_body_truncated"], false);
    record.assert_timeline_has(format!("approval {id} denied by {ROOT} after"));
    record.assert_timeline_has(format!("\"{note}\""));
    env.assert_verifies(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_nobody_decides_is_refused_when_its_time_runs_out() {
    let env = Env::with_ask("timeout = \"2s\"\n").await;
    let m = marker("expire");
    let url = env.url(&format!("/echo/pay/{m}"));
    let payload = format!(r#"{{"expired": "{m}"}}"#);
    env.put("body.json", &payload);
    // The sandbox lives on after the answer, for a late decision.
    let script = format!(
        "{} > answer.txt; touch answered; while [ ! -e stop ]; do sleep 0.05; done",
        curl_post(&url, "body.json")
    );
    let run = env.run(&[], &script);
    env.await_file("answered").await;
    let answer = std::fs::read_to_string(env.ws().join("answer.txt")).unwrap();
    let (code, body) = status_and_body(&answer);
    assert_eq!(code, 403, "{answer}");
    // "... nobody approved it within 2s (approval ID) ..."
    let id = body
        .split_once("nobody approved it within 2s (approval ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(id, _)| id.to_owned())
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(pending(&m).await.is_empty());
    assert_eq!(env.upstream.hits(), 0);
    // Deciding afterwards is refused by name.
    let late = airlock(&["approve", &id]).await;
    assert_eq!(late.status, 1, "{late:?}");
    assert!(late.stderr.contains("was already expired"), "{late:?}");
    env.put("stop", "");
    run.finish().await;

    let record = env.record();
    let requested = record.approval("approval_requested", &id);
    assert_eq!(requested["timeout_ms"], 2000, "{requested}");
    let decided = record.approval("approval_decided", &id);
    assert_eq!(decided["outcome"], "expired", "{decided}");
    assert!(decided["by"].is_null(), "{decided}");
    assert!(decided["waited_ms"].as_u64().unwrap() >= 2000, "{decided}");
    let http = record.http(&m);
    assert_eq!(http.len(), 1, "{}", record.brief());
    assert_eq!(http[0]["decision"], "deny");
    assert_eq!(
        request_body(http[0]),
        payload.as_bytes(),
        "{}",
        record.brief()
    );
    record.assert_timeline_has(format!("approval {id} expired after"));
    record.assert_timeline_has("nobody decided");
    env.assert_verifies(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_is_decided_only_once() {
    let env = Env::new().await;
    let m = marker("twice");
    let url = env.url(&format!("/echo/pay/{m}"));
    env.put("body.json", "{}");
    // The sandbox lives on after the answer, for the second decisions.
    let script = format!(
        "{} > answer.txt; touch answered; while [ ! -e stop ]; do sleep 0.05; done",
        curl_post(&url, "body.json")
    );
    let run = env.run(&[], &script);
    let id = id_of(&await_one(&m).await);
    approve(&id, &[]).await;
    env.await_file("answered").await;

    for second in [
        vec!["approve", &id],
        vec!["deny", &id, "--note", "too late"],
    ] {
        let out = airlock(&second).await;
        assert_eq!(out.status, 1, "{second:?}: {out:?}");
        assert_eq!(
            out.stderr,
            format!(
                "airlock: approval {id} was already approved; a request is decided only once\n"
            ),
            "{second:?}: {out:?}"
        );
    }
    // An id nobody handed out.
    let out = airlock(&["approve", "zzzzzzzzzz"]).await;
    assert_eq!(out.status, 1, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(
        out.stderr.contains("no running session holds approval"),
        "{out:?}"
    );

    env.put("stop", "");
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    let answer = std::fs::read_to_string(env.ws().join("answer.txt")).unwrap();
    assert_eq!(status_and_body(&answer).0, 200, "{answer}");
    assert_eq!(env.upstream.hits(), 1);
    let record = env.record();
    let decided = record.approval("approval_decided", &id);
    assert_eq!(decided["outcome"], "approved", "{decided}");
    env.assert_verifies(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_rules_approvers_may_decide() {
    let env = Env::with_ask("timeout = \"60s\"\napprovers = [\"someone-else\"]\n").await;
    let m = marker("approvers");
    let url = env.url(&format!("/echo/pay/{m}"));
    env.put("body.json", "{}");
    let script = format!(
        "{} > held.txt & while [ ! -e stop ]; do sleep 0.05; done",
        curl_post(&url, "body.json")
    );
    let run = env.run(&[], &script);
    let view = await_one(&m).await;
    assert_eq!(
        view["approvers"],
        serde_json::json!(["someone-else"]),
        "{view:#}"
    );
    let id = id_of(&view);
    for decision in [vec!["approve", &id], vec!["deny", &id]] {
        let out = airlock(&decision).await;
        assert_eq!(out.status, 1, "{out:?}");
        assert_eq!(
            out.stderr,
            format!(
                "airlock: {ROOT} may not decide approval {id}: its rule names the approvers someone-else\n"
            ),
            "{out:?}"
        );
    }
    // Still waiting for someone who may, until the sandbox ends.
    assert_eq!(pending(&m).await.len(), 1);
    env.put("stop", "");
    run.finish().await;
    assert_eq!(env.upstream.hits(), 0);
    let record = env.record();
    let decided = record.approval("approval_decided", &id);
    assert_eq!(decided["outcome"], "abandoned", "{decided}");
    assert!(decided["by"].is_null(), "{decided}");
}

// ---------------------------------------------------------------------------
// Many requests, and limits.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn many_held_requests_wait_while_other_requests_flow() {
    const HELD: usize = 20;
    let env = Env::new().await;
    let m = marker("many");
    env.put("body.json", "{\"amount\": 1}");
    std::fs::create_dir(env.ws().join("out")).unwrap();
    let held_url = env.url(&format!("/echo/pay/{m}"));
    let free_url = env.url(&format!("/echo/{m}/free"));
    let script = format!(
        "i=0; while [ $i -lt {HELD} ]; do \
           curl -sS --max-time 100 -X POST --data-binary @body.json -o /dev/null -w '%{{http_code}}' '{held_url}/'$i > out/$i & \
           i=$((i+1)); \
         done; \
         while [ ! -e go ]; do sleep 0.05; done; \
         for j in 1 2 3 4 5; do curl -sS --max-time 10 -o /dev/null -w '%{{http_code}} %{{time_total}}\\n' '{free_url}/'$j >> free.txt; done; \
         touch free.done; wait"
    );
    let run = env.run(&[], &script);
    let held = await_pending(&m, HELD).await;
    env.put("go", "");

    // While all of them wait, allowed requests go through promptly.
    env.await_file("free.done").await;
    let free = std::fs::read_to_string(env.ws().join("free.txt")).unwrap();
    assert_eq!(free.lines().count(), 5, "{free}");
    for line in free.lines() {
        let (code, seconds) = line.split_once(' ').unwrap();
        assert_eq!(code, "200", "{free}");
        assert!(seconds.parse::<f64>().unwrap() < 5.0, "{free}");
    }
    assert_eq!(pending(&m).await.len(), HELD, "still all held");
    assert_eq!(env.upstream.hits(), 5, "only the allowed requests went out");

    // Even ones approved, odd ones denied.
    let index = |view: &Value| -> usize {
        let url = view["url"].as_str().unwrap();
        url.rsplit('/').next().unwrap().parse().unwrap()
    };
    for view in &held {
        let id = id_of(view);
        match index(view) % 2 {
            0 => approve(&id, &[]).await,
            _ => deny(&id, "odd").await,
        };
    }
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    for i in 0..HELD {
        let code = std::fs::read_to_string(env.ws().join(format!("out/{i}"))).unwrap();
        let want = if i % 2 == 0 { "200" } else { "403" };
        assert_eq!(code, want, "request {i}");
    }
    assert_eq!(env.upstream.hits(), 5 + HELD / 2);
    let record = env.record();
    for view in &held {
        let decided = record.approval("approval_decided", &id_of(view));
        let want = if index(view) % 2 == 0 {
            "approved"
        } else {
            "denied"
        };
        assert_eq!(decided["outcome"], want, "{decided}");
    }
    env.assert_verifies(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn past_the_cap_a_new_request_is_refused_at_once() {
    let env = Env::new().await;
    let m = marker("cap");
    env.put("body.json", "{}");
    let url = |n: u32| env.url(&format!("/echo/pay/{m}/{n}"));
    let script = format!(
        "{} > one.txt & {} > two.txt & \
         while [ ! -e go ]; do sleep 0.05; done; \
         {} > three.txt; touch three.done; wait",
        curl_post(&url(1), "body.json"),
        curl_post(&url(2), "body.json"),
        curl_post(&url(3), "body.json"),
    );
    let run = env.run(&["--approval-cap", "2"], &script);
    let held = await_pending(&m, 2).await;
    let go = Instant::now();
    env.put("go", "");
    let third = env.await_file("three.done").await;
    assert!(third.is_empty());
    assert!(
        go.elapsed() < Duration::from_secs(10),
        "the third request was refused at once, not held: {:?}",
        go.elapsed()
    );
    let third = std::fs::read_to_string(env.ws().join("three.txt")).unwrap();
    let (code, body) = status_and_body(&third);
    assert_eq!(code, 403, "{third}");
    assert!(
        body.contains("2 requests are already waiting for approval in this session (the cap)"),
        "{third}"
    );
    let still: Vec<Value> = pending(&m).await;
    assert_eq!(still.len(), 2, "{still:#?}");
    assert!(
        still.iter().all(|p| p["url"] != url(3).as_str()),
        "{still:#?}"
    );

    for view in &held {
        approve(&id_of(view), &[]).await;
    }
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    for file in ["one.txt", "two.txt"] {
        let text = std::fs::read_to_string(env.ws().join(file)).unwrap();
        assert_eq!(status_and_body(&text).0, 200, "{file}: {text}");
    }
    let record = env.record();
    let asked: Vec<&Value> = record
        .events
        .iter()
        .filter(|e| e["kind"] == "approval_requested")
        .collect();
    assert_eq!(
        asked.len(),
        2,
        "the refused one was never held: {}",
        record.brief()
    );
    env.assert_verifies(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_is_held_whole_up_to_1_mib_and_a_larger_one_is_refused_at_once() {
    const MIB: usize = 1024 * 1024;
    let env = Env::new().await;
    let m = marker("big");
    let exact: Vec<u8> = (0..MIB).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(env.ws().join("exact.bin"), &exact).unwrap();
    std::fs::write(env.ws().join("over.bin"), vec![b'x'; MIB + 1]).unwrap();
    let over = env.url(&format!("/echo/pay/{m}/over"));
    let held = env.url(&format!("/echo/pay/{m}/exact"));
    let script = format!(
        "{} > over.txt; touch over.done; {} > exact.txt",
        curl_post(&over, "over.bin"),
        curl_post(&held, "exact.bin")
    );
    let started = Instant::now();
    let run = env.run(&[], &script);
    let view = await_one(&m).await;
    // The larger one never waited: it was refused before the other was sent.
    assert!(env.ws().join("over.done").exists());
    assert!(started.elapsed() < PATIENCE);
    let refused = std::fs::read_to_string(env.ws().join("over.txt")).unwrap();
    let (code, body) = status_and_body(&refused);
    assert_eq!(code, 403, "{refused}");
    assert!(
        body.contains("the body is over 1024 KiB, too large to hold for approval"),
        "{refused}"
    );

    assert_eq!(view["url"], held.as_str(), "{view:#}");
    assert_eq!(view["body_bytes"], MIB, "held whole");
    assert_eq!(view["body_sha256"], sha256_hex(&exact));
    assert_eq!(view["body_preview_truncated"], true);
    assert_eq!(
        view["body_preview"],
        std::str::from_utf8(&exact[..4096]).unwrap(),
        "the first 4 KiB"
    );
    approve(&id_of(&view), &[]).await;
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    let forwarded = std::fs::read_to_string(env.ws().join("exact.txt")).unwrap();
    let (code, echoed) = status_and_body(&forwarded);
    assert_eq!(code, 200);
    let echo: Value = serde_json::from_str(echoed).unwrap();
    assert!(
        echo["body"].as_str().unwrap().as_bytes() == exact.as_slice(),
        "the upstream got the body that was approved"
    );
    assert_eq!(env.upstream.targets(), vec![format!("/echo/pay/{m}/exact")]);
    let record = env.record();
    // The refused one's start is on record, marked cut, with its length.
    let over_record = record.http(&format!("{m}/over"));
    assert_eq!(over_record.len(), 1, "{}", record.brief());
    assert_eq!(over_record[0]["decision"], "deny");
    assert!(
        request_body(over_record[0]) == vec![b'x'; 64 * 1024],
        "the first 64 KiB"
    );
    assert_eq!(over_record[0]["request_body_truncated"], true);
    assert_eq!(over_record[0]["bytes_up"], MIB + 1);
    assert_eq!(
        record
            .events
            .iter()
            .filter(|e| e["kind"] == "approval_requested")
            .count(),
        1,
        "{}",
        record.brief()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn other_streams_of_the_same_http2_connection_go_on_while_one_is_held() {
    let env = Env::new().await;
    let m = marker("h2");
    env.put("body.json", "{}");
    let held = env.url(&format!("/echo/pay/{m}"));
    let free = env.url(&format!("/echo/{m}/free"));
    // Two transfers multiplexed on one HTTP/2 connection: the held POST
    // first, then a GET.
    let script = format!(
        "curl -sS --max-time 100 --http2 --parallel --parallel-max 2 \
           -X POST --data-binary @body.json -o held.out '{held}' \
           --next --http2 -o free.out -w '%{{http_version}} %{{num_connects}}\\n' '{free}'"
    );
    let run = env.run(&[], &script);
    let view = await_one(&m).await;
    let free_out = env.ws().join("free.out");
    eventually("the GET finishes while the POST is held", || {
        std::fs::read_to_string(&free_out).is_ok_and(|t| serde_json::from_str::<Value>(&t).is_ok())
    })
    .await;
    assert_eq!(pending(&m).await.len(), 1, "the POST is still held");
    assert_eq!(env.upstream.targets(), vec![format!("/echo/{m}/free")]);
    approve(&id_of(&view), &[]).await;
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    let held_out = std::fs::read_to_string(env.ws().join("held.out")).unwrap();
    let echo: Value = serde_json::from_str(&held_out).unwrap();
    assert_eq!(echo["method"], "POST");
    let record = env.record();
    let http = record.http(&m);
    assert_eq!(http.len(), 2, "{}", record.brief());
    assert!(
        http.iter().all(|h| h["http_version"] == "HTTP/2.0"),
        "{}",
        record.brief()
    );
    let tcp: Vec<&Value> = record
        .events
        .iter()
        .filter(|e| e["kind"] == "tcp")
        .collect();
    let mut connections: Vec<&Value> = tcp.iter().map(|e| &e["connection"]).collect();
    connections.dedup();
    assert_eq!(connections.len(), 1, "one connection: {tcp:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_held_longer_than_every_proxy_timer_still_goes_out_when_approved() {
    // The proxy's own timers (a request head, a body, an idle body) are
    // 30 s; a person may take minutes.
    const HELD: Duration = Duration::from_secs(32);
    let env = Env::new().await;
    let m = marker("long");
    env.put("body.json", "{\"slow\": true}");
    let url = |v: &str| env.url(&format!("/echo/pay/{m}/{v}"));
    let script = format!(
        "{} --http1.1 > h1.txt & {} --http2 > h2.txt & wait",
        curl_post(&url("h1"), "body.json"),
        curl_post(&url("h2"), "body.json"),
    );
    let run = env.run(&[], &script);
    let held = await_pending(&m, 2).await;
    tokio::time::sleep(HELD).await;
    assert_eq!(pending(&m).await.len(), 2, "both still held");
    for view in &held {
        approve(&id_of(view), &[]).await;
    }
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    let record = env.record();
    for (file, version) in [("h1", "HTTP/1.1"), ("h2", "HTTP/2.0")] {
        let text = std::fs::read_to_string(env.ws().join(format!("{file}.txt"))).unwrap();
        let (code, echoed) = status_and_body(&text);
        assert_eq!(code, 200, "{file}: {text}");
        let echo: Value = serde_json::from_str(echoed).unwrap();
        assert_eq!(echo["body"], "{\"slow\": true}", "{file}: {text}");
        let http = record.http(&format!("{m}/{file}"));
        assert_eq!(http[0]["http_version"], version, "{}", record.brief());
    }
    for view in &held {
        let decided = record.approval("approval_decided", &id_of(view));
        let waited = decided["waited_ms"].as_u64().unwrap();
        assert!(waited >= HELD.as_millis() as u64, "{decided}");
    }
}

// ---------------------------------------------------------------------------
// A wait that ends without a decision.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_hangs_up_withdraws_its_request() {
    let env = Env::new().await;
    let m = marker("hangup");
    let url = env.url(&format!("/echo/pay/{m}"));
    env.put("body.json", "{}");
    let script = format!(
        "{} & client=$!; while [ ! -e hangup ]; do sleep 0.05; done; kill $client; wait; echo hung up; \
         while [ ! -e stop ]; do sleep 0.05; done",
        curl_post(&url, "body.json")
    );
    let run = env.run(&[], &script);
    let id = id_of(&await_one(&m).await);
    env.put("hangup", "");
    let deadline = Instant::now() + PATIENCE;
    while !pending(&m).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the abandoned request leaves the list"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let late = airlock(&["approve", &id]).await;
    assert_eq!(late.status, 1, "{late:?}");
    assert!(late.stderr.contains("was already abandoned"), "{late:?}");
    env.put("stop", "");
    let out = run.finish().await;
    assert_eq!(out.stdout, "hung up\n", "{out:?}");
    assert_eq!(env.upstream.hits(), 0);
    let record = env.record();
    let decided = record.approval("approval_decided", &id);
    assert_eq!(decided["outcome"], "abandoned", "{decided}");
    record.assert_timeline_has("the client went away or the session ended first");
    env.assert_verifies(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_still_held_when_the_sandbox_ends_is_abandoned_on_the_record() {
    let env = Env::new().await;
    let m = marker("ends");
    env.put("body.json", "{}");
    let url = env.url(&format!("/echo/pay/{m}"));
    // The command ends while its request waits.
    let script = format!(
        "{} & while [ ! -e stop ]; do sleep 0.05; done",
        curl_post(&url, "body.json")
    );
    let run = env.run(&[], &script);
    let id = id_of(&await_one(&m).await);
    let socket = socket_holding(&m).await;
    env.put("stop", "");
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    assert!(pending(&m).await.is_empty());
    assert!(!socket.exists(), "{} is removed", socket.display());
    let late = airlock(&["approve", &id]).await;
    assert_eq!(late.status, 1, "{late:?}");
    assert_eq!(env.upstream.hits(), 0);
    let record = env.record();
    let decided = record.approval("approval_decided", &id);
    assert_eq!(decided["outcome"], "abandoned", "{decided}");
    env.assert_verifies(&record);
}

// ---------------------------------------------------------------------------
// Telling a person.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn the_webhook_alone_is_enough_to_decide() {
    let receiver = Receiver::start(1).await;
    let env = Env::new().await;
    let m = marker("hook");
    let url = env.url(&format!("/echo/pay/{m}"));
    let body = format!("{{\"to\": \"{m}\"}}");
    env.put("body.json", &body);
    let run = env.run(
        &["--approval-webhook", &receiver.url()],
        &curl_post(&url, "body.json"),
    );
    // The first try is answered 503; the announcement is tried again.
    eventually("the webhook is tried twice", || receiver.got().len() >= 2).await;
    let got = receiver.got();
    assert_eq!(got[0], got[1], "the retry repeats the announcement");
    assert_eq!(got[1].method, "POST");
    assert_eq!(got[1].path, "/airlock-hook");
    assert_eq!(got[1].content_type, "application/json");
    let hook = &got[1].body;
    assert_eq!(hook["kind"], "approval_requested", "{hook:#}");
    let approval = &hook["approval"];
    let id = approval["id"].as_str().unwrap().to_owned();
    assert_eq!(approval["url"], url.as_str(), "{hook:#}");
    assert_eq!(approval["method"], "POST", "{hook:#}");
    assert_eq!(
        approval["body_sha256"],
        sha256_hex(body.as_bytes()),
        "{hook:#}"
    );
    assert_eq!(approval["body_preview"], body.as_str(), "{hook:#}");
    assert_eq!(approval["reason"], REASON, "{hook:#}");
    assert_eq!(approval["rule"], env.ask_rule().as_str(), "{hook:#}");
    assert_eq!(
        hook["decide"]["api"],
        format!("/v1/approvals/{id}").as_str()
    );
    assert_eq!(
        hook["decide"]["approve"],
        format!("airlock approve {id}").as_str()
    );
    assert_eq!(
        hook["decide"]["deny"],
        format!("airlock deny {id}").as_str()
    );
    assert_eq!(env.upstream.hits(), 0);

    // Decided with what the webhook said, and nothing else.
    approve(&id, &[]).await;
    let out = run.finish().await;
    assert_eq!(status_and_body(&out.stdout).0, 200, "{out:?}");
    assert_eq!(env.upstream.hits(), 1);
    assert_eq!(receiver.got().len(), 2, "announced once (one retry)");
    let record = env.record();
    assert_eq!(
        record.approval("approval_decided", &id)["outcome"],
        "approved"
    );
    env.assert_verifies(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn watching_shows_each_new_request_once_as_it_is_held() {
    use tokio::io::AsyncBufReadExt;
    let env = Env::new().await;
    let m = marker("watch");
    env.put("body.json", "{}");
    let mut watch = tokio::process::Command::new(AIRLOCK)
        .args(["approvals", "--watch", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    // The second is sent once the first was seen.
    let script = format!(
        "{} > 1.txt & while [ ! -e next ]; do sleep 0.05; done; {} > 2.txt & wait",
        curl_post(&env.url(&format!("/echo/pay/{m}/1")), "body.json"),
        curl_post(&env.url(&format!("/echo/pay/{m}/2")), "body.json"),
    );
    let run = env.run(&[], &script);
    let mut seen: Vec<Value> = Vec::new();
    // Both, then long enough for a few more looks (every 500 ms).
    let mut until = Instant::now() + PATIENCE;
    while Instant::now() < until {
        let left = until.saturating_duration_since(Instant::now());
        let Ok(line) = tokio::time::timeout(left, lines.next_line()).await else {
            break;
        };
        let line = line.unwrap().expect("watching goes on");
        let view: Value = serde_json::from_str(&line).unwrap();
        if view["url"].as_str().is_some_and(|u| u.contains(&m)) {
            seen.push(view);
            if seen.len() == 1 {
                env.put("next", "");
            }
            if seen.len() == 2 {
                until = Instant::now() + Duration::from_millis(1500);
            }
        }
    }
    assert_eq!(seen.len(), 2, "each once: {seen:#?}");
    assert!(
        seen[0]["url"].as_str().unwrap().ends_with("/1"),
        "in order: {seen:#?}"
    );
    assert!(
        seen[1]["url"].as_str().unwrap().ends_with("/2"),
        "in order: {seen:#?}"
    );
    for view in &seen {
        approve(&id_of(view), &[]).await;
    }
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(env.upstream.hits(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_request_gets_its_credentials_and_approvers_never_see_the_secret() {
    const SECRET: &str = "sk-approvals-0123456789abcdef";
    let receiver = Receiver::start(0).await;
    let env = Env::with_rules(
        "timeout = \"60s\"\n",
        "[[credential]]\nname = \"api\"\nhosts = [\"api.test\"]\nheader = \"Authorization\"\nvalue = \"Bearer ${env:APPROVALS_TOKEN}\"\nplaceholder = \"APPROVALS_TOKEN\"\n",
    )
    .await;
    let m = marker("secret");
    let url = env.url(&format!("/echo/pay/{m}"));
    env.put("body.json", "{}");
    let script = format!(
        "curl -sS --max-time 100 -X POST -H \"X-Echo-Token: $APPROVALS_TOKEN\" --data-binary @body.json -w '\\n%{{http_code}}\\n' '{url}'"
    );
    let run = env.run_with(
        &["--approval-webhook", &receiver.url()],
        &script,
        &[("APPROVALS_TOKEN", SECRET)],
    );
    let view = await_one(&m).await;
    let id = id_of(&view);
    eventually("the webhook is called", || !receiver.got().is_empty()).await;
    let listed = airlock(&["approvals"]).await;
    for shown in [
        view.to_string(),
        receiver.got()[0].body.to_string(),
        listed.stdout,
        run.stderr_now(),
    ] {
        assert!(
            !shown.contains(SECRET),
            "an approver was shown the secret: {shown}"
        );
    }
    let token = view["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h[0] == "x-echo-token")
        .unwrap_or_else(|| panic!("{view:#}"));
    // What the client sent: the placeholder's dummy, swapped only once approved.
    assert!(
        token[1]
            .as_str()
            .unwrap()
            .starts_with("airlock-placeholder-approvals_token-"),
        "{view:#}"
    );

    approve(&id, &[]).await;
    let out = run.finish().await;
    let (code, echoed) = status_and_body(&out.stdout);
    assert_eq!(code, 200, "{out:?}");
    assert!(!echoed.contains(SECRET), "{out:?}");
    let seen = env.upstream.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].headers.get("authorization").unwrap(),
        format!("Bearer {SECRET}").as_str(),
        "the approved request went out with the credential"
    );
    assert_eq!(seen[0].headers.get("x-echo-token").unwrap(), SECRET);
    let record = env.record();
    assert!(
        !serde_json::to_string(&record.events)
            .unwrap()
            .contains(SECRET),
        "{}",
        record.brief()
    );
    assert_eq!(
        record.approval("approval_decided", &id)["outcome"],
        "approved"
    );
    env.assert_verifies(&record);
}

// ---------------------------------------------------------------------------
// Who can decide.
// ---------------------------------------------------------------------------

/// What a hostile program in the sandbox tries, to approve its own held
/// request: find the approvals sockets (the test tells it every real path
/// and the id), connect and POST a decision, run `airlock approve` and
/// `airlock deny`. It writes what happened to attempts.txt.
const HOSTILE: &str = r#"
while [ ! -e id ]; do sleep 0.05; done
ID=$(cat id)
{
  echo "ls /run/airlock: $(ls -A /run/airlock 2>&1 | tr '\n' ' ')"
  echo "ls approvals: $(ls -A /run/airlock/approvals 2>&1 | tr '\n' ' ')"
  for s in $(cat sockets) /run/airlock/approvals/*.sock /proc/*/root/run/airlock/approvals/*.sock; do
    python3 probe.py "$s" "$ID"
  done
  "$AIRLOCK" approvals --json; echo "approvals exit $?"
  "$AIRLOCK" approve "$ID" --scope session; echo "approve exit $?"
  "$AIRLOCK" deny "$ID"; echo "deny exit $?"
} > attempts.txt 2>&1
touch tried
wait
"#;

/// Connect to the Unix socket argv[1] and POST an approval of argv[2].
const PROBE: &str = r#"
import socket, sys
path, id = sys.argv[1], sys.argv[2]
try:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(path)
    body = b'{"decision": "approve", "scope": "session"}'
    s.sendall(b"POST /v1/approvals/%s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (id.encode(), len(body), body))
    print("socket", path, "REACHED", s.recv(300))
except OSError as e:
    print("socket", path, "refused", e.errno)
"#;

/// The sandboxed program tries to approve its own request (see `HOSTILE`);
/// every way fails, the request is still held, and the test denies it.
async fn the_sandbox_cannot_decide(extra: &[&str]) {
    let env = Env::new().await;
    let m = marker("self");
    let url = env.url(&format!("/echo/pay/{m}"));
    env.put("body.json", "{}");
    env.put("probe.py", PROBE);
    let script = format!(
        "{} > held.txt 2>&1 &\n{HOSTILE}",
        curl_post(&url, "body.json")
    );
    let airlock_env = format!("AIRLOCK={AIRLOCK}");
    let mut args = vec!["--env", &airlock_env];
    args.extend_from_slice(extra);
    let run = env.run(&args, &script);
    let id = id_of(&await_one(&m).await);

    // The session's own socket is its owner's alone, in a private directory.
    use std::os::unix::fs::PermissionsExt;
    let ours = socket_holding(&m).await;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&ours), 0o600, "{}", ours.display());
    assert_eq!(mode(ours.parent().unwrap()), 0o700);
    // The program is told every socket's real path, its own first.
    let own = ours.to_string_lossy().into_owned();
    let mut sockets = vec![own.clone()];
    sockets.extend(
        std::fs::read_dir("/run/airlock/approvals")
            .unwrap()
            .map(|e| e.unwrap().path().to_string_lossy().into_owned())
            .filter(|p| p.ends_with(".sock") && *p != own),
    );
    env.put("sockets", &sockets.join("\n"));
    env.put("id", &id);
    env.await_file("tried").await;
    let attempts = std::fs::read_to_string(env.ws().join("attempts.txt")).unwrap();
    assert!(!attempts.contains("REACHED"), "{attempts}");
    assert_eq!(
        attempts.matches(" refused ").count(),
        attempts
            .lines()
            .filter(|l| l.starts_with("socket "))
            .count(),
        "{attempts}"
    );
    assert!(
        attempts.contains(&sockets[0]),
        "each real socket was tried: {attempts}"
    );
    assert!(
        !attempts.contains(&m),
        "the sandbox lists nothing: {attempts}"
    );
    for tried in ["approvals", "approve", "deny"] {
        assert!(attempts.contains(&format!("{tried} exit ")), "{attempts}");
        assert!(!attempts.contains(&format!("{tried} exit 0")), "{attempts}");
    }

    // Still waiting for a person, who says no.
    let still = pending(&m).await;
    assert_eq!(still.len(), 1, "{still:#?}");
    assert_eq!(id_of(&still[0]), id);
    deny(&id, "nice try").await;
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    let held = std::fs::read_to_string(env.ws().join("held.txt")).unwrap();
    assert_eq!(status_and_body(&held).0, 403, "{held}");
    assert!(held.contains("nice try"), "{held}");
    assert_eq!(env.upstream.hits(), 0);
    let record = env.record();
    let decided = record.approval("approval_decided", &id);
    assert_eq!(decided["outcome"], "denied", "{decided}");
    assert_eq!(decided["by"], ROOT, "{decided}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_cannot_approve_its_own_request() {
    the_sandbox_cannot_decide(&[]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_cannot_approve_its_own_request_even_with_unix_sockets() {
    the_sandbox_cannot_decide(&["--allow-unix-sockets"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_proxy_serves_the_approvals_api_to_token_holders_only() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let secrets = tempfile::tempdir().unwrap();
    let m = marker("proxy");
    let token = sha256_hex(m.as_bytes());
    let tokens = token_file(secrets.path(), "ops-bot", &token);
    let (proxy, admin) = proxy_with_admin(&pki, &upstream, Some(&tokens)).await;
    let url = format!("https://api.test:{}/echo/pay/{m}", upstream.port());
    let body = format!("{{\"to\": \"{m}\"}}");

    let args = ["-X", "POST", "--data-binary", &body, &url];
    let client = curl(&proxy, &args);
    let approver = async {
        // Found through the API alone.
        let deadline = Instant::now() + PATIENCE;
        let view = loop {
            let (status, list) = http_json(admin, "GET", "/v1/approvals", Some(&token), "").await;
            assert_eq!(status, 200, "{list}");
            let mine = list["pending"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["url"] == url.as_str())
                .cloned();
            if let Some(view) = mine {
                break view;
            }
            assert!(
                Instant::now() < deadline,
                "held within {PATIENCE:?}: {list}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let id = id_of(&view);
        let one = format!("/v1/approvals/{id}");
        assert_eq!(view["body_sha256"], sha256_hex(body.as_bytes()), "{view:#}");
        assert_eq!(upstream.hits(), 0);

        // No token, or a wrong one: 401, to reading and deciding alike.
        let approve = r#"{"decision": "approve"}"#;
        for (method, path, body) in [
            ("GET", "/v1/approvals", ""),
            ("POST", one.as_str(), approve),
        ] {
            for wrong in [None, Some("guessed-guessed-guessed"), Some(&token[1..])] {
                let (status, answer) = http_json(admin, method, path, wrong, body).await;
                assert_eq!(status, 401, "{method} {path} with {wrong:?}: {answer}");
                assert!(answer["error"].is_string(), "{answer}");
            }
        }
        // An id nobody holds, and a method the API does not take.
        let (status, answer) = http_json(
            admin,
            "POST",
            "/v1/approvals/zzzzzzzzzz",
            Some(&token),
            approve,
        )
        .await;
        assert_eq!(status, 404, "{answer}");
        let (status, answer) = http_json(admin, "DELETE", &one, Some(&token), "").await;
        assert_eq!(status, 405, "{answer}");
        // A decision the API cannot read is refused, and decides nothing.
        let huge = format!(
            r#"{{"decision": "approve", "note": "{}"}}"#,
            "n".repeat(17 * 1024)
        );
        for bad in [
            "{\"decision\": ",
            r#"{"decision": "maybe"}"#,
            r#"{"decision": "deny", "scope": "session"}"#,
            // Who decided is the token's name, never the client's word.
            r#"{"decision": "approve", "by": "alice (uid 1000)"}"#,
            &huge,
        ] {
            let (status, answer) = http_json(admin, "POST", &one, Some(&token), bad).await;
            assert_eq!(status, 400, "{}: {answer}", &bad[..bad.len().min(80)]);
            assert!(answer["error"].is_string(), "{answer}");
        }
        // (Counted from the record, which may trail the listing a little.)
        await_metric(admin, "airlock_approvals_pending 1").await;
        let (status, answer) = http_json(admin, "GET", &one, Some(&token), "").await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["pending"]["id"], id.as_str(), "still held: {answer}");

        let decision = r#"{"decision": "approve", "scope": "once", "note": "from the API"}"#;
        let (status, answer) = http_json(admin, "POST", &one, Some(&token), decision).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["decided"]["outcome"], "approved", "{answer}");
        assert_eq!(answer["decided"]["by"], "token ops-bot", "{answer}");
        let (status, answer) = http_json(admin, "POST", &one, Some(&token), decision).await;
        assert_eq!(status, 409, "decided once: {answer}");
        let (status, answer) = http_json(admin, "GET", &one, Some(&token), "").await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["decided"]["outcome"], "approved", "{answer}");
        id
    };
    let ((code, echoed, out), id) = tokio::join!(client, approver);
    assert_eq!(code, 200, "{out:?}");
    await_metric(admin, "airlock_approvals_pending 0").await;
    await_metric(admin, "airlock_approvals_total{outcome=\"approved\"} 1").await;
    let echo: Value = serde_json::from_str(&echoed).unwrap();
    assert_eq!(echo["body"], body.as_str());
    assert_eq!(upstream.hits(), 1);

    let events = proxy
        .events_when(|events| events.iter().any(|e| e["kind"] == "approval_decided"))
        .await;
    let decided: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "approval_decided" && e["approval"] == id.as_str())
        .collect();
    assert_eq!(decided.len(), 1, "{events:#?}");
    assert_eq!(decided[0]["by"], "token ops-bot", "{events:#?}");
    assert_eq!(decided[0]["note"], "from the API", "{events:#?}");
    let forwarded: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "request" && e["url"] == url.as_str())
        .collect();
    assert_eq!(forwarded.len(), 1, "{events:#?}");
    assert_eq!(
        forwarded[0]["reason"],
        format!("approved once by token ops-bot (approval {id})").as_str(),
        "{events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_file_others_can_read_or_with_a_short_token_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, proxy_policy(443)).unwrap();
    let readable = token_file(dir.path(), "ops-bot", "0123456789abcdef0123");
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let short = dir.path().join("short-tokens");
    std::fs::write(&short, "ops-bot:short\n").unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    for (file, why) in [
        (&readable, "others can read it; run `chmod 600".to_owned()),
        (&short, "line 1: expected NAME:TOKEN".to_owned()),
    ] {
        let run = tokio::process::Command::new(AIRLOCK)
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
            ])
            .arg("--policy")
            .arg(&policy)
            .arg("--approval-token-file")
            .arg(file)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(PATIENCE, run)
            .await
            .expect("airlock proxy refuses at once")
            .unwrap();
        let out = ClientOutput::from(out);
        assert_ne!(out.status, 0, "{out:?}");
        assert!(out.stderr.contains(&why), "{out:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_token_file_the_admin_endpoint_decides_nothing() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let (proxy, admin) = proxy_with_admin(&pki, &upstream, None).await;
    let m = marker("no-tokens");
    let url = format!("https://api.test:{}/echo/pay/{m}", upstream.port());
    let args = ["-X", "POST", "--data-binary", "{}", &url];
    let client = curl(&proxy, &args);
    let person = async {
        let id = id_of(&await_one(&m).await);
        let decision = r#"{"decision": "approve"}"#;
        for (method, path, body) in [
            ("GET", "/v1/approvals".to_owned(), ""),
            ("POST", format!("/v1/approvals/{id}"), decision),
        ] {
            let (status, answer) = http_json(admin, method, &path, None, body).await;
            assert_eq!(status, 404, "{method} {path}: {answer}");
        }
        assert_eq!(http_json(admin, "GET", "/healthz", None, "").await.0, 200);
        // Still held; its owner decides on the approvals socket, with a
        // note longer than is kept.
        assert_eq!(pending(&m).await.len(), 1);
        let note = format!("no tokens here {}", "x".repeat(2000));
        let denied = deny(&id, &note).await;
        assert!(denied.stdout.starts_with("denied: POST"), "{denied:?}");
        id
    };
    let ((code, body, out), id) = tokio::join!(client, person);
    assert_eq!(code, 403, "{out:?}");
    assert!(body.contains("no tokens here"), "{body}");
    assert_eq!(upstream.hits(), 0);
    let events = proxy
        .events_when(|events| events.iter().any(|e| e["kind"] == "approval_decided"))
        .await;
    let decided = events
        .iter()
        .find(|e| e["kind"] == "approval_decided" && e["approval"] == id.as_str())
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(decided["by"], ROOT, "{decided}");
    let kept = decided["note"].as_str().unwrap();
    assert_eq!(
        kept.chars().count(),
        1024,
        "notes are kept up to 1,024 characters"
    );
    assert!(kept.starts_with("no tokens here x"), "{kept}");
}

// ---------------------------------------------------------------------------
// Report mode.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn in_report_mode_an_ask_is_recorded_and_nothing_is_held() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let policy = proxy_policy(upstream.port()).replacen(
        "version = 1\n",
        "version = 1\ndefault = \"report\"\n",
        1,
    );
    let mut opts = ProxyOptions::new(&policy);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    let proxy = AirlockProxy::start(AIRLOCK, opts);
    let m = marker("report");
    let url = format!("https://api.test:{}/echo/pay/{m}", upstream.port());
    let started = Instant::now();
    let (code, _, out) = curl(&proxy, &["-X", "POST", "--data-binary", "{}", &url]).await;
    assert_eq!(code, 200, "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "not held");
    assert_eq!(upstream.hits(), 1);
    let events = proxy
        .events_when(|events| events.iter().any(|e| e["kind"] == "request"))
        .await;
    let request = events
        .iter()
        .find(|e| e["kind"] == "request" && e["url"] == url.as_str())
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(request["decision"], "report", "{request}");
    assert_eq!(
        request["reason"], "an [[ask]] rule holds this request for a person's approval",
        "{request}"
    );
    assert!(
        !events.iter().any(|e| e["kind"]
            .as_str()
            .unwrap_or_default()
            .starts_with("approval")),
        "{events:#?}"
    );
}

// ---------------------------------------------------------------------------
// What the approver sees: nothing that changes a request's meaning hidden.
// ---------------------------------------------------------------------------

/// The part of `airlock approvals`' text about request `id`.
fn section<'a>(listing: &'a str, id: &str) -> &'a str {
    listing
        .split("\n\n")
        .find(|s| s.starts_with(id))
        .unwrap_or_else(|| panic!("{id} is listed: {listing}"))
}

/// `airlock approvals` as a person reads it, which must succeed.
async fn listing() -> String {
    let out = airlock(&["approvals"]).await;
    assert_eq!(out.status, 0, "airlock approvals: {out:?}");
    assert!(!out.stdout.contains('\x1b'), "no raw escape: {out:?}");
    out.stdout
}

/// A curl POST of the workspace file `file` to `url` with extra `-H`
/// headers, in the background, printing to `out`.
fn curl_post_with(url: &str, file: &str, headers: &[&str], out: &str) -> String {
    let headers: String = headers.iter().map(|h| format!(" -H '{h}'")).collect();
    format!(
        "curl -sS --max-time 100 -X POST{headers} --data-binary @{file} -w '\\n%{{http_code}}\\n' '{url}' > {out} &"
    )
}

/// Deny every request held with `marker`, then let the run end.
async fn deny_all(run: Running, views: &[Value]) {
    for view in views {
        deny(&id_of(view), "test over").await;
    }
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_approvers_view_shows_a_method_override_in_every_spelling() {
    let env = Env::new().await;
    let m = marker("override");
    env.put("body.json", "{\"id\": 7}");
    let spellings: [&[&str]; 5] = [
        &["X-HTTP-Method-Override: DELETE"],
        &["x-http-method: DELETE"],
        &["X-Method-Override: DELETE"],
        &["X-HTTP-METHOD-OVERRIDE: DELETE"],
        // Sent twice: once harmless, once not.
        &[
            "x-http-method-override: GET",
            "X-Http-Method-Override: DELETE",
        ],
    ];
    let mut script = String::new();
    for (n, headers) in spellings.iter().enumerate() {
        let mut all = vec!["content-type: application/json"];
        all.extend_from_slice(headers);
        let url = env.url(&format!("/echo/pay/{m}/{n}"));
        script += &curl_post_with(&url, "body.json", &all, &format!("{n}.txt"));
    }
    script += " wait";
    let run = env.run(&[], &script);
    let views = await_pending(&m, spellings.len()).await;
    let shown = listing().await;
    for view in &views {
        let id = id_of(view);
        let text = section(&shown, &id);
        assert!(
            text.contains("may make the server treat this POST as DELETE"),
            "the override is a warning: {text}"
        );
        let header = text
            .lines()
            .find(|l| {
                l.starts_with("    ")
                    && l.to_ascii_lowercase().contains("method")
                    && l.contains(": DELETE")
            })
            .unwrap_or_else(|| panic!("the header is shown: {text}"));
        assert!(header.contains("[method override"), "{header}");
        assert!(text.contains("content-type: application/json"), "{text}");
        assert!(text.contains("id = 7"), "{text}");
        if view["url"].as_str().unwrap().ends_with("/4") {
            assert!(text.contains(": GET"), "both values: {text}");
            assert!(text.contains("sent 2 times"), "{text}");
        }
    }
    assert_eq!(env.upstream.hits(), 0);
    deny_all(run, &views).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn padding_cannot_hide_a_later_amount_from_the_approver() {
    let env = Env::new().await;
    let m = marker("padded");
    let pad = " ".repeat(100_000);
    // JSON: every field is shown, however long the one before it.
    env.put(
        "fields.json",
        &format!("{{\"amount\": 5, \"memo\": \"{pad}\", \"total\": 999999}}"),
    );
    // Not JSON (two documents): text, shown to the bound, the rest counted.
    env.put(
        "two.json",
        &format!("{{\"amount\": 5}}{pad}{{\"amount\": 999999}}"),
    );
    let json = "content-type: application/json";
    let script = format!(
        "{} {} wait",
        curl_post_with(
            &env.url(&format!("/echo/pay/{m}/fields")),
            "fields.json",
            &[json],
            "1.txt"
        ),
        curl_post_with(
            &env.url(&format!("/echo/pay/{m}/two")),
            "two.json",
            &[json],
            "2.txt"
        ),
    );
    let run = env.run(&[], &script);
    let views = await_pending(&m, 2).await;
    let shown = listing().await;
    let by_path = |end: &str| {
        views
            .iter()
            .find(|v| v["url"].as_str().unwrap().ends_with(end))
            .map(id_of)
            .unwrap()
    };
    let (fields, two) = (by_path("/fields"), by_path("/two"));

    let text = section(&shown, &fields);
    assert!(text.contains("amount = 5"), "{text}");
    assert!(
        text.contains("total = 999999"),
        "the later field is shown: {text}"
    );
    assert!(text.contains("more characters not shown"), "{text}");
    assert!(
        text.contains(&format!(
            "see all of it with `airlock approvals show {fields}`"
        )),
        "{text}"
    );

    let text = section(&shown, &two);
    assert!(!text.contains("999999"), "past the bound here: {text}");
    assert!(text.contains("but the body is not JSON"), "{text}");
    assert!(text.contains("NOT SHOWN: 1 more line ("), "{text}");
    assert!(
        text.contains(&format!(
            "see all of it with `airlock approvals show {two}`"
        )),
        "{text}"
    );

    // Decided, a request is no longer held: `show` says how it ended, and
    // the session goes on answering.
    deny(&fields, "too much").await;
    let done = airlock(&["approvals", "show", &fields]).await;
    assert_eq!(done.status, 0, "{done:?}");
    assert!(
        done.stdout
            .contains(&format!("denied by {ROOT}; the request is no longer held")),
        "{done:?}"
    );
    assert_eq!(pending(&m).await.len(), 1, "the session still answers");

    // The command the view names shows it all.
    let whole = airlock(&["approvals", "show", &two]).await;
    assert_eq!(whole.status, 0, "{whole:?}");
    assert!(whole.stdout.contains("{\"amount\": 999999}"), "{whole:?}");
    assert!(!whole.stdout.contains("NOT SHOWN"), "{whole:?}");
    assert!(whole.stdout.contains("headers (all):"), "{whole:?}");
    assert!(
        whole.stdout.contains("\n    user-agent: curl/"),
        "every header: {whole:?}"
    );
    let whole = airlock(&["approvals", "show", &two, "--json"]).await;
    assert_eq!(whole.status, 0, "{whole:?}");
    let answer: Value = serde_json::from_str(&whole.stdout).unwrap();
    let lines = &answer["pending"]["shown"]["body"]["lines"];
    assert!(
        lines[0].as_str().unwrap().ends_with("{\"amount\": 999999}"),
        "{answer:#}"
    );
    assert!(answer["pending"]["shown"]["body"]["hidden"].is_null());
    let left: Vec<Value> = views.into_iter().filter(|v| id_of(v) == two).collect();
    deny_all(run, &left).await;

    // Decided, it is no longer held, and `show` says so.
    let after = airlock(&["approvals", "show", &two]).await;
    assert_ne!(after.status, 0, "the session ended: {after:?}");
    assert!(
        after
            .stderr
            .starts_with("airlock: no running session knows approval"),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_sent_twice_is_shown_both_times_and_flagged() {
    let env = Env::new().await;
    let m = marker("twice");
    env.put("twice.json", "{\"amount\":5,\"amount\":999999}");
    env.put("twice.form", "amount=5&to=bob&amount=999999");
    // Keys and values that try to write to the approver's terminal.
    env.put(
        "escape.json",
        "{\"\\u001b[2Kamount\": \"\\u001b]0;ok\\u0007\\r5\"}",
    );
    let script = format!(
        "{} {} {} wait",
        curl_post_with(
            &env.url(&format!("/echo/pay/{m}/json")),
            "twice.json",
            &["content-type: application/json"],
            "1.txt"
        ),
        curl_post_with(
            &env.url(&format!("/echo/pay/{m}/form")),
            "twice.form",
            &["content-type: application/x-www-form-urlencoded"],
            "2.txt"
        ),
        curl_post_with(
            &env.url(&format!("/echo/pay/{m}/escape")),
            "escape.json",
            &["content-type: application/json"],
            "3.txt"
        ),
    );
    let run = env.run(&[], &script);
    let views = await_pending(&m, 3).await;
    let shown = listing().await;
    for view in &views {
        let url = view["url"].as_str().unwrap();
        let text = section(&shown, &id_of(view));
        if url.ends_with("/escape") {
            // The key is quoted (it is not a plain name), the value escaped.
            let line = text
                .lines()
                .find(|l| l.contains("u001b[2Kamount"))
                .unwrap_or_else(|| panic!("the key is shown: {text}"));
            assert!(line.ends_with("= \"\\x1b]0;ok\\x07\\r5\""), "{line}");
            continue;
        }
        let what = if url.ends_with("/json") {
            "JSON"
        } else {
            "form"
        };
        assert!(
            text.contains(&format!("the {what} body sends amount more than once")),
            "{text}"
        );
        for value in ["5", "999999"] {
            let value = match what {
                "JSON" => value.to_owned(),
                _ => format!("\"{value}\""),
            };
            let line = format!("amount = {value}    [key sent more than once]");
            assert!(text.lines().any(|l| l.trim() == line), "{line:?} in {text}");
        }
    }
    deny_all(run, &views).await;
}

/// A receiver's URL is often its credential: Slack's and Teams' incoming
/// webhooks carry it in the path, others in `?token=`. It is used as
/// given, and shown nowhere but by its host: not in a log line, an error,
/// the record or an export.
#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_urls_secret_is_in_no_log_error_or_record() {
    // Refuses every announcement, so the run logs giving up on it.
    let receiver = Receiver::start(usize::MAX).await;
    let env = Env::new().await;
    let m = marker("hookurl");
    let secret = "hooksecret-9f1c";
    let base = receiver.url().replace("/airlock-hook", "");
    let hook = format!("{base}/services/T0/B0/{secret}?token={secret}");
    env.put("body.json", "{\"amount\":5}");
    let script = format!(
        "{} wait",
        curl_post_with(
            &env.url(&format!("/echo/pay/{m}")),
            "body.json",
            &["content-type: application/json"],
            "1.txt"
        )
    );
    let run = env.run(&["--approval-webhook", &hook], &script);
    let view = await_one(&m).await;
    eventually("the run gives up on the announcement", || {
        run.stderr_now().contains("giving up")
    })
    .await;
    let got = receiver.got();
    assert_eq!(
        got[0].path,
        format!("/services/T0/B0/{secret}"),
        "used as given"
    );
    assert_eq!(got.len(), 4, "four tries");
    deny(&id_of(&view), "test over").await;
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
    assert!(
        out.stderr.contains(&format!("{base}/***")),
        "the log names the receiver by its host: {}",
        out.stderr
    );
    assert!(!out.stderr.contains(secret), "{}", out.stderr);
    // Nor is it in the record: its files byte for byte, and what the CLI
    // reads back and exports.
    for entry in std::fs::read_dir(env.dir.path().join("audit")).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the record's files hold it"
        );
    }
    let record = env.record();
    assert!(!record.timeline.contains(secret));
    assert!(
        !serde_json::to_string(&record.events)
            .unwrap()
            .contains(secret)
    );
    // A URL refused at start is named by its host too.
    let refused = std::process::Command::new(AIRLOCK)
        .args(["run", "--no-audit", "--approval-webhook"])
        .arg(format!("ftp://hooks.example/services/{secret}"))
        .args(["--", "true"])
        .current_dir(env.ws())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(125), "{err}");
    assert_eq!(
        err.trim_end(),
        "airlock: --approval-webhook ftp://hooks.example/*** is not an http:// or https:// URL; give the receiver's full URL, e.g. https://bot.example/airlock"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_webhook_carries_the_headers_and_fields_the_approver_sees() {
    let receiver = Receiver::start(0).await;
    let env = Env::new().await;
    let m = marker("hookview");
    env.put("body.json", "{\"amount\":5,\"amount\":999999}");
    let url = env.url(&format!("/echo/pay/{m}"));
    let script = format!(
        "{} wait",
        curl_post_with(
            &url,
            "body.json",
            &[
                "content-type: application/json",
                "X-HTTP-Method-Override: DELETE"
            ],
            "1.txt"
        )
    );
    let run = env.run(&["--approval-webhook", &receiver.url()], &script);
    let view = await_one(&m).await;
    eventually("the webhook is called", || !receiver.got().is_empty()).await;
    let hook = receiver.got()[0].body.clone();
    let shown = &hook["approval"]["shown"];
    assert_eq!(
        shown, &view["shown"],
        "the same view as the CLI's: {hook:#}"
    );
    let headers = shown["headers"].as_array().unwrap();
    assert!(
        headers.iter().any(|h| h["name"] == "x-http-method-override"
            && h["value"] == "DELETE"
            && h["note"] == "method override"),
        "{hook:#}"
    );
    let warnings = shown["warnings"].to_string();
    assert!(warnings.contains("treat this POST as DELETE"), "{hook:#}");
    assert!(warnings.contains("sends amount more than once"), "{hook:#}");
    let body = &shown["body"];
    assert_eq!(body["form"], "json", "{hook:#}");
    let fields: Vec<(&str, &str, bool)> = body["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap(),
                f["value"].as_str().unwrap(),
                f["duplicate"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(fields, [("amount", "5", true), ("amount", "999999", true)]);
    deny_all(run, &[view]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_encoded_body_is_said_to_be_unreadable_and_a_nul_cannot_cut_the_view() {
    let env = Env::new().await;
    let m = marker("opaque");
    // Made in the sandbox: gzip of a charge, and JSON, a NUL, more JSON.
    let json = "content-type: application/json";
    let script = format!(
        "printf '{{\"amount\": 999999}}' | gzip -c > body.gz; printf '{{\"amount\":5}}\\000{{\"amount\":999999}}' > nul.json; {} {} wait",
        curl_post_with(
            &env.url(&format!("/echo/pay/{m}/gzip")),
            "body.gz",
            &[json, "Content-Encoding: gzip"],
            "1.txt"
        ),
        curl_post_with(
            &env.url(&format!("/echo/pay/{m}/nul")),
            "nul.json",
            &[json],
            "2.txt"
        ),
    );
    let run = env.run(&[], &script);
    let views = await_pending(&m, 2).await;
    let shown = listing().await;
    for view in &views {
        let text = section(&shown, &id_of(view));
        if view["url"].as_str().unwrap().ends_with("/gzip") {
            assert!(
                text.contains("! the body is gzip-encoded")
                    && text.contains("Airlock does not decode it"),
                "{text}"
            );
            assert!(
                text.contains("content-encoding: gzip    [the body is encoded]"),
                "{text}"
            );
            assert!(text.contains("00000000  1f 8b"), "the bytes as hex: {text}");
        } else {
            assert!(text.contains("but the body is not JSON"), "{text}");
            assert!(
                text.contains("    | {\"amount\":5}\\x00{\"amount\":999999}"),
                "both documents, the NUL escaped: {text}"
            );
        }
    }
    deny_all(run, &views).await;
}

/// Two identical requests held at once, and a person approving the first
/// for the session while another denies the second: each is decided once,
/// by its own decision (a session-wide approval covers what comes after it,
/// never a request already shown to a person with a body of its own), only
/// the approved one goes out, and the record holds one decision for each.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_approval_races_two_held_requests_and_each_is_decided_once() {
    let env = Env::new().await;
    let m = marker("race");
    let mut session = Session::start(&env, &m).await;
    env.put("body.json", "{\"amount\": 5}");
    let url = env.url(&format!("/echo/pay/{m}/same"));
    let first = session.sh(&curl_post(&url, "body.json"));
    let second = session.sh(&curl_post(&url, "body.json"));
    let held = await_listed(&["--session", &m], &url, 2).await;
    let (a, b) = (id_of(&held[0]), id_of(&held[1]));
    // Both decisions at once.
    let (approved, denied) = tokio::join!(approve(&a, &["--scope", "session"]), deny(&b, "race"));
    assert!(approved.stdout.contains("approved"), "{approved:?}");
    assert!(denied.stdout.contains("denied"), "{denied:?}");
    let mut codes =
        [output_of(first).await, output_of(second).await].map(|out| status_and_body(&out.stdout).0);
    codes.sort_unstable();
    assert_eq!(
        codes,
        [200, 403],
        "the approved one went out, the denied one did not"
    );
    assert_eq!(
        env.upstream.targets().len(),
        1,
        "only the approved one left"
    );
    assert!(pending(&m).await.is_empty());
    let audit = session.audit_session().await;
    session.stop().await;
    let record = env.record_of(&audit);
    for id in [&a, &b] {
        let decisions = record
            .events
            .iter()
            .filter(|e| e["kind"] == "approval_decided" && e["approval"] == id.as_str())
            .count();
        assert_eq!(decisions, 1, "{id}: {}", record.brief());
    }
    env.assert_verifies(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn listing_a_session_that_does_not_exist_says_so_and_fails() {
    let env = Env::new().await;
    let m = marker("nosuch");
    let mut session = Session::start(&env, &m).await;
    // The session exists: nothing waits, and that is a success.
    for given in [m.as_str(), session.id.as_str(), &session.id[..8]] {
        let out = airlock(&["approvals", "--session", given]).await;
        assert_eq!(out.status, 0, "{given}: {out:?}");
        assert_eq!(
            out.stderr.trim_end(),
            "airlock: no request is waiting for approval"
        );
    }
    // A name no running session has, in each form of the listing.
    let missing = format!("{m}-gone");
    for extra in [&[][..], &["--json"][..], &["--watch"][..]] {
        let mut args = vec!["approvals", "--session", missing.as_str()];
        args.extend_from_slice(extra);
        let out = tokio::time::timeout(PATIENCE, airlock(&args))
            .await
            .unwrap_or_else(|_| panic!("{args:?} kept running"));
        assert_eq!(out.status, 1, "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        assert_eq!(
            out.stderr.trim_end(),
            format!(
                "airlock: no running session matches {missing:?}; `airlock session ls` lists live sessions, and `airlock approvals` without --session what every running airlock holds"
            ),
            "{args:?}"
        );
    }
    // Once stopped, the session's own name does not exist any more either.
    session.stop().await;
    let out = airlock(&["approvals", "--session", &m]).await;
    assert_eq!(out.status, 1, "{out:?}");
    assert!(out.stderr.contains("no running session matches"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_approver_sees_the_senders_argv_quoted_and_the_steps_label_and_each_decision_echoes_its_note()
 {
    let env = Env::new().await;
    let m = marker("label");
    let mut session = Session::start(&env, &m).await;
    env.put("body.json", "{\"amount\": 5}");
    let url = env.url(&format!("/echo/pay/{m}/a"));
    let step = |label: &str| {
        tokio::process::Command::new(AIRLOCK)
            .args([
                "session",
                "exec",
                &session.id,
                "--label",
                label,
                "--timeout",
                "100s",
                "--",
            ])
            .args(["sh", "-c", &curl_post(&url, "body.json")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    let first = step("call_7");
    let view = await_listed(&["--session", &m], &url, 1).await.remove(0);
    let id = id_of(&view);
    assert_eq!(view["sender"]["label"], "call_7", "{view:#}");
    let listed = airlock(&["approvals", "--session", &m]).await;
    assert_eq!(listed.status, 0, "{listed:?}");
    let sent_by = listed
        .stdout
        .lines()
        .find(|l| l.contains("sent by "))
        .unwrap_or_else(|| panic!("{listed:?}"));
    // One argument with a space is one quoted word, as a shell takes it.
    assert!(
        sent_by.contains(
            "sent by curl -sS --max-time 100 -X POST -H 'content-type: application/json' --data-binary @body.json "
        ),
        "{sent_by}"
    );
    let exec = view["sender"]["exec"].as_str().unwrap();
    assert!(
        sent_by.ends_with(&format!(" {url} (exec {exec}, step call_7)")),
        "{sent_by}"
    );
    // Denied with a note: the note is said back.
    let note = "not during the change freeze";
    let decided = deny(&id, note).await;
    assert_eq!(
        decided.stdout,
        format!("denied: POST {url} (approval {id}, by {ROOT}); note: {note}\n"),
        "{decided:?}"
    );
    assert_eq!(status_and_body(&output_of(first).await.stdout).0, 403);
    // Approved for the session, in words that say so.
    let second = step("call_8");
    let view = await_listed(&["--session", &m], &url, 1).await.remove(0);
    let id = id_of(&view);
    assert_eq!(view["sender"]["label"], "call_8", "{view:#}");
    let decided = approve(&id, &["--scope", "session", "--note", "refunds ok today"]).await;
    assert_eq!(
        decided.stdout,
        format!(
            "approved for this session: POST {url} (approval {id}, by {ROOT}); note: refunds ok today\n"
        ),
        "{decided:?}"
    );
    assert_eq!(status_and_body(&output_of(second).await.stdout).0, 200);
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn watching_shows_each_decision_and_expiry_as_it_happens() {
    use tokio::io::AsyncBufReadExt;
    let env = Env::with_ask("timeout = \"3s\"\n").await;
    let m = marker("watch-ends");
    env.put("body.json", "{}");
    let mut watch = tokio::process::Command::new(AIRLOCK)
        .args(["approvals", "--watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let (approved_url, expired_url) = (
        env.url(&format!("/echo/pay/{m}/approved")),
        env.url(&format!("/echo/pay/{m}/expires")),
    );
    let script = format!(
        "{} > 1.txt & {} > 2.txt & wait; while [ ! -e stop ]; do sleep 0.05; done",
        curl_post(&approved_url, "body.json"),
        curl_post(&expired_url, "body.json"),
    );
    let run = env.run(&[], &script);
    // Each of the watcher's request lines ("ID  POST URL", not indented)
    // with the line after it.
    let mut previous = String::new();
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut next_pair = async || -> Option<(String, String)> {
        let until = Instant::now() + PATIENCE;
        while Instant::now() < until {
            let left = until.saturating_duration_since(Instant::now());
            let line = tokio::time::timeout(left, lines.next_line()).await.ok()?;
            let line = line.unwrap().expect("watching goes on");
            let pair = (!previous.starts_with(' ') && previous.contains(&m))
                .then(|| (previous.clone(), line.clone()));
            previous = line;
            if pair.is_some() {
                return pair;
            }
        }
        None
    };
    // Both held and shown, then one approved and the other left to expire.
    while pairs
        .iter()
        .filter(|(_, l)| l.starts_with("  session "))
        .count()
        < 2
    {
        pairs.push(next_pair().await.expect("both requests shown"));
    }
    let id = pairs
        .iter()
        .find(|(h, _)| h.ends_with(&format!("  POST {approved_url}")))
        .map(|(h, _)| h.split_whitespace().next().unwrap().to_owned())
        .unwrap();
    approve(&id, &["--note", "looks fine"]).await;
    let mut ends: Vec<(String, String)> = Vec::new();
    while ends.len() < 2 {
        let pair = next_pair().await.expect("each end shown");
        if !pair.1.starts_with("  session ") {
            ends.push(pair);
        }
    }
    let end_of = |url: &str| {
        ends.iter()
            .find(|(h, _)| h.ends_with(&format!("  POST {url}")))
            .map(|(h, l)| (h.clone(), l.clone()))
            .unwrap_or_else(|| panic!("{url}: {ends:#?}"))
    };
    assert_eq!(
        end_of(&approved_url),
        (
            format!("{id}  POST {approved_url}"),
            format!("  approved once by {ROOT}; note: looks fine")
        )
    );
    assert_eq!(end_of(&expired_url).1, "  expired: nobody decided in time");
    env.put("stop", "");
    let out = run.finish().await;
    assert_eq!(out.status, 0, "{out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn session_exec_says_which_request_is_held_and_how_to_decide_it_while_it_waits() {
    use tokio::io::AsyncBufReadExt;
    let env = Env::new().await;
    let m = marker("exec-holds");
    let mut session = Session::start(&env, &m).await;
    env.put("body.json", "{}");
    let url = env.url(&format!("/echo/pay/{m}"));
    let mut step = session.sh(&curl_post(&url, "body.json"));
    let mut stderr = tokio::io::BufReader::new(step.stderr.take().unwrap()).lines();
    // The line comes while the request waits, before anyone decides.
    let line = tokio::time::timeout(PATIENCE, stderr.next_line())
        .await
        .expect("session exec says the request is held")
        .unwrap()
        .expect("a line");
    let view = await_one(&m).await;
    let id = id_of(&view);
    assert_eq!(
        line,
        format!(
            "airlock: holding POST {url} for a person's approval (rule {}: {REASON}); decide with `airlock approve {id}` or `airlock deny {id}` within {}",
            env.ask_rule(),
            line.rsplit_once("within ").unwrap().1
        )
    );
    let within = line.rsplit_once("within ").unwrap().1;
    assert!(
        within.ends_with('s') && within.len() <= 3,
        "about a minute left: {within}"
    );
    approve(&id, &[]).await;
    let mut rest = Vec::new();
    while let Ok(Ok(Some(more))) = tokio::time::timeout(PATIENCE, stderr.next_line()).await {
        rest.push(more);
    }
    assert!(
        !rest.iter().any(|l| l.contains("holding")),
        "said once, not again: {rest:?}"
    );
    let out = output_of(step).await;
    assert_eq!(status_and_body(&out.stdout).0, 200, "{out:?}");
    session.stop().await;
}
