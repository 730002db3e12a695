//! `airlock audit search` over sessions recorded by real clients: an
//! `airlock run` session and an `airlock proxy` session sharing one audit
//! database, and a live `airlock session`, searched as an incident
//! responder would.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use airlock_test_support::audit_cli::{audit_cli, sessions};
use airlock_test_support::client::curl;
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::upstream::Upstream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

const SECRET: &str = "sk-search-secret-4b1d7e90";

/// Allows GET and POST of /echo on api.test and injects the secret.
fn policy(port: u16) -> String {
    format!(
        r#"version = 1
[[allow]]
host = "api.test"
port = {port}
methods = ["GET", "POST"]
paths = ["/echo"]

[[credential]]
name = "api"
hosts = ["api.test"]
header = "Authorization"
value = "Bearer ${{env:API_TOKEN}}"
"#
    )
}

struct Recorded {
    _pki: TestPki,
    _upstream: Upstream,
    dir: tempfile::TempDir,
    workspace: PathBuf,
    run_id: String,
    proxy_id: String,
}

impl Recorded {
    fn db(&self) -> PathBuf {
        self.dir.path().join("audit/audit.db")
    }

    fn search(&self, args: &[&str]) -> Output {
        let mut all = vec!["search"];
        all.extend_from_slice(args);
        audit_cli(AIRLOCK, &self.db(), &all)
    }

    fn hits(&self, args: &[&str]) -> Vec<Hit> {
        hits(&self.db(), args)
    }
}

/// One match of `search --json`: session, kind, event.
type Hit = (String, String, serde_json::Value);

/// `search --json ARGS` against `db`: each hit; checks the search succeeded
/// and no line holds the secret.
fn hits(db: &Path, args: &[&str]) -> Vec<Hit> {
    let mut all = vec!["search", "--json"];
    all.extend_from_slice(args);
    let out = audit_cli(AIRLOCK, db, &all);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(!stdout.contains(SECRET), "{stdout}");
    stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect(l);
            assert!(v["seq"].is_u64() && v["ts"].is_string(), "{v}");
            (
                v["session"].as_str().unwrap().to_owned(),
                v["kind"].as_str().unwrap().to_owned(),
                v["event"].clone(),
            )
        })
        .collect()
}

