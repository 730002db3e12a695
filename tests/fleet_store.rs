//! The central store as a responder uses it: sessions recorded by real
//! `airlock run` and `airlock proxy` into a node's SQLite record, shipped
//! into a real PostgreSQL server (test-support's `PgServer`), then read
//! with the real binary and `--audit-db postgres://…`. Every reader must
//! say on the central copy exactly what it says on the node's record; a
//! row changed there, a tail deleted, a key not enrolled or revoked is
//! caught; and the store's password shows nowhere.

use std::path::{Path, PathBuf};
use std::process::Output;

use airlock_auditor::postgres::PgStore;
use airlock_auditor::ship::ship_all;
use airlock_auditor::sqlite::SqliteStore;
use airlock_auditor::{KeyFingerprint, SigningKeySource, load_public_key};
use airlock_test_support::audit_cli::sessions;
use airlock_test_support::client::curl;
use airlock_test_support::pki::TestPki;
use airlock_test_support::postgres::PgServer;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::upstream::Upstream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn policy(port: u16) -> String {
    format!(
        r#"version = 1
[[allow]]
host = "api.test"
port = {port}
methods = ["GET", "POST"]
paths = ["/echo"]
"#
    )
}

/// A node's record (a run session and a proxy session) shipped whole into
/// a fresh central store, the node's key enrolled as `node-a`.
struct Fleet {
    pg: PgServer,
    _pki: TestPki,
    _upstream: Upstream,
    dir: tempfile::TempDir,
    ids: Vec<String>,
    port: u16,
}

impl Fleet {
    fn db(&self) -> PathBuf {
        self.dir.path().join("audit/audit.db")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("audit/audit.key")
    }

    fn url(&self) -> PathBuf {
        PathBuf::from(self.pg.url())
    }

    /// `airlock ARGS` (not only `audit`), run to completion.
    fn airlock(&self, args: &[&str]) -> Output {
        std::process::Command::new(AIRLOCK)
            .args(args)
            .output()
            .unwrap()
    }

    /// What `airlock ARGS --audit-db DB` prints on the node's record and on
    /// the central store, each checked to have succeeded alike and to show
    /// no password.
    fn both(&self, args: &[&str]) -> (Output, Output) {
        let run = |db: &Path| {
            let mut all: Vec<&str> = args.to_vec();
            all.push("--audit-db");
            all.push(db.to_str().unwrap());
            self.airlock(&all)
        };
        let local = run(&self.db());
        let central = run(&self.url());
        assert_eq!(
            local.status.code(),
            central.status.code(),
            "{args:?}: {local:?} {central:?}"
        );
        self.no_password(&central);
        (local, central)
    }

    fn no_password(&self, out: &Output) {
        for text in [&out.stdout, &out.stderr] {
            let text = String::from_utf8_lossy(text);
            assert!(!text.contains(self.pg.password()), "{text}");
        }
    }
}

