//! Nodes ship what they record into one PostgreSQL store, exactly once,
//! whatever fails: `--audit-ship` on `run`, `session start` and `proxy`,
//! and `airlock audit ship` for databases that exist. Every check is to
//! the event: the central copy of each session is the local one, row for
//! row, and verifies against the node's enrolled key.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use airlock_test_support::audit_cli::{audit_cli, sessions};
use airlock_test_support::client::curl;
use airlock_test_support::pki::TestPki;
use airlock_test_support::postgres::PgServer;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::upstream::Upstream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// A node: its own audit database and signing key, in a directory of its own.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        Self { dir }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("audit/audit.db")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("audit/audit.key")
    }

    /// `airlock run` recording here and shipping to `pg`.
    fn run(&self, pg: &PgServer, command: &[&str]) -> Output {
        Command::new(AIRLOCK)
            .args(["run", "--workspace"])
            .arg(self.dir.path().join("ws"))
            .arg("--audit-db")
            .arg(self.db())
            .arg("--audit-key")
            .arg(self.key())
            .args(["--audit-ship", &pg.url_without_password()])
            .args(["--label", "pod=runner"])
            .env("PGPASSWORD", pg.password())
            .arg("--")
            .args(command)
            .output()
            .unwrap()
    }

    /// Enrolls this node's key in the central store.
    fn enroll(&self, pg: &PgServer) {
        let out = Command::new(AIRLOCK)
            .args(["audit", "keys", "add"])
            .arg(self.key())
            .args(["--name", "node", "--audit-db", &pg.url()])
            .output()
            .unwrap();
        assert!(out.status.success(), "audit keys add: {}", show(&out));
    }
}

impl Node {
    /// `airlock proxy` recording here and shipping to `pg`, allowing GETs
    /// to the TLS upstream `api.test:port`, with `extra` options.
    fn proxy(&self, pg: &PgServer, pki: &TestPki, port: u16, extra: &[String]) -> AirlockProxy {
        let policy = format!(
            "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"GET\"]\n"
        );
        let mut opts = ProxyOptions::new(&policy);
        opts.env = vec![("PGPASSWORD", pg.password())];
        opts.upstream_ca = Some(&pki.ca_pem);
        opts.resolve = vec!["api.test:127.0.0.1".into()];
        opts.extra = vec![
            "--audit-db".into(),
            self.db().to_str().unwrap().into(),
            "--audit-key".into(),
            self.key().to_str().unwrap().into(),
            "--audit-ship".into(),
            pg.url_without_password(),
        ];
        opts.extra.extend(extra.iter().cloned());
        AirlockProxy::start(AIRLOCK, opts)
    }
}

/// `airlock audit ship --from FROM --to` `pg`, the password in the
/// environment, once or following.
fn audit_ship(from: &Path, pg: &PgServer, follow: bool) -> Command {
    let mut command = Command::new(AIRLOCK);
    command.args(["audit", "ship"]);
    if follow {
        command.arg("--follow");
    }
    command
        .arg("--from")
        .arg(from)
        .args(["--to", &pg.url_without_password()])
        .env("PGPASSWORD", pg.password());
    command
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn pg_path(pg: &PgServer) -> PathBuf {
    PathBuf::from(pg.url())
}

/// Every event of every session of `db`, as `audit export --format jsonl`
/// writes them: what "the same record" means here.
fn all_events(db: &Path) -> Vec<(String, String)> {
    let list = sessions(AIRLOCK, db);
    let mut out = Vec::new();
    for session in list.as_array().unwrap() {
        let id = session["id"].as_str().unwrap().to_owned();
        let export = audit_cli(
            AIRLOCK,
            db,
            &["export", &id, "--format", "jsonl", "--out", "-"],
        );
        assert!(export.status.success(), "export {id}: {}", show(&export));
        out.push((id, String::from_utf8(export.stdout).unwrap()));
    }
    out.sort();
    out
}

fn event_count(db: &Path) -> u64 {
    sessions(AIRLOCK, db)
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["events"].as_u64().unwrap())
        .sum()
}