/// A run session (curl: an allowed request, a refused one, a file written)
/// then a proxy session (curl through it: an allowed request).
async fn record() -> Recorded {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let db = dir.path().join("audit/audit.db");
    let key = dir.path().join("audit/audit.key");
    let policy_file = dir.path().join("policy.toml");
    std::fs::write(&policy_file, policy(upstream.port())).unwrap();

    let base = format!("https://api.test:{}", upstream.port());
    let script = format!(
        "curl -sS '{base}/echo?from=run'; curl -sS -o /dev/null '{base}/admin'; echo findings > notes.txt"
    );
    // Awaited, not blocking: the upstream runs on this test's runtime.
    let out = tokio::process::Command::new(AIRLOCK)
        .arg("run")
        .arg("--policy")
        .arg(&policy_file)
        .arg("--workspace")
        .arg(&workspace)
        .arg("--upstream-ca")
        .arg(&pki.ca_pem)
        .args(["--resolve", "api.test:127.0.0.1"])
        .arg("--audit-db")
        .arg(&db)
        .arg("--audit-key")
        .arg(&key)
        .args(["--timeout", "60s", "--", "sh", "-c", &script])
        .env("API_TOKEN", SECRET)
        .current_dir(&workspace)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    let policy_text = policy(upstream.port());
    let mut opts = ProxyOptions::new(&policy_text);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    opts.env = vec![("API_TOKEN", SECRET)];
    opts.extra = vec![
        "--audit-db".into(),
        db.to_str().unwrap().into(),
        "--audit-key".into(),
        key.to_str().unwrap().into(),
    ];
    let mut proxy = AirlockProxy::start(AIRLOCK, opts);
    let (code, _, _) = curl(&proxy, &[&format!("{base}/echo?from=proxy")]).await;
    assert_eq!(code, 200);
    assert_eq!(proxy.stop(), Some(0));

    let listed = sessions(AIRLOCK, &db);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{listed:#}");
    let (run_id, proxy_id) = (ids[0].to_owned(), ids[1].to_owned());
    Recorded {
        _pki: pki,
        _upstream: upstream,
        dir,
        workspace,
        run_id,
        proxy_id,
    }
}

fn session_set(hits: &[Hit]) -> BTreeSet<String> {
    hits.iter().map(|(s, _, _)| s.clone()).collect()
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn search_finds_hosts_refusals_files_and_commands_across_run_and_proxy_sessions() {
    let r = record().await;

    // A host: both sessions, in text as in JSON.
    let api = r.hits(&["--host", "API.test"]);
    assert_eq!(
        session_set(&api),
        BTreeSet::from([r.run_id.clone(), r.proxy_id.clone()])
    );
    assert!(api.iter().any(|(s, kind, e)| s == &r.proxy_id
        && kind == "http"
        && e["url"].as_str().unwrap().ends_with("/echo?from=proxy")));
    let out = r.search(&["--host", "api.test"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines = text(&out);
    for id in [&r.run_id, &r.proxy_id] {
        let short: String = id.chars().take(14).collect();
        assert!(
            lines.lines().any(|l| l.starts_with(&short)),
            "{short}: {lines}"
        );
    }
    assert!(!lines.contains(SECRET));

    // The refused request, and only it, with the exec that sent it.
    let denied = r.hits(&["--verdict", "deny"]);
    assert!(!denied.is_empty());
    assert!(
        denied
            .iter()
            .all(|(s, _, e)| s == &r.run_id && e["decision"] == "deny")
    );
    let refused: Vec<_> = denied.iter().filter(|(_, k, _)| k == "http").collect();
    assert_eq!(refused.len(), 1, "{denied:#?}");
    assert!(refused[0].2["url"].as_str().unwrap().ends_with("/admin"));
    let by_url = r.hits(&["--url", "/admin", "--method", "get"]);
    assert_eq!(by_url.len(), 1, "{by_url:#?}");

    // The file the run session wrote, by path and by directory.
    let notes = r.workspace.join("notes.txt");
    let written = r.hits(&["--file", notes.to_str().unwrap()]);
    assert!(!written.is_empty());
    assert!(
        written
            .iter()
            .all(|(s, k, e)| s == &r.run_id && k == "file" && e["path"] == notes.to_str().unwrap())
    );
    let dir = format!("{}/", r.workspace.display());
    assert!(r.hits(&["--file", &dir]).len() >= written.len());

    // The curl that made the refused request, by its command line.
    let curls = r.hits(&["--command", "/admin"]);
    assert_eq!(curls.len(), 2, "the shell and curl: {curls:#?}");
    assert!(curls.iter().all(|(s, k, _)| s == &r.run_id && k == "exec"));
    assert!(curls.iter().any(|(_, _, e)| e["argv"][0] == "curl"));

    // Time and session filters.
    assert_eq!(
        r.hits(&["--host", "api.test", "--since", "1h"]).len(),
        api.len()
    );
    let proxy_prefix: String = r.proxy_id.chars().take(12).collect();
    let only_proxy = r.hits(&["--host", "api.test", "--session", &proxy_prefix]);
    assert_eq!(
        session_set(&only_proxy),
        BTreeSet::from([r.proxy_id.clone()])
    );
}

#[tokio::test]
async fn no_match_exits_1_and_bad_input_exits_2_naming_the_fix() {
    let r = record().await;
    let none = r.search(&["--host", "nowhere.test"]);
    assert_eq!(none.status.code(), Some(1), "{none:?}");
    assert!(none.stdout.is_empty());
    let before = r.search(&["--host", "api.test", "--until", "2001-01-01T00:00:00Z"]);
    assert_eq!(before.status.code(), Some(1), "{before:?}");

    let stderr = |args: &[&str]| {
        let out = r.search(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(stderr(&[]).contains("--host"));
    assert!(stderr(&["--host", "api.test", "--since", "yesterday-ish"]).contains("RFC 3339"));
    assert!(
        stderr(&["--host", "api.test", "--session", "ffffffff"]).contains("airlock audit sessions")
    );
    assert!(stderr(&["--verdict", "maybe"]).contains("allow"));
    let missing = audit_cli(
        AIRLOCK,
        Path::new("/nonexistent/audit.db"),
        &["search", "--host", "api.test"],
    );
    assert_eq!(missing.status.code(), Some(2), "{missing:?}");
}

/// `airlock ARGS`, to completion, with no input and the credential's secret
/// in its environment.
fn airlock(args: &[&str]) -> Output {
    std::process::Command::new(AIRLOCK)
        .args(args)
        .env("API_TOKEN", SECRET)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

// Multi-threaded: the steps block this thread while the upstream answers.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_session_step_is_found_by_its_command_its_request_and_its_file() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let db = dir.path().join("audit/audit.db");
    let key = dir.path().join("audit/audit.key");
    let policy_file = dir.path().join("policy.toml");
    std::fs::write(&policy_file, policy(upstream.port())).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let (policy_arg, ws, ca, db_arg, key_arg) = (
        s(&policy_file),
        s(&workspace),
        s(&pki.ca_pem),
        s(&db),
        s(&key),
    );
    let started = airlock(&[
        "session",
        "start",
        "--policy",
        &policy_arg,
        "--workspace",
        &ws,
        "--upstream-ca",
        &ca,
        "--resolve",
        "api.test:127.0.0.1",
        "--audit-db",
        &db_arg,
        "--audit-key",
        &key_arg,
    ]);
    assert_eq!(started.status.code(), Some(0), "{started:?}");
    let live = String::from_utf8(started.stdout).unwrap().trim().to_owned();
    let url = format!("https://api.test:{}/echo?from=step", upstream.port());
    let step = airlock(&[
        "session",
        "exec",
        &live,
        "--",
        "sh",
        "-c",
        &format!("curl -sS '{url}' && echo done > step-output.txt"),
    ]);
    let stopped = airlock(&["session", "stop", &live]);
    assert_eq!(step.status.code(), Some(0), "{step:?}");
    assert_eq!(stopped.status.code(), Some(0), "{stopped:?}");

    let listed = sessions(AIRLOCK, &db);
    assert_eq!(listed[0]["mode"], "session", "{listed:#}");
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    let by_command = hits(&db, &["--command", "from=step"]);
    let kinds: BTreeSet<&str> = by_command.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["step_start", "exec"]),
        "{by_command:#?}"
    );
    assert!(by_command.iter().all(|(s, _, _)| s == &id));
    let requests = hits(
        &db,
        &[
            "--host",
            "api.test",
            "--method",
            "GET",
            "--url",
            "from=step",
        ],
    );
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!(requests[0].2["status"], 200);
    let file = workspace.join("step-output.txt");
    assert!(!hits(&db, &["--file", file.to_str().unwrap()]).is_empty());
}

/// The paths of the file events `search --json --file FILE` finds, run
/// from `cwd`.
fn files_found(db: &Path, cwd: &Path, file: &str) -> BTreeSet<String> {
    let out = std::process::Command::new(AIRLOCK)
        .current_dir(cwd)
        .args(["audit", "search", "--json", "--file", file, "--audit-db"])
        .arg(db)
        .output()
        .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{file}: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect(l);
            v["event"]["path"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[test]
fn a_file_is_found_by_a_relative_path_or_by_its_bare_name() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let db = root.join("audit/audit.db");
    let out = std::process::Command::new(AIRLOCK)
        .current_dir(&ws)
        .args(["run", "--audit-db"])
        .arg(&db)
        .args([
            "--",
            "sh",
            "-c",
            "echo a > notes.txt; mkdir sub; echo b > sub/notes.txt; echo c > /tmp/notes.txt; echo d > notes.txt.bak; echo e > mynotes.txt",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let path = |p: &str| p.replace("WS", ws.to_str().unwrap());
    let set = |paths: &[&str]| paths.iter().map(|p| path(p)).collect::<BTreeSet<_>>();
    let sub = ws.join("sub");
    for (cwd, file, expected) in [
        // A bare name: that name in every directory, and nothing longer.
        (
            &ws,
            "notes.txt",
            set(&["WS/notes.txt", "WS/sub/notes.txt", "/tmp/notes.txt"]),
        ),
        (
            &root,
            "notes.txt",
            set(&["WS/notes.txt", "WS/sub/notes.txt", "/tmp/notes.txt"]),
        ),
        (&ws, "mynotes.txt", set(&["WS/mynotes.txt"])),
        // Relative paths, from where the user stands.
        (&ws, "./notes.txt", set(&["WS/notes.txt"])),
        (&ws, "sub/notes.txt", set(&["WS/sub/notes.txt"])),
        (&sub, "../notes.txt", set(&["WS/notes.txt"])),
        (&sub, "./notes.txt", set(&["WS/sub/notes.txt"])),
        (&root, "ws/./sub/../notes.txt", set(&["WS/notes.txt"])),
        (&root, "ws/sub/", set(&["WS/sub/", "WS/sub/notes.txt"])),
        // Absolute paths, as before.
        (&root, "/tmp/notes.txt", set(&["/tmp/notes.txt"])),
        (&root, &path("WS/notes.txt"), set(&["WS/notes.txt"])),
        // A relative path from elsewhere names another file.
        (&root, "./notes.txt", set(&[])),
    ] {
        assert_eq!(
            files_found(&db, cwd, file),
            expected,
            "--file {file} from {}",
            cwd.display()
        );
    }
}
