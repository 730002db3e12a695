//! `airlock audit` run as a real process against stores written through the
//! auditor's API (the fixtures of airlock-test-support's `audit_store`,
//! shared with auditor/tests).

use std::process::{Command, Output};

use airlock_test_support::audit_store::{Env, env, file, info, thirty_event_session};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn run(e: &Env, args: &[&str]) -> Output {
    Command::new(AIRLOCK)
        .arg("audit")
        .args(args)
        .arg("--audit-db")
        .arg(&e.db)
        .env("HOME", e.dir.path())
        .env_remove("XDG_DATA_HOME")
        .env_remove("AIRLOCK_AUDIT_DB")
        .env_remove("AIRLOCK_AUDIT_KEY")
        .output()
        .unwrap()
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
    rec.record(file(
        "/work/a.txt",
        airlock_auditor::FileOp::Create,
        Some(b"alpha"),
    ))
    .unwrap();
    let id = rec.session_id().clone();
    rec.finish(Default::default()).unwrap();
    let dir = e.dir.path().join("out");
    let o = run(
        &e,
        &["files", id.as_str(), "--restore", dir.to_str().unwrap()],
    );
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