async fn fleet() -> Fleet {
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
        "curl -sS '{base}/echo?from=run'; curl -sS -o /dev/null '{base}/admin'; curl -sS -X POST -d x '{base}/echo'; echo findings > notes.txt; mkdir -p out; echo b > out/b.txt"
    );
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
        .current_dir(&workspace)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let policy_text = policy(upstream.port());
    let mut opts = ProxyOptions::new(&policy_text);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
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
    let ids: Vec<String> = sessions(AIRLOCK, &db)
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 2);

    let pg = PgServer::start();
    // The store's client blocks: off the runtime's threads, as the
    // console and the shipper call it.
    let (url, from, signer) = (pg.url(), db.clone(), key.clone());
    let shipped = tokio::task::spawn_blocking(move || {
        let local = SqliteStore::open(&from, SigningKeySource::KeyFile(signer)).unwrap();
        let central = PgStore::open(&url).unwrap();
        ship_all(&local, &central).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(shipped.sessions, 2);
    let fleet = Fleet {
        pg,
        _pki: pki,
        port: upstream.port(),
        _upstream: upstream,
        dir,
        ids,
    };
    let out = fleet.airlock(&[
        "audit",
        "keys",
        "add",
        key.to_str().unwrap(),
        "--name",
        "node-a",
        "--audit-db",
        &fleet.pg.url(),
    ]);
    assert!(out.status.success(), "{out:?}");
    fleet
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn every_reader_says_on_the_central_store_what_it_says_on_the_nodes_record() {
    let f = fleet().await;
    let mut compared = 0;
    let same = |args: &[&str], compared: &mut usize| {
        let (local, central) = f.both(args);
        assert!(local.status.success(), "{args:?}: {local:?}");
        assert_eq!(stdout(&central), stdout(&local), "{args:?}");
        assert!(!stdout(&local).is_empty(), "{args:?} printed something");
        *compared += 1;
    };
    same(&["audit", "sessions"], &mut compared);
    same(&["audit", "sessions", "--json"], &mut compared);
    for id in &f.ids {
        let short = &id[..12];
        same(&["audit", "timeline", short], &mut compared);
        same(&["audit", "timeline", id, "--json"], &mut compared);
        same(
            &["audit", "timeline", id, "--kind", "http,dns"],
            &mut compared,
        );
        for format in ["har", "jsonl"] {
            same(
                &["audit", "export", id, "--format", format, "--out", "-"],
                &mut compared,
            );
        }
    }
    let run = &f.ids[0];
    same(&["audit", "files", run], &mut compared);
    same(
        &["audit", "export", run, "--format", "cast", "--out", "-"],
        &mut compared,
    );
    let out_dir = format!("{}/out/", f.dir.path().join("ws").display());
    for filters in [
        &["--host", "api.test"][..],
        &["--host", "*.test"],
        &["--verdict", "deny"],
        &["--method", "post"],
        &["--url", "from=proxy"],
        &["--file", "notes.txt"],
        &["--file", &out_dir],
        &["--command", "curl"],
        &[
            "--host",
            "api.test",
            "--since",
            "1h",
            "--session",
            &f.ids[1],
        ],
    ] {
        let mut args = vec!["audit", "search"];
        args.extend_from_slice(filters);
        same(&args, &mut compared);
        args.push("--json");
        same(&args, &mut compared);
    }
    // Policy tools over the fleet's traffic: replay under a policy that
    // no longer allows POST, and a policy suggested from what ran.
    let stricter = f.dir.path().join("stricter.toml");
    std::fs::write(
        &stricter,
        policy(f.port).replace(r#"["GET", "POST"]"#, r#"["GET"]"#),
    )
    .unwrap();
    let stricter = stricter.to_str().unwrap();
    for json in [&[][..], &["--json"]] {
        let mut args = vec!["policy", "replay", stricter, &f.ids[0], &f.ids[1]];
        args.extend_from_slice(json);
        // Exit 1: the stricter policy would block the POST.
        let (local, central) = f.both(&args);
        assert_eq!(local.status.code(), Some(1), "{local:?}");
        assert!(stdout(&local).contains("POST"), "{local:?}");
        assert_eq!(stdout(&central), stdout(&local));
    }
    same(&["policy", "suggest", &f.ids[0], &f.ids[1]], &mut compared);
    assert!(compared >= 33, "{compared}");

    // verify: the same verdict; the central store names the enrolled node
    // where the node's record names its own key.
    let key = f.key();
    let (local, central) = {
        let local = f.airlock(&[
            "audit",
            "verify",
            "--all",
            "--audit-db",
            f.db().to_str().unwrap(),
            "--audit-key",
            key.to_str().unwrap(),
        ]);
        let central = f.airlock(&["audit", "verify", "--all", "--audit-db", &f.pg.url()]);
        (local, central)
    };
    assert_eq!(central.status.code(), Some(0), "{central:?}");
    assert_eq!(local.status.code(), Some(0), "{local:?}");
    assert_eq!(
        stdout(&central),
        stdout(&local).replace(
            "signed by the trusted key",
            "signed by enrolled node key of node-a"
        )
    );
    assert!(
        !String::from_utf8_lossy(&central.stderr).contains("no trusted key"),
        "{central:?}"
    );
    f.no_password(&central);
}

#[tokio::test]
async fn the_console_serves_the_central_store() {
    let f = fleet().await;
    let console = airlock_test_support::console::Console::start(AIRLOCK, &f.url(), &f.key()).await;
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-f", "-H"])
        .arg(format!("Authorization: Bearer {}", console.token()))
        .arg(format!("http://{}/api/sessions", console.authority()))
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let body = stdout(&out);
    for id in &f.ids {
        assert!(body.contains(id.as_str()), "{body}");
    }
    assert!(body.contains("intact"), "{body}");
    assert!(!body.contains(f.pg.password()));
}

#[tokio::test]
async fn verify_on_the_central_store_names_a_changed_row_and_a_deleted_tail() {
    let f = fleet().await;
    let id = &f.ids[0];
    let sid =
        f.pg.psql(&format!("SELECT sid FROM sessions WHERE id = '{id}'"));
    let verify = || f.airlock(&["audit", "verify", id, "--audit-db", &f.pg.url()]);
    assert_eq!(verify().status.code(), Some(0));
    // An HTTP request's URL rewritten by SQL.
    let seq = f.pg.psql(&format!(
        "SELECT min(seq) FROM events WHERE sid = {sid} AND kind = 'http' AND payload LIKE '%/admin%'"
    ));
    f.pg.psql(&format!(
        "UPDATE events SET payload = replace(payload, '/admin', '/fine') WHERE sid = {sid} AND seq = {seq}"
    ));
    let out = verify();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("TAMPERED") && text.contains(&format!("first bad seq {seq}")),
        "{text}"
    );
    f.no_password(&out);
    // The other session's tail deleted.
    let other = &f.ids[1];
    let osid =
        f.pg.psql(&format!("SELECT sid FROM sessions WHERE id = '{other}'"));
    let last: i64 =
        f.pg.psql(&format!("SELECT max(seq) FROM events WHERE sid = {osid}"))
            .parse()
            .unwrap();
    f.pg.psql(&format!(
        "DELETE FROM events WHERE sid = {osid} AND seq > {}",
        last - 2
    ));
    let out = f.airlock(&["audit", "verify", other, "--audit-db", &f.pg.url()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stdout(&out).contains("TAMPERED"), "{out:?}");
    // Every session at once: nonzero, both named.
    let out = f.airlock(&["audit", "verify", "--all", "--audit-db", &f.pg.url()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out).matches("TAMPERED").count(), 2, "{out:?}");
}

#[tokio::test]
async fn sessions_signed_by_a_key_not_enrolled_or_revoked_verify_as_unverified() {
    let f = fleet().await;
    let url = f.pg.url();
    let fp = KeyFingerprint::of(&load_public_key(&f.key()).unwrap()).0;
    let list = f.airlock(&["audit", "keys", "list", "--audit-db", &url]);
    assert!(
        stdout(&list).contains(&fp) && stdout(&list).contains("node-a"),
        "{list:?}"
    );
    let out = f.airlock(&["audit", "keys", "revoke", &fp, "--audit-db", &url]);
    assert!(out.status.success(), "{out:?}");
    let out = f.airlock(&["audit", "verify", "--all", "--audit-db", &url]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    assert_eq!(text.matches("UNVERIFIED").count(), 2, "{text}");
    assert!(text.contains(&fp) && text.contains("revoked"), "{text}");
    // Not enrolled at all (its row deleted): named with the fix.
    f.pg.psql("DELETE FROM node_keys");
    let out = f.airlock(&["audit", "verify", &f.ids[0], "--audit-db", &url]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("UNVERIFIED")
            && text.contains(&fp)
            && text.contains("not an enrolled node key")
            && text.contains("airlock audit keys add"),
        "{text}"
    );
    // Naming the key on the command line does not stand in for enrolling
    // it: trust on a central store is enrolment.
    let out = f.airlock(&[
        "audit",
        "verify",
        &f.ids[0],
        "--audit-db",
        &url,
        "--audit-key",
        f.key().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // Enrolled again, by its public key's text: intact.
    let public = airlock_auditor::public_key_text(&load_public_key(&f.key()).unwrap());
    let out = f.airlock(&["audit", "keys", "add", public.trim(), "--audit-db", &url]);
    assert!(out.status.success(), "{out:?}");
    let out = f.airlock(&["audit", "verify", "--all", "--audit-db", &url]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Bad input: one line naming the problem.
    for args in [
        &["audit", "keys", "add", "not-a-key", "--audit-db", &url][..],
        &["audit", "keys", "revoke", "SHA256:0000", "--audit-db", &url],
        &[
            "audit",
            "keys",
            "list",
            "--audit-db",
            f.db().to_str().unwrap(),
        ],
    ] {
        let out = f.airlock(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("airlock: ") && err.lines().count() == 1,
            "{err}"
        );
    }
}

/// A wrong password, a wrong host, a server that is down, a server without
/// TLS under the default sslmode: each a one-line `airlock:` error naming
/// the problem and the fix, and never the password, wherever it was given.
#[test]
fn reaching_the_central_store_fails_on_one_line_without_the_password() {
    let pg = PgServer::start();
    let password = pg.password().to_string();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let wrong = "wrong-pass-8d2f";
    let cases: Vec<(String, &str)> = vec![
        (pg.url().replace(&password, wrong), "refused the password"),
        (
            pg.url()
                .replace(&format!(":{}/", pg.port()), &format!(":{closed}/")),
            "cannot reach the server",
        ),
        (
            pg.url().replace("127.0.0.1", "192.0.2.1") + "&connect_timeout=1",
            "cannot reach the server",
        ),
        (
            pg.url().replace("?sslmode=disable", ""),
            "does not offer TLS",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let pwfile = dir.path().join("pw");
    std::fs::write(&pwfile, format!("{wrong}\n")).unwrap();
    let check = |out: &Output, problem: &str| {
        assert!(matches!(out.status.code(), Some(1 | 2)), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("airlock: "), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(problem), "{problem}: {err}");
        for secret in [password.as_str(), wrong] {
            assert!(!err.contains(secret), "{err}");
            assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
        }
    };
    for (url, problem) in &cases {
        for args in [
            &["audit", "sessions"][..],
            &["audit", "verify", "--all"],
            &["audit", "keys", "list"],
        ] {
            let out = std::process::Command::new(AIRLOCK)
                .args(args)
                .arg("--audit-db")
                .arg(url)
                .output()
                .unwrap();
            check(&out, problem);
        }
    }
    // The wrong password from a file, and from PGPASSWORD.
    for (var, value) in [
        ("AIRLOCK_AUDIT_DB_PASSWORD_FILE", pwfile.to_str().unwrap()),
        ("PGPASSWORD", wrong),
    ] {
        let out = std::process::Command::new(AIRLOCK)
            .args(["audit", "sessions", "--audit-db"])
            .arg(pg.url_without_password())
            .env_remove("PGPASSWORD")
            .env(var, value)
            .output()
            .unwrap();
        check(&out, "refused the password");
    }
    // The right one from the file works.
    std::fs::write(&pwfile, pg.password()).unwrap();
    let out = std::process::Command::new(AIRLOCK)
        .args(["audit", "keys", "list", "--audit-db"])
        .arg(pg.url_without_password())
        .env("AIRLOCK_AUDIT_DB_PASSWORD_FILE", &pwfile)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // A server that went down.
    pg.kill9();
    let out = std::process::Command::new(AIRLOCK)
        .args(["audit", "sessions", "--audit-db"])
        .arg(pg.url())
        .output()
        .unwrap();
    check(&out, "cannot reach the server");
}

/// A central store is read, never recorded into: `run` and `proxy` given
/// one as --audit-db (or AIRLOCK_AUDIT_DB) refuse it on one line, naming
/// --audit-ship, without the password.
#[test]
fn recording_commands_refuse_a_central_store_without_showing_its_password() {
    let url = "postgres://node:s3cret-pw-71@127.0.0.1:5999/fleet";
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.toml");
    std::fs::write(&policy, "version = 1\n").unwrap();
    let policy = policy.to_str().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().to_str().unwrap();
    for (args, env) in [
        (
            vec![
                "run",
                "--audit-db",
                url,
                "--policy",
                policy,
                "--workspace",
                ws,
                "--",
                "true",
            ],
            None,
        ),
        (
            vec!["run", "--policy", policy, "--workspace", ws, "--", "true"],
            Some(url),
        ),
        (vec!["proxy", "--audit-db", url, "--policy", policy], None),
    ] {
        let mut cmd = std::process::Command::new(AIRLOCK);
        cmd.args(&args);
        if let Some(db) = env {
            cmd.env("AIRLOCK_AUDIT_DB", db);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success(), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("airlock: sessions are not recorded into the central store")
                && err.contains("--audit-ship")
                && err.lines().count() == 1,
            "{args:?}: {err}"
        );
        assert!(!err.contains("s3cret-pw-71"), "{err}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("s3cret-pw-71"));
    }
}
