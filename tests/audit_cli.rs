//! `airlock audit` run as a real process against stores written through the
//! auditor's API (the fixtures of airlock-test-support's `audit_store`,
//! shared with auditor/tests).

use std::path::Path;
use std::process::{Command, Output};

use airlock_auditor::{AuditEvent, FileOp, RecordStore, SessionEnd, SessionId};
use airlock_test_support::audit_store::{Env, dns, env, file, info, thirty_event_session};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn run(e: &Env, args: &[&str]) -> Output {
    run_with_key(e, args, None)
}

/// `airlock audit ARGS` on the store, with `key` exported as
/// AIRLOCK_AUDIT_KEY, as users do for every command.
fn run_with_key(e: &Env, args: &[&str], key: Option<&Path>) -> Output {
    let mut command = Command::new(AIRLOCK);
    command
        .arg("audit")
        .args(args)
        .arg("--audit-db")
        .arg(&e.db)
        .env("HOME", e.dir.path())
        .env_remove("XDG_DATA_HOME")
        .env_remove("AIRLOCK_AUDIT_DB")
        .env_remove("AIRLOCK_AUDIT_KEY");
    if let Some(key) = key {
        command.env("AIRLOCK_AUDIT_KEY", key);
    }
    command.output().unwrap()
}

/// `audit files ID --restore DIR`.
fn restore_into(e: &Env, id: &SessionId, dir: &Path, key: Option<&Path>) -> Output {
    let args = ["files", id.as_str(), "--restore", dir.to_str().unwrap()];
    run_with_key(e, &args, key)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn sessions_timeline_export_and_verify_exit_codes() {
    let e = env();
    let id = thirty_event_session(&e.store());
    let prefix = &id.as_str()[..16];
    let key = e.key.to_str().unwrap();

    let o = run(&e, &["sessions"]);
    assert!(o.status.success());
    let table = stdout(&o);
    assert!(
        table.contains("python3 x.py") && table.contains("exit 0") && table.contains("30"),
        "{table}"
    );

    let o = run(&e, &["sessions", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["id"], id.as_str());
    assert_eq!(v[0]["events"], 30);

    let o = run(&e, &["timeline", prefix, "--kind", "dns"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o).matches("dns   host").count(), 30);

    let out = e.dir.path().join("s.jsonl");
    let o = run(
        &e,
        &[
            "export",
            prefix,
            "--format",
            "jsonl",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{o:?}");
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 30);

    let o = run(&e, &["verify", prefix, "--audit-key", key]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).contains("intact"));

    let o = run(&e, &["verify", "--all", "--audit-key", key]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    // Usage errors: no session / unknown session / bad kind.
    assert_eq!(run(&e, &["verify"]).status.code(), Some(2));
    let o = run(&e, &["verify", "ffff", "--audit-key", key]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("airlock audit sessions"));
    assert_eq!(
        run(&e, &["timeline", prefix, "--kind", "bogus"])
            .status
            .code(),
        Some(2)
    );

    // Tampered: exit 1 naming the first bad seq.
    e.raw()
        .execute(
            "UPDATE events SET payload = replace(payload, 'host9.', 'hostX.') WHERE seq = 9",
            [],
        )
        .unwrap();
    let o = run(&e, &["verify", prefix, "--audit-key", key]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let text = stdout(&o);
    assert!(
        text.contains("TAMPERED") && text.contains("first bad seq 9"),
        "{text}"
    );
}

#[test]
fn files_restore_and_har_export() {
    let e = env();
    let store = e.store();
    let rec = store.begin_session(info(&["sh"])).unwrap();
    rec.record(file("/work/a.txt", FileOp::Create, Some(b"alpha")))
        .unwrap();
    let id = rec.session_id().clone();
    rec.finish(Default::default()).unwrap();
    let dir = e.dir.path().join("out");
    let o = restore_into(&e, &id, &dir, None);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("restored   /work/a.txt (5 B)"));
    assert_eq!(std::fs::read(dir.join("work/a.txt")).unwrap(), b"alpha");

    let o = run(
        &e,
        &["export", id.as_str(), "--format", "har", "--out", "-"],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["log"]["version"], "1.2");
}

/// A file that was there before the session and that the session only
/// renamed is restored under its new name with what it held: the record has
/// its original (taken before the rename), and the rename moves it.
#[test]
fn restore_puts_a_renamed_preexisting_file_under_its_new_name_with_its_content() {
    let e = env();
    let store = e.store();
    let rec = store.begin_session(info(&["sh"])).unwrap();
    let mut original = file("/work/a.txt", FileOp::Original, Some(b"before the session"));
    if let AuditEvent::File(f) = &mut original {
        f.mode = Some(0o100640);
    }
    rec.record(original).unwrap();
    let mut rename = file("/work/a.txt", FileOp::Rename, None);
    if let AuditEvent::File(f) = &mut rename {
        f.rename_to = Some("/work/b.txt".into());
    }
    rec.record(rename).unwrap();
    let id = rec.session_id().clone();
    rec.finish(Default::default()).unwrap();
    let dir = e.dir.path().join("out");
    let o = restore_into(&e, &id, &dir, None);
    assert!(o.status.success(), "{o:?}");
    assert!(
        stdout(&o).contains("restored   /work/b.txt (18 B)"),
        "{}",
        stdout(&o)
    );
    assert!(!stdout(&o).contains("unknown"), "{}", stdout(&o));
    let restored = dir.join("work/b.txt");
    assert_eq!(std::fs::read(&restored).unwrap(), b"before the session");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&restored).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    assert!(
        !dir.join("work/a.txt").exists(),
        "the old name is not restored"
    );

    // The key the session was signed with, exported as users do for every
    // command: listing works, and the restore verifies with it.
    let key = Some(e.key.as_path());
    let o = run_with_key(&e, &["files", id.as_str()], key);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("rename"), "{}", stdout(&o));
    let again = e.dir.path().join("again");
    let o = restore_into(&e, &id, &again, key);
    assert!(o.status.success(), "{o:?}");
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Without it (and with no local key) the restore says what it could
    // not check.
    let o = restore_into(&e, &id, &again, None);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no trusted key"),
        "{o:?}"
    );
}

