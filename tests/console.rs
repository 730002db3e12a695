//! The forensic console (`airlock audit serve`) in a real browser: a session
//! recorded by real clients (curl through `airlock run`, an allowed and a
//! refused request, an injected credential, a file written twice, coloured
//! output, a process tree three levels deep), then the console started on
//! its database and driven by Chromium through Playwright
//! (tests/console/console.test.mjs): sessions list and filters, session
//! page, process tree, the refused request's rule to add and body, a file's diff,
//! a file over the content cap kept as a hash only, terminal playback, the
//! HAR download, a live session gaining events, the
//! token check, the CSP, and no trace of the secret in anything served.
//!
//! Prerequisites (installed by `scripts/setup`): node, Chromium at
//! /usr/bin/chromium and `npm ci` in tests/console. A missing one fails
//! the test: a console nobody drove is not a tested console.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use airlock_test_support::audit_cli::{first_session_id, sessions};
use airlock_test_support::console::{CHROMIUM, Console, check_browser_prerequisites};
use airlock_test_support::pki::TestPki;
use airlock_test_support::upstream::Upstream;
use tokio::process::Command;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// What the policy injects as `Authorization`; the record, and so the
/// console, may hold only `[secret:api]`.
const SECRET: &str = "sk-console-secret-7c2e41d9a0";

/// The body of the refused request (a POST): on its page, never upstream.
const REFUSED_BODY: &str = "stolen=console-exfil-4b1d";

/// In the live session's command line, so the browser can find it.
const LIVE_MARKER: &str = "console-live-7f3a";

/// The browser test's own budget is 100 s (it takes about 7); this is the
/// backstop that keeps the whole test under two minutes.
const NODE_TIMEOUT: Duration = Duration::from_secs(110);

/// Allows GET of /echo on api.test and injects the secret there.
fn policy_text(port: u16) -> String {
    format!(
        r#"version = 1

[[allow]]
host = "api.test"
port = {port}
methods = ["GET"]
paths = ["/echo"]

[[credential]]
name = "api"
hosts = ["api.test"]
header = "Authorization"
value = "Bearer ${{env:API_TOKEN}}"
"#
    )
}

/// tests/console: the browser test, its package.json and node_modules.
fn browser_test_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console")
}

