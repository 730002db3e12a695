//! Layouts a user picks for the workspace and the audit database just work,
//! without the sandbox seeing the database, the signing key or the secrets
//! beside them; the one layout that can't work is refused with a line that
//! names the path, why, and the fix.

use std::path::Path;
use std::process::{Command, Output};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn airlock_run(cwd: &Path, home: &Path, args: &[&str], script: &str) -> Output {
    Command::new(AIRLOCK)
        .current_dir(cwd)
        .env("HOME", home)
        .env_remove("XDG_DATA_HOME")
        .env_remove("AIRLOCK_AUDIT_DB")
        .arg("run")
        .args(args)
        .args(["--timeout", "60s", "--", "sh", "-c", script])
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The sessions recorded in `db`, as `airlock audit sessions --json` lists them.
fn sessions(db: &Path) -> Vec<serde_json::Value> {
    let out = Command::new(AIRLOCK)
        .args(["audit", "sessions", "--json", "--audit-db"])
        .arg(db)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn an_audit_database_in_the_workspaces_parent_works_and_stays_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(dir.path().join("sibling.txt"), "not for the sandbox").unwrap();
    let out = airlock_run(
        &workspace,
        dir.path(),
        &["--audit-db", "../audit.db", "--audit-key", "../audit.key"],
        "ls -A ..; for f in ../audit.db ../audit.key ../sibling.txt; do test -e $f && echo visible $f; done; echo written > out.txt; cat out.txt",
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Only the workspace itself is left of the hidden parent.
    assert_eq!(stdout, "ws\nwritten\n", "{stderr}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("out.txt")).unwrap(),
        "written\n"
    );
    assert_eq!(sessions(&dir.path().join("audit.db")).len(), 1);
}

#[test]
fn a_workspace_that_is_home_keeps_home_secrets_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    std::fs::write(home.join("notes.txt"), "mine\n").unwrap();
    let db = dir.path().join("elsewhere/audit.db");
    let out = airlock_run(
        &home,
        &home,
        &["--audit-db", db.to_str().unwrap()],
        "cat notes.txt; ls -A .ssh | wc -l; cat .ssh/id_ed25519 2>/dev/null || echo hidden; echo ok > new.txt",
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "mine\n0\nhidden\n", "{stderr}");
    assert!(home.join("new.txt").exists());
}

#[test]
fn a_workspace_under_home_with_the_default_database_works() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let script = format!(
        "ls -A ..; test -e {}/.local && echo visible; echo ok > f",
        home.display()
    );
    let out = airlock_run(&project, &home, &[], &script);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "project\n", "{stderr}");
    // The default database is under the (hidden) home, and has the session.
    assert_eq!(
        sessions(&home.join(".local/share/airlock/audit.db")).len(),
        1
    );
}

#[test]
fn relative_audit_paths_are_hidden_like_absolute_ones() {
    // Not under /tmp, which the sandbox replaces with its own: the key's
    // directory is visible unless it is hidden.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let script = format!(
        "for f in a.db a.key; do test -e {0}/$f && echo visible $f; done; ls -A {0}",
        dir.path().display()
    );
    let out = airlock_run(
        dir.path(),
        dir.path(),
        &[
            "--workspace",
            "ws",
            "--audit-db",
            "a.db",
            "--audit-key",
            "a.key",
        ],
        &script,
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "ws\n", "{stderr}");
    assert!(dir.path().join("a.key").exists());
}

#[test]
fn a_symlinked_workspace_runs_at_its_real_path() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir_all(&real).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let db = dir.path().join("db/audit.db");
    let out = airlock_run(
        &link,
        dir.path(),
        &["--audit-db", db.to_str().unwrap()],
        "pwd; echo through-the-link > f",
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.trim(),
        real.canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(real.join("f")).unwrap(),
        "through-the-link\n"
    );
}

/// A mount the test makes and removes (the test runs as root).
struct Mounted(std::path::PathBuf);

impl Mounted {
    /// A tmpfs of its own at `path`.
    fn tmpfs(path: &Path) -> Self {
        Self::mount(&["-t", "tmpfs", "-o", "size=8m", "tmpfs"], path)
    }

