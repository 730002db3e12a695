//! Policy as code: sessions recorded for real (`airlock run` + curl against
//! a local TLS upstream, in report mode) replayed under edited policies
//! with `airlock policy replay`, and tables of cases run with
//! `airlock policy test --cases`, and policies suggested from sessions
//! and events files with `airlock policy suggest`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use airlock_test_support::audit_cli::first_session_id;
use airlock_test_support::client::curl;
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::server::TestServer;
use airlock_test_support::upstream::{Extra, Upstream};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// A session recorded under a report-mode policy: GET /a/1 and GET /b
/// (allowed), GET /c (reported: no rule), and a 100 kB JSON POST to
/// /upload (allowed; the record keeps only its first 64 KiB).
struct Recorded {
    dir: tempfile::TempDir,
    db: PathBuf,
    id: String,
    port: u16,
}

const REPORT_POLICY: &str = r#"version = 1
default = "report"

[[allow]]
host = "api.test"
port = PORT
methods = ["GET"]
paths = ["/a/**", "/b"]

[[allow]]
host = "api.test"
port = PORT
methods = ["POST"]
paths = ["/upload"]
"#;

impl Recorded {
    async fn new() -> Self {
        Self::under(REPORT_POLICY).await
    }

    /// The same requests recorded under `policy` (PORT replaced).
    async fn under(policy_text: &str) -> Self {
        let pki = TestPki::new();
        let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
        let port = upstream.port();
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let db = dir.path().join("audit/audit.db");
        let key = dir.path().join("audit/audit.key");
        let policy = dir.path().join("recorded.toml");
        std::fs::write(&policy, with_port(policy_text, port)).unwrap();
        let base = format!("https://api.test:{port}");
        let script = format!(
            "curl -sS -o /dev/null {base}/a/1 && curl -sS -o /dev/null {base}/b && \
             curl -sS -o /dev/null {base}/c && \
             {{ printf '{{\"name\":\"x\",\"pad\":\"'; head -c 100000 /dev/zero | tr '\\0' a; printf '\"}}'; }} > /tmp/body.json && \
             curl -sS -o /dev/null -H 'content-type: application/json' --data-binary @/tmp/body.json {base}/upload"
        );
        let args: Vec<String> = [
            "run",
            "--workspace",
            ws.to_str().unwrap(),
            "--audit-db",
            db.to_str().unwrap(),
            "--audit-key",
            key.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
            "--upstream-ca",
            pki.ca_pem.to_str().unwrap(),
            "--resolve",
            "api.test:127.0.0.1",
            "--",
            "sh",
            "-c",
            &script,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(AIRLOCK).args(&args).output().unwrap()
        })
        .await
        .unwrap();
        // The last request (the upload) is allowed in every policy used here.
        assert!(out.status.success(), "airlock run: {out:?}");
        let id = first_session_id(AIRLOCK, &db, &out);
        drop(upstream);
        Self { dir, db, id, port }
    }

    /// `airlock policy replay` of this session under `policy` (PORT replaced).
    fn replay(&self, policy: &str, json: bool) -> Output {
        let file = self.dir.path().join("policy.toml");
        std::fs::write(&file, with_port(policy, self.port)).unwrap();
        self.replay_file(&file, &self.id, json)
    }

    fn replay_file(&self, file: &Path, session: &str, json: bool) -> Output {
        let mut cmd = Command::new(AIRLOCK);
        cmd.args(["policy", "replay"])
            .arg(file)
            .arg(session)
            .arg("--audit-db")
            .arg(&self.db);
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    }

    fn replay_json(&self, policy: &str) -> (i32, Value) {
        let out = self.replay(policy, true);
        let report = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("replay --json: {e}: {out:?}"));
        (out.status.code().unwrap_or(-1), report)
    }
}

fn with_port(policy: &str, port: u16) -> String {
    policy.replace("PORT", &port.to_string())
}

