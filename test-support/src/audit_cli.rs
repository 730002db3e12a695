//! `airlock audit`, run as an incident responder runs it, against a database.

use std::path::Path;
use std::process::Command;

/// `airlock audit ARGS --audit-db DB`, run to completion (`airlock` is the
/// binary's path, see [`airlock_bin!`](crate::airlock_bin)).
pub fn audit_cli(airlock: &str, db: &Path, args: &[&str]) -> std::process::Output {
    Command::new(airlock)
        .arg("audit")
        .args(args)
        .arg("--audit-db")
        .arg(db)
        .output()
        .unwrap()
}

/// What `airlock audit ARGS --audit-db DB` printed; panics unless it
/// succeeded.
pub fn audit_ok(airlock: &str, db: &Path, args: &[&str]) -> String {
    let out = audit_cli(airlock, db, args);
    assert!(out.status.success(), "airlock audit {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every session in `db`, as `audit sessions --json` lists them.
pub fn sessions(airlock: &str, db: &Path) -> serde_json::Value {
    let out = audit_cli(airlock, db, &["sessions", "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("audit sessions: {e}: {out:?}"))
}

/// Every event of session `id`, as `audit export --format jsonl` writes
/// them to stdout.
pub fn export_jsonl(airlock: &str, db: &Path, id: &str) -> Vec<serde_json::Value> {
    let out = audit_cli(
        airlock,
        db,
        &["export", id, "--format", "jsonl", "--out", "-"],
    );
    assert!(out.status.success(), "audit export: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The id of the first session in `db`; `context` (say, the run's output)
/// is printed when there is none.
pub fn first_session_id(airlock: &str, db: &Path, context: &dyn std::fmt::Debug) -> String {
    let out = audit_cli(airlock, db, &["sessions", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("no session recorded: {context:?}"));
    list[0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session recorded: {context:?}"))
        .to_owned()
}