    /// `source` under a second name, `at`.
    fn bind(source: &Path, at: &Path) -> Self {
        Self::mount(&["--bind", source.to_str().unwrap()], at)
    }

    fn mount(args: &[&str], at: &Path) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let done = Command::new("mount").args(args).arg(at).status().unwrap();
        assert!(done.success(), "mount {args:?} {}", at.display());
        Self(at.to_owned())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_workspace_on_another_filesystem_works() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Mounted::tmpfs(&dir.path().join("other-fs"));
    let db = dir.path().join("db/audit.db");
    let out = airlock_run(
        &fs.0,
        dir.path(),
        &["--audit-db", db.to_str().unwrap()],
        "stat -f -c %T .; echo on-tmpfs > f",
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "tmpfs\n", "{stderr}");
    assert_eq!(
        std::fs::read_to_string(fs.0.join("f")).unwrap(),
        "on-tmpfs\n"
    );
}

#[test]
fn a_workspace_that_must_stay_hidden_is_refused_with_the_path_why_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let db = dir.path().join("db/audit.db");
    // The signing key would live in the workspace itself.
    let out = airlock_run(
        &workspace,
        dir.path(),
        &[
            "--audit-db",
            db.to_str().unwrap(),
            "--audit-key",
            "audit.key",
        ],
        "true",
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the workspace {} holds the audit signing key, which the sandbox must not see",
            workspace.display()
        )) && stderr.contains("--audit-key"),
        "{stderr}"
    );
    // The database in a place the sandbox can write: named, with the fix.
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = airlock_run(&home, &home, &[], "true");
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains(".local/share/airlock/audit.db is inside")
            && stderr.contains("pass --audit-db (or set AIRLOCK_AUDIT_DB) with a path outside it"),
        "{stderr}"
    );
}

/// `airlock SUBCOMMAND ARGS` in `cwd`, stdin empty, with the audit store out
/// of the sandbox's reach: what matters here is the policy.
fn airlock_start(cwd: &Path, db: &Path, subcommand: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(AIRLOCK);
    cmd.current_dir(cwd)
        .env_remove("AIRLOCK_AUDIT_DB")
        .arg(subcommand)
        .args(args)
        .arg("--audit-db")
        .arg(db)
        .stdin(std::process::Stdio::null());
    if subcommand == "run" {
        cmd.args(["--", "true"]);
    }
    cmd.output().unwrap()
}