/// The changes of a `--json` report as "change kind what → decision".
fn changes(report: &Value) -> Vec<String> {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let what = c["what"].as_str().unwrap();
            // The URL's path is what the tests care about.
            let path = what.rsplit_once(['/']).map_or(what, |(_, p)| p);
            format!(
                "{} {} {} /{path} → {}",
                c["change"].as_str().unwrap(),
                c["kind"].as_str().unwrap(),
                what.split(' ').next().unwrap(),
                c["would_be"]["decision"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn replaying_a_session_under_the_policy_that_recorded_it_changes_nothing() {
    let s = Recorded::new().await;
    let out = s.replay(REPORT_POLICY, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        stdout.contains("0 newly blocked, 0 would now be allowed, 0 undecidable, 0 other changes,"),
        "{stdout}"
    );
    let (code, report) = s.replay_json(REPORT_POLICY);
    assert_eq!(code, 0);
    assert_eq!(changes(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(report["replayed"]["http"], 4, "{report:#}");
    assert!(
        report["replayed"]["dns"].as_u64().unwrap() >= 1,
        "{report:#}"
    );
    assert!(
        report["replayed"]["tcp"].as_u64().unwrap() >= 1,
        "{report:#}"
    );
}

#[tokio::test]
async fn what_report_mode_flagged_and_a_new_rule_allows_is_grouped_as_would_now_be_allowed() {
    let s = Recorded::new().await;
    // Enforced, with a rule for /c, which report mode only reported.
    let enforced = REPORT_POLICY
        .replace("default = \"report\"", "default = \"deny\"")
        .replace("[\"/a/**\", \"/b\"]", "[\"/a/**\", \"/b\", \"/c\"]");
    let (code, report) = s.replay_json(&enforced);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(
        changes(&report),
        ["now_allowed http GET /c → allow"],
        "{report:#}"
    );
    assert_eq!(report["changes"][0]["was"]["decision"], "report");
    assert_eq!(report["now_allowed"], 1, "{report:#}");
    assert_eq!(report["other"], 0, "{report:#}");
    let out = s.replay(&enforced, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("allowed     ")
            && first.ends_with(
                " http GET https://api.test:{port}/c"
                    .replace("{port}", &s.port.to_string())
                    .as_str()
            ),
        "{stdout}"
    );
    assert!(
        stdout
            .contains(": 0 newly blocked, 1 would now be allowed, 0 undecidable, 0 other changes,"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_stricter_policy_shows_exactly_the_newly_denied_requests_and_exits_1() {
    let s = Recorded::new().await;
    // Enforced, and /b no longer allowed: /b (was allowed) and /c (was
    // only reported) would now be refused; nothing else changes.
    let stricter = REPORT_POLICY
        .replace("default = \"report\"", "default = \"deny\"")
        .replace("[\"/a/**\", \"/b\"]", "[\"/a/**\"]");
    let (code, report) = s.replay_json(&stricter);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        changes(&report),
        ["blocked http GET /b → deny", "blocked http GET /c → deny"],
        "{report:#}"
    );
    let b = &report["changes"][0];
    assert_eq!(b["was"]["decision"], "allow");
    assert!(
        b["was"]["rule"]
            .as_str()
            .unwrap()
            .ends_with("recorded.toml:4")
    );
    assert_eq!(report["hosts"][0]["host"], "api.test");
    assert_eq!(report["hosts"][0]["blocked"], 2);
    assert_eq!(report["blocked"], 2);

    let text = s.replay(&stricter, false);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert_eq!(text.status.code(), Some(1));
    assert!(stdout.contains("allow by "), "{stdout}");
    assert!(stdout.contains("→ deny"), "{stdout}");
    assert!(
        stdout.contains("api.test: 2 changes, 2 newly blocked"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_request_an_ask_rule_would_hold_shows_as_ask_and_exits_1() {
    let s = Recorded::new().await;
    let policy = format!(
        "{REPORT_POLICY}\n[[ask]]\nhost = \"api.test\"\nport = PORT\nmethods = [\"GET\"]\npaths = [\"/b\"]\n"
    )
    .replace("default = \"report\"", "default = \"allow\"");
    let (code, report) = s.replay_json(&policy);
    assert_eq!(code, 1, "{report:#}");
    let changed = changes(&report);
    assert!(
        changed.contains(&"blocked http GET /b → ask".to_owned()),
        "{changed:?}"
    );
    // /c was reported and is now allowed by the default: would now be
    // allowed, not a block.
    assert!(
        changed.contains(&"now_allowed http GET /c → allow".to_owned()),
        "{changed:?}"
    );
}

#[tokio::test]
async fn a_body_constraint_on_a_truncated_recorded_body_is_undecidable() {
    let s = Recorded::new().await;
    let policy = format!("{REPORT_POLICY}\n[allow.body]\nname = {{ max_length = 5 }}\n");
    let (code, report) = s.replay_json(&policy);
    assert_eq!(
        changes(&report),
        ["undecidable http POST /upload → undecidable"],
        "{report:#}"
    );
    assert_eq!(report["undecidable"], 1);
    // Undecidable is reported, not counted as newly blocked.
    assert_eq!(code, 0, "{report:#}");
}

#[tokio::test]
async fn a_bad_session_id_or_a_bad_policy_is_exit_2_with_one_line() {
    let s = Recorded::new().await;
    let good = s.dir.path().join("good.toml");
    std::fs::write(&good, with_port(REPORT_POLICY, s.port)).unwrap();
    for session in ["ffffffffffff", "not-hex"] {
        let out = s.replay_file(&good, session, false);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(out.stdout.is_empty(), "{out:?}");
    }
    // A unique prefix is accepted, as by `airlock audit timeline`.
    let out = s.replay_file(&good, &s.id[..8], false);
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    let bad = s.dir.path().join("bad.toml");
    std::fs::write(&bad, "version = 1\n[[allow]]\nhots = \"api.test\"\n").unwrap();
    let out = s.replay_file(&bad, &s.id, false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("bad.toml:3:1"), "{stderr}");
}

const CASES_POLICY: &str = r#"version = 1

[[allow]]
host = "api.example.com"
methods = ["GET"]
paths = ["/repos/**"]
description = "read repositories"

[[ask]]
host = "api.example.com"
methods = ["POST"]
paths = ["/deploy"]

[[deny]]
host = "api.example.com"
paths = ["/admin/**"]
"#;

/// `airlock policy test policy.toml --cases cases.toml` in a fresh directory.
fn run_cases(cases: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.toml"), CASES_POLICY).unwrap();
    std::fs::write(dir.path().join("cases.toml"), cases).unwrap();
    let out = Command::new(AIRLOCK)
        .current_dir(dir.path())
        .args(["policy", "test", "policy.toml", "--cases", "cases.toml"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_cases_file_the_policy_satisfies_passes_with_exit_0() {
    let (code, stdout, stderr) = run_cases(
        r#"
[[case]]
name = "read a repo"
method = "GET"
url = "https://api.example.com/repos/a/b"
expect = "allow"
rule = "read repositories"

[[case]]
name = "deploy needs a person"
method = "POST"
url = "https://api.example.com/deploy"
expect = "ask"
rule = "policy.toml:9"

[[case]]
name = "admin is off limits"
method = "GET"
url = "https://api.example.com/admin/users"
expect = "deny"
rule = "policy.toml:14"

[[case]]
method = "GET"
url = "https://elsewhere.example.org/"
expect = "deny"
rule = "default"
"#,
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "ok   read a repo: GET https://api.example.com/repos/a/b → allow by policy.toml:3"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("ok   case 4: "), "{stdout}");
    assert!(stdout.ends_with("4 passed, 0 failed\n"), "{stdout}");
}

#[test]
fn a_failing_case_names_the_rule_that_decided_and_exits_1() {
    let (code, stdout, stderr) = run_cases(
        r#"
[[case]]
name = "repos are readable"
method = "GET"
url = "https://api.example.com/repos/a/b"
expect = "allow"

[[case]]
name = "admin is readable"
method = "GET"
url = "https://api.example.com/admin/users"
expect = "allow"

[[case]]
name = "right decision, wrong rule"
method = "GET"
url = "https://api.example.com/repos/x"
expect = "allow"
rule = "policy.toml:14"
"#,
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("FAIL admin is readable: expected allow, got deny by policy.toml:14"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "FAIL right decision, wrong rule: expected allow by policy.toml:14, got allow by policy.toml:3"
        ),
        "{stdout}"
    );
    assert!(stdout.ends_with("1 passed, 2 failed\n"), "{stdout}");
}

#[test]
fn a_bad_cases_file_is_exit_2_naming_file_and_line() {
    for (cases, at) in [
        (
            "[[case]]\nmethod = \"GET\"\nurl = \"https://a.test/\"\nexpect = \"alow\"\n",
            "cases.toml:4:",
        ),
        (
            "[[case]]\nmethod = \"GET\"\nurl = \"https://a.test/\"\nexpect = \"allow\"\n\n[[case]]\nmethod = \"GET\"\nurl = \"a.test/x\"\nexpect = \"deny\"\n",
            "cases.toml:6:",
        ),
    ] {
        let (code, stdout, stderr) = run_cases(cases);
        assert_eq!(code, 2, "{stdout}{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(at), "{stderr}");
    }
}

#[test]
fn report_mode_cases_are_judged_by_what_enforcing_the_policy_would_do() {
    let dir = tempfile::tempdir().unwrap();
    let policy = CASES_POLICY.replace("version = 1\n", "version = 1\ndefault = \"report\"\n");
    std::fs::write(dir.path().join("policy.toml"), policy).unwrap();
    std::fs::write(
        dir.path().join("cases.toml"),
        r#"
[[case]]
name = "admin"
method = "GET"
url = "https://api.example.com/admin/users"
expect = "deny"
rule = "policy.toml:15"

[[case]]
name = "deploy"
method = "POST"
url = "https://api.example.com/deploy"
expect = "ask"

[[case]]
name = "elsewhere"
method = "GET"
url = "https://elsewhere.example.org/"
expect = "allow"
"#,
    )
    .unwrap();
    let out = Command::new(AIRLOCK)
        .current_dir(dir.path())
        .args(["policy", "test", "policy.toml", "--cases", "cases.toml"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("ok   admin: GET https://api.example.com/admin/users → deny by policy.toml:15 (report mode: allowed until enforced)"),
        "{stdout}"
    );
    assert!(stdout.contains("ok   deploy: "), "{stdout}");
    assert!(
        stdout.contains("FAIL elsewhere: expected allow, got deny by policy.toml (default)"),
        "{stdout}"
    );
}

#[tokio::test]
async fn quotas_are_replayed_in_order_per_session() {
    let s = Recorded::new().await;
    // Two GETs under /a/** and /b: a quota of one lets the first through
    // and stops the second, in record order.
    let policy = REPORT_POLICY
        .replace("default = \"report\"", "default = \"deny\"")
        .replace(
            "paths = [\"/a/**\", \"/b\"]",
            "paths = [\"/a/**\", \"/b\"]\nmax_requests = 1",
        );
    let (code, report) = s.replay_json(&policy);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        changes(&report),
        ["blocked http GET /b → deny", "blocked http GET /c → deny"],
        "{report:#}"
    );
    let reason = report["changes"][0]["would_be"]["reason"].as_str().unwrap();
    assert!(reason.contains("quota of 1"), "{reason}");
}

#[tokio::test]
async fn a_request_that_was_held_for_approval_replays_as_ask() {
    // Enforced, with GET /b held for a person nobody is: it expires (403).
    let asking = format!(
        "{REPORT_POLICY}\n[[ask]]\nhost = \"api.test\"\nport = PORT\nmethods = [\"GET\"]\npaths = [\"/b\"]\ntimeout = \"1s\"\n"
    )
    .replace("default = \"report\"", "default = \"deny\"");
    let s = Recorded::under(&asking).await;
    // Held then and held now: no change.
    let (code, report) = s.replay_json(&asking);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(changes(&report), Vec::<String>::new(), "{report:#}");
    // Without the ask rule /b is allowed outright: a change, but nothing
    // that went through is stopped.
    let plain = REPORT_POLICY.replace("default = \"report\"", "default = \"deny\"");
    let (code, report) = s.replay_json(&plain);
    assert_eq!(code, 0, "{report:#}");
    let changed = changes(&report);
    assert!(
        changed.contains(&"now_allowed http GET /b → allow".to_owned()),
        "{changed:?}"
    );
    let b = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["what"].as_str().unwrap().ends_with("/b"))
        .unwrap();
    assert_eq!(b["was"]["decision"], "ask", "{b}");
}

/// A local TLS upstream for `api.test` (also `pypi.test` and `git.test`)
/// that stays up across several `airlock run`s, so a session can be
/// recorded and then repeated under the policy suggested from it.
struct Lab {
    pki: TestPki,
    upstream: Upstream,
    dir: tempfile::TempDir,
}

/// What the suggest tests' sessions do: identifiers in paths (numbers, a
/// UUID, a version string) under one host, two methods.
const SUGGEST_SCRIPT: &str = "b=https://api.test:PORT && \
    curl -sS -o /dev/null $b/users/42/keys && curl -sS -o /dev/null $b/users/7/keys && \
    curl -sS -o /dev/null $b/items/3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b && \
    curl -sS -o /dev/null $b/packages/requests-2.31.0.tar.gz && \
    curl -sS -o /dev/null $b/packages/requests-2.32.3.tar.gz && \
    curl -sS -o /dev/null -H 'content-type: application/json' --data-binary '{\"n\":1}' $b/upload";

/// Refused in every mode, report mode included: an ambiguous path.
const REFUSED_SCRIPT: &str =
    "curl -sS -o /dev/null --path-as-is https://api.test:PORT/users/../admin";

impl Lab {
    async fn new() -> Self {
        Self::with(Extra::default()).await
    }

    /// The upstream also serving `extra` (an index's files, a git root).
    async fn with(extra: Extra) -> Self {
        let pki = TestPki::new();
        let upstream = Upstream::start_with(
            Some(pki.server_config(&["api.test", "pypi.test", "git.test"])),
            extra,
        )
        .await;
        Self {
            pki,
            upstream,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn port_in(&self, text: &str) -> String {
        with_port(text, self.upstream.port())
    }

    /// `airlock run` of `script` under `policy` (PORT replaced in both),
    /// recorded into `db`, with `env` set for airlock itself.
    async fn run(&self, policy: &str, script: &str, db: &str, env: &[(&str, &str)]) -> Output {
        let ws = self.path("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let policy_file = self.path(&format!("{db}.toml"));
        std::fs::write(&policy_file, self.port_in(policy)).unwrap();
        let mut cmd = Command::new(AIRLOCK);
        cmd.arg("run")
            .arg("--workspace")
            .arg(&ws)
            .arg("--audit-db")
            .arg(self.path(&format!("audit/{db}.db")))
            .arg("--audit-key")
            .arg(self.path("audit/audit.key"))
            .arg("--policy")
            .arg(&policy_file)
            .arg("--upstream-ca")
            .arg(&self.pki.ca_pem)
            .args(["--resolve", "api.test:127.0.0.1"])
            .args(["--resolve", "pypi.test:127.0.0.1"])
            .args(["--resolve", "git.test:127.0.0.1"])
            .args(["--timeout", "60s", "--", "sh", "-c"])
            .arg(self.port_in(script))
            .envs(env.iter().copied());
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap()
    }

    /// `airlock policy suggest` of the first session in `db`, written to `out`.
    fn suggest(&self, db: &str, out: &str) -> (Output, String) {
        let db = self.path(&format!("audit/{db}.db"));
        let id = first_session_id(AIRLOCK, &db, &"suggest");
        let out_file = self.path(out);
        let run = Command::new(AIRLOCK)
            .args(["policy", "suggest", &id, "--audit-db"])
            .arg(&db)
            .arg("--out")
            .arg(&out_file)
            .output()
            .unwrap();
        let text = std::fs::read_to_string(&out_file).unwrap_or_default();
        (run, text)
    }

    fn check(&self, file: &str) -> Output {
        Command::new(AIRLOCK)
            .args(["policy", "check"])
            .arg(self.path(file))
            .output()
            .unwrap()
    }
}

/// The policy without its header comment (which names where it came from).
fn rules_of(text: &str) -> &str {
    text.split_once("version = 1\n")
        .map_or(text, |(_, rules)| rules)
}

#[tokio::test]
async fn a_suggested_policy_lints_clean_replays_clean_and_repeats_the_session_unrefused() {
    let lab = Lab::new().await;
    let script = format!("{SUGGEST_SCRIPT} && {REFUSED_SCRIPT}");
    let out = lab
        .run(
            "version = 1\ndefault = \"report\"\n",
            &script,
            "recorded",
            &[],
        )
        .await;
    assert!(out.status.success(), "{out:?}");

    let (run, text) = lab.suggest("recorded", "suggested.toml");
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let port = lab.upstream.port();
    // Shaped as a person writes it: one rule per method group, identifiers
    // collapsed into globs, a comment with the count and an example.
    assert!(
        text.contains(&format!(
            "# 5 requests, e.g. https://api.test:{port}/items/3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "[[allow]]\nhost = \"api.test\"\nports = [{port}]\nmethods = [\"GET\"]\npaths = [\"/items/*\", \"/packages/requests-*.tar.gz\", \"/users/*/keys\"]\n"
        )),
        "{text}"
    );
    assert!(
        text.contains("methods = [\"POST\"]\npaths = [\"/upload\"]\n"),
        "{text}"
    );
    assert!(text.contains("default = \"deny\"\n"), "{text}");
    // The refused request stays refused, listed for a person to decide.
    let (_, refused) = text
        .split_once("# Refused when recorded")
        .unwrap_or_else(|| panic!("no refused block: {text}"));
    assert!(refused.contains("/admin"), "{text}");
    assert!(
        refused.lines().skip(1).all(|l| l.starts_with('#')),
        "{text}"
    );

    let check = lab.check("suggested.toml");
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{check:?}");
    assert!(stdout.ends_with("ok (0 warnings)\n"), "{stdout}");

    let db = lab.path("audit/recorded.db");
    let id = first_session_id(AIRLOCK, &db, &"replay");
    let replay = Command::new(AIRLOCK)
        .args(["policy", "replay"])
        .arg(lab.path("suggested.toml"))
        .arg(&id)
        .arg("--audit-db")
        .arg(&db)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(0), "{stdout}{replay:?}");
    assert!(stdout.contains(": 0 newly blocked,"), "{stdout}");

    // Enforced, the same commands go through with no refusal.
    let hits = lab.upstream.hits();
    let again = lab.run(&text, SUGGEST_SCRIPT, "enforced", &[]).await;
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{again:?}");
    assert!(!stderr.contains("refused"), "{stderr}");
    assert_eq!(lab.upstream.hits() - hits, 6, "{again:?}");
    // And what it did not do stays refused.
    let refused = lab
        .run(&text, REFUSED_SCRIPT, "enforced-refused", &[])
        .await;
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("refused"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_credential_used_in_a_session_is_referenced_by_its_source_never_its_secret() {
    let lab = Lab::new().await;
    let secret = "s3cret-suggest-7f1d2c";
    let policy = "version = 1\ndefault = \"report\"\n\n[[credential]]\nname = \"api\"\nhost = \"api.test\"\nheader = \"Authorization\"\nvalue = \"Bearer ${env:SUGGEST_TOKEN}\"\n";
    let out = lab
        .run(policy, SUGGEST_SCRIPT, "cred", &[("SUGGEST_TOKEN", secret)])
        .await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        lab.upstream.last_header("authorization").as_deref(),
        Some(format!("Bearer {secret}").as_str()),
        "the credential was not injected"
    );
    let (run, text) = lab.suggest("cred", "suggested.toml");
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    assert!(
        text.contains("[[credential]]\nname = \"api\"\nhosts = [\"api.test\"]\nheader = \"Authorization\"\nvalue = \"Bearer ${env:SUGGEST_TOKEN}\"\n"),
        "{text}"
    );
    assert!(!text.contains(secret), "{text}");
    assert!(!String::from_utf8_lossy(&run.stdout).contains(secret));
    let check = lab.check("suggested.toml");
    assert!(
        String::from_utf8_lossy(&check.stdout).ends_with("ok (0 warnings)\n"),
        "{check:?}"
    );
    // Enforced, the credential is injected as before.
    let again = lab
        .run(
            &text,
            SUGGEST_SCRIPT,
            "cred-enforced",
            &[("SUGGEST_TOKEN", secret)],
        )
        .await;
    assert!(again.status.success(), "{again:?}");
    assert_eq!(
        lab.upstream.last_header("authorization").as_deref(),
        Some(format!("Bearer {secret}").as_str())
    );
}

#[tokio::test]
async fn suggest_from_an_events_file_gives_the_policy_the_record_gives() {
    let lab = Lab::new().await;
    let db = lab.path("audit/proxy.db");
    std::fs::create_dir_all(lab.path("audit")).unwrap();
    let mut opts = ProxyOptions::new("version = 1\ndefault = \"report\"\n");
    opts.upstream_ca = Some(&lab.pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".to_owned()];
    opts.extra = vec![
        "--audit-db".to_owned(),
        db.to_str().unwrap().to_owned(),
        "--audit-key".to_owned(),
        lab.path("audit/audit.key").to_str().unwrap().to_owned(),
    ];
    let mut proxy = AirlockProxy::start(AIRLOCK, opts);
    let base = format!("https://api.test:{}", lab.upstream.port());
    for path in [
        "/users/42/keys",
        "/users/7/keys",
        "/packages/requests-2.31.0.tar.gz",
    ] {
        let (code, _, out) = curl(&proxy, &[&format!("{base}{path}")]).await;
        assert_eq!(code, 200, "{out:?}");
    }
    let (code, _, out) = curl(
        &proxy,
        &["-X", "POST", "-d", "x=1", &format!("{base}/upload")],
    )
    .await;
    assert_eq!(code, 200, "{out:?}");
    proxy
        .events_when(|e| e.iter().filter(|e| e["kind"] == "response").count() >= 4)
        .await;
    assert_eq!(proxy.stop(), Some(0));

    let from_events = Command::new(AIRLOCK)
        .args(["policy", "suggest", "--from-events"])
        .arg(&proxy.events)
        .output()
        .unwrap();
    assert_eq!(from_events.status.code(), Some(0), "{from_events:?}");
    let events_text = String::from_utf8(from_events.stdout).unwrap();
    let (run, record_text) = lab.suggest("proxy", "from-record.toml");
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    assert_eq!(rules_of(&events_text), rules_of(&record_text));
    assert!(
        events_text.contains("paths = [\"/packages/requests-*.tar.gz\", \"/users/*/keys\"]"),
        "{events_text}"
    );
    std::fs::write(lab.path("from-events.toml"), &events_text).unwrap();
    let check = lab.check("from-events.toml");
    assert!(
        String::from_utf8_lossy(&check.stdout).ends_with("ok (0 warnings)\n"),
        "{check:?}"
    );

    // Bad input is exit 2 with one line.
    std::fs::write(lab.path("bad.jsonl"), "{\"kind\":\"dns\"}\nnot json\n").unwrap();
    let bad = Command::new(AIRLOCK)
        .args(["policy", "suggest", "--from-events"])
        .arg(lab.path("bad.jsonl"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("bad.jsonl:2"), "{stderr}");
    let unknown = Command::new(AIRLOCK)
        .args(["policy", "suggest", "ffffffffffff", "--audit-db"])
        .arg(&db)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(unknown.status.code(), Some(2), "{unknown:?}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(unknown.stdout.is_empty(), "{unknown:?}");
}

#[tokio::test]
async fn a_connection_that_carried_no_http_becomes_a_tcp_rule_for_its_port() {
    // A line protocol where the client speaks first: report mode tunnels it.
    let server = TestServer::tcp(|stream| async move {
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if write
                .write_all(format!("echo {line}\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    })
    .await;
    let lab = Lab::new().await;
    let script = format!(
        "python3 -c 'import socket\ns = socket.create_connection((\"git.test\", {port}), timeout=10)\ns.sendall(b\"HELLO\\n\")\nprint(s.makefile().readline().strip())'",
        port = server.port()
    );
    let resolve = ["--resolve", "git.test:127.0.0.1"];
    let record = |policy: &str, db: &str| {
        let policy_file = lab.path(&format!("{db}.toml"));
        std::fs::write(&policy_file, policy).unwrap();
        std::fs::create_dir_all(lab.path("ws")).unwrap();
        let mut cmd = Command::new(AIRLOCK);
        cmd.arg("run")
            .arg("--workspace")
            .arg(lab.path("ws"))
            .arg("--audit-db")
            .arg(lab.path(&format!("audit/{db}.db")))
            .arg("--audit-key")
            .arg(lab.path("audit/audit.key"))
            .arg("--policy")
            .arg(&policy_file)
            .args(resolve)
            .args(["--", "sh", "-c", &script]);
        cmd
    };
    let mut cmd = record("version = 1\ndefault = \"report\"\n", "tcp");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "echo HELLO\n",
        "{out:?}"
    );

    let (run, text) = lab.suggest("tcp", "suggested.toml");
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    assert!(
        text.contains(&format!(
            "[[allow]]\nhost = \"git.test\"\nport = {}\nprotocol = \"tcp\"\n",
            server.port()
        )),
        "{text}"
    );
    let check = lab.check("suggested.toml");
    assert!(
        String::from_utf8_lossy(&check.stdout).ends_with("ok (0 warnings)\n"),
        "{check:?}"
    );
    // Enforced, the connection is tunnelled by that rule.
    let mut cmd = record(&text, "tcp-enforced");
    let again = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(again.status.success(), "{again:?}");
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        "echo HELLO\n",
        "{again:?}"
    );
}

/// A local package index (`/simple/airlock-demo/` linking a wheel under
/// `/files/`) and a bare git repository served over smart HTTP under
/// `/git/repo.git`, both from one upstream; `root` holds the repository.
fn index_and_repo(root: &Path) -> Extra {
    let git = |args: &[&str], dir: &Path| {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    let work = root.join("work");
    std::fs::create_dir(&work).unwrap();
    git(&["init", "-q", "-b", "main"], &work);
    std::fs::write(work.join("README"), "hello from git\n").unwrap();
    git(&["add", "README"], &work);
    git(&["commit", "-q", "-m", "first"], &work);
    git(&["clone", "-q", "--bare", "work", "repo.git"], root);

    Extra {
        git_root: Some(root.to_owned()),
        ..Extra::default()
    }
    .with_demo_package(root)
}

/// What a developer's setup does: install a package from the index, clone
/// a repository, fetch one more thing with curl. Prints the installed
/// package's greeting and the clone's README.
const TOOLS_SCRIPT: &str = "cd /tmp && rm -rf t c && \
    /usr/bin/python3 -m pip install -q --no-cache-dir --disable-pip-version-check --target /tmp/t \
      --index-url https://pypi.test:PORT/simple/ airlock-demo && \
    PYTHONPATH=/tmp/t /usr/bin/python3 -c 'import airlock_demo; print(airlock_demo.HELLO)' && \
    git -c user.name=dev -c user.email=dev@example.test clone -q https://git.test:PORT/git/repo.git c && \
    cat c/README && \
    curl -sS -o /dev/null https://api.test:PORT/users/42/keys";

#[tokio::test]
async fn a_policy_suggested_from_pip_and_git_lets_them_run_again_enforced() {
    let root = tempfile::tempdir().unwrap();
    let lab = Lab::with(index_and_repo(root.path())).await;
    let out = lab
        .run(
            "version = 1\ndefault = \"report\"\n",
            TOOLS_SCRIPT,
            "tools",
            &[],
        )
        .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout, "installed through the airlock\nhello from git\n",
        "{out:?}"
    );

    let (run, text) = lab.suggest("tools", "suggested.toml");
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let port = lab.upstream.port();
    // One rule per host and method: pip's project page and the wheel (its
    // version a glob), git's ref advertisement (the `?service=` query is
    // not part of the path) and its upload-pack POSTs, curl's one GET.
    for rule in [
        format!(
            "# 2 requests, e.g. https://pypi.test:{port}/files/airlock_demo-0.1-py3-none-any.whl\n[[allow]]\nhost = \"pypi.test\"\nports = [{port}]\nmethods = [\"GET\"]\npaths = [\"/files/airlock_demo-*-py3-none-any.whl\", \"/simple/airlock-demo/\"]\n"
        ),
        format!(
            "[[allow]]\nhost = \"git.test\"\nports = [{port}]\nmethods = [\"GET\"]\npaths = [\"/git/repo.git/info/refs\"]\n"
        ),
        format!(
            "[[allow]]\nhost = \"git.test\"\nports = [{port}]\nmethods = [\"POST\"]\npaths = [\"/git/repo.git/git-upload-pack\"]\n"
        ),
        format!(
            "[[allow]]\nhost = \"api.test\"\nports = [{port}]\nmethods = [\"GET\"]\npaths = [\"/users/*/keys\"]\n"
        ),
    ] {
        assert!(text.contains(&rule), "no {rule:?} in:\n{text}");
    }
    assert!(text.contains("default = \"deny\"\n"), "{text}");
    // Nothing broader: no host or path wildcard beyond those above.
    assert_eq!(text.matches("[[allow]]").count(), 4, "{text}");
    assert!(!text.contains("/**"), "{text}");

    let check = lab.check("suggested.toml");
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{check:?}\n{text}");
    assert!(stdout.ends_with("ok (0 warnings)\n"), "{stdout}\n{text}");

    // Replayed under the suggested policy, nothing is newly denied.
    let db = lab.path("audit/tools.db");
    let id = first_session_id(AIRLOCK, &db, &"replay");
    let replay = |file: &str| {
        let out = Command::new(AIRLOCK)
            .args(["policy", "replay"])
            .arg(lab.path(file))
            .arg(&id)
            .arg("--audit-db")
            .arg(&db)
            .arg("--json")
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("replay --json: {e}: {out:?}"));
        (out.status.code().unwrap_or(-1), report)
    };
    let (code, report) = replay("suggested.toml");
    assert_eq!(code, 0, "{report:#}\n{text}");
    assert_eq!(report["blocked"], 0, "{report:#}");
    // Every request was only reported when recorded (no rules); each is
    // now allowed by a suggested rule: changes, none of them a block.
    let all = changes(&report);
    assert_eq!(all.len(), 6, "{report:#}");
    assert!(
        all.iter()
            .all(|c| c.starts_with("now_allowed http ") && c.ends_with(" → allow")),
        "{report:#}"
    );
    assert!(
        report["changes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["was"]["decision"] == "report"),
        "{report:#}"
    );
    // pip's page and wheel, git's refs and two upload-packs, curl's GET.
    assert_eq!(report["replayed"]["http"], 6, "{report:#}");

    // Stricter: no git. Exactly git's three requests would be refused.
    let no_git: Vec<&str> = text
        .split("\n\n")
        .filter(|block| !block.contains("host = \"git.test\""))
        .collect();
    std::fs::write(lab.path("no-git.toml"), no_git.join("\n\n")).unwrap();
    let check = lab.check("no-git.toml");
    assert_eq!(check.status.code(), Some(0), "{check:?}");
    let (code, report) = replay("no-git.toml");
    assert_eq!(code, 1, "{report:#}");
    // Its name, its connection and each of its requests; nothing of pip's
    // or curl's.
    let blocked: Vec<String> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["change"] == "blocked")
        .map(|c| {
            format!(
                "{} {} → {}",
                c["kind"].as_str().unwrap(),
                c["what"].as_str().unwrap(),
                c["would_be"]["decision"].as_str().unwrap()
            )
        })
        .collect();
    let git = format!("https://git.test:{port}/git/repo.git");
    assert_eq!(
        blocked,
        [
            "dns A git.test → deny".to_owned(),
            "dns AAAA git.test → deny".to_owned(),
            format!("http GET {git}/info/refs?service=git-upload-pack → deny"),
            format!("http POST {git}/git-upload-pack → deny"),
            format!("http POST {git}/git-upload-pack → deny"),
            format!("tcp git.test:{port} → deny"),
        ],
        "{report:#}"
    );
    assert_eq!(report["blocked"], 6, "{report:#}");
    let hosts = report["hosts"].as_array().unwrap();
    let blocked_hosts: Vec<&Value> = hosts.iter().filter(|h| h["blocked"] != 0).collect();
    assert_eq!(blocked_hosts.len(), 1, "{report:#}");
    assert_eq!(blocked_hosts[0]["host"], "git.test", "{report:#}");
    assert_eq!(blocked_hosts[0]["blocked"], 6, "{report:#}");

    // Enforced, pip installs and git clones again with no refusal.
    let hits = lab.upstream.hits();
    let again = lab.run(&text, TOOLS_SCRIPT, "tools-enforced", &[]).await;
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{again:?}\n{text}");
    assert!(!stderr.contains("airlock: refused"), "{stderr}");
    assert!(!stderr.contains("refused"), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        "installed through the airlock\nhello from git\n",
        "{again:?}"
    );
    assert_eq!(lab.upstream.hits() - hits, 6, "{again:?}");
    // And no broader: pushing (git-receive-pack) was never done, so it is
    // refused before it reaches the server.
    let hits = lab.upstream.hits();
    let push = lab
        .run(
            &text,
            "curl -sS -o /dev/null -w '%{http_code}' -X POST \
             https://git.test:PORT/git/repo.git/git-receive-pack",
            "tools-push",
            &[],
        )
        .await;
    assert_eq!(String::from_utf8_lossy(&push.stdout), "403", "{push:?}");
    assert_eq!(lab.upstream.hits(), hits, "{push:?}");
}

/// The same session with git's identity left unset, as on a fresh
/// machine: git then looks up the sandbox's own host name (`airlock`) to
/// make up a committer address. The sandbox's hosts file names it, so the
/// lookup never reaches the airlock's DNS: nothing about it in the
/// suggestion, nothing newly blocked on replay, no refusal notice.
#[tokio::test]
async fn git_without_an_identity_does_not_leave_the_sandbox_host_name_to_the_policy() {
    let root = tempfile::tempdir().unwrap();
    let lab = Lab::with(index_and_repo(root.path())).await;
    let script = TOOLS_SCRIPT.replace(
        "git -c user.name=dev -c user.email=dev@example.test clone",
        "git clone",
    );
    let out = lab
        .run("version = 1\ndefault = \"report\"\n", &script, "bare", &[])
        .await;
    assert!(out.status.success(), "{out:?}");
    let (run, text) = lab.suggest("bare", "suggested.toml");
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    assert!(!text.contains("airlock\n"), "{text}");

    let db = lab.path("audit/bare.db");
    let replay = Command::new(AIRLOCK)
        .args(["policy", "replay"])
        .arg(lab.path("suggested.toml"))
        .arg(first_session_id(AIRLOCK, &db, &"replay"))
        .arg("--audit-db")
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(replay.status.code(), Some(0), "{replay:?}");

    let again = lab.run(&text, &script, "bare-enforced", &[]).await;
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{again:?}");
    assert!(!stderr.contains("no rule allows airlock"), "{stderr}");
}

/// Report-mode sessions that try to poison `policy suggest` into a broad
/// rule (issue 29, item 7), each with what the suggestion must list as not
/// suggested (None: the request gets a rule that allows it literally).
const POISON_SCRIPTS: &[(&str, &str, Option<&str>)] = &[
    // Glob characters in the path, as sent and percent-encoded.
    (
        "literal-double-star",
        "curl -sS -o /dev/null --path-as-is \"$b/**\"",
        None,
    ),
    (
        "literal-star",
        "curl -sS -o /dev/null -X DELETE --path-as-is \"$b/*\"",
        None,
    ),
    (
        "stars-under-admin",
        "curl -sS -o /dev/null -X DELETE --path-as-is \"$b/admin/*/*\"",
        None,
    ),
    (
        "deep-glob",
        "curl -sS -o /dev/null -X DELETE --path-as-is \"$b/admin/**/all\"",
        None,
    ),
    (
        "star-in-a-segment",
        "curl -sS -o /dev/null -X DELETE --path-as-is \"$b/admin/users/a*\"",
        None,
    ),
    (
        "encoded-stars",
        "curl -sS -o /dev/null -X DELETE --path-as-is \"$b/%2A%2A\"",
        None,
    ),
    (
        "encoded-question-mark",
        "curl -sS -o /dev/null -X DELETE --path-as-is \"$b/admin/users/al%3F\"",
        None,
    ),
    // The asterisk form over intercepted TLS, whatever the method.
    (
        "asterisk-delete",
        "curl -sS -o /dev/null -X DELETE --request-target '*' \"$b\"",
        Some("the asterisk-form target `*` names no path"),
    ),
    (
        "asterisk-options",
        "curl -sS -o /dev/null -X OPTIONS --request-target '*' \"$b\"",
        Some("the asterisk-form target `*` names no path"),
    ),
    (
        "asterisk-lower-case",
        "curl -sS -o /dev/null -X delete --request-target '*' \"$b\"",
        Some("delete https://api.test:"),
    ),
    // A lower-case method: no allow rule names it, and DELETE was not sent.
    (
        "lower-case-method",
        "curl -sS -o /dev/null -X delete \"$b/admin/users/all\"",
        Some("allow rules name methods in upper case"),
    ),
];

#[tokio::test]
async fn recorded_traffic_cannot_poison_a_suggestion_into_allowing_what_it_did_not_do() {
    let lab = Lab::new().await;
    let port = lab.upstream.port();
    let base = format!("https://api.test:{port}");
    let policy_test = |file: &str, method: &str, path: &str| {
        Command::new(AIRLOCK)
            .args(["policy", "test"])
            .arg(lab.path(file))
            .args([method, &format!("{base}{path}")])
            .output()
            .unwrap()
    };
    for (name, attack, unsuggested) in POISON_SCRIPTS {
        let script = format!("b=https://api.test:PORT; {attack}");
        let out = lab
            .run("version = 1\ndefault = \"report\"\n", &script, name, &[])
            .await;
        assert!(out.status.success(), "{name}: {out:?}");
        let file = format!("{name}.suggested.toml");
        let (run, text) = lab.suggest(name, &file);
        assert_eq!(run.status.code(), Some(0), "{name}: {run:?}");
        assert!(!text.contains("protocol = \"tcp\""), "{name}: {text}");
        assert!(!text.contains("tls = \"passthrough\""), "{name}: {text}");
        let check = lab.check(&file);
        assert!(
            String::from_utf8_lossy(&check.stdout).ends_with("ok (0 warnings)\n"),
            "{name}: {check:?}\n{text}"
        );
        for (method, path) in [
            ("DELETE", "/admin/users/all"),
            ("GET", "/admin/users/all"),
            ("OPTIONS", "/admin/users/all"),
            ("DELETE", "/"),
            ("POST", "/x"),
        ] {
            let decided = policy_test(&file, method, path);
            assert_eq!(
                decided.status.code(),
                Some(1),
                "{name}: {method} {path} allowed: {decided:?}\n{text}"
            );
        }
        match unsuggested {
            Some(reason) => {
                let (_, listed) = text
                    .split_once("# Not suggested:")
                    .unwrap_or_else(|| panic!("{name}: no not-suggested block: {text}"));
                assert!(listed.contains(reason), "{name}: {text}");
                assert!(!text.contains("[[allow]]"), "{name}: {text}");
            }
            None => {
                // The request itself is allowed, as sent and only as sent.
                let method = attack
                    .split_once(" -X ")
                    .map_or("GET", |(_, rest)| rest.split(' ').next().unwrap());
                let path = attack
                    .rsplit_once("$b")
                    .map(|(_, rest)| rest.trim_end_matches('"'))
                    .unwrap();
                let decided = policy_test(&file, method, path);
                assert_eq!(
                    decided.status.code(),
                    Some(0),
                    "{name}: {decided:?}\n{text}"
                );
            }
        }
    }
}
