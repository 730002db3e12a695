//! `airlock audit export --format ocsf`, as a SIEM pipeline consumes it:
//! real sessions (a live session whose steps run curl through the proxy
//! with allowed, denied and held requests, DNS, file writes and processes;
//! `airlock run`s recording while a follower tails the database), their
//! OCSF events validated against the published OCSF schema (the
//! schema.ocsf.io export that the `ocsf-json-schema` package ships, with
//! Python's `jsonschema`, in a venv the tests make), and a `--follow`
//! consumer killed with SIGKILL and restarted that ends with every event
//! exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use airlock_test_support::audit_cli::audit_cli;
use airlock_test_support::pki::TestPki;
use airlock_test_support::postgres::PgServer;
use airlock_test_support::skip_or_fail;
use airlock_test_support::upstream::Upstream;
use serde_json::Value;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// The validator's packages, pinned: the schema is what `ocsf-json-schema`
/// ships (schema.ocsf.io's export of each OCSF version).
const VALIDATOR_PACKAGES: [&str; 2] = ["ocsf-json-schema==1.2.0", "jsonschema==4.26.0"];

const SECRET: &str = "sk-ocsf-5ecret-7d1e9a";

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A venv with the validator, made once per target directory (tests run in
/// parallel: each builds its own and the first to finish is kept).
fn validator_python() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let venv = root.join(format!(
        "ocsf-venv-{}",
        VALIDATOR_PACKAGES.join("-").replace(['=', '.'], "_")
    ));
    let python = venv.join("bin/python");
    if venv.join("ready").exists() {
        return Some(python);
    }
    std::fs::create_dir_all(root).unwrap();
    let building = tempfile::tempdir_in(root).unwrap().keep();
    let ok = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&building)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(building.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(VALIDATOR_PACKAGES)
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        let _ = std::fs::remove_dir_all(&building);
        skip_or_fail("cannot make a venv with ocsf-json-schema and jsonschema from PyPI");
        return None;
    }
    std::fs::write(building.join("ready"), "").unwrap();
    // A venv's scripts name its own path: it is used where it was built
    // when another test's won the rename.
    if std::fs::rename(&building, &venv).is_err() {
        return Some(building.join("bin/python"));
    }
    // Built elsewhere and moved: its scripts name the old path, but
    // `bin/python` (a symlink to the system's) still finds its packages.
    Some(python)
}

/// Validates OCSF JSON lines; returns how many events of each class
/// validated ("4002 HTTP Activity" → n), or panics naming every invalid one.
fn validate(python: &Path, lines: &str) -> BTreeMap<String, u64> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ocsf/validate.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OCSF events do not validate against the schema:\n{}",
        show(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&out)))
}

fn export(db: &Path, args: &[&str]) -> Output {
    let mut all = vec!["export", "--format", "ocsf"];
    all.extend_from_slice(args);
    audit_cli(AIRLOCK, db, &all)
}

fn export_ok(db: &Path, args: &[&str]) -> String {
    let out = export(db, args);
    assert!(out.status.success(), "{}", show(&out));
    String::from_utf8(out.stdout).unwrap()
}