/// Records a finished session of `command` on `node` with `labels`, one DNS
/// lookup of `looked_up` in it.
fn labelled(
    store: &dyn RecordStore,
    command: &str,
    node: &str,
    labels: &[(&str, &str)],
    looked_up: &str,
) -> SessionId {
    let mut info = info(&[command]);
    info.host = node.into();
    info.labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let rec = store.begin_session(info).unwrap();
    rec.record(dns(looked_up)).unwrap();
    let id = rec.session_id().clone();
    rec.finish(Default::default()).unwrap();
    id
}

/// Four sessions of a fleet: labels with `=` and unicode in their values,
/// a value that another begins with, and a session without labels, as
/// every version before labels recorded it. The commands name them.
fn fleet(e: &Env) {
    let store = e.store();
    labelled(
        &store,
        "red-agent",
        "node-a",
        &[("team", "red"), ("pod", "agent-1")],
        "red.example.com",
    );
    labelled(
        &store,
        "red2-agent",
        "node-a",
        &[("team", "red-2")],
        "red2.example.com",
    );
    labelled(
        &store,
        "blue-agent",
        "node-b",
        &[("team", "blue=green"), ("owner", "Zoë 日本")],
        "blue.example.com",
    );
    labelled(
        &store,
        "unlabelled-agent",
        "node-b",
        &[],
        "plain.example.com",
    );
}