#[test]
fn a_policy_the_sandbox_could_rewrite_is_refused_at_start_in_every_spelling() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let grant = root.join("grant");
    let safe = root.join("safe");
    for d in [&ws, &grant, &safe] {
        std::fs::create_dir_all(d).unwrap();
    }
    let db = root.join("db/audit.db");
    let deny = "version = 1\ndefault = \"deny\"\n";
    std::fs::write(ws.join("policy.toml"), deny).unwrap();
    std::fs::write(ws.join("base.toml"), deny).unwrap();
    std::fs::write(grant.join("policy.toml"), deny).unwrap();
    std::fs::write(ws.join("token"), "t0ken\n").unwrap();
    std::fs::write(
        safe.join("extends.toml"),
        "version = 1\nextends = [\"../ws/base.toml\"]\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(ws.join("policy.toml"), safe.join("link.toml")).unwrap();
    std::fs::write(
        safe.join("credential.toml"),
        format!(
            "version = 1\n[[credential]]\nname = \"gh\"\nhosts = [\"api.github.com\"]\nheader = \"Authorization\"\nvalue = \"Bearer ${{file:{}}}\"\n",
            ws.join("token").display()
        ),
    )
    .unwrap();
    let ws_arg = ws.to_str().unwrap();
    let grant_arg = grant.to_str().unwrap();
    // (cwd, options, the file named, the writable path named)
    let attempts: Vec<(&Path, Vec<&str>, String, &Path)> = vec![
        // The default workspace is the current directory.
        (
            &ws,
            vec!["--policy", "policy.toml"],
            ws.join("policy.toml").display().to_string(),
            &ws,
        ),
        (
            &root,
            vec!["--policy", "ws/policy.toml", "--workspace", "ws"],
            ws.join("policy.toml").display().to_string(),
            &ws,
        ),
        (
            &root,
            vec!["--policy", "./ws/../ws/policy.toml", "--workspace", ws_arg],
            ws.join("policy.toml").display().to_string(),
            &ws,
        ),
        // A base it extends.
        (
            &root,
            vec!["--policy", "safe/extends.toml", "--workspace", ws_arg],
            "base.toml".into(),
            &ws,
        ),
        // A link outside that leads inside.
        (
            &root,
            vec!["--policy", "safe/link.toml", "--workspace", ws_arg],
            format!("(a link to {})", ws.join("policy.toml").display()),
            &ws,
        ),
        // A --rw grant is as writable as the workspace.
        (
            &root,
            vec![
                "--policy",
                "grant/policy.toml",
                "--workspace",
                "safe",
                "--rw",
                grant_arg,
            ],
            grant.join("policy.toml").display().to_string(),
            &grant,
        ),
    ];
    for subcommand in ["run", "session", "mcp"] {
        for (cwd, options, named, writable) in &attempts {
            let mut args: Vec<&str> = Vec::new();
            if subcommand == "session" {
                args.push("start");
            }
            args.extend(options);
            let sub = if subcommand == "session" {
                "session"
            } else {
                subcommand
            };
            let out = airlock_start(cwd, &db, sub, &args);
            let (stdout, stderr) = text(&out);
            let what = format!("airlock {subcommand} {options:?}: {stderr}");
            assert_eq!(out.status.code(), Some(125), "{what}");
            assert!(stdout.is_empty(), "{what} / {stdout}");
            assert_eq!(stderr.lines().count(), 1, "{what}");
            assert!(stderr.starts_with("airlock: the policy file "), "{what}");
            assert!(stderr.contains(named), "{what}");
            assert!(
                stderr.contains(&format!(
                    "is inside {}, which the sandbox can write (and so could rewrite its own policy): move it outside",
                    writable.display()
                )) && stderr.contains("--policy"),
                "{what}"
            );
            assert!(!stderr.contains("panicked"), "{what}");
        }
        // A credential read from a file the sandbox can write (and read).
        let mut args: Vec<&str> = Vec::new();
        if subcommand == "session" {
            args.push("start");
        }
        args.extend(["--policy", "safe/credential.toml", "--workspace", ws_arg]);
        let sub = if subcommand == "session" {
            "session"
        } else {
            subcommand
        };
        let out = airlock_start(&root, &db, sub, &args);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(125), "{stderr}");
        assert_eq!(
            stderr.trim_end(),
            format!(
                "airlock: credential gh: its file {} is inside {}, which the sandbox can write (and so could read or replace the secret): move the file outside it and name that path in ${{file:...}}",
                ws.join("token").display(),
                ws.display()
            )
        );
    }
    // The same policy outside every writable path starts.
    std::fs::copy(ws.join("policy.toml"), safe.join("policy.toml")).unwrap();
    let out = airlock_start(
        &root,
        &db,
        "run",
        &["--policy", "safe/policy.toml", "--workspace", ws_arg],
    );
    assert!(out.status.success(), "{out:?}");
}

