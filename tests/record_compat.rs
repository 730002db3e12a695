//! A record written before today's changes to the record's model still
//! opens, verifies and reads as it did. tests/fixtures/record-2026-11-27
//! holds a database written by main as of 2026-11-27 (commit f63d59b, before
//! names were kept as bytes): an `airlock run` session with every file
//! operation, execs, DNS, an allowed, a refused and a held (expired)
//! request, output and a nonzero exit, and a live session with two labelled
//! steps; and what that binary printed for it (the `*.golden` files, see
//! `make.sh` there). The database is copied first: opening must not be
//! able to change the checked-in file.

use std::path::{Path, PathBuf};

use airlock_test_support::audit_cli::audit_cli;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/record-2026-11-27")
}

fn golden(name: &str) -> String {
    let path = fixture().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A private copy of the fixture's database.
fn database() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    std::fs::copy(fixture().join("audit.db"), &db).unwrap();
    (dir, db)
}

fn run(db: &Path, args: &[&str]) -> String {
    let out = audit_cli(AIRLOCK, db, args);
    assert!(out.status.success(), "airlock audit {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn session_ids() -> Vec<String> {
    let sessions: serde_json::Value = serde_json::from_str(&golden("sessions.golden")).unwrap();
    sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The old binary's timeline with the one deliberate change in wording
/// since (issue 35: `exit  2 status 0` reads as if 2 were an exit code, so
/// the timeline now says `exit  exec 2 exited 0`). Nothing else may differ.
fn in_todays_wording(old: &str) -> String {
    old.lines()
        .map(|line| {
            let Some((head, tail)) = line.split_once(" exit  ") else {
                return line.to_owned();
            };
            match tail.split_once(" status ") {
                Some((exec, status)) if exec.bytes().all(|b| b.is_ascii_digit()) => {
                    format!("{head} exit  exec {exec} exited {status}")
                }
                _ => line.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The old binary's `sessions --json` with the fields added since (issue
/// 31): `labels`, empty for a session recorded before labels existed, and
/// `shipped`, null for one never shipped to a central store; and
/// `isolation` (issue 37), namespaces for a session recorded before the
/// choice existed.
fn with_fleet_fields(old: &str) -> String {
    let mut sessions: serde_json::Value = serde_json::from_str(old).unwrap();
    for s in sessions.as_array_mut().unwrap() {
        s["labels"] = serde_json::json!({});
        s["shipped"] = serde_json::Value::Null;
        s["isolation"] = serde_json::json!("namespaces");
    }
    serde_json::to_string_pretty(&sessions).unwrap()
}

/// Line by line, so a difference names its line.
fn assert_same(what: &str, got: &str, want: &str) {
    for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
        assert_eq!(g, w, "{what}, line {}", i + 1);
    }
    assert_eq!(
        got.lines().count(),
        want.lines().count(),
        "{what}: line count"
    );
}

#[test]
fn a_record_from_before_todays_model_changes_verifies_with_its_key() {
    let (_dir, db) = database();
    let key = fixture().join("audit.key");
    let verify = run(
        &db,
        &["verify", "--all", "--audit-key", key.to_str().unwrap()],
    );
    assert_same("verify", &verify, &golden("verify.golden"));
    assert_eq!(verify.matches(": intact:").count(), 2, "{verify}");
}

#[test]
fn a_record_from_before_todays_model_changes_reads_and_exports_as_it_did() {
    let (dir, db) = database();
    assert_same(
        "sessions --json",
        &run(&db, &["sessions", "--json"]),
        &with_fleet_fields(&golden("sessions.golden")),
    );
    for id in session_ids() {
        assert_same(
            &format!("timeline {id}"),
            &run(&db, &["timeline", &id]),
            &in_todays_wording(&golden(&format!("timeline-{id}.golden"))),
        );
        assert_same(
            &format!("files {id}"),
            &run(&db, &["files", &id]),
            &golden(&format!("files-{id}.golden")),
        );
        for (format, name) in [("jsonl", "export"), ("har", "har")] {
            let out = dir.path().join(format!("{id}.{format}"));
            run(
                &db,
                &[
                    "export",
                    "--format",
                    format,
                    "--out",
                    out.to_str().unwrap(),
                    &id,
                ],
            );
            assert_same(
                &format!("export --format {format} {id}"),
                &std::fs::read_to_string(&out).unwrap(),
                &golden(&format!("{name}-{id}.golden")),
            );
        }
    }
}

#[test]
fn sessions_recorded_before_labels_list_with_their_node_and_match_no_label_filter() {
    let (_dir, db) = database();
    let ids = session_ids();
    let table = run(&db, &["sessions"]);
    let header = table.lines().next().unwrap();
    assert!(header.contains("  NODE  LABELS  COMMAND"), "{table}");
    for id in &ids {
        let line = table
            .lines()
            .find(|l| l.starts_with(&id[..14]))
            .unwrap_or_else(|| panic!("{id} listed:\n{table}"));
        // Recorded on the machine called "vm"; no labels.
        assert!(line.contains("  vm    -       "), "{line}");
    }
    let listed = |filters: &[&str]| {
        let out = audit_cli(AIRLOCK, &db, &[&["sessions"], filters].concat());
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8(out.stdout).unwrap().lines().count() - 1
    };
    assert_eq!(listed(&["--node", "vm"]), ids.len());
    assert_eq!(listed(&["--node", "other"]), 0);
    assert_eq!(listed(&["--label", "pod=anything"]), 0);
    assert_eq!(listed(&["--label", "mode=run"]), 0);
    // Search: the same sessions (scanned or looked up), none by label.
    let search = |filters: &[&str]| {
        audit_cli(
            AIRLOCK,
            &db,
            &[&["search", "--command", "sh"], filters].concat(),
        )
        .status
        .code()
    };
    assert_eq!(search(&["--node", "vm"]), Some(0));
    assert_eq!(search(&["--label", "pod=anything"]), Some(1));
}
