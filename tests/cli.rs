//! The command line as a user meets it: `policy check`, `policy test`,
//! `policy schema`, `ca init`, and the errors for bad input.

use std::process::{Command, Output};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn airlock(args: &[&str]) -> Output {
    Command::new(AIRLOCK).args(args).output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn write_policy(dir: &tempfile::TempDir, body: &str) -> String {
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, body).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn every_example_policy_checks_clean() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/policies/examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let out = airlock(&["policy", "check", path.to_str().unwrap()]);
            assert!(out.status.success(), "{}", text(&out));
            assert!(text(&out).contains("ok (0 warnings)"), "{}", text(&out));
            seen += 1;
        }
    }
    assert!(seen >= 4, "expected the example policies, found {seen}");
}

#[test]
fn check_names_line_column_and_fix_for_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        &dir,
        "version = 1\n\n[[allow]]\nhots = \"api.example.com\"\n",
    );
    let out = airlock(&["policy", "check", &policy]);
    assert_eq!(out.status.code(), Some(2));
    let msg = text(&out);
    assert!(msg.contains("policy.toml:4:1"), "{msg}");
    assert!(msg.contains("hots"), "{msg}");
    assert!(msg.contains("host"), "{msg}");
    assert_eq!(msg.lines().count(), 1, "one-line error: {msg}");
}

#[test]
fn check_warns_about_rules_that_never_match_or_are_shadowed() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        &dir,
        r#"version = 1

[[deny]]
host = "*.evil.test"

[[allow]]
host = "api.evil.test"

[[allow]]
host = "api.github.com"

[[allow]]
host = "api.github.com"
methods = ["GET"]
paths = ["/repos/**"]

[[allow]]
host = "git.test"
port = 22
protocol = "tcp"

[[allow]]
host = "git.test"
port = 22
methods = ["GET"]
"#,
    );
    let out = airlock(&["policy", "check", &policy]);
    // Warnings do not fail the check; each names its line and the other rule.
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let msg = text(&out);
    assert!(
        msg.contains(
            "policy.toml:6:1: warning: this allow rule can never match: the deny rule at line 3"
        ),
        "{msg}"
    );
    assert!(
        msg.contains("policy.toml:12:1: warning: this allow rule can never match: the allow rule at line 9 already allows everything it does"),
        "{msg}"
    );
    assert!(
        msg.contains("policy.toml:22:1: warning: the tcp rule at line 17 tunnels git.test:22 without inspection"),
        "{msg}"
    );
    assert!(msg.contains("ok (3 warnings)"), "{msg}");
}

#[test]
fn test_prints_the_deciding_rule_and_exits_by_decision() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        &dir,
        r#"version = 1
[[allow]]
host = "api.github.com"
methods = ["GET"]
paths = ["/repos/**"]