/// Where screenshots and the browser's log go: $AIRLOCK_CONSOLE_ARTIFACTS,
/// or target/console-artifacts in the workspace.
fn artifacts_dir() -> PathBuf {
    let dir = std::env::var_os("AIRLOCK_CONSOLE_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-artifacts"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The sandboxes' shared setup: the upstream's CA and name, the policy,
/// the audit database.
struct Setup {
    _pki: TestPki,
    upstream: Upstream,
    dir: tempfile::TempDir,
    ca: PathBuf,
    policy: PathBuf,
}

impl Setup {
    async fn new() -> Self {
        let pki = TestPki::new();
        let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, policy_text(upstream.port())).unwrap();
        let ca = pki.ca_pem.clone();
        Self {
            _pki: pki,
            upstream,
            dir,
            ca,
            policy,
        }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("audit/audit.db")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("audit/audit.key")
    }

    fn base(&self) -> String {
        format!("https://api.test:{}", self.upstream.port())
    }

    /// `airlock run` of `command` in `workspace`, recorded.
    fn run(&self, workspace: &Path, command: &[&str]) -> Command {
        self.run_with(workspace, &[], command)
    }

    /// The same with more of `airlock run`'s options.
    fn run_with(&self, workspace: &Path, options: &[&str], command: &[&str]) -> Command {
        std::fs::create_dir_all(workspace).unwrap();
        let mut cmd = Command::new(AIRLOCK);
        cmd.arg("run")
            .arg("--policy")
            .arg(&self.policy)
            .arg("--workspace")
            .arg(workspace)
            .arg("--upstream-ca")
            .arg(&self.ca)
            .args(["--resolve", "api.test:127.0.0.1"])
            .arg("--audit-db")
            .arg(self.db())
            .arg("--audit-key")
            .arg(self.key())
            .args(["--audit-max-file", "1K"])
            .args(options)
            .args(["--no-tty", "--timeout", "120s", "--"])
            .args(command)
            .env("API_TOKEN", SECRET)
            .current_dir(workspace)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }
}

/// Records `sh -c 'echo tamper-me > t.txt'`, then rewrites its exec event
/// in the database as an attacker with write access could: the session's
/// id and the seq of the edited event.
async fn record_and_tamper(setup: &Setup) -> (String, u64) {
    let ws = setup.dir.path().join("tampered");
    let out = setup
        .run(&ws, &["sh", "-c", "echo tamper-me > t.txt"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "the session to tamper: {out:?}");
    let listed = sessions(AIRLOCK, &setup.db());
    let id = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["command"].as_array().is_some_and(|argv| {
                argv.iter()
                    .any(|a| a.as_str().is_some_and(|a| a.contains("tamper-me")))
            })
        })
        .and_then(|s| s["id"].as_str())
        .unwrap_or_else(|| panic!("no session ran tamper-me: {listed:#}"))
        .to_owned();
    let sql = format!(
        "UPDATE events SET payload = replace(payload, 'tamper-me', 'innocent!') \
         WHERE sid = (SELECT sid FROM sessions WHERE id = '{id}') AND kind = 'exec' AND payload LIKE '%tamper-me%'; \
         SELECT seq FROM events WHERE sid = (SELECT sid FROM sessions WHERE id = '{id}') AND payload LIKE '%innocent!%' ORDER BY seq LIMIT 1;"
    );
    let edited = std::process::Command::new("sqlite3")
        .arg(setup.db())
        .arg(&sql)
        .output()
        .unwrap_or_else(|e| panic!("sqlite3 is not installed ({e}); scripts/setup installs it"));
    assert!(edited.status.success(), "sqlite3: {edited:?}");
    let seq = String::from_utf8_lossy(&edited.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no event was edited: {edited:?}"));
    (id, seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responder_reads_a_recorded_and_a_live_session_in_the_browser_and_no_secret_reaches_it() {
    let test_dir = browser_test_dir();
    check_browser_prerequisites(&test_dir);
    let artifacts = artifacts_dir();
    let setup = Setup::new().await;
    let base = setup.base();

    // The recorded session: sh fetch-report.sh → sh -c → curl for the
    // refused request.
    let ws = setup.dir.path().join("ws");
    let script = format!(
        r#"printf '\033[1;36m==>\033[0m checking \033[1mapi.test\033[0m\n'
curl -sS -o /dev/null -w 'allowed: %{{http_code}}\n' '{base}/echo?from=console'
sh -c 'printf "\033[31mrefused\033[0m: "; curl -sS -o /dev/null -w "%{{http_code}}\n" --data-binary @exfil.txt {base}/admin/keys; true'
printf 'alpha\nbeta\n' > notes.txt
printf 'alpha\nbeta-2\ngamma\n' > notes.txt
head -c 3000 /dev/zero | tr '\0' x > big.txt
echo 'appended in the session' >> existing.txt
sed -i s/one/ONE/ edited.txt
printf '<img src=x onerror=alert(1)><script>alert(2)</script>' > 'page<i>.html'
printf '#!/bin/sh\necho ran\n' > run.sh
chmod 700 run.sh
setfacl -m u:1000:rwx run.sh
setfattr -n user.origin -v 'set in the session' run.sh
printf '\033[32mdone\033[0m\n'
"#
    );
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("fetch-report.sh"), script).unwrap();
    std::fs::write(ws.join("existing.txt"), "there before the session\n").unwrap();
    std::fs::write(ws.join("edited.txt"), "one\ntwo\n").unwrap();
    // What the refused request tries to send: its page must show it.
    std::fs::write(ws.join("exfil.txt"), REFUSED_BODY).unwrap();
    let out = setup
        .run(&ws, &["sh", "fetch-report.sh"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "the recorded session: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("allowed: 200") && stdout.contains("refused"),
        "{stdout}"
    );
    let session = first_session_id(AIRLOCK, &setup.db(), &out);
    assert!(
        !setup
            .upstream
            .targets()
            .iter()
            .any(|t| t.contains("/admin")),
        "the refused request reached the upstream: {:?}",
        setup.upstream.targets()
    );

    // A session whose record is then edited through SQLite: its badge must
    // be red and name the first bad event.
    let (tampered, tampered_seq) = record_and_tamper(&setup).await;

    let console = Console::start(AIRLOCK, &setup.db(), &setup.key()).await;
    let url = console.url.clone();

    // The live session, started once the console is up: it waits on a FIFO
    // the browser test writes to once it watches the session's page, then
    // sends a request the policy refuses.
    let live_ws = setup.dir.path().join("live");
    std::fs::create_dir_all(&live_ws).unwrap();
    let fifo = live_ws.join("go.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", fifo.display());
    let live_script = format!(
        "echo waiting; read go < '{}'; curl -sS -o /dev/null -w 'live: %{{http_code}}\\n' '{base}/private/{LIVE_MARKER}'; echo finished",
        fifo.display()
    );
    let live = setup
        .run(&live_ws, &["sh", "-c", &live_script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let node = Command::new("node")
        .arg("console.test.mjs")
        .current_dir(&test_dir)
        .env("CONSOLE_URL", &url)
        .env("SESSION_ID", &session)
        .env("SECRET", SECRET)
        .env("ARTIFACTS", &artifacts)
        .env("CHROMIUM", CHROMIUM)
        .env("LIVE_MARKER", LIVE_MARKER)
        .env("LIVE_FIFO", &fifo)
        .env("FILE_PATH", ws.join("notes.txt"))
        .env("BIG_FILE_PATH", ws.join("big.txt"))
        .env("EXISTING_FILE_PATH", ws.join("existing.txt"))
        .env("EDITED_FILE_PATH", ws.join("edited.txt"))
        .env("HOSTILE_FILE_PATH", ws.join("page<i>.html"))
        .env("ACL_FILE_PATH", ws.join("run.sh"))
        .env("DENIED_PATH", "/admin/keys")
        .env("REFUSED_BODY", REFUSED_BODY)
        .env("UPSTREAM_HOST", "api.test")
        .env("TAMPERED_ID", &tampered)
        .env("TAMPERED_SEQ", tampered_seq.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let node = match tokio::time::timeout(NODE_TIMEOUT, node).await {
        Ok(out) => out.unwrap(),
        Err(_) => panic!(
            "the browser test ran over {NODE_TIMEOUT:?}; artifacts in {}",
            artifacts.display()
        ),
    };
    let node_log = format!(
        "--- node stdout ---\n{}\n--- node stderr ---\n{}",
        String::from_utf8_lossy(&node.stdout),
        String::from_utf8_lossy(&node.stderr)
    );
    println!("{node_log}");
    println!("console screenshots: {}", artifacts.display());
    assert_eq!(
        node.status.code(),
        Some(0),
        "the browser test failed (screenshots in {}):\n{node_log}",
        artifacts.display()
    );

    // The live session went on to its end as the browser watched.
    let live = tokio::time::timeout(Duration::from_secs(60), live.wait_with_output())
        .await
        .expect("the live session did not end")
        .unwrap();
    assert_eq!(live.status.code(), Some(0), "the live session: {live:?}");
    assert!(
        String::from_utf8_lossy(&live.stdout).contains("live: 403"),
        "{live:?}"
    );
    drop(console);
}

/// A live session (`airlock session`) as a new user first meets it in the
/// console (tests/console/live-session.test.mjs): the header counts its
/// steps as they start, the search box is above the sessions list, and the
/// stopped session's End reads `airlock session stop` as code on one line.
#[tokio::test]
async fn a_live_sessions_header_counts_its_steps_and_its_stop_reads_as_one_line_under_the_search_box()
 {
    let test_dir = browser_test_dir();
    check_browser_prerequisites(&test_dir);
    let artifacts = artifacts_dir();
    let setup = Setup::new().await;
    let ws = setup.dir.path().join("live-session");
    std::fs::create_dir_all(&ws).unwrap();
    let started = Command::new(AIRLOCK)
        .args(["session", "start", "--name", "first-hour"])
        .arg("--policy")
        .arg(&setup.policy)
        .arg("--workspace")
        .arg(&ws)
        .arg("--upstream-ca")
        .arg(&setup.ca)
        .args(["--resolve", "api.test:127.0.0.1"])
        .arg("--audit-db")
        .arg(setup.db())
        .arg("--audit-key")
        .arg(setup.key())
        .env("API_TOKEN", SECRET)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(started.status.code(), Some(0), "{started:?}");
    let live = String::from_utf8(started.stdout).unwrap().trim().to_owned();
    let first = Command::new(AIRLOCK)
        .args(["session", "exec", &live, "--", "true"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(first.status.code(), Some(0), "{first:?}");

    let console = Console::start(AIRLOCK, &setup.db(), &setup.key()).await;
    let node = Command::new("node")
        .arg("live-session.test.mjs")
        .current_dir(&test_dir)
        .env("CONSOLE_URL", &console.url)
        .env("LIVE_ID", &live)
        .env("LIVE_NAME", "first-hour")
        .env("AIRLOCK", AIRLOCK)
        .env("ARTIFACTS", &artifacts)
        .env("CHROMIUM", CHROMIUM)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let node = tokio::time::timeout(NODE_TIMEOUT, node)
        .await
        .expect("the browser test ran over its time")
        .unwrap();
    // Whatever the browser found, the session does not outlive the test.
    let _ = std::process::Command::new(AIRLOCK)
        .args(["session", "stop", &live])
        .output();
    let node_log = format!(
        "--- node stdout ---\n{}\n--- node stderr ---\n{}",
        String::from_utf8_lossy(&node.stdout),
        String::from_utf8_lossy(&node.stderr)
    );
    println!("{node_log}");
    assert_eq!(
        node.status.code(),
        Some(0),
        "the browser test failed (screenshots in {}):\n{node_log}",
        artifacts.display()
    );
    drop(console);
}

#[tokio::test]
async fn the_sessions_list_shows_each_sessions_node_and_labels_and_filters_by_one_label_or_node() {
    let test_dir = browser_test_dir();
    check_browser_prerequisites(&test_dir);
    let artifacts = artifacts_dir();
    let setup = Setup::new().await;
    // Three agents of a fleet and one session from before labels (none).
    let fleet: [(&str, &[&str]); 4] = [
        (
            "fleet-red-1",
            &["--label", "team=red", "--label", "pod=agent-1"],
        ),
        (
            "fleet-red-2",
            &["--label", "team=red", "--label", "pod=agent-2"],
        ),
        (
            "fleet-blue",
            &["--label", "team=blue=green", "--label", "owner=Zoë 日本"],
        ),
        ("fleet-unlabelled", &[]),
    ];
    for (name, labels) in fleet {
        let ws = setup.dir.path().join(name);
        let out = setup
            .run_with(&ws, labels, &["echo", name])
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{name}: {out:?}");
    }
    let node_name = sessions(AIRLOCK, &setup.db())[0]["host"]
        .as_str()
        .unwrap()
        .to_owned();

    let console = Console::start(AIRLOCK, &setup.db(), &setup.key()).await;
    let node = Command::new("node")
        .arg("fleet-labels.test.mjs")
        .current_dir(&test_dir)
        .env("CONSOLE_URL", &console.url)
        .env("NODE_NAME", &node_name)
        .env("ARTIFACTS", &artifacts)
        .env("CHROMIUM", CHROMIUM)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let node = tokio::time::timeout(NODE_TIMEOUT, node)
        .await
        .expect("the browser test ran over its time")
        .unwrap();
    let node_log = format!(
        "--- node stdout ---\n{}\n--- node stderr ---\n{}",
        String::from_utf8_lossy(&node.stdout),
        String::from_utf8_lossy(&node.stderr)
    );
    println!("{node_log}");
    assert_eq!(
        node.status.code(),
        Some(0),
        "the browser test failed (screenshots in {}):\n{node_log}",
        artifacts.display()
    );
    drop(console);
}

#[tokio::test]
async fn a_sessions_mcp_tool_calls_show_in_their_own_view_with_a_changed_tool_flagged_and_hostile_text_kept_as_text()
 {
    use airlock_auditor::{AuditEvent, RecordStore, Verdict};
    use airlock_test_support::mcp_record::{mcp_call, record_mcp_calls};
    let test_dir = browser_test_dir();
    check_browser_prerequisites(&test_dir);
    let artifacts = artifacts_dir();
    let e = airlock_test_support::audit_store::env();
    let store = e.store();
    let rec = store
        .begin_session(airlock_test_support::audit_store::info(&[
            "python3", "agent.py",
        ]))
        .unwrap();
    record_mcp_calls(&rec);
    // A tool name and arguments the server or the agent chose to be markup.
    rec.record(AuditEvent::McpCall(mcp_call(
        9,
        Some(serde_json::json!(9)),
        "tools/call",
        Some("<img src=x onerror=window.__pwned('tool')>"),
        Some(serde_json::json!({"<b>": "<script>window.__pwned('arg')</script>"})),
        Verdict::Deny,
        "policy.toml:1",
    )))
    .unwrap();
    let id = rec.session_id().clone();
    rec.finish(Default::default()).unwrap();
    drop(store);

    let console = Console::start(AIRLOCK, &e.db, &e.key).await;
    let node = Command::new("node")
        .arg("mcp-tools.test.mjs")
        .current_dir(&test_dir)
        .env("CONSOLE_URL", &console.url)
        .env("SESSION", id.as_str())
        .env("ARTIFACTS", &artifacts)
        .env("CHROMIUM", CHROMIUM)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let node = tokio::time::timeout(NODE_TIMEOUT, node)
        .await
        .expect("the browser test ran over its time")
        .unwrap();
    let node_log = format!(
        "--- node stdout ---\n{}\n--- node stderr ---\n{}",
        String::from_utf8_lossy(&node.stdout),
        String::from_utf8_lossy(&node.stderr)
    );
    println!("{node_log}");
    assert_eq!(
        node.status.code(),
        Some(0),
        "the browser test failed (screenshots in {}):\n{node_log}",
        artifacts.display()
    );
    drop(console);
}