/// A session Airlock ended with a long reason (an error's whole chain)
/// takes no more of the table than its EXIT column's cap: the columns after
/// it stay aligned on every line, and its timeline keeps the reason whole.
#[test]
fn audit_sessions_cuts_a_long_end_reason_and_keeps_its_columns_aligned() {
    let e = env();
    let store = e.store();
    let ends = [
        (
            "failed-agent",
            None,
            None,
            Some("airlock failed: the audit store could not be written: disk full (os error 28)"),
        ),
        ("killed-agent", None, Some(9), None),
        ("clean-agent", Some(0), None, None),
        ("stopped-agent", None, None, Some("idle for 10m")),
    ];
    let mut failed = None;
    for (command, exit_status, signal, reason) in ends {
        let rec = store.begin_session(info(&[command])).unwrap();
        rec.record(dns("example.com")).unwrap();
        let id = rec.session_id().clone();
        rec.finish(SessionEnd {
            exit_status,
            signal,
            reason: reason.map(str::to_owned),
        })
        .unwrap();
        failed.get_or_insert(id);
    }
    let table = sessions_table(&e);
    let lines: Vec<&str> = table.lines().collect();
    let header = lines[0];
    for (command, exit) in [
        ("failed-agent", "airlock failed: the aud…"),
        ("killed-agent", "signal 9"),
        ("clean-agent", "exit 0"),
        ("stopped-agent", "idle for 10m"),
    ] {
        let line = lines
            .iter()
            .find(|l| l.ends_with(&format!("  {command}")))
            .unwrap_or_else(|| panic!("{command} listed:\n{table}"));
        assert_eq!(column(line, exit), column(header, "EXIT"), "{table}");
        assert_eq!(column(line, command), column(header, "COMMAND"), "{table}");
    }
    assert!(!table.contains("disk full"), "{table}");
    let o = run(&e, &["timeline", failed.unwrap().as_str()]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        stdout(&o).contains("session ended: airlock failed: the audit store could not be written: disk full (os error 28)"),
        "{}",
        stdout(&o)
    );
}

/// `audit sessions` as a table.
fn sessions_table(e: &Env) -> String {
    let o = run(e, &["sessions"]);
    assert!(o.status.success(), "{o:?}");
    stdout(&o)
}

/// Where `text` starts on a line of that table, in characters.
fn column(line: &str, text: &str) -> usize {
    let at = line
        .find(text)
        .unwrap_or_else(|| panic!("{text:?} in {line:?}"));
    line[..at].chars().count()
}

