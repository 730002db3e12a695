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

    /// `airlock run` recording here and shipping to `to`.
    fn run(&self, to: &str, command: &[&str]) -> Output {
        Command::new(AIRLOCK)
            .args(["run", "--workspace"])
            .arg(self.dir.path().join("ws"))
            .arg("--audit-db")
            .arg(self.db())
            .arg("--audit-key")
            .arg(self.key())
            .args(["--audit-ship", to, "--label", "pod=runner"])
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
        &pg.url(),
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
    let out = node.run(&pg.url(), &["sh", "-c", "echo a > a; echo b > b"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let before = event_count(&pg_path(&pg));
    assert!(before > 0);
    // Again, as it stands: nothing new.
    let ship = |db: &Path| {
        Command::new(AIRLOCK)
            .args(["audit", "ship", "--from"])
            .arg(db)
            .args(["--to", &pg.url()])
            .output()
            .unwrap()
    };
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
    let out = Command::new(AIRLOCK)
        .args(["audit", "ship", "--from"])
        .arg(spool.path())
        .args(["--to", &pg.url()])
        .output()
        .unwrap();
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
            .args(["--audit-ship", &pg.url()])
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
    let mut shipper = Command::new(AIRLOCK)
        .args(["audit", "ship", "--follow", "--from"])
        .arg(node.db())
        .args(["--to", &pg.url()])
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
    let out = Command::new(AIRLOCK)
        .args(["audit", "ship", "--from"])
        .arg(node.db())
        .args(["--to", &pg.url()])
        .output()
        .unwrap();
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
    let policy = format!(
        "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {}\nmethods = [\"GET\"]\n",
        upstream.port()
    );
    let mut opts = ProxyOptions::new(&policy);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    opts.extra = vec![
        "--audit-db".into(),
        node.db().to_str().unwrap().into(),
        "--audit-key".into(),
        node.key().to_str().unwrap().into(),
        "--audit-ship".into(),
        pg.url(),
        "--audit-ship-required".into(),
    ];
    let mut proxy = AirlockProxy::start(AIRLOCK, opts);
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