/// The central copy holds exactly what the node holds, and every session
/// in it verifies against the enrolled key.
fn assert_shipped_whole(node: &Path, pg: &PgServer) {
    let local = all_events(node);
    let central = all_events(&pg_path(pg));
    assert_eq!(local.len(), central.len(), "sessions differ");
    for ((id, l), (cid, c)) in local.iter().zip(&central) {
        assert_eq!(id, cid);
        assert!(
            l == c,
            "session {id} differs: local {} lines, central {} lines",
            l.lines().count(),
            c.lines().count()
        );
    }
    let verify = audit_cli(AIRLOCK, &pg_path(pg), &["verify", "--all"]);
    assert!(
        verify.status.success(),
        "verify on Postgres: {}",
        show(&verify)
    );
}

/// Waits until the central store holds `events` events in all.
fn wait_for_events(pg: &PgServer, events: u64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        // Until the first batch lands, the store has no schema to read.
        let listed = audit_cli(AIRLOCK, &pg_path(pg), &["sessions", "--json"]);
        let now = match listed.status.success() {
            true => event_count(&pg_path(pg)),
            false => 0,
        };
        if now >= events {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the central store has {now} events, expected {events}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_run_shipped_as_it_records_is_in_postgres_whole_and_verifies() {
    let pg = PgServer::start();
    let node = Node::new();
    let out = node.run(
        &pg,
        &[
            "sh",
            "-c",
            "for i in $(seq 1 40); do echo $i > f$i; done; cat f7",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    node.enroll(&pg);
    assert_shipped_whole(&node.db(), &pg);
    // The password is on no line airlock printed.
    assert!(!String::from_utf8_lossy(&out.stderr).contains(pg.password()));
    // The node notes how far it shipped.
    let listed = sessions(AIRLOCK, &node.db());
    let session = &listed[0];
    assert_eq!(
        session["shipped"]["up_to"].as_u64(),
        session["events"].as_u64(),
        "{listed:#}"
    );
    assert_eq!(session["shipped"]["ended"], true, "{listed:#}");
}

#[test]
fn shipping_again_stores_nothing_twice_even_when_the_node_forgot_what_it_shipped() {
    let pg = PgServer::start();
    let node = Node::new();
    let out = node.run(&pg, &["sh", "-c", "echo a > a; echo b > b"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let before = event_count(&pg_path(&pg));
    assert!(before > 0);
    // Again, as it stands: nothing new.
    let ship = |db: &Path| audit_ship(db, &pg, false).output().unwrap();
    let again = ship(&node.db());
    assert!(again.status.success(), "{}", show(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("shipped 0 events"),
        "{}",
        show(&again)
    );
    // The node's marks lost (a restore of an old backup, a crash before
    // the mark): the central store is asked, and nothing lands twice.
    let wiped = Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('DELETE FROM shipped'); c.commit()",
        ])
        .arg(node.db())
        .status()
        .unwrap();
    assert!(wiped.success());
    let again = ship(&node.db());
    assert!(again.status.success(), "{}", show(&again));
    assert_eq!(event_count(&pg_path(&pg)), before);
    node.enroll(&pg);
    assert_shipped_whole(&node.db(), &pg);
}

#[test]
fn existing_databases_are_shipped_by_audit_ship_from_a_directory() {
    let pg = PgServer::start();
    let spool = tempfile::tempdir().unwrap();
    let nodes: Vec<Node> = (0..3).map(|_| Node::new()).collect();
    for (i, node) in nodes.iter().enumerate() {
        // Recorded without shipping: the central store is not reached.
        let out = Command::new(AIRLOCK)
            .args(["run", "--workspace"])
            .arg(node.dir.path().join("ws"))
            .arg("--audit-db")
            .arg(spool.path().join(format!("node{i}.db")))
            .arg("--audit-key")
            .arg(node.key())
            .args(["--", "sh", "-c", &format!("echo {i} > n")])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        node.enroll(&pg);
    }
    let out = audit_ship(spool.path(), &pg, false).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let central = sessions(AIRLOCK, &pg_path(&pg));
    assert_eq!(central.as_array().unwrap().len(), 3, "{central:#}");
    let local: u64 = (0..3)
        .map(|i| event_count(&spool.path().join(format!("node{i}.db"))))
        .sum();
    assert_eq!(event_count(&pg_path(&pg)), local);
    let verify = audit_cli(AIRLOCK, &pg_path(&pg), &["verify", "--all"]);
    assert!(verify.status.success(), "{}", show(&verify));
}

/// A live session shipping to `pg`, stopped when dropped.
struct LiveSession {
    id: String,
}

impl LiveSession {
    fn start(node: &Node, pg: &PgServer, extra: &[&str]) -> Self {
        let out = Command::new(AIRLOCK)
            .args(["session", "start", "--workspace"])
            .arg(node.dir.path().join("ws"))
            .arg("--audit-db")
            .arg(node.db())
            .arg("--audit-key")
            .arg(node.key())
            .args(["--audit-ship", &pg.url_without_password()])
            .env("PGPASSWORD", pg.password())
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        Self {
            id: String::from_utf8(out.stdout).unwrap().trim().to_owned(),
        }
    }

    fn sh(&self, script: &str) {
        let out = Command::new(AIRLOCK)
            .args(["session", "exec", &self.id, "--", "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    }

    fn stop(&self) {
        let out = Command::new(AIRLOCK)
            .args(["session", "stop", &self.id])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
    }
}

impl Drop for LiveSession {
    fn drop(&mut self) {
        let _ = Command::new(AIRLOCK)
            .args(["session", "stop", &self.id])
            .output();
    }
}

#[test]
fn postgres_killed_mid_session_and_restarted_loses_and_repeats_nothing() {
    let pg = PgServer::start();
    let node = Node::new();
    let session = LiveSession::start(&node, &pg, &[]);
    session.sh("echo one > one");
    wait_for_events(&pg, 1, Duration::from_secs(10));
    pg.kill9();
    // The session goes on: its events wait in the local record.
    for i in 0..5 {
        session.sh(&format!("echo {i} > during{i}"));
    }
    pg.restart();
    session.sh("echo after > after");
    session.stop();
    wait_for_events(&pg, event_count(&node.db()), Duration::from_secs(30));
    node.enroll(&pg);
    assert_shipped_whole(&node.db(), &pg);
}

#[test]
fn a_shipper_killed_mid_stream_resumes_exactly_where_the_store_stopped() {
    let pg = PgServer::start();
    let node = Node::new();
    // Recorded first, unshipped: enough events for several batches.
    let out = Command::new(AIRLOCK)
        .args(["run", "--workspace"])
        .arg(node.dir.path().join("ws"))
        .arg("--audit-db")
        .arg(node.db())
        .arg("--audit-key")
        .arg(node.key())
        .args([
            "--",
            "sh",
            "-c",
            "for i in $(seq 1 12000); do echo $i > f$((i % 50)); done",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let total = event_count(&node.db());
    assert!(total > 10_000, "{total} events");
    let mut shipper = audit_ship(&node.db(), &pg, true)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed once the first batch is in, before the last.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut landed = 0;
    while landed == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
        landed = pg
            .psql("SELECT count(*) FROM pg_tables WHERE tablename = 'events'")
            .parse::<u64>()
            .unwrap();
        if landed > 0 {
            landed = event_count(&pg_path(&pg));
        }
    }
    shipper.kill().unwrap();
    shipper.wait().unwrap();
    let at_kill = event_count(&pg_path(&pg));
    eprintln!("killed with {at_kill} of {total} events shipped");
    assert!(at_kill > 0);
    let out = audit_ship(&node.db(), &pg, false).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(event_count(&pg_path(&pg)), total);
    node.enroll(&pg);
    assert_shipped_whole(&node.db(), &pg);
}

#[test]
fn a_session_goes_on_while_the_path_to_postgres_is_dropped_and_ships_when_it_is_back() {
    let pg = PgServer::start();
    let node = Node::new();
    let session = LiveSession::start(&node, &pg, &[]);
    session.sh("echo before > before");
    wait_for_events(&pg, 1, Duration::from_secs(10));
    let table = format!("airlock_test_drop_{}", pg.port());
    let nft = |script: &str| {
        let out = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn();
        let mut child = out.unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "nft {script}");
    };
    nft(&format!(
        "table inet {table} {{\n chain out {{\n type filter hook output priority 0;\n tcp dport {port} drop\n tcp sport {port} drop\n }}\n}}\n",
        port = pg.port()
    ));
    let dropped = Instant::now();
    let central_before = event_count(&node.db()); // everything so far
    for i in 0..5 {
        session.sh(&format!("echo {i} > during{i}"));
    }
    // The node says how far it got: behind its own record.
    let listed = sessions(AIRLOCK, &node.db());
    let local_events = listed[0]["events"].as_u64().unwrap();
    let shipped = listed[0]["shipped"]["up_to"].as_u64().unwrap_or(0);
    assert!(
        shipped < local_events,
        "shipped up to {shipped} of {local_events} while the path is down"
    );
    assert!(shipped >= central_before.min(1));
    std::thread::sleep(Duration::from_secs(30).saturating_sub(dropped.elapsed()));
    nft(&format!("delete table inet {table}"));
    session.sh("echo after > after");
    session.stop();
    wait_for_events(&pg, event_count(&node.db()), Duration::from_secs(60));
    node.enroll(&pg);
    assert_shipped_whole(&node.db(), &pg);
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_ship_required_holds_each_decision_until_it_is_central_and_refuses_when_it_cannot_be()
{
    let pg = PgServer::start();
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let node = Node::new();
    let mut proxy = node.proxy(
        &pg,
        &pki,
        upstream.port(),
        &["--audit-ship-required".into()],
    );
    let url = |path: &str| format!("https://api.test:{}{path}", upstream.port());
    let (code, _, _) = curl(&proxy, &[&url("/first")]).await;
    assert_eq!(code, 200);
    // Forwarded only once it was central: the decision is there already.
    let hits = audit_cli(AIRLOCK, &pg_path(&pg), &["search", "--url", "/first"]);
    assert!(hits.status.success(), "{}", show(&hits));

    pg.kill9();
    let started = Instant::now();
    let (code, body, _) = curl(&proxy, &[&url("/while-down")]).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("central audit store"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(20));

    pg.restart();
    let (code, _, _) = curl(&proxy, &[&url("/after")]).await;
    assert_eq!(code, 200, "the proxy serves again once the store is back");
    assert_eq!(proxy.stop(), Some(0));
    node.enroll(&pg);
    assert_shipped_whole(&node.db(), &pg);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `/metrics` of the admin endpoint at `port`, as Prometheus reads it.
fn metric(port: u16, name: &str) -> f64 {
    let out = Command::new("curl")
        .args(["-sS", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_show_how_far_the_record_is_behind_the_central_store_and_when_it_caught_up() {
    let pg = PgServer::start();
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let node = Node::new();
    let admin = free_port();
    let mut proxy = node.proxy(
        &pg,
        &pki,
        upstream.port(),
        &["--admin-listen".into(), format!("127.0.0.1:{admin}")],
    );
    let url = format!("https://api.test:{}/x", upstream.port());
    pg.kill9();
    for _ in 0..3 {
        let (code, _, _) = curl(&proxy, &[&url]).await;
        assert_eq!(code, 200, "requests go on while the store is down");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(admin, "airlock_audit_ship_pending_events") == 0.0 {
        assert!(Instant::now() < deadline, "pending never rose");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(metric(admin, "airlock_audit_ship_errors_total") >= 1.0);
    assert!(metric(admin, "airlock_audit_ship_lag_seconds") > 0.0);
    pg.restart();
    let (code, _, _) = curl(&proxy, &[&url]).await;
    assert_eq!(code, 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(admin, "airlock_audit_ship_pending_events") != 0.0 {
        assert!(Instant::now() < deadline, "never caught up");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(metric(admin, "airlock_audit_ship_lag_seconds"), 0.0);
    assert!(metric(admin, "airlock_audit_shipped_events_total") > 0.0);
    assert_eq!(proxy.stop(), Some(0));
    node.enroll(&pg);
    assert_shipped_whole(&node.db(), &pg);
}

#[test]
fn the_sandbox_never_sees_the_central_stores_password_nor_does_the_record() {
    let pg = PgServer::start();
    let node = Node::new();
    let secrets = tempfile::tempdir().unwrap();
    let file = secrets.path().join("pgpass");
    std::fs::write(&file, pg.password()).unwrap();
    // What a hostile command tries: the environment, the file the
    // variable names, airlock's own command line, and the process list.
    let probe = format!(
        "env; cat {file} pgpass-moved 2>&1; cat $AIRLOCK_AUDIT_DB_PASSWORD_FILE 2>&1; for p in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $p; echo; done; echo done",
        file = file.display()
    );
    let ws = node.dir.path().join("ws");
    let run_with = |url: &str, env: &[(&str, &str)], options: &[&str]| {
        Command::new(AIRLOCK)
            .args(["run", "--workspace"])
            .arg(&ws)
            .arg("--audit-db")
            .arg(node.db())
            .arg("--audit-key")
            .arg(node.key())
            .args(["--audit-ship", url])
            .args(options)
            .args(["--", "sh", "-c", &probe])
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let run = |url: &str, env: &[(&str, &str)]| run_with(url, env, &[]);
    let file_env = file.to_str().unwrap();
    // A password on airlock's command line would be in the sandbox's
    // process list: refused, in either spelling, saying where it goes.
    for url in [
        pg.url(),
        format!("{}&password={}", pg.url_without_password(), pg.password()),
    ] {
        let out = run(&url, &[]);
        assert_eq!(out.status.code(), Some(125), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("carries a password"), "{err}");
        assert!(err.contains("AIRLOCK_AUDIT_DB_PASSWORD_FILE"), "{err}");
        assert!(!err.contains(pg.password()), "{err}");
        assert!(out.stdout.is_empty(), "nothing ran: {}", show(&out));
    }
    for out in [
        run(
            &pg.url_without_password(),
            &[("AIRLOCK_AUDIT_DB_PASSWORD_FILE", file_env)],
        ),
        run(&pg.url_without_password(), &[("PGPASSWORD", pg.password())]),
    ] {
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        let seen = String::from_utf8_lossy(&out.stdout);
        assert!(seen.contains("done"), "{}", show(&out));
        assert!(
            !seen.contains(pg.password()),
            "the sandbox saw the password:\n{seen}"
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains(pg.password()));
    }
    // Asked for by name, or inside another variable's value: refused, as
    // a credential's secret is.
    let url = pg.url_without_password();
    let with_variable = [("PGPASSWORD", pg.password())];
    let with_file = [("AIRLOCK_AUDIT_DB_PASSWORD_FILE", file_env)];
    let inside = format!("DSN=postgres://u:{}@h/db", pg.password());
    for (env, options, variable) in [
        (
            &with_variable,
            vec!["--pass-env", "PGPASSWORD"],
            "PGPASSWORD",
        ),
        (&with_file, vec!["--env", inside.as_str()], "DSN"),
        (&with_variable, vec!["--env", inside.as_str()], "DSN"),
    ] {
        let out = run_with(&url, env, &options);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{options:?}: {}", show(&out));
        assert_eq!(
            err.trim_end(),
            format!(
                "airlock: {variable} carries the central audit store's password; secrets never enter the sandbox (only airlock's shipper uses it)"
            ),
        );
        assert!(out.stdout.is_empty(), "nothing ran: {}", show(&out));
    }
    // The file by a second name the sandbox can read, or through a link
    // into the workspace: refused; named inside the workspace: hidden (the
    // probe reads it there).
    let hard = ws.join("pgpass-hard");
    std::fs::hard_link(&file, &hard).unwrap();
    let linked = secrets.path().join("pgpass-link");
    let moved = ws.join("pgpass-moved");
    std::fs::copy(&file, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &linked).unwrap();
    for (named, says) in [
        (
            file.clone(),
            "has 2 names (hard links), and the sandbox could read it through one: copy it to a file of its own".to_owned(),
        ),
        (
            linked.clone(),
            format!("(a link to {}) is inside {}", moved.display(), ws.display()),
        ),
    ] {
        let out = run(&url, &[("AIRLOCK_AUDIT_DB_PASSWORD_FILE", named.to_str().unwrap())]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{}", show(&out));
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("airlock: the central audit store's password file ") && err.contains(&says),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "nothing ran: {}", show(&out));
    }
    // A password file that cannot be read: one line, its cause said once.
    let out = run(
        &url,
        &[("AIRLOCK_AUDIT_DB_PASSWORD_FILE", "/nonexistent/pgpass")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert_eq!(
        err.trim_end(),
        "airlock: cannot read the central store's password file /nonexistent/pgpass (AIRLOCK_AUDIT_DB_PASSWORD_FILE): No such file or directory (os error 2); check the path and its permissions"
    );
    std::fs::remove_file(&hard).unwrap();
    std::fs::remove_file(&linked).unwrap();
    let out = run(
        &url,
        &[("AIRLOCK_AUDIT_DB_PASSWORD_FILE", moved.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(
        seen.contains("done") && !seen.contains(pg.password()),
        "{seen}"
    );
    // A live session's step is refused it the same way.
    let start = Command::new(AIRLOCK)
        .args(["session", "start", "--workspace"])
        .arg(&ws)
        .arg("--audit-db")
        .arg(node.db())
        .arg("--audit-key")
        .arg(node.key())
        .args(["--audit-ship", &url])
        .env("PGPASSWORD", pg.password())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(start.status.code(), Some(0), "{}", show(&start));
    let id = String::from_utf8_lossy(&start.stdout).trim().to_owned();
    let step = |options: &[&str]| {
        Command::new(AIRLOCK)
            .args(["session", "exec", &id])
            .args(options)
            .args(["--", "sh", "-c", "env; echo done"])
            .output()
            .unwrap()
    };
    let refused = step(&["--env", &inside]);
    let ran = step(&["--env", "DSN=postgres://u@h/db"]);
    let stop = Command::new(AIRLOCK)
        .args(["session", "stop", &id])
        .output()
        .unwrap();
    assert_eq!(stop.status.code(), Some(0), "{}", show(&stop));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_ne!(refused.status.code(), Some(0), "{}", show(&refused));
    assert!(
        err.contains(
            "DSN carries the central audit store's password; secrets never enter the sandbox"
        ),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&refused.stdout).contains(pg.password()));
    assert_eq!(ran.status.code(), Some(0), "{}", show(&ran));
    assert!(String::from_utf8_lossy(&ran.stdout).contains("done"));
    // Nor is it anywhere in the record, here or central.
    node.enroll(&pg);
    for db in [node.db(), pg_path(&pg)] {
        for (id, events) in all_events(&db) {
            assert!(!events.contains(pg.password()), "{id} records it");
        }
        let listed = audit_cli(AIRLOCK, &db, &["sessions", "--json"]);
        assert!(!String::from_utf8_lossy(&listed.stdout).contains(pg.password()));
    }
    assert_shipped_whole(&node.db(), &pg);
}

#[test]
fn a_node_agent_following_a_directory_ships_databases_that_appear_and_stops_cleanly() {
    let pg = PgServer::start();
    let spool = tempfile::tempdir().unwrap();
    let record = |name: &str, node: &Node| {
        let out = Command::new(AIRLOCK)
            .args(["run", "--workspace"])
            .arg(node.dir.path().join("ws"))
            .arg("--audit-db")
            .arg(spool.path().join(name))
            .arg("--audit-key")
            .arg(node.key())
            .args(["--", "sh", "-c", "echo x > x"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    };
    let (a, b) = (Node::new(), Node::new());
    record("a.db", &a);
    let agent = audit_ship(spool.path(), &pg, true)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let a_events = event_count(&spool.path().join("a.db"));
    wait_for_events(&pg, a_events, Duration::from_secs(20));
    // A database that appears later (a new pod's) is found and shipped.
    record("b.db", &b);
    let b_events = event_count(&spool.path().join("b.db"));
    wait_for_events(&pg, a_events + b_events, Duration::from_secs(20));
    let pid = i32::try_from(agent.id()).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = agent.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("stopped by SIGTERM"), "{log}");
    assert!(!log.contains(pg.password()), "{log}");
    for node in [&a, &b] {
        node.enroll(&pg);
    }
    let verify = audit_cli(AIRLOCK, &pg_path(&pg), &["verify", "--all"]);
    assert!(verify.status.success(), "{}", show(&verify));
    // Each node's table says it is all shipped.
    for db in ["a.db", "b.db"] {
        let table = audit_cli(AIRLOCK, &spool.path().join(db), &["sessions"]);
        let text = String::from_utf8_lossy(&table.stdout);
        assert!(text.contains("SHIPPED"), "{text}");
        assert!(text.lines().nth(1).unwrap().contains(" all "), "{text}");
    }
}

/// The id of the one session of `db` in `mode`.
fn session_in_mode(db: &Path, mode: &str) -> String {
    let listed = sessions(AIRLOCK, db);
    listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["mode"] == mode)
        .unwrap_or_else(|| panic!("no {mode} session in {listed:#}"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fleets_console_follows_sessions_of_several_nodes_live() {
    use airlock_test_support::console::Console;
    let pg = PgServer::start();
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    // Node one: a live session; node two: a proxy. Both ship as they go.
    let (one, two) = (Node::new(), Node::new());
    let live = LiveSession::start(&one, &pg, &[]);
    live.sh("echo first > first");
    let mut proxy = two.proxy(&pg, &pki, upstream.port(), &[]);
    let base = format!("https://api.test:{}", upstream.port());
    let (code, _, _) = curl(&proxy, &[&format!("{base}/before")]).await;
    assert_eq!(code, 200);
    wait_for_events(&pg, 2, Duration::from_secs(10));
    for node in [&one, &two] {
        node.enroll(&pg);
    }
    let central = pg_path(&pg);
    let deadline = Instant::now() + Duration::from_secs(10);
    while sessions(AIRLOCK, &central).as_array().unwrap().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "both nodes' sessions never arrived"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let console = Console::start(AIRLOCK, &central, &one.key()).await;
    let mut session_stream = console.live(&session_in_mode(&central, "session"), 0).await;
    let mut proxy_stream = console.live(&session_in_mode(&central, "proxy"), 0).await;
    // Events recorded on each node after the streams opened arrive.
    let step = tokio::task::spawn_blocking(move || {
        live.sh("echo later > later-on-node-one");
        live
    });
    session_stream
        .until(Duration::from_secs(15), |e, d| {
            e == "ev" && d.to_string().contains("later-on-node-one")
        })
        .await;
    let (code, _, _) = curl(&proxy, &[&format!("{base}/later-on-node-two")]).await;
    assert_eq!(code, 200);
    proxy_stream
        .until(Duration::from_secs(15), |e, d| {
            e == "ev" && d.to_string().contains("later-on-node-two")
        })
        .await;
    let live = step.await.unwrap();
    live.stop();
    assert_eq!(proxy.stop(), Some(0));
}

#[test]
fn a_run_whose_central_store_is_down_ends_promptly_and_says_how_to_ship_the_rest() {
    let pg = PgServer::start();
    let node = Node::new();
    pg.kill9();
    let started = Instant::now();
    let out = node.run(&pg, &["sh", "-c", "echo kept > kept"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the command ran: {}",
        show(&out)
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let hint = format!(
        "airlock audit ship --from {} --to {}",
        node.db().display(),
        pg.url_without_password()
    );
    assert!(err.contains(&hint), "{err}");
    assert!(!err.contains(pg.password()), "{err}");
    // What it says to do ships the rest.
    pg.restart();
    let ship = audit_ship(&node.db(), &pg, false).output().unwrap();
    assert!(ship.status.success(), "{}", show(&ship));
    node.enroll(&pg);
    assert_shipped_whole(&node.db(), &pg);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_candidate_policy_is_replayed_over_the_fleets_recent_traffic_chosen_by_time_and_label() {
    let pg = PgServer::start();
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let port = upstream.port();
    // Two nodes of two teams, each asking for its own path.
    for (team, path) in [("pay", "/charges"), ("search", "/index")] {
        let node = Node::new();
        let mut proxy = node.proxy(&pg, &pki, port, &["--label".into(), format!("team={team}")]);
        let (code, _, _) = curl(&proxy, &[&format!("https://api.test:{port}{path}")]).await;
        assert_eq!(code, 200);
        assert_eq!(proxy.stop(), Some(0));
    }
    let dir = tempfile::tempdir().unwrap();
    let candidate = dir.path().join("candidate.toml");
    std::fs::write(
        &candidate,
        format!(
            "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"GET\"]\npaths = [\"/charges\"]\n"
        ),
    )
    .unwrap();
    let replay = |extra: &[&str]| {
        Command::new(AIRLOCK)
            .args(["policy", "replay"])
            .arg(&candidate)
            .args(extra)
            .args(["--json", "--audit-db", &pg.url()])
            .output()
            .unwrap()
    };
    // The week's traffic of every node: the search team's request would
    // now be refused.
    let week = replay(&["--since", "7d"]);
    assert_eq!(week.status.code(), Some(1), "{}", show(&week));
    let report: serde_json::Value = serde_json::from_slice(&week.stdout).unwrap();
    assert_eq!(
        report["sessions"].as_array().unwrap().len(),
        2,
        "{report:#}"
    );
    assert_eq!(report["blocked"], 1, "{report:#}");
    assert!(report.to_string().contains("/index"), "{report:#}");
    // One team's: nothing it did would change.
    let pay = replay(&["--since", "7d", "--label", "team=pay"]);
    assert_eq!(pay.status.code(), Some(0), "{}", show(&pay));
    let report: serde_json::Value = serde_json::from_slice(&pay.stdout).unwrap();
    assert_eq!(
        report["sessions"].as_array().unwrap().len(),
        1,
        "{report:#}"
    );
    // A window with nothing in it, and no choice at all, say so on one line.
    let none = replay(&["--since", "2999-01-01T00:00:00Z"]);
    assert_ne!(none.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("no recorded session matches"),
        "{}",
        show(&none)
    );
    let nothing = replay(&[]);
    assert_ne!(nothing.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&nothing.stderr).contains("--since"),
        "{}",
        show(&nothing)
    );
    // And a policy suggested from the same week allows both teams' paths.
    let suggest = Command::new(AIRLOCK)
        .args([
            "policy",
            "suggest",
            "--since",
            "7d",
            "--audit-db",
            &pg.url(),
        ])
        .output()
        .unwrap();
    assert!(suggest.status.success(), "{}", show(&suggest));
    let text = String::from_utf8_lossy(&suggest.stdout);
    assert!(
        text.contains("/charges") && text.contains("/index"),
        "{text}"
    );
}