fn events(lines: &str) -> Vec<Value> {
    lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn airlock(args: &[&str]) -> Output {
    Command::new(AIRLOCK)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Runs `airlock session stop` when dropped, so a failed test leaves no
/// live session behind.
struct Live(String);

impl Drop for Live {
    fn drop(&mut self) {
        let _ = airlock(&["session", "stop", &self.0]);
    }
}

// Two workers: the test blocks one on the CLI while the upstream serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_a_live_session_records_exports_as_ocsf_that_the_published_schema_accepts_without_a_secret()
 {
    let Some(python) = validator_python() else {
        return;
    };
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let port = upstream.port();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            r#"version = 1
[[allow]]
host = "api.test"
port = {port}
methods = ["GET"]
paths = ["/echo", "/echo/**"]

[[ask]]
host = "api.test"
port = {port}
methods = ["POST"]
paths = ["/echo/pay"]
reason = "paying needs a person"
timeout = "1s"

[[credential]]
name = "api"
hosts = ["api.test"]
header = "Authorization"
value = "Bearer ${{env:OCSF_TOKEN}}"
placeholder = "OCSF_TOKEN"
"#
        ),
    )
    .unwrap();
    let db = dir.path().join("audit/audit.db");
    let p = |p: &Path| p.to_str().unwrap().to_owned();
    let start = Command::new(AIRLOCK)
        .args(["session", "start", "--policy", &p(&policy), "--workspace"])
        .arg(&ws)
        .args(["--upstream-ca", &p(&pki.ca_pem)])
        .args(["--resolve", "api.test:127.0.0.1", "--audit-db", &p(&db)])
        .args(["--label", "team=payments", "--label", "pod=agent-7"])
        .env("OCSF_TOKEN", SECRET)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(start.status.success(), "{}", show(&start));
    let live = Live(String::from_utf8(start.stdout).unwrap().trim().to_owned());
    let base = format!("https://api.test:{port}");
    // Allowed (the credential injected, and echoed back in a response
    // header), denied by path, denied by host, held and expired; a file
    // written, renamed, chmodded and deleted; a process that fails.
    let script = format!(
        "curl -sS -H \"X-Token: $OCSF_TOKEN\" '{base}/echo?q=$OCSF_TOKEN' -o /dev/null; \
         curl -sS '{base}/admin' -o /dev/null; \
         curl -sS -m 5 https://denied.test/ -o /dev/null; \
         curl -sS -X POST --data pay '{base}/echo/pay' -o /dev/null; \
         echo one > a.txt; mv a.txt b.txt; chmod 600 b.txt; rm b.txt; \
         sh -c 'exit 3'; true"
    );
    let step = airlock(&[
        "session",
        "exec",
        &live.0,
        "--label",
        "tool-call-1",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(step.status.success(), "{}", show(&step));
    let stop = airlock(&["session", "stop", &live.0]);
    assert!(stop.status.success(), "{}", show(&stop));

    let lines = export_ok(&db, &[]);
    let counts = validate(&python, &lines);
    for class in [
        "1001 File System Activity",
        "1007 Process Activity",
        "4001 Network Activity",
        "4002 HTTP Activity",
        "4003 DNS Activity",
    ] {
        assert!(counts.contains_key(class), "no {class} event: {counts:?}");
    }
    for spelling in [
        SECRET.to_owned(),
        SECRET.to_uppercase(),
        base64_encode(SECRET.as_bytes()),
        base64_encode(format!("Bearer {SECRET}").as_bytes()),
    ] {
        assert!(
            !lines.contains(&spelling),
            "the secret ({spelling}) is in the OCSF export"
        );
    }

    // The headers are exported, the credential's value scrubbed from the
    // one airlock injected and from the upstream's echo of it.
    let allowed_line = lines
        .lines()
        .find(|l| l.contains("x-echo-authorization"))
        .expect("the response headers are exported");
    assert!(
        allowed_line.contains("Bearer [secret:api]"),
        "{allowed_line}"
    );

    // One event per recorded event (terminal output and resizes left
    // out), each with a uid a SIEM deduplicates on.
    let all = events(&lines);
    let session = all[0]["unmapped"]["airlock"]["session"]
        .as_str()
        .unwrap()
        .to_owned();
    let jsonl = airlock_test_support::audit_cli::export_jsonl(AIRLOCK, &db, &session);
    let expected: BTreeSet<String> = jsonl
        .iter()
        .filter(|e| e["kind"] != "output" && e["kind"] != "resize")
        .map(|e| format!("{session}-{}", e["seq"]))
        .collect();
    let uids: Vec<String> = all
        .iter()
        .map(|e| e["metadata"]["uid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(uids.iter().cloned().collect::<BTreeSet<_>>(), expected);
    assert_eq!(uids.len(), expected.len(), "an event is exported twice");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for e in &all {
        assert_eq!(e["metadata"]["product"]["name"], "Airlock", "{e}");
        assert_eq!(
            e["metadata"]["product"]["version"],
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(e["actor"]["session"]["uid"], session.as_str(), "{e}");
        assert_eq!(e["device"]["hostname"], host.trim(), "{e}");
        let tags = &e["metadata"]["tags"];
        assert_eq!(
            *tags,
            serde_json::json!([{"name": "pod", "value": "agent-7"}, {"name": "team", "value": "payments"}]),
            "{e}"
        );
        // Time in milliseconds, as the record has it in microseconds.
        let seq = e["metadata"]["sequence"].as_u64().unwrap();
        let recorded = jsonl.iter().find(|j| j["seq"] == seq).unwrap();
        assert_eq!(
            e["time"].as_i64().unwrap(),
            recorded["ts_us"].as_i64().unwrap() / 1000
        );
    }

    let http = |pred: &dyn Fn(&Value) -> bool| -> Vec<&Value> {
        all.iter()
            .filter(|e| e["class_uid"] == 4002 && pred(e))
            .collect()
    };
    let url = |e: &Value| {
        e["http_request"]["url"]["url_string"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    // The allowed request: verdict, rule, the exec that made it and its
    // command line, the credential's header scrubbed.
    let allowed = http(&|e| url(e).contains("/echo?q=") && e["http_response"]["code"] == 200);
    let allowed = allowed.first().expect("the allowed request is exported");
    assert_eq!(allowed["action_id"], 1, "{allowed}");
    assert_eq!(allowed["disposition_id"], 1);
    assert_eq!(allowed["unmapped"]["airlock"]["verdict"], "allow");
    let rule = allowed["firewall_rule"]["uid"].as_str().unwrap();
    assert!(rule.ends_with("policy.toml:2"), "{allowed}");
    assert_eq!(allowed["unmapped"]["airlock"]["rule"], rule);
    assert!(
        allowed["actor"]["process"]["cmd_line"]
            .as_str()
            .unwrap()
            .starts_with("curl "),
        "{allowed}"
    );
    assert_eq!(
        allowed["actor"]["process"]["uid"],
        allowed["unmapped"]["airlock"]["exec_id"]
    );
    assert_eq!(allowed["activity_name"], "Get");
    // The denied request: denied, blocked, the verdict kept verbatim.
    let denied = http(&|e| url(e).ends_with("/admin"));
    assert!(!denied.is_empty(), "the denied request is exported");
    for e in denied {
        assert_eq!(e["action_id"], 2, "{e}");
        assert_eq!(e["disposition_id"], 2, "{e}");
        assert_eq!(e["unmapped"]["airlock"]["verdict"], "deny");
    }
    // The connection refused by host, and the DNS query for it.
    assert!(all.iter().any(|e| e["class_uid"] == 4001
        && e["activity_name"] == "Refuse"
        && e["dst_endpoint"]["hostname"] == "denied.test"
        && e["action_id"] == 2));
    assert!(all.iter().any(|e| e["class_uid"] == 4003
        && e["query"]["hostname"] == "api.test"
        && e["action_id"] == 1));
    // The held request: delayed by the [[ask]] rule, then blocked when
    // nobody decided in time, linked by correlation_uid.
    let held = http(&|e| e["unmapped"]["airlock"]["kind"] == "approval_requested");
    let held = held.first().expect("the held request is exported");
    assert_eq!(held["disposition"], "Delayed", "{held}");
    assert!(
        held["firewall_rule"]["uid"]
            .as_str()
            .unwrap()
            .ends_with("policy.toml:8")
    );
    let decided = http(&|e| e["unmapped"]["airlock"]["kind"] == "approval_decided");
    let decided = decided.first().expect("the approval's end is exported");
    assert_eq!(
        decided["unmapped"]["airlock"]["outcome"], "expired",
        "{decided}"
    );
    assert_eq!(decided["action_id"], 2);
    assert_eq!(
        decided["metadata"]["correlation_uid"],
        held["metadata"]["correlation_uid"]
    );
    // Files, by the exec that wrote them.
    let file = |activity: &str| {
        all.iter()
            .find(|e| {
                e["class_uid"] == 1001
                    && e["activity_name"] == activity
                    && e["file"]["path"].as_str().unwrap().ends_with(".txt")
            })
            .unwrap_or_else(|| panic!("no file {activity}"))
    };
    assert_eq!(file("Create")["file"]["name"], "a.txt");
    assert_eq!(file("Rename")["file_result"]["name"], "b.txt");
    assert_eq!(file("Delete")["file"]["name"], "b.txt");
    file("Set Security");
    assert!(
        file("Create")["actor"]["process"]["cmd_line"]
            .as_str()
            .is_some_and(|c| c.starts_with("sh -c ")),
        "{}",
        file("Create")
    );
    // Processes: the failing one's exit code; the step with its label.
    assert!(all.iter().any(|e| e["class_uid"] == 1007
        && e["activity_name"] == "Terminate"
        && e["exit_code"] == 3));
    assert!(all.iter().any(|e| e["class_uid"] == 1007
        && e["unmapped"]["airlock"]["kind"] == "step_start"
        && e["unmapped"]["airlock"]["label"] == "tool-call-1"));
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `airlock run` recording into `db`, its command `script`.
fn run(db: &Path, ws: &Path, script: &str) -> Command {
    let mut c = Command::new(AIRLOCK);
    c.args(["run", "--workspace"])
        .arg(ws)
        .arg("--audit-db")
        .arg(db)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// A follower writing to `out` with cursor `cursor`.
fn follower(db: &Path, out: &Path, cursor: &Path) -> Child {
    follower_with(db, out, cursor, &[])
}

/// A follower of `db` (a file, or a central store's URL), with `env`.
fn follower_with(db: &Path, out: &Path, cursor: &Path, env: &[(&str, &str)]) -> Child {
    Command::new(AIRLOCK)
        .envs(env.iter().copied())
        .args(["audit", "export", "--format", "ocsf", "--follow"])
        .arg("--out")
        .arg(out)
        .arg("--cursor")
        .arg(cursor)
        .arg("--audit-db")
        .arg(db)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// Waits (bounded) until `done` holds.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The file's lines, each once, checking that none is there twice.
fn exactly_once(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut seen = BTreeSet::new();
    for line in text.lines() {
        let e: Value = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("a line cut short or broken ({err}): {line}"));
        assert!(
            seen.insert(line.to_owned()),
            "written twice: {}",
            e["metadata"]["uid"]
        );
    }
    assert!(text.ends_with('\n'), "the last line is cut short");
    seen
}

#[test]
fn a_follower_killed_with_sigkill_and_restarted_with_its_cursor_writes_every_event_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let db = dir.path().join("audit/audit.db");
    // The database exists before the follower starts.
    let first = run(&db, &ws, "true").status().unwrap();
    assert!(first.success());
    let out = dir.path().join("events.ocsf.jsonl");
    let cursor = dir.path().join("events.cursor");
    let mut f = follower(&db, &out, &cursor);
    // Two sessions that start after the follower did, writing one file
    // and running one process at a time, for at least 120 rounds and until
    // the kills are done: a loaded machine must not let them finish first.
    let script = |tag: &str| {
        format!(
            "i=0; while [ $i -lt 120 ] || [ ! -e stop ]; do echo $i > {tag}-$i; /bin/true; i=$((i+1)); [ $i -lt 6000 ] || break; done"
        )
    };
    let mut a = run(&db, &ws, &script("a")).spawn().unwrap();
    let mut b = run(&db, &ws, &script("b")).spawn().unwrap();
    // Killed three times mid-stream, each time once it has written more.
    for round in 1..=3 {
        let seen = line_count(&out);
        wait_until("the follower writes more", || line_count(&out) > seen + 20);
        f.kill().unwrap();
        f.wait().unwrap();
        if round < 3 {
            f = follower(&db, &out, &cursor);
        }
    }
    f = follower(&db, &out, &cursor);
    std::fs::write(ws.join("stop"), "").unwrap();
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    let full = export_ok(&db, &[]);
    let expected: BTreeSet<String> = full.lines().map(str::to_owned).collect();
    assert!(expected.len() > 700, "{} events", expected.len());
    wait_until("the follower writes every event", || {
        line_count(&out) >= expected.len()
    });
    // Anything more it would write (a duplicate) comes within a poll or two.
    std::thread::sleep(Duration::from_millis(800));
    f.kill().unwrap();
    f.wait().unwrap();
    assert_eq!(line_count(&out), expected.len(), "events written twice");
    assert_eq!(exactly_once(&out), expected);
}

#[test]
fn lines_written_before_the_cursor_was_saved_are_not_written_again_and_a_cut_line_is_dropped() {
    // What a kill between the write and the cursor's rename leaves: the
    // file has lines the cursor does not know of, the last one cut short.
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let db = dir.path().join("audit/audit.db");
    let out = dir.path().join("events.ocsf.jsonl");
    let cursor = dir.path().join("events.cursor");
    let (o, c) = (out.to_str().unwrap(), cursor.to_str().unwrap());
    assert!(run(&db, &ws, "echo one > one").status().unwrap().success());
    export_ok(&db, &["--out", o, "--cursor", c]);
    let old_cursor = std::fs::read(&cursor).unwrap();
    assert!(
        run(&db, &ws, "echo two > two; echo three > three")
            .status()
            .unwrap()
            .success()
    );
    export_ok(&db, &["--out", o, "--cursor", c]);
    let whole = exactly_once(&out);
    // Back to the cursor of before the second session, with half a line
    // more in the file.
    std::fs::write(&cursor, &old_cursor).unwrap();
    let last = whole.iter().next_back().unwrap().clone();
    let mut file = std::fs::OpenOptions::new().append(true).open(&out).unwrap();
    file.write_all(&last.as_bytes()[..last.len() / 2]).unwrap();
    drop(file);
    export_ok(&db, &["--out", o, "--cursor", c]);
    assert_eq!(exactly_once(&out), whole);
    assert_eq!(line_count(&out), whole.len());
    // And a new session after that still comes, once.
    assert!(
        run(&db, &ws, "echo four > four")
            .status()
            .unwrap()
            .success()
    );
    export_ok(&db, &["--out", o, "--cursor", c]);
    let after = exactly_once(&out);
    assert_eq!(after.len(), line_count(&out));
    assert!(after.len() > whole.len());
    assert_eq!(
        after,
        export_ok(&db, &[]).lines().map(str::to_owned).collect()
    );
}

#[test]
fn since_keeps_only_events_recorded_then_or_later_in_either_spelling() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let db = dir.path().join("audit/audit.db");
    assert!(run(&db, &ws, "echo old > old").status().unwrap().success());
    std::thread::sleep(Duration::from_millis(1100));
    let cut = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let rfc3339 = String::from_utf8(
        Command::new("date")
            .args(["-u", "-d", &format!("@{}.{:03}", cut / 1000, cut % 1000)])
            .arg("+%Y-%m-%dT%H:%M:%S.%3NZ")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(run(&db, &ws, "echo new > new").status().unwrap().success());
    let all = events(&export_ok(&db, &[]));
    let expected: Vec<&Value> = all
        .iter()
        .filter(|e| e["time"].as_i64().unwrap() >= cut)
        .collect();
    assert!(!expected.is_empty() && expected.len() < all.len());
    let since = events(&export_ok(&db, &["--since", rfc3339.trim()]));
    assert_eq!(since.iter().collect::<Vec<_>>(), expected);
    assert!(
        since.iter().all(|e| e["unmapped"]["airlock"]["session"]
            == expected[0]["unmapped"]["airlock"]["session"])
    );
    assert!(since.iter().any(|e| e["file"]["name"] == "new"));
    // A relative time: the last hour has everything, a long-gone hour nothing.
    assert_eq!(events(&export_ok(&db, &["--since", "1h"])), all);
    assert!(
        export_ok(&db, &["--since", "2000-01-01T00:00:00Z"])
            .lines()
            .count()
            == all.len()
    );
    let later = (cut / 1000) + 3600;
    let future = String::from_utf8(
        Command::new("date")
            .args(["-u", "-d", &format!("@{later}"), "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(export_ok(&db, &["--since", future.trim()]), "");
}

#[test]
fn bad_export_options_get_a_one_line_error_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let db = dir.path().join("audit/audit.db");
    assert!(run(&db, &ws, "true").status().unwrap().success());
    let bad_cursor = dir.path().join("cursor");
    std::fs::write(&bad_cursor, "not a cursor").unwrap();
    let cases: [(&[&str], &str); 7] = [
        (&["--since", "yesterday-ish"], "invalid --since"),
        (&["--since", "5 parsecs"], "invalid --since"),
        (
            &["--cursor", bad_cursor.to_str().unwrap()],
            "is not an airlock OCSF cursor",
        ),
        (&["--session", "zzzz"], "invalid session id"),
        (&["--session", "ffffffff"], "no audit session matches"),
        (
            &["--format", "har", "--follow", "--out", "-"],
            "--follow works with --format ocsf only",
        ),
        (
            &["--format", "har", "--out", "-"],
            "give the session to export",
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["export"];
        if !args.contains(&"--format") {
            all.extend(["--format", "ocsf"]);
        }
        all.extend_from_slice(args);
        let out = audit_cli(AIRLOCK, &db, &all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", show(&out));
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("airlock: ") && stderr.contains(expected),
            "{args:?}: {stderr}"
        );
    }
}

/// One record of every kind, in every outcome a SIEM tells apart, in the
/// stored form the proxy, the observer and the session write.
fn every_kind_and_outcome() -> Vec<Value> {
    use serde_json::json;
    let http = |method: &str, url: &str, status: Option<u16>, decision: &str| {
        json!({"kind": "http", "exec_id": "2", "exchange": 7, "method": method, "url": url,
            "http_version": "HTTP/1.1",
            "request_headers": [["user-agent", "curl/8"], ["authorization", "Bearer [secret:api]"]],
            "status": status, "response_headers": [["content-type", "text/plain"]],
            "bytes_up": 10, "bytes_down": 20, "started_us": 1_795_000_000_000_000_i64,
            "ms_to_headers": 1.5, "ms_total": 2.5, "decision": decision,
            "rule": "policy.toml:12", "reason": "because"})
    };
    let mut ws = http("GET", "https://api.test/ws", Some(101), "allow");
    ws["websocket"] = json!({"messages": [{"ts_us": 1, "direction": "to_upstream",
        "opcode": "text", "bytes": 2, "payload": "aGk="}], "closed_by": "client",
        "messages_to_upstream": 1, "bytes_to_upstream": 2});
    let file = |op: &str, path: &str| {
        json!({"kind": "file", "exec_id": "2", "path": path, "op": op, "size": 3,
            "sha256": "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4"})
    };
    let mut rename = file("rename", "/ws/a.txt");
    rename["rename_to"] = "/ws/b.txt".into();
    let mut acl = file("xattr", "/ws/b.txt");
    acl["xattr"] = json!({"name": "system.posix_acl_access", "acl": "user::rw-"});
    let mut xattr = file("xattr", "/ws/b.txt");
    xattr["xattr"] = json!({"name": {"escaped": "user.\\xff"}});
    let decided = |outcome: &str, by: Option<&str>| {
        json!({"kind": "approval_decided", "approval": "k3v9q2xa", "exec_id": "2",
            "exchange": 9, "outcome": outcome, "scope": "once", "by": by, "waited_ms": 1200,
            "body_sha256": "00", "method": "POST", "url": "https://api.test/pay"})
    };
    vec![
        json!({"kind": "step_start", "step": 1, "label": "tool-call-1",
            "command": ["sh", "-c", "curl https://api.test/"], "cwd": "/ws", "tty": false}),
        json!({"kind": "exec", "exec_id": "1", "pid": 2, "ppid": 1, "uid": 0,
            "path": "/usr/bin/dash", "argv": ["sh", "-c", "curl https://api.test/"],
            "cwd": "/ws", "step": 1}),
        json!({"kind": "exec", "exec_id": "2", "parent_exec_id": "1", "pid": 3, "ppid": 2,
            "uid": 1000, "path": {"escaped": "/usr/bin/curl\\xff"},
            "argv": ["curl", {"escaped": "\\xff"}], "cwd": "/ws",
            "sha256": "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4",
            "image": "file"}),
        json!({"kind": "dns", "exec_id": "2", "name": "api.test", "qtype": "A",
            "answer": ["127.0.0.1"], "decision": "allow", "rule": "policy.toml:2"}),
        json!({"kind": "dns", "exec_id": "2", "name": "evil.test", "qtype": "AAAA",
            "decision": "deny", "rule": "no rule allows this name"}),
        json!({"kind": "dns", "exec_id": "2", "name": "maybe.test", "qtype": "A",
            "answer": ["10.0.0.1"], "decision": "report"}),
        json!({"kind": "tcp", "exec_id": "2", "connection": 3, "dst": "127.0.0.1:443",
            "host": "api.test", "port": 443, "decision": "allow", "rule": "policy.toml:2"}),
        json!({"kind": "tcp", "exec_id": "2", "connection": 3, "dst": "127.0.0.1:443",
            "host": "api.test", "port": 443, "decision": "allow", "rule": "policy.toml:2",
            "bytes_up": 100, "bytes_down": 200, "duration_ms": 12.5}),
        json!({"kind": "tcp", "exec_id": "2", "connection": 4, "dst": "[2001:db8::1]:22",
            "port": 22, "decision": "deny", "reason": "no rule allows this host"}),
        json!({"kind": "tcp", "connection": 5, "dst": "evil.test:80", "port": 80,
            "decision": "report"}),
        http("GET", "https://api.test/echo?q=1", None, "allow"),
        http("GET", "https://api.test/echo?q=1", Some(200), "allow"),
        http("DELETE", "https://api.test/admin", Some(403), "deny"),
        http("PATCH", "http://[2001:db8::1]:8080/x", Some(204), "report"),
        http("PROPFIND", "https://api.test/dav", Some(207), "allow"),
        ws,
        json!({"kind": "approval_requested", "approval": "k3v9q2xa", "exec_id": "2",
            "exchange": 9, "method": "POST", "url": "https://api.test/pay",
            "request_headers": [["content-type", "text/plain"]], "body_bytes": 3,
            "body_sha256": "00", "rule": "policy.toml:8", "reason": "money",
            "timeout_ms": 60000, "approvers": ["alice"]}),
        decided("approved", Some("alice (uid 1000)")),
        decided("denied", Some("token ci-bot")),
        decided("expired", None),
        decided("abandoned", None),
        file("create", "/ws/a.txt"),
        file("modify", "/ws/a.txt"),
        file("truncate", "/ws/a.txt"),
        file("original", "/ws/old.txt"),
        rename,
        file("chmod", "/ws/b.txt"),
        acl,
        xattr,
        file("image", "/memfd:payload (deleted)"),
        file("delete", "/ws/b.txt"),
        file("create", "/ws/dir/"),
        json!({"kind": "output", "stream": "stdout", "data": "aGkK", "step": 1}),
        json!({"kind": "resize", "cols": 80, "rows": 24}),
        json!({"kind": "note", "text": "policy reloaded: sha256 00"}),
        json!({"kind": "untraced", "exec_id": "1", "pid": 9, "ppid": 2, "uid": 0,
            "comm": "escapee"}),
        json!({"kind": "exit", "exec_id": "2", "status": 0}),
        json!({"kind": "exit", "exec_id": "1", "signal": 9}),
        json!({"kind": "exit", "exec_id": "404"}),
        json!({"kind": "step_end", "step": 1, "exit_status": 0, "duration_ms": 33.3}),
        json!({"kind": "step_end", "step": 2, "signal": 15, "timed_out": true,
            "duration_ms": 1000.0, "reason": "killed: the step's timeout"}),
    ]
}

#[test]
fn every_event_kind_in_every_outcome_exports_as_ocsf_that_the_published_schema_accepts() {
    use airlock_auditor::{AuditEvent, RecordStore, SessionEnd};
    let Some(python) = validator_python() else {
        return;
    };
    let env = airlock_test_support::audit_store::env();
    let store = env.store();
    let mut info = airlock_test_support::audit_store::info(&["airlock", "session", "start"]);
    info.labels.insert("team".into(), "payments".into());
    let recorder = store.begin_session(info).unwrap();
    let records = every_kind_and_outcome();
    for record in &records {
        let event: AuditEvent =
            serde_json::from_value(record.clone()).unwrap_or_else(|e| panic!("{e}: {record}"));
        recorder.record(event).unwrap();
    }
    recorder.finish(SessionEnd::default()).unwrap();
    drop(store);

    let lines = export_ok(&env.db, &[]);
    let counts = validate(&python, &lines);
    let all = events(&lines);
    // Every record but terminal output and resizes is an event.
    let kinds = |e: &Value| {
        e["unmapped"]["airlock"]["kind"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let exported: Vec<String> = all.iter().map(kinds).collect();
    let expected: Vec<String> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .filter(|k| k != "output" && k != "resize")
        .collect();
    assert_eq!(exported, expected, "{counts:?}");
    assert_eq!(counts.get("0 Base Event"), Some(&1), "the note");
    for e in &all {
        assert_eq!(e["metadata"]["tags"][0]["value"], "payments", "{e}");
        assert_eq!(e["device"]["hostname"], "testhost", "{e}");
    }
    // The verdicts, each kept verbatim.
    let by_verdict = |v: &str| {
        all.iter()
            .filter(|e| e["unmapped"]["airlock"]["verdict"] == v)
            .map(|e| {
                (
                    e["action"].as_str().unwrap(),
                    e["disposition"].as_str().unwrap(),
                )
            })
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        by_verdict("allow"),
        BTreeSet::from([("Allowed", "Allowed")])
    );
    assert_eq!(by_verdict("deny"), BTreeSet::from([("Denied", "Blocked")]));
    assert_eq!(
        by_verdict("report"),
        BTreeSet::from([("Allowed", "Detected")])
    );
    // A refused name's reason is not taken for a rule.
    let evil = all
        .iter()
        .find(|e| e["query"]["hostname"] == "evil.test")
        .unwrap();
    assert!(evil.get("firewall_rule").is_none(), "{evil}");
    assert_eq!(
        evil["unmapped"]["airlock"]["reason"],
        "no rule allows this name"
    );
    // A name that is not UTF-8 is exported escaped, not lost.
    let curl = all.iter().find(|e| e["process"]["uid"] == "2").unwrap();
    assert_eq!(curl["process"]["path"], "/usr/bin/curl\\xff", "{curl}");
    assert_eq!(
        curl["actor"]["process"]["cmd_line"],
        "sh -c 'curl https://api.test/'"
    );
}

#[test]
fn mcp_tool_calls_export_as_api_activity_naming_the_tool_and_a_changed_tool_list_is_an_alert() {
    let Some(python) = validator_python() else {
        return;
    };
    let env = airlock_test_support::audit_store::env();
    let id = airlock_test_support::mcp_record::recorded_mcp_session(&env.store());
    let lines = export_ok(&env.db, &["--session", id.as_str()]);
    let counts = validate(&python, &lines);
    let all = events(&lines);
    let mcp: Vec<&Value> = all
        .iter()
        .filter(|e| e["unmapped"]["airlock"]["kind"] == "mcp_call")
        .collect();
    // Every record, as for HTTP: a SIEM sees the decision and the answer.
    assert_eq!(mcp.len(), 11, "{counts:?}");
    assert_eq!(counts.get("6003 API Activity"), Some(&11), "{counts:?}");
    let call = |tool: &str, answered: bool| {
        *mcp.iter()
            .find(|e| e["api"]["operation"] == tool && e["api"]["response"].is_object() == answered)
            .unwrap_or_else(|| panic!("no {tool} (answered {answered}) in {mcp:#?}"))
    };
    let transfer = call("transfer", true);
    assert_eq!(transfer["activity_name"], "Tool Call");
    assert_eq!(transfer["api"]["service"]["name"], "pay.test:443/mcp");
    assert_eq!(transfer["api"]["request"]["uid"], "2");
    // The arguments are on the decided record (the answered one, as the
    // proxy writes it, carries the answer only); both name the call.
    assert_eq!(
        call("transfer", false)["api"]["request"]["data"],
        serde_json::json!({"amount": 5, "currency": "USD"})
    );
    assert_eq!(
        call("transfer", false)["metadata"]["correlation_uid"],
        transfer["metadata"]["correlation_uid"]
    );
    assert_eq!(transfer["action"], "Allowed");
    assert_eq!(transfer["firewall_rule"]["uid"], "policy.toml:4");
    assert_eq!(transfer["dst_endpoint"]["hostname"], "pay.test");
    assert_eq!(transfer["actor"]["process"]["uid"], "e1");
    // Linked to the HTTP exchange it rode on.
    let post = all
        .iter()
        .find(|e| {
            e["class_uid"] == 4002
                && e["metadata"]["correlation_uid"] == transfer["metadata"]["correlation_uid"]
        })
        .unwrap_or_else(|| panic!("no HTTP record shares {transfer}"));
    assert_eq!(post["http_request"]["http_method"], "POST");
    let refund = call("refund", false);
    assert_eq!(
        (refund["action"].as_str(), refund["disposition"].as_str()),
        (Some("Denied"), Some("Blocked"))
    );
    assert_eq!(
        refund["firewall_rule"]["desc"],
        "tool refund is not allowed on pay.test/mcp"
    );
    // The second list changed transfer's description: an alert, High.
    let lists: Vec<&&Value> = mcp
        .iter()
        .filter(|e| e["api"]["operation"] == "tools/list" && e["api"]["response"].is_object())
        .collect();
    assert_eq!(lists.len(), 2);
    assert!(lists[0].get("is_alert").is_none(), "{}", lists[0]);
    assert_eq!(lists[1]["is_alert"], true, "{}", lists[1]);
    assert_eq!(lists[1]["severity"], "High");
    assert_eq!(
        lists[1]["unmapped"]["airlock"]["tools"]["changed"],
        serde_json::json!(["transfer"])
    );
    assert!(
        lists[1]["message"]
            .as_str()
            .unwrap()
            .contains("tools changed since the session's previous list: transfer"),
        "{}",
        lists[1]
    );
}

#[test]
fn a_follower_of_the_central_store_killed_with_sigkill_writes_every_shipped_event_exactly_once() {
    let pg = PgServer::start();
    let url = pg.url_without_password();
    let env = [("PGPASSWORD", pg.password())];
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let db = dir.path().join("audit/audit.db");
    let ship = || {
        let out = Command::new(AIRLOCK)
            .args(["audit", "ship", "--from"])
            .arg(&db)
            .args(["--to", &url])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
    };
    // What the node's own record exports: the central copy must export it
    // line for line.
    let local = || -> BTreeSet<String> { export_ok(&db, &[]).lines().map(str::to_owned).collect() };
    assert!(run(&db, &ws, "echo one > one").status().unwrap().success());
    ship();
    let out = dir.path().join("central.ocsf.jsonl");
    let cursor = dir.path().join("central.cursor");
    let mut f = follower_with(Path::new(&url), &out, &cursor, &env);
    let first = local().len();
    wait_until("the follower writes the first session", || {
        line_count(&out) >= first
    });
    // A session shipped while it follows, then a kill, then one more
    // session shipped before it comes back.
    let script = "i=0; while [ $i -lt 40 ]; do echo $i > f$i; i=$((i+1)); done";
    assert!(run(&db, &ws, script).status().unwrap().success());
    ship();
    let second = local().len();
    wait_until("the follower writes the second session", || {
        line_count(&out) >= second
    });
    f.kill().unwrap();
    f.wait().unwrap();
    assert!(
        run(&db, &ws, "echo three > three")
            .status()
            .unwrap()
            .success()
    );
    ship();
    let mut f = follower_with(Path::new(&url), &out, &cursor, &env);
    let expected = local();
    wait_until("the follower writes every event", || {
        line_count(&out) >= expected.len()
    });
    std::thread::sleep(Duration::from_millis(800));
    f.kill().unwrap();
    f.wait().unwrap();
    assert_eq!(line_count(&out), expected.len(), "events written twice");
    assert_eq!(exactly_once(&out), expected);
}