/// What a hostile command would do with a record or key it could reach:
/// delete the one, read the others (the signing key, to sign a record of
/// its own; the CA's, to pass for any host to whatever trusts the CA). Each
/// spelling that would let it is refused before the session starts, for
/// every way to start one.
#[test]
fn the_record_and_the_keys_are_refused_in_every_spelling_the_sandbox_could_reach() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = dir.path().canonicalize().unwrap();
    let [ws, grant, safe, keys] = ["ws", "grant", "safe", "keys"].map(|d| root.join(d));
    for d in [&ws, &grant, &safe, &keys, &ws.join("sub")] {
        std::fs::create_dir_all(d).unwrap();
    }
    // A key made by a session of its own, then placed where each attempt
    // needs it.
    let made = airlock_run(
        &root,
        &root,
        &[
            "--workspace",
            ws.to_str().unwrap(),
            "--audit-db",
            keys.join("made.db").to_str().unwrap(),
            "--audit-key",
            keys.join("made.key").to_str().unwrap(),
        ],
        "true",
    );
    assert!(made.status.success(), "{made:?}");
    let key_bytes = std::fs::read(keys.join("made.key")).unwrap();
    std::fs::write(ws.join("sub/k.key"), &key_bytes).unwrap();
    std::fs::write(keys.join("hard.key"), &key_bytes).unwrap();
    std::fs::hard_link(keys.join("hard.key"), ws.join("hard.key")).unwrap();
    std::fs::copy(keys.join("made.db"), keys.join("hard.db")).unwrap();
    std::fs::hard_link(keys.join("hard.db"), ws.join("hard.db")).unwrap();
    let link = |name: &str, to: &Path| {
        let at = safe.join(name);
        std::os::unix::fs::symlink(to, &at).unwrap();
        at
    };
    let db_into_ws = link("into-ws.db", &ws.join("record.db"));
    std::fs::copy(keys.join("made.db"), grant.join("record.db")).unwrap();
    let db_into_grant = link("into-grant.db", &grant.join("record.db"));
    let key_into_ws = link("into-ws.key", &ws.join("sub/k.key"));
    // The workspace under a second name: a bind mount of the directory
    // that holds the database and the key.
    let bound = root.join("bound");
    let _bind = Mounted::bind(&keys, &bound);
    let key = keys.join("made.key");
    // The CA's private key by a second name in the workspace, or moved
    // there and linked to; and a CA whose directory the workspace is.
    let ca = |name: &str| {
        let dir = keys.join(name);
        let made = Command::new(AIRLOCK)
            .args(["ca", "init", "--dir"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
        dir
    };
    let [ca_hard, ca_linked, ca_bound] = ["ca-hard", "ca-linked", "ca-bound"].map(ca);
    std::fs::hard_link(ca_hard.join("ca-key.pem"), ws.join("ca-key.pem")).unwrap();
    std::fs::rename(ca_linked.join("ca-key.pem"), ws.join("sub/ca-key.pem")).unwrap();
    std::os::unix::fs::symlink(ws.join("sub/ca-key.pem"), ca_linked.join("ca-key.pem")).unwrap();
    let ca_bound_ws = root.join("ca-bound-ws");
    let _ca_bind = Mounted::bind(&ca_bound, &ca_bound_ws);
    let good_db = root.join("db/audit.db");
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    // (options, the start of the line, what it must name)
    let db_line = "airlock: the audit database ";
    let key_line = "airlock: the audit signing key ";
    let mut attempts: Vec<(Vec<String>, &str, String)> = vec![
        // A link outside that leads into the workspace, to nothing yet:
        // SQLite would make the record there.
        (
            vec![
                "--workspace".into(),
                s(&ws),
                "--audit-db".into(),
                s(&db_into_ws),
                "--audit-key".into(),
                s(&key),
            ],
            db_line,
            format!(
                "(a link to {}) is inside {}",
                ws.join("record.db").display(),
                ws.display()
            ),
        ),
        // A link into a --rw grant, to a record that is there.
        (
            vec![
                "--workspace".into(),
                s(&ws),
                "--rw".into(),
                s(&grant),
                "--audit-db".into(),
                s(&db_into_grant),
                "--audit-key".into(),
                s(&key),
            ],
            db_line,
            format!("is inside {}", grant.display()),
        ),
        // A second name for the database in the workspace.
        (
            vec![
                "--workspace".into(),
                s(&ws),
                "--audit-db".into(),
                s(&keys.join("hard.db")),
                "--audit-key".into(),
                s(&key),
            ],
            db_line,
            "has 2 names (hard links)".into(),
        ),
        // The workspace is the database's directory under another name.
        (
            vec![
                "--workspace".into(),
                s(&bound),
                "--audit-db".into(),
                s(&keys.join("made.db")),
                "--audit-key".into(),
                s(&root.join("k/other.key")),
            ],
            db_line,
            format!("is inside {}", bound.display()),
        ),
        // The key through a link into the workspace.
        (
            vec![
                "--workspace".into(),
                s(&ws),
                "--audit-db".into(),
                s(&good_db),
                "--audit-key".into(),
                s(&key_into_ws),
            ],
            key_line,
            format!(
                "(a link to {}) is inside {}",
                ws.join("sub/k.key").display(),
                ws.display()
            ),
        ),
        // A second name for the key in the workspace.
        (
            vec![
                "--workspace".into(),
                s(&ws),
                "--audit-db".into(),
                s(&good_db),
                "--audit-key".into(),
                s(&keys.join("hard.key")),
            ],
            key_line,
            "has 2 names (hard links)".into(),
        ),
        // The key's directory is the workspace under another name.
        (
            vec![
                "--workspace".into(),
                s(&bound),
                "--audit-db".into(),
                s(&good_db),
                "--audit-key".into(),
                s(&key),
            ],
            key_line,
            format!("is inside {}", bound.display()),
        ),
    ];
    let ca_line = "airlock: the CA's private key ";
    let with_ca = |workspace: &Path, ca: &Path| {
        vec![
            "--workspace".into(),
            s(workspace),
            "--ca-dir".into(),
            s(ca),
            "--audit-db".into(),
            s(&good_db),
            "--audit-key".into(),
            s(&key),
        ]
    };
    attempts.extend([
        (
            with_ca(&ws, &ca_hard),
            ca_line,
            "has 2 names (hard links)".to_owned(),
        ),
        (
            with_ca(&ws, &ca_linked),
            ca_line,
            format!(
                "(a link to {}) is inside {}",
                ws.join("sub/ca-key.pem").display(),
                ws.display()
            ),
        ),
        (
            with_ca(&ca_bound_ws, &ca_bound),
            ca_line,
            format!("is inside {}", ca_bound_ws.display()),
        ),
    ]);
    for subcommand in ["run", "session", "mcp"] {
        for (options, line, named) in &attempts {
            let mut cmd = Command::new(AIRLOCK);
            cmd.current_dir(&root)
                .env_remove("AIRLOCK_AUDIT_DB")
                .arg(subcommand);
            if subcommand == "session" {
                cmd.arg("start");
            }
            cmd.args(options).stdin(std::process::Stdio::null());
            if subcommand == "run" {
                cmd.args([
                    "--",
                    "sh",
                    "-c",
                    "rm -f record.db* hard.db; cat sub/k.key hard.key ca-key.pem sub/ca-key.pem",
                ]);
            }
            let out = cmd.output().unwrap();
            let (stdout, stderr) = text(&out);
            let what = format!("airlock {subcommand} {options:?}: {stderr}");
            assert_eq!(out.status.code(), Some(125), "{what}");
            assert!(stdout.is_empty(), "{what} / {stdout}");
            assert_eq!(stderr.lines().count(), 1, "{what}");
            assert!(stderr.starts_with(line), "{what}");
            assert!(stderr.contains(named), "{what}");
            assert!(!stderr.contains("panicked"), "{what}");
        }
    }
    // Nothing was made or removed where the sandbox can write.
    assert!(!ws.join("record.db").exists());
    assert!(ws.join("hard.db").exists() && grant.join("record.db").exists());
    assert!(!good_db.exists(), "a refused start recorded a session");
}

/// A database and a key reached through links to a place the sandbox
/// cannot write are used, and neither where they are named nor where
/// they lead is visible inside.
#[test]
fn a_record_and_key_behind_links_work_and_both_their_places_stay_hidden() {
    // Not under /tmp, which the sandbox replaces with its own.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = dir.path().canonicalize().unwrap();
    let [ws, named, real] = ["ws", "named", "real"].map(|d| root.join(d));
    for d in [&ws, &named, &real] {
        std::fs::create_dir_all(d).unwrap();
    }
    // The key is made by a session of its own (a link to no key is
    // refused); the database is made through its link.
    let made = airlock_run(
        &ws,
        &root,
        &[
            "--audit-db",
            root.join("other/audit.db").to_str().unwrap(),
            "--audit-key",
            real.join("audit.key").to_str().unwrap(),
        ],
        "true",
    );
    assert!(made.status.success(), "{made:?}");
    for f in ["audit.db", "audit.key"] {
        std::os::unix::fs::symlink(real.join(f), named.join(f)).unwrap();
    }
    let script = format!(
        "for d in {} {}; do ls -A $d; done; echo done",
        named.display(),
        real.display()
    );
    let out = airlock_run(
        &ws,
        &root,
        &[
            "--audit-db",
            named.join("audit.db").to_str().unwrap(),
            "--audit-key",
            named.join("audit.key").to_str().unwrap(),
        ],
        &script,
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "done\n", "{stderr}");
    assert!(real.join("audit.key").is_file());
    assert_eq!(sessions(&named.join("audit.db")).len(), 1);
    assert_eq!(sessions(&real.join("audit.db")).len(), 1);
}

/// A home's secrets, Airlock's own files and a `--hide` stay hidden when a
/// grant is the directory that holds them under another name (a bind
/// mount, which the path alone does not show), as when the path is the
/// same.
fn secrets_stay_hidden_under_a_grant_that_is_their_directory_by_another_name_under(
    isolation: airlock_test_support::isolation::Isolation,
) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = dir.path().canonicalize().unwrap();
    let home = root.join("home");
    for d in [".ssh", ".local/share/airlock", "private", "project"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    std::fs::write(home.join(".local/share/airlock/audit.key"), "KEY").unwrap();
    std::fs::write(home.join("private/notes"), "hidden by --hide").unwrap();
    std::fs::write(home.join("project/readme"), "visible\n").unwrap();
    let workspace = Mounted::bind(&home, &root.join("workspace"));
    let read_only = Mounted::bind(&home, &root.join("read-only"));
    // A grant that is the --hide'd directory itself under another name.
    let private = Mounted::bind(&home.join("private"), &root.join("private-too"));
    let db = root.join("db/audit.db");
    let mut args = isolation.args().map(str::to_owned).to_vec();
    args.extend([
        "--audit-db".into(),
        db.to_str().unwrap().into(),
        // Not the home's default key: the sandbox could write that one
        // through the workspace, which is refused (see above).
        "--audit-key".into(),
        root.join("db/audit.key").to_str().unwrap().into(),
        "--hide".into(),
        home.join("private").to_str().unwrap().into(),
        "--ro".into(),
        read_only.0.to_str().unwrap().into(),
        "--ro".into(),
        private.0.to_str().unwrap().into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let script = format!(
        "cat project/readme; for d in . {}; do for f in .ssh/id_ed25519 .local/share/airlock/audit.key private/notes; do cat $d/$f 2>/dev/null && echo \" <- $d/$f\"; done; done; cat {}/notes 2>/dev/null; echo done",
        read_only.0.display(),
        private.0.display()
    );
    let out = airlock_run(&workspace.0, &home, &args, &script);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "visible\ndone\n", "{stderr}");
}

airlock_test_support::per_isolation!(sync secrets_stay_hidden_under_a_grant_that_is_their_directory_by_another_name_under =>
    secrets_stay_hidden_under_a_grant_that_is_their_directory_by_another_name,
    under_gvisor_secrets_stay_hidden_under_a_grant_that_is_their_directory_by_another_name);

/// Airlock's own files granted by their own names show nothing of
/// themselves: the signing key (read-only or writable), the database, a
/// file beside the CA's private key, and this user's default key and
/// persistent CA when the session records elsewhere or not at all. Before,
/// a grant inside the directory that hides them was mounted on top of that
/// hide, and the sandbox read the key that signs the record and the
/// private key of the CA `airlock proxy` mints with.
fn airlocks_own_files_granted_by_their_names_show_nothing_under(
    isolation: airlock_test_support::isolation::Isolation,
) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = dir.path().canonicalize().unwrap();
    let [ws, rec] = ["ws", "rec"].map(|d| root.join(d));
    for d in [&ws, &rec] {
        std::fs::create_dir_all(d).unwrap();
    }
    let ca_init = |dir: &Path| {
        let made = Command::new(AIRLOCK)
            .args(["ca", "init", "--dir"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
    };
    let (db, key, ca) = (rec.join("audit.db"), rec.join("audit.key"), rec.join("ca"));
    ca_init(&ca);
    let notes = ca.join("notes");
    std::fs::write(&notes, "beside the CA's key").unwrap();
    let own = [
        "--audit-db",
        db.to_str().unwrap(),
        "--audit-key",
        key.to_str().unwrap(),
        "--ca-dir",
        ca.to_str().unwrap(),
    ];
    let first = airlock_run(
        &ws,
        &root,
        &[&isolation.args()[..], &own[..]].concat(),
        "true",
    );
    assert!(first.status.success(), "{first:?}");
    // This user's defaults: a session that records where sessions do by
    // default makes the key, and the persistent CA is where `ca init` puts it.
    let defaults = root.join(".local/share/airlock");
    let default_run = airlock_run(&ws, &root, &isolation.args(), "true");
    assert!(default_run.status.success(), "{default_run:?}");
    ca_init(&defaults.join("ca"));
    let ca_key = ca.join("ca-key.pem");
    let default_key = defaults.join("audit.key");
    let default_ca_key = defaults.join("ca/ca-key.pem");
    let secrets = [&key, &ca_key, &default_key, &default_ca_key];
    let before = secrets.map(|f| std::fs::read(f).unwrap());
    let shown = |p: &Path| p.display().to_string();
    // The same files by other names: a link to the key, and the record's
    // directory bound elsewhere (a second name the path alone does not show).
    let link = root.join("key-link");
    std::os::unix::fs::symlink(&key, &link).unwrap();
    let bound = Mounted::bind(&rec, &root.join("bound"));
    let (bound_key, bound_ca_key) = (bound.0.join("audit.key"), bound.0.join("ca/ca-key.pem"));
    let script = format!(
        "for f in {key} {db} {ca_key} {default_key} {default_ca_key} {bound_key} {bound_ca_key}; do test -s $f && echo readable $f; done; \
         for f in {key} {ca_key} {default_key} {default_ca_key}; do echo forged > $f 2>/dev/null; done; \
         cat {notes}; echo; echo done",
        key = shown(&key),
        db = shown(&db),
        ca_key = shown(&ca_key),
        default_key = shown(&default_key),
        default_ca_key = shown(&default_ca_key),
        bound_key = shown(&bound_key),
        bound_ca_key = shown(&bound_ca_key),
        notes = shown(&notes),
    );
    let default_ca = defaults.join("ca");
    let variants: [Vec<&str>; 4] = [
        [
            &own[..],
            &["--ro", key.to_str().unwrap(), "--ro", db.to_str().unwrap()],
        ]
        .concat(),
        [
            &own[..],
            &[
                "--rw",
                key.to_str().unwrap(),
                "--ro",
                notes.to_str().unwrap(),
            ],
        ]
        .concat(),
        vec![
            "--no-audit",
            "--rw",
            default_ca.to_str().unwrap(),
            "--ro",
            default_key.to_str().unwrap(),
        ],
        [
            &own[..],
            &[
                "--ro",
                link.to_str().unwrap(),
                "--ro",
                bound_key.to_str().unwrap(),
                "--ro",
                bound_ca_key.to_str().unwrap(),
            ],
        ]
        .concat(),
    ];
    for grants in variants {
        let args = [&isolation.args()[..], &grants[..]].concat();
        let out = airlock_run(&ws, &root, &args, &script);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{grants:?}: {stdout}\n{stderr}");
        assert!(
            !stdout.contains("readable"),
            "{grants:?}: {stdout}\n{stderr}"
        );
        assert!(stdout.ends_with("done\n"), "{grants:?}: {stdout}\n{stderr}");
        assert_eq!(
            secrets.map(|f| std::fs::read(f).unwrap()),
            before,
            "{grants:?}"
        );
    }
    // Writable under its other name, the CA's key is refused outright,
    // before anything runs.
    let args = [
        &isolation.args()[..],
        &own[..],
        &["--rw", bound_ca_key.to_str().unwrap()],
    ]
    .concat();
    let out = airlock_run(&ws, &root, &args, "echo ran");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(125), "{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.starts_with("airlock: the CA's private key") && stderr.lines().count() == 1,
        "{stderr}"
    );
    // Every recorded run is on record, signed by its key.
    assert_eq!(sessions(&db).len(), 4);
}

airlock_test_support::per_isolation!(sync airlocks_own_files_granted_by_their_names_show_nothing_under =>
    airlocks_own_files_granted_by_their_names_show_nothing,
    under_gvisor_airlocks_own_files_granted_by_their_names_show_nothing);