[[deny]]
host = "api.github.com"
paths = ["/repos/*/secret/**"]
"#,
    );
    let out = airlock(&[
        "policy",
        "test",
        &policy,
        "GET",
        "https://api.github.com/repos/a/b",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("policy.toml:2"), "{}", text(&out));
    let out = airlock(&[
        "policy",
        "test",
        &policy,
        "POST",
        "https://api.github.com/repos/a/b",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = airlock(&[
        "policy",
        "test",
        &policy,
        "GET",
        "https://api.github.com/repos/a/secret/x",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("policy.toml:7"), "{}", text(&out));
    let out = airlock(&["policy", "test", &policy, "GET", "not a url"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn test_evaluates_body_constraints_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        &dir,
        r#"version = 1
[[allow]]
host = "api.stripe.com"
methods = ["POST"]
paths = ["/v1/charges"]
[allow.body]
amount = { max = 10000 }
"#,
    );
    let body = dir.path().join("body.json");
    std::fs::write(&body, r#"{"amount": 20000}"#).unwrap();
    let args = |b: &str| {
        vec![
            "policy".to_owned(),
            "test".into(),
            policy.clone(),
            "POST".into(),
            "https://api.stripe.com/v1/charges".into(),
            "--body".into(),
            b.to_owned(),
        ]
    };
    let out = Command::new(AIRLOCK)
        .args(args(body.to_str().unwrap()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("amount"), "{}", text(&out));
    std::fs::write(&body, r#"{"amount": 200}"#).unwrap();
    let out = Command::new(AIRLOCK)
        .args(args(body.to_str().unwrap()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn schema_is_json_naming_the_top_level_keys() {
    let out = airlock(&["policy", "schema"]);
    assert!(out.status.success());
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = schema.to_string();
    for key in ["version", "default", "allow", "deny", "credential"] {
        assert!(text.contains(&format!("\"{key}\"")), "schema lacks {key}");
    }
}

#[test]
fn ca_init_creates_a_private_key_and_refuses_to_overwrite() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca");
    let out = airlock(&["ca", "init", "--dir", ca.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let mode = std::fs::metadata(ca.join("ca-key.pem"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let out = airlock(&["ca", "init", "--dir", ca.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("already exists"), "{}", text(&out));
}

#[test]
fn proxy_start_errors_are_one_line_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        &dir,
        "version = 1\n[[credential]]\nname = \"gh\"\nhosts = [\"api.github.com\"]\nheader = \"Authorization\"\nvalue = \"Bearer ${env:AIRLOCK_TEST_UNSET_TOKEN}\"\n[[allow]]\nhost = \"api.github.com\"\n",
    );
    let ca = dir.path().join("ca");
    let out = airlock(&["ca", "init", "--dir", ca.to_str().unwrap()]);
    assert!(out.status.success());
    // `airlock proxy` with this CA directory and environment (None: unset).
    let proxy = |ca_dir: &std::path::Path, env: &[(&str, Option<&str>)]| {
        let mut cmd = Command::new(AIRLOCK);
        cmd.args(["proxy", "--listen", "127.0.0.1:0", "--policy", &policy])
            .arg("--ca-dir")
            .arg(ca_dir);
        for (name, value) in env {
            match value {
                Some(value) => cmd.env(name, value),
                None => cmd.env_remove(name),
            };
        }
        cmd.output().unwrap()
    };
    let out = proxy(&ca, &[("AIRLOCK_TEST_UNSET_TOKEN", None)]);
    assert_eq!(out.status.code(), Some(2));
    let msg = text(&out);
    assert!(msg.contains("AIRLOCK_TEST_UNSET_TOKEN is not set"), "{msg}");
    let missing = dir.path().join("nowhere");
    let out = proxy(&missing, &[("AIRLOCK_TEST_UNSET_TOKEN", Some("set-now"))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("airlock ca init"), "{}", text(&out));
    // A worker count that is not one: named, with the fix, before anything starts.
    for bad in ["abc", "0"] {
        let out = proxy(
            &missing,
            &[
                ("AIRLOCK_TEST_UNSET_TOKEN", Some("set-now")),
                ("AIRLOCK_WORKER_THREADS", Some(bad)),
            ],
        );
        assert_eq!(out.status.code(), Some(2));
        let msg = text(&out);
        assert_eq!(msg.lines().count(), 1, "{msg}");
        assert!(
            msg.contains(&format!(
                "AIRLOCK_WORKER_THREADS={bad}: not a number of threads from 1 to 1024"
            )) && msg.contains("unset it for one per CPU"),
            "{msg}"
        );
    }
}

#[test]
fn every_duration_option_reads_the_same_spellings() {
    // A bare number is seconds for the sidecar's --wait-timeout as for
    // run --timeout: nothing listens on port 9, so it gives up after 0.5s.
    for spelling in ["0.5", "0.5s", "500ms"] {
        let started = std::time::Instant::now();
        let out = airlock(&[
            "sidecar",
            "--wait-ready",
            "127.0.0.1:9",
            "--wait-timeout",
            spelling,
        ]);
        let msg = text(&out);
        assert!(msg.contains("was not ready within"), "{spelling}: {msg}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{spelling}"
        );
    }
    // A bad one: one line naming the option, the value and how to write it.
    for (args, option, code) in [
        (
            &["run", "--timeout", "soon", "--", "true"][..],
            "--timeout",
            125,
        ),
        (
            &[
                "sidecar",
                "--wait-ready",
                "127.0.0.1:9",
                "--wait-timeout",
                "0",
            ][..],
            "--wait-timeout",
            2,
        ),
    ] {
        let out = airlock(args);
        assert_eq!(out.status.code(), Some(code), "{}", text(&out));
        let msg = text(&out);
        let first = msg.lines().next().unwrap_or_default();
        assert!(first.contains(option), "{msg}");
        assert!(first.contains("500ms") && first.contains("1.5s"), "{msg}");
    }
}

#[test]
fn the_audit_database_can_be_named_by_airlock_audit_db() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(&dir, "version = 1\n");
    let ca = dir.path().join("ca");
    assert!(
        airlock(&["ca", "init", "--dir", ca.to_str().unwrap()])
            .status
            .success()
    );
    let db = dir.path().join("from-env.db");
    // `airlock proxy` records only when given a database: here only the
    // variable names one.
    let mut proxy = Command::new(AIRLOCK)
        .args(["proxy", "--listen", "127.0.0.1:0", "--events", "/dev/null"])
        .args(["--policy", &policy])
        .arg("--ca-dir")
        .arg(&ca)
        .arg("--audit-key")
        .arg(dir.path().join("audit.key"))
        .env("AIRLOCK_AUDIT_DB", &db)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(proxy.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("proxy listening") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "proxy exited");
    }
    let killed = Command::new("kill")
        .args(["-TERM", &proxy.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(proxy.wait().unwrap().code(), Some(0));
    assert!(
        db.exists(),
        "the proxy did not record into AIRLOCK_AUDIT_DB"
    );
    // `airlock audit` reads the same variable.
    let out = Command::new(AIRLOCK)
        .args(["audit", "sessions", "--json"])
        .env("AIRLOCK_AUDIT_DB", &db)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let sessions: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sessions.as_array().map(Vec::len), Some(1), "{sessions}");
    assert_eq!(sessions[0]["mode"], "proxy", "{sessions}");
}

#[test]
fn a_missing_policy_file_is_named_with_where_it_was_looked_for_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let ws = cwd.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let fix = "give the path of an existing policy file (docs/policy.md says how to write one; `airlock policy suggest` writes one from a recorded session)";
    for (args, code) in [
        (
            &[
                "run",
                "--policy",
                "policy.toml",
                "--workspace",
                "ws",
                "--",
                "true",
            ][..],
            125,
        ),
        (
            &[
                "session",
                "start",
                "--policy",
                "policy.toml",
                "--workspace",
                "ws",
            ][..],
            125,
        ),
        (
            &["mcp", "--policy", "policy.toml", "--workspace", "ws"][..],
            125,
        ),
        (
            &[
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--policy",
                "policy.toml",
            ][..],
            2,
        ),
        (&["policy", "check", "policy.toml"][..], 2),
        (
            &[
                "policy",
                "test",
                "policy.toml",
                "GET",
                "https://example.com/",
            ][..],
            2,
        ),
    ] {
        let out = Command::new(AIRLOCK)
            .current_dir(&cwd)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {msg}");
        assert_eq!(
            msg.trim_end(),
            format!(
                "airlock: the policy file policy.toml does not exist: looked for {} (relative to the current directory {}); {fix}",
                cwd.join("policy.toml").display(),
                cwd.display()
            ),
            "{args:?}"
        );
    }
    // An absolute path needs no directory to be relative to.
    let missing = cwd.join("nowhere/policy.toml");
    let out = airlock(&["policy", "check", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out).trim_end(),
        format!(
            "airlock: the policy file {0} does not exist: looked for {0}; {fix}",
            missing.display()
        )
    );
}

/// stderr of `airlock ARGS` in `cwd`, its exit status, and that it is one
/// line with airlock's prefix and no panic.
fn one_line_error(cwd: &std::path::Path, args: &[&str]) -> (String, Option<i32>) {
    let out = Command::new(AIRLOCK)
        .current_dir(cwd)
        .args(args)
        .stdin(std::process::Stdio::null())
        .env_remove("AIRLOCK_AUDIT_DB")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.starts_with("airlock: "), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    (stderr.trim_end().to_owned(), out.status.code())
}

#[test]
fn a_damaged_or_foreign_audit_database_is_named_for_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    std::fs::create_dir_all(cwd.join("ws")).unwrap();
    let db = cwd.join("audit.db");
    let out = Command::new(AIRLOCK)
        .current_dir(cwd)
        .args(["run", "--workspace", "ws", "--audit-db"])
        .arg(&db)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let whole = std::fs::read(&db).unwrap();
    // Cut short, as by an interrupted copy.
    std::fs::write(cwd.join("trunc.db"), &whole[..whole.len() / 2]).unwrap();
    std::fs::write(cwd.join("text.db"), "hello\n").unwrap();
    std::fs::write(cwd.join("empty.db"), "").unwrap();
    let damaged = "airlock: the audit database trunc.db is damaged (database disk image is malformed): it begins as one but cannot be read whole, as when a copy was cut short; check it with `sqlite3 trunc.db 'PRAGMA integrity_check'`, restore it from a backup, or pass another --audit-db";
    for args in [
        &["audit", "sessions", "--audit-db", "trunc.db"][..],
        &["audit", "timeline", "x", "--audit-db", "trunc.db"][..],
        &["audit", "verify", "x", "--audit-db", "trunc.db"][..],
        &["audit", "search", "--file", "x", "--audit-db", "trunc.db"][..],
    ] {
        assert_eq!(
            one_line_error(cwd, args),
            (damaged.to_owned(), Some(2)),
            "{args:?}"
        );
    }
    // Recording into it says the same, with the path as it was resolved.
    let (msg, code) = one_line_error(
        cwd,
        &[
            "run",
            "--workspace",
            "ws",
            "--audit-db",
            "trunc.db",
            "--",
            "true",
        ],
    );
    assert_eq!(code, Some(125));
    assert!(
        msg.starts_with(&format!(
            "airlock: the audit database {} is damaged",
            cwd.join("trunc.db").display()
        )),
        "{msg}"
    );
    assert_eq!(
        one_line_error(cwd, &["audit", "sessions", "--audit-db", "text.db"]),
        (
            "airlock: text.db is not an SQLite database, so not an airlock audit database; pass the right --audit-db".to_owned(),
            Some(2)
        )
    );
    assert_eq!(
        one_line_error(cwd, &["audit", "sessions", "--audit-db", "empty.db"]),
        (
            "airlock: empty.db is empty, so it holds no airlock record; pass the right --audit-db"
                .to_owned(),
            Some(2)
        )
    );
    // The audit commands' own errors carry the same prefix as the rest.
    for args in [
        &["audit", "timeline", "abcdef"][..],
        &["audit", "verify", "abcdef"][..],
        &["audit", "files", "abcdef"][..],
    ] {
        let mut args = args.to_vec();
        args.extend(["--audit-db", "audit.db"]);
        assert_eq!(
            one_line_error(cwd, &args),
            (
                "airlock: no audit session matches \"abcdef\"; list them with `airlock audit sessions`".to_owned(),
                Some(2)
            ),
            "{args:?}"
        );
    }
    // Never a Rust value.
    for name in ["trunc.db", "text.db", "empty.db"] {
        let (msg, _) = one_line_error(cwd, &["audit", "sessions", "--audit-db", name]);
        assert!(!msg.contains("None") && !msg.contains("Some("), "{msg}");
    }
}

#[test]
fn bad_arguments_are_one_airlock_line_naming_the_option_and_an_example() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    for (args, code, expected) in [
        // A misspelt flag: the suggestion, and no usage line implying that
        // --policy is required.
        (
            &["run", "--polcy", "p.toml", "--", "true"][..],
            125,
            "airlock: unexpected argument '--polcy' found (a similar argument exists: '--policy') (to pass '--polcy' as a value, use '-- --polcy'); see `airlock run --help`",
        ),
        (
            &["session", "start", "--bogus"][..],
            125,
            "airlock: unexpected argument '--bogus' found; see `airlock session start --help`",
        ),
        (
            &["audit", "verify"][..],
            2,
            "airlock: the following required arguments were not provided: <SESSION>; see `airlock audit verify --help`",
        ),
        (
            &["run", "--cpus", "abc", "--", "true"][..],
            125,
            "airlock: invalid value 'abc' for '--cpus <N>': not a number of CPU cores above zero; write one like 0.5 or 2; see `airlock run --help`",
        ),
        (
            &["run", "--cpus", "0", "--", "true"][..],
            125,
            "airlock: invalid value '0' for '--cpus <N>': not a number of CPU cores above zero; write one like 0.5 or 2; see `airlock run --help`",
        ),
        (
            &["session", "start", "--pids", "many"][..],
            125,
            "airlock: invalid value 'many' for '--pids <N>': not a whole number of processes above zero; write one like 64; see `airlock session start --help`",
        ),
        (
            &["proxy", "--listen", "localhost:80"][..],
            2,
            "airlock: invalid value 'localhost:80' for '--listen <LISTEN>': not an IP address and port; write one like 127.0.0.1:8080 or [::1]:8080; see `airlock proxy --help`",
        ),
        (
            &["sidecar", "--dns-port", "70000"][..],
            2,
            "airlock: invalid value '70000' for '--dns-port <PORT>': not a port number (0 to 65535); write one like 15001; see `airlock sidecar --help`",
        ),
        (
            &["audit", "serve", "--listen", ":8080"][..],
            2,
            "airlock: invalid value ':8080' for '--listen <ADDR>': not an IP address and port; write one like 127.0.0.1:8080 or [::1]:8080; see `airlock audit serve --help`",
        ),
    ] {
        let (msg, status) = one_line_error(cwd, args);
        assert_eq!(status, Some(code), "{args:?}: {msg}");
        assert_eq!(msg, expected, "{args:?}");
        assert!(!msg.contains("Usage:"), "{msg}");
    }
}

#[test]
fn a_busy_port_is_one_line_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    std::fs::create_dir_all(cwd.join("ws")).unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let out = Command::new(AIRLOCK)
        .current_dir(cwd)
        .args([
            "run",
            "--workspace",
            "ws",
            "--audit-db",
            "audit.db",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The console says it once.
    let (msg, code) = one_line_error(
        cwd,
        &[
            "audit",
            "serve",
            "--listen",
            &addr,
            "--audit-db",
            "audit.db",
        ],
    );
    assert_eq!(code, Some(2));
    assert_eq!(
        msg,
        format!(
            "airlock: cannot listen on {addr}: Address already in use (os error 98); pick another address with --listen"
        )
    );
    // The proxy binds before it creates its CA or begins a record, on
    // every address it is given.
    std::fs::write(cwd.join("policy.toml"), "version = 1\n").unwrap();
    let home = cwd.join("home");
    std::fs::create_dir_all(&home).unwrap();
    for (flag, args) in [
        ("--listen", vec!["--listen", addr.as_str()]),
        (
            "--admin-listen",
            vec!["--listen", "127.0.0.1:0", "--admin-listen", addr.as_str()],
        ),
        (
            "--transparent-listen",
            vec![
                "--listen",
                "127.0.0.1:0",
                "--transparent-listen",
                addr.as_str(),
            ],
        ),
    ] {
        let out = Command::new(AIRLOCK)
            .current_dir(cwd)
            .env("HOME", &home)
            .env_remove("XDG_DATA_HOME")
            .arg("proxy")
            .args(&args)
            .args(["--policy", "policy.toml", "--audit-db", "proxy/audit.db"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(
            stderr.trim_end(),
            format!(
                "airlock: {flag} {addr}: cannot listen (Address already in use (os error 98)); another process may be using it: pick another address with {flag}"
            )
        );
        assert!(
            !home.join(".local/share/airlock/ca").exists(),
            "{flag}: a CA was created before the bind failed"
        );
        assert!(
            !cwd.join("proxy/audit.db").exists(),
            "{flag}: a record was begun before the bind failed"
        );
    }
    drop(busy);
}

#[test]
fn policy_check_catches_typos_in_values_and_says_which_ports_a_rule_covers() {
    let dir = tempfile::tempdir().unwrap();
    let check = |body: &str, extra: &[&str]| {
        let policy = write_policy(&dir, body);
        let mut args = vec!["policy", "check"];
        args.extend_from_slice(extra);
        args.push(&policy);
        let out = airlock(&args);
        let msg = text(&out).replace(&policy, "P");
        assert!(!msg.contains("panicked"), "{msg}");
        (msg, out.status.code())
    };
    // A method no client sends: a warning naming the one meant.
    assert_eq!(
        check("version = 1\n[[allow]]\nhost = \"a.com\"\nmethods = [\"GTE\"]\n", &[]),
        (
            "P:2:1: warning: method \"GTE\" is not a standard HTTP method, so this rule matches only a client that sends exactly that; did you mean \"GET\"?\nP: ok (1 warning)\n".to_owned(),
            Some(0)
        )
    );
    // A misspelt value: one line, the suggestion, exit 2.
    assert_eq!(
        check("version = 1\ndefault = \"dney\"\n", &[]),
        (
            "airlock: P:2:11: unknown value \"dney\" for `default`; did you mean \"deny\"? (one of: deny, allow, report)\n".to_owned(),
            Some(2)
        )
    );
    // A quoted port.
    assert_eq!(
        check("version = 1\n[[allow]]\nhost = \"a.com\"\nports = [\"443\"]\n", &[]),
        (
            "airlock: P:4:10: \"443\" is a string, and a number is expected here: write 443 without quotes\n".to_owned(),
            Some(2)
        )
    );
    // What a rule without `ports` covers, spelt out on request.
    assert_eq!(
        check(
            "version = 1\n[[allow]]\nhost = \"api.test\"\nmethods = [\"GET\"]\n[[allow]]\nhost = \"other.test\"\nports = [8443]\npaths = [\"/v1/**\"]\n[[deny]]\nhost = \"*.evil.test\"\n",
            &["--explain"]
        ),
        (
            "P:2: allow api.test, ports 80, 443 only (the default without `ports`: https://HOST:8443 is not covered; add ports = [80, 443, 8443] for it); GET; any path\n\
             P:5: allow other.test, port 8443; any method; /v1/**\n\
             P:9: deny *.evil.test, every port; any method; any path\n\
             default: deny for whatever no rule covers\n\
             P: ok (0 warnings)\n"
                .to_owned(),
            Some(0)
        )
    );
}