/// The commands `audit sessions` lists with these arguments, and its stderr.
fn listed(e: &Env, filters: &[&str]) -> (Vec<String>, String) {
    let o = run(e, &[&["sessions"], filters].concat());
    assert_eq!(o.status.code(), Some(0), "sessions {filters:?}: {o:?}");
    let table = stdout(&o);
    let commands = table
        .lines()
        .skip(1)
        .map(|l| l.rsplit("  ").next().unwrap().to_owned())
        .collect();
    (commands, String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn audit_sessions_shows_each_sessions_node_and_labels_in_aligned_columns() {
    let e = env();
    fleet(&e);
    let table = sessions_table(&e);
    let lines: Vec<&str> = table.lines().collect();
    let header = lines[0];
    for (command, node, labels) in [
        ("red-agent", "node-a", "pod=agent-1,team=red"),
        ("red2-agent", "node-a", "team=red-2"),
        ("blue-agent", "node-b", "owner=Zoë 日本,team=blue=green"),
        ("unlabelled-agent", "node-b", "-"),
    ] {
        let line = lines
            .iter()
            .find(|l| l.ends_with(&format!("  {command}")))
            .unwrap_or_else(|| panic!("{command} listed:\n{table}"));
        assert_eq!(
            column(line, &format!("  {node}  ")) + 2,
            column(header, "NODE"),
            "{table}"
        );
        assert_eq!(
            column(line, &format!("  {labels}  ")) + 2,
            column(header, "LABELS"),
            "{table}"
        );
        assert_eq!(column(line, command), column(header, "COMMAND"), "{table}");
    }

    let o = run(&e, &["sessions", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let by_command = |c: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|s| s["command"][0] == c)
            .unwrap()
            .clone()
    };
    assert_eq!(
        by_command("blue-agent")["labels"],
        serde_json::json!({"team": "blue=green", "owner": "Zoë 日本"})
    );
    assert_eq!(by_command("blue-agent")["host"], "node-b");
    assert_eq!(
        by_command("unlabelled-agent")["labels"],
        serde_json::json!({})
    );
}

#[test]
fn audit_sessions_label_and_node_filters_match_exactly_and_all_must_hold() {
    let e = env();
    fleet(&e);
    for (filters, want) in [
        (&["--label", "team=red"][..], &["red-agent"][..]),
        // The value is everything after the first '='.
        (&["--label", "team=blue=green"], &["blue-agent"]),
        (&["--label", "owner=Zoë 日本"], &["blue-agent"]),
        (
            &["--label", "team=red", "--label", "pod=agent-1"],
            &["red-agent"],
        ),
        (&["--node", "node-b"], &["blue-agent", "unlabelled-agent"]),
        (
            &["--node", "node-b", "--label", "team=blue=green"],
            &["blue-agent"],
        ),
        (&["--node", "node-a"], &["red-agent", "red2-agent"]),
        // Neither a prefix, a part, another case nor a key alone matches.
        (&["--label", "team=re"], &[]),
        (&["--label", "team=blue"], &[]),
        (&["--label", "owner=Zoë"], &[]),
        (&["--label", "Team=red"], &[]),
        (&["--label", "team=RED"], &[]),
        (&["--label", "team="], &[]),
        (&["--label", "team=red", "--label", "pod=agent-2"], &[]),
        (&["--label", "team=red", "--node", "node-b"], &[]),
        // A key no session has; a session without labels matches none.
        (&["--label", "nokey=x"], &[]),
        (&["--node", "node-a "], &[]),
        (&["--node", "NODE-A"], &[]),
    ] {
        let (commands, stderr) = listed(&e, filters);
        assert_eq!(commands, want, "sessions {filters:?}");
        if want.is_empty() {
            assert!(
                stderr.starts_with("note: no recorded session matches --"),
                "{filters:?}: {stderr}"
            );
        }
    }
}

#[test]
fn a_label_filter_that_is_not_key_equals_value_or_an_empty_node_is_a_one_line_usage_error() {
    let e = env();
    fleet(&e);
    for (args, words) in [
        (
            &["sessions", "--label", "team"][..],
            "has no '='; write KEY=VALUE",
        ),
        (&["sessions", "--label", "=red"], "has no key before '='"),
        (
            &["search", "--host", "*.example.com", "--label", "team"],
            "has no '='",
        ),
        (&["sessions", "--node", ""], "--node is empty"),
        (
            &["search", "--host", "*.example.com", "--node", " "],
            "--node is empty",
        ),
    ] {
        let o = run(&e, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.starts_with("airlock: ") && err.contains(words),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn audit_search_by_label_or_node_finds_only_the_events_of_those_sessions() {
    let e = env();
    fleet(&e);
    let red = e.store().sessions().unwrap()[0].id.clone();
    // The hosts the matching events looked up, and the exit status.
    let found = |filters: &[&str]| {
        let o = run(
            &e,
            &[&["search", "--host", "*.example.com", "--json"], filters].concat(),
        );
        let hosts: Vec<String> = stdout(&o)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["event"]["name"].as_str().unwrap().to_owned()
            })
            .collect();
        (hosts, o.status.code())
    };
    for (filters, want) in [
        (&["--label", "team=red"][..], &["red.example.com"][..]),
        (&["--label", "team=blue=green"], &["blue.example.com"]),
        (&["--label", "owner=Zoë 日本"], &["blue.example.com"]),
        (
            &["--node", "node-b"],
            &["blue.example.com", "plain.example.com"],
        ),
        (
            &["--node", "node-a", "--label", "team=red-2"],
            &["red2.example.com"],
        ),
        (
            &["--label", "team=red", "--session", red.as_str()],
            &["red.example.com"],
        ),
        // Only a session in both.
        (
            &["--label", "team=blue=green", "--session", red.as_str()],
            &[],
        ),
        (&["--label", "team=re"], &[]),
        (&["--label", "nokey=x"], &[]),
        (&["--label", "team=red", "--label", "team=red-2"], &[]),
        (&["--node", "node-c"], &[]),
    ] {
        let (hosts, code) = found(filters);
        assert_eq!(hosts, want, "search {filters:?}");
        // Exit 0 when something matched, 1 when nothing did.
        assert_eq!(
            code,
            Some(if want.is_empty() { 1 } else { 0 }),
            "{filters:?}"
        );
    }
    // Text output: the same one line per event.
    let o = run(
        &e,
        &["search", "--host", "*.example.com", "--label", "team=red"],
    );
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("red.example.com") && text.starts_with(&red.as_str()[..14]),
        "{text}"
    );
}

#[test]
fn a_hostile_label_or_node_is_printed_escaped_and_cannot_forge_a_line_or_reach_the_terminal() {
    let e = env();
    // What a record written by something else than airlock could hold
    // (airlock refuses control characters in --label at start).
    labelled(
        &e.store(),
        "hostile-agent",
        "node\u{1b}]0;owned\u{7}",
        &[("team", "red\u{1b}[2J\nFORGED 2026-01-01 exit 0  fake-agent")],
        "x.example.com",
    );
    let o = run(&e, &["sessions"]);
    assert!(o.status.success(), "{o:?}");
    let table = stdout(&o);
    assert!(
        !table.contains('\u{1b}') && !table.contains('\u{7}'),
        "{table:?}"
    );
    assert_eq!(table.lines().count(), 2, "one header, one session: {table}");
    assert!(table.contains("node\\x1b]0;owned\\x07"), "{table}");
    assert!(table.contains("team=red\\x1b[2J\\nFORGED"), "{table}");
    // The filter takes the value as recorded, and JSON keeps it exact.
    let o = run(
        &e,
        &[
            "sessions",
            "--json",
            "--label",
            "team=red\u{1b}[2J\nFORGED 2026-01-01 exit 0  fake-agent",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["host"], "node\u{1b}]0;owned\u{7}");
}

/// `airlock audit ... | head`: once the reader has gone, each reader
/// command stops quietly with status 0, as other command-line tools do; a
/// broken pipe anywhere else stays an error.
#[test]
fn a_reader_that_stops_reading_ends_each_command_quietly() {
    let e = env();
    let store = e.store();
    for _ in 0..20 {
        thirty_event_session(&store);
    }
    let id = thirty_event_session(&store);
    let prefix = &id.as_str()[..16];
    let commands: [&[&str]; 6] = [
        &["sessions"],
        &["sessions", "--json"],
        &["timeline", prefix],
        &["export", prefix, "--format", "jsonl", "--out", "-"],
        &["export", prefix, "--format", "ocsf", "--out", "-"],
        &["search", "--host", "*.example.com"],
    ];
    for args in commands {
        // A pipe whose reading end is closed before airlock writes: every
        // write fails with EPIPE, whatever the timing.
        let (read, write) = nix::unistd::pipe().unwrap();
        drop(read);
        let out = Command::new(AIRLOCK)
            .arg("audit")
            .args(args)
            .arg("--audit-db")
            .arg(&e.db)
            .env("HOME", e.dir.path())
            .env_remove("AIRLOCK_AUDIT_DB")
            .stdout(std::process::Stdio::from(write))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "audit {args:?}: {stderr}");
        assert!(stderr.is_empty(), "audit {args:?}: {stderr}");
    }
}
