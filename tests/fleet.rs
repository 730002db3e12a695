//! A fleet, with real components: five nodes record at the same time into
//! one PostgreSQL server (test-support's `PgServer`), each shipping with
//! `--audit-ship` as it records. Two `airlock run`s, one live session
//! (`session start`/`exec`/`stop`) and two `airlock sidecar`s, each inside
//! the network namespace of a podman pod whose app (curl in an ordinary,
//! capability-less container) makes real requests through it to a TLS
//! upstream the test runs, some allowed by the fleet's policy, some
//! refused. Each node is a host of its own (a UTS namespace with its own
//! name), with its own audit database, signing key and labels.
//!
//! The sidecars ship from inside their pods' network namespaces, so their
//! connections to the store go out through their own capture rules (the
//! socket mark lets them), to the server listening on the pods' bridge
//! gateway; the app beside it cannot reach the store. While some nodes
//! still run, their sessions are already central, and the console on the
//! store in headless Chromium (tests/console/fleet-central.test.mjs) shows
//! them running, then ended, without a reload. Once all have stopped, the
//! store is read as a responder reads it: search across the nodes and
//! narrowed by label and node, verification against the enrolled node
//! keys (an unenrolled one is "unverified"), every node's record in it
//! exactly once, event for event, and the console showing all five,
//! verified, filtered by label and node.
//!
//! Podman, PostgreSQL, node, Chromium and playwright-core missing are
//! failures, not skips (scripts/setup installs them).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use airlock_test_support::audit_cli::{audit_cli, sessions};
use airlock_test_support::console::{CHROMIUM, Console, check_browser_prerequisites};
use airlock_test_support::pki::TestPki;
use airlock_test_support::podman::{self, Container, Images, Net, Pod, relay_at};
use airlock_test_support::postgres::PgServer;
use airlock_test_support::proxy::init_ca;
use airlock_test_support::sidecar::Sidecar;
use airlock_test_support::upstream::Upstream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();
const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The browser's backstop (its own budget is 60 s; it takes a few).
const BROWSER_TIMEOUT: Duration = Duration::from_secs(90);

/// How long shipping may take to catch up with a node's record.
const SHIP_PATIENCE: Duration = Duration::from_secs(30);

fn images() -> &'static Images {
    podman::images(REPO, AIRLOCK)
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// One node of the fleet: a host name of its own, its team, its audit
/// database and signing key.
struct Node {
    host: &'static str,
    team: &'static str,
    dir: tempfile::TempDir,
}

impl Node {
    fn new(host: &'static str, team: &'static str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        Self { host, team, dir }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("audit/audit.db")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("audit/audit.key")
    }

    fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// `airlock ARGS` run as this node: in a UTS namespace of its own
    /// named after it, so that the session's node is this host.
    fn airlock(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("unshare");
        cmd.args(["--uts", "sh", "-c", r#"hostname "$0" && exec "$@""#])
            .args([self.host, AIRLOCK])
            .args(args);
        cmd
    }

    /// Where it records, its labels, and where it ships (a URL without
    /// its password: the password goes in PGPASSWORD, where no process
    /// list shows it).
    fn recording(&self, ship_to: &str) -> Vec<String> {
        vec![
            "--audit-db".into(),
            self.db().to_str().unwrap().into(),
            "--audit-key".into(),
            self.key().to_str().unwrap().into(),
            "--audit-ship".into(),
            ship_to.into(),
            "--label".into(),
            format!("team={}", self.team),
            "--label".into(),
            format!("pod={}", self.host),
        ]
    }

    /// Its one session, as its own record lists it.
    fn session(&self) -> serde_json::Value {
        let list = sessions(AIRLOCK, &self.db());
        assert_eq!(list.as_array().unwrap().len(), 1, "{}: {list:#}", self.host);
        list[0].clone()
    }

    fn id(&self) -> String {
        self.session()["id"].as_str().unwrap().to_owned()
    }

    /// Enrolls its key in the central store, under its host name.
    fn enroll(&self, url: &str) {
        let out = Command::new(AIRLOCK)
            .args(["audit", "keys", "add"])
            .arg(self.key())
            .args(["--name", self.host, "--audit-db", url])
            .output()
            .unwrap();
        assert!(out.status.success(), "audit keys add: {}", show(&out));
    }
}

/// What every node shares: the central store, the upstream and its CA,
/// the fleet's policy, the sidecars' CA and the bundle the apps trust.
struct Fleet {
    pg: PgServer,
    pki: TestPki,
    upstream: Upstream,
    /// The pods' bridge's address on this host, where the store and the
    /// upstream listen for them.
    gateway: String,
    /// The upstream's port at the gateway.
    port: u16,
    dir: tempfile::TempDir,
}

impl Fleet {
    fn url(&self) -> String {
        self.pg.url()
    }

    fn central(&self) -> PathBuf {
        PathBuf::from(self.pg.url())
    }

    fn policy(&self) -> PathBuf {
        self.dir.path().join("policy.toml")
    }

    fn ca_dir(&self) -> PathBuf {
        self.dir.path().join("ca")
    }

    fn url_of(&self, path: &str) -> String {
        format!("https://api.test:{}{path}", self.port)
    }

    /// What reaches the upstream, for `run`, `session` and `sidecar` alike.
    fn upstream_args(&self) -> Vec<String> {
        vec![
            "--policy".into(),
            self.policy().to_str().unwrap().into(),
            "--upstream-ca".into(),
            self.pki.ca_pem.to_str().unwrap().into(),
            "--resolve".into(),
            format!("api.test:{}", self.gateway),
        ]
    }

    /// `airlock sidecar --pid PID` as `node`, shipping from inside the
    /// pod's network namespace to the store at the pod's gateway.
    fn sidecar(&self, node: &Node, pid: &str) -> Sidecar {
        let mut args = vec![
            "sidecar".to_string(),
            "--pid".into(),
            pid.into(),
            "--ca-dir".into(),
            self.ca_dir().to_str().unwrap().into(),
        ];
        args.extend(self.upstream_args());
        args.extend(node.recording(&self.pg.url_at(&self.gateway)));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = node.airlock(&args);
        cmd.env("PGPASSWORD", self.pg.password());
        Sidecar::spawn(cmd)
    }
}

/// The app of a pod: an ordinary uid, no capabilities, a read-only
/// root, the sidecars' CA through a read-only volume.
fn app(pod: &Pod, public_ca: &Path) -> Container {
    let ca = format!("{}:/etc/airlock/ca:ro", public_ca.display());
    Container::run_in(
        pod,
        "fleet-app",
        &[
            "--user",
            "10001:10001",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--read-only",
            "-v",
            &ca,
            "-e",
            "SSL_CERT_FILE=/etc/airlock/ca/ca.pem",
            "-e",
            "CURL_CA_BUNDLE=/etc/airlock/ca/ca.pem",
            &images().app,
            "sleep",
            "infinity",
        ],
    )
}

/// The fleet's one policy: GET of /echo/** on api.test; everything else
/// refused.
fn policy_text(port: u16) -> String {
    format!(
        r#"version = 1
[[allow]]
host = "api.test"
port = {port}
methods = ["GET"]
paths = ["/echo", "/echo/**"]
"#
    )
}

/// The sidecars' CA, and the bundle an app trusts (readable by its uid).
fn sidecar_ca(fleet_dir: &Path, upstream_ca: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(fleet_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ca = fleet_dir.join("ca");
    init_ca(AIRLOCK, &ca);
    let public = fleet_dir.join("ca-public");
    std::fs::create_dir(&public).unwrap();
    let bundle = [
        std::fs::read_to_string(ca.join("ca.pem")).unwrap(),
        std::fs::read_to_string(upstream_ca).unwrap(),
    ]
    .concat();
    std::fs::write(public.join("ca.pem"), bundle).unwrap();
    std::fs::set_permissions(
        public.join("ca.pem"),
        std::fs::Permissions::from_mode(0o444),
    )
    .unwrap();
    public
}

/// A shell script for a sandbox: `rounds` allowed GETs and refused
/// requests (a path and a method the policy does not allow), with pauses,
/// printing each status.
fn requests_script(fleet: &Fleet, name: &str, rounds: u32) -> String {
    let mut script = String::new();
    for i in 1..=rounds {
        script.push_str(&format!(
            "curl -sS -o /dev/null -w '%{{http_code}}\\n' {ok}; \
             curl -sS -o /dev/null -w '%{{http_code}}\\n' {denied}; \
             curl -sS -o /dev/null -w '%{{http_code}}\\n' -X POST -d x {ok}; \
             sleep 0.3; ",
            ok = fleet.url_of(&format!("/echo/{name}-{i}")),
            denied = fleet.url_of(&format!("/admin/{name}-{i}")),
        ));
    }
    script
}

/// What [`requests_script`] does, from a pod's app through its sidecar:
/// each status, a line each.
async fn app_requests(fleet: &Fleet, app: &Container, name: &str, rounds: u32) -> String {
    let mut codes = String::new();
    for i in 1..=rounds {
        for (path, extra) in [
            (format!("/echo/{name}-{i}"), &[][..]),
            (format!("/admin/{name}-{i}"), &[][..]),
            (format!("/echo/{name}-{i}"), &["-X", "POST", "-d", "x"][..]),
        ] {
            let (code, body, out) = app.curl(&fleet.url_of(&path), extra).await;
            assert!(code != 0, "{name} {path}: {out:?}");
            if code == 403 {
                assert!(body.contains("Airlock refused this request."), "{body}");
            }
            codes.push_str(&format!("{code}\n"));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    codes
}

/// What [`requests_script`] prints when the policy decided every request.
fn decided(rounds: u32) -> String {
    "200\n403\n403\n".repeat(rounds as usize)
}

/// A live session of `node`, stopped when dropped.
struct Live {
    id: String,
}

impl Live {
    fn start(fleet: &Fleet, node: &Node) -> Self {
        let mut args = vec![
            "session".to_string(),
            "start".into(),
            "--workspace".into(),
            node.ws().to_str().unwrap().into(),
        ];
        args.extend(fleet.upstream_args());
        args.extend(node.recording(&fleet.pg.url_without_password()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = node
            .airlock(&args)
            .env("PGPASSWORD", fleet.pg.password())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "session start: {}", show(&out));
        Self {
            id: String::from_utf8(out.stdout).unwrap().trim().to_owned(),
        }
    }

    async fn sh(&self, script: &str) -> Output {
        tokio::process::Command::new(AIRLOCK)
            .args(["session", "exec", &self.id, "--", "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap()
    }

    fn stop(&self) {
        let out = Command::new(AIRLOCK)
            .args(["session", "stop", &self.id])
            .output()
            .unwrap();
        assert!(out.status.success(), "session stop: {}", show(&out));
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = Command::new(AIRLOCK)
            .args(["session", "stop", &self.id])
            .output();
    }
}

/// Every session the central store lists, by id.
fn central_sessions(fleet: &Fleet) -> Vec<serde_json::Value> {
    let out = audit_cli(AIRLOCK, &fleet.central(), &["sessions", "--json"]);
    if !out.status.success() {
        // No batch yet: no schema to read.
        return Vec::new();
    }
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Waits until the central store holds, for each node, as many events as
/// its own record, and its end once the node recorded it.
fn wait_until_shipped(fleet: &Fleet, nodes: &[&Node]) {
    let deadline = Instant::now() + SHIP_PATIENCE;
    loop {
        let central = central_sessions(fleet);
        let behind: Vec<String> = nodes
            .iter()
            .filter_map(|node| {
                let local = node.session();
                let there = central.iter().find(|s| s["id"] == local["id"]);
                let caught_up = there.is_some_and(|s| {
                    s["events"] == local["events"]
                        && s["ended"].is_null() == local["ended"].is_null()
                });
                (!caught_up).then(|| {
                    format!(
                        "{}: {} events here, {} central",
                        node.host,
                        local["events"],
                        there.map_or(serde_json::Value::Null, |s| s["events"].clone())
                    )
                })
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the central store is behind after {SHIP_PATIENCE:?}: {behind:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The sessions `audit search ARGS` on the central store found events of.
fn search(fleet: &Fleet, args: &[&str]) -> BTreeSet<String> {
    let mut all = vec!["search", "--json"];
    all.extend_from_slice(args);
    let out = audit_cli(AIRLOCK, &fleet.central(), &all);
    assert!(
        out.status.success(),
        "audit search {args:?}: {}",
        show(&out)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let hit: serde_json::Value = serde_json::from_str(l).unwrap();
            hit["session"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// Every event of session `id` in `db`, as `audit export --format jsonl`
/// writes them.
fn export(db: &Path, id: &str) -> String {
    let out = audit_cli(
        AIRLOCK,
        db,
        &["export", id, "--format", "jsonl", "--out", "-"],
    );
    assert!(out.status.success(), "export {id}: {}", show(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// A python script that opens a TCP connection to the store at
/// `gateway`:`port` and sends a PostgreSQL startup message: prints
/// "postgres answered" when an authentication request (or an error) comes
/// back from PostgreSQL, "refused ..." otherwise. With `forge_mark`, it
/// first tries to put the sidecar's socket mark on its socket (which takes
/// CAP_NET_ADMIN), as an app hoping to be let out like the sidecar would.
fn store_probe(gateway: &str, port: u16, forge_mark: bool) -> String {
    let forge = if forge_mark { "True" } else { "False" };
    format!(
        r#"
import socket, struct
params = b"user\0airlock\0database\0airlock\0\0"
startup = struct.pack(">ii", 8 + len(params), 196608) + params
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    if {forge}:
        try:
            s.setsockopt(socket.SOL_SOCKET, 36, 0x4149524c)  # SO_MARK
            print("mark set")
        except OSError as e:
            print("mark refused:", e)
    s.connect(("{gateway}", {port}))
    s.sendall(startup)
    reply = s.recv(1)
    print("postgres answered" if reply in (b"R", b"E") else "refused: got %r" % reply)
except OSError as e:
    print("refused:", e)
"#
    )
}

/// The IPv4 address of eth0 in the network namespace of `pid`.
fn pod_address(pid: &str) -> String {
    let out = podman::nsenter_ok(pid, &["ip", "-4", "-o", "addr", "show", "dev", "eth0"]);
    let cidr = out
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .unwrap_or_else(|| panic!("no IPv4 address on eth0: {out}"));
    cidr.split('/').next().unwrap().to_owned()
}

/// Every event of every node is in the central store exactly once: the
/// node's `audit export` and the store's, event for event, and no
/// (session, seq) stored twice.
fn assert_central_exactly_once(fleet: &Fleet, nodes: &[&Node]) {
    for node in nodes {
        let id = node.id();
        let local = export(&node.db(), &id);
        let there = export(&fleet.central(), &id);
        assert!(
            local == there,
            "{}: {} events here, {} central",
            node.host,
            local.lines().count(),
            there.lines().count()
        );
        assert_eq!(
            local.lines().count() as u64,
            node.session()["events"].as_u64().unwrap(),
            "{}",
            node.host
        );
    }
    let rows = fleet
        .pg
        .psql("SELECT count(*), count(DISTINCT (sid, seq)) FROM events");
    let total: u64 = nodes
        .iter()
        .map(|n| n.session()["events"].as_u64().unwrap())
        .sum();
    assert_eq!(rows, format!("{total}|{total}"));
}

/// With the keys of `enrolled` enrolled and not yet that of `late`,
/// `audit verify --all` on the store says `late`'s session is unverified,
/// never intact, and the others intact; once `late`'s key is enrolled too,
/// every session is intact.
fn assert_verified_against_enrolled_keys(fleet: &Fleet, enrolled: &[&Node], late: &Node) {
    for node in enrolled {
        node.enroll(&fleet.url());
    }
    let verify = || {
        let out = audit_cli(AIRLOCK, &fleet.central(), &["verify", "--all"]);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = verify();
    assert_eq!(code, Some(1), "{text}");
    let unenrolled = late.id();
    let line_of = |text: &str, id: &str| {
        let lines: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with(id))
            .map(str::to_owned)
            .collect();
        assert_eq!(lines.len(), 1, "{id}: {text}");
        lines[0].clone()
    };
    assert!(line_of(&text, &unenrolled).contains("UNVERIFIED"), "{text}");
    for node in enrolled {
        assert!(line_of(&text, &node.id()).contains(": intact"), "{text}");
    }
    late.enroll(&fleet.url());
    let (code, text) = verify();
    assert_eq!(code, Some(0), "{text}");
    for node in enrolled.iter().chain([&late]) {
        assert!(line_of(&text, &node.id()).contains(": intact"), "{text}");
    }
}

/// The browser test (tests/console/fleet-central.test.mjs) running beside
/// this one: it writes a file into `signals` when it has seen something,
/// and waits for one this test writes there before its last checks.
struct Browser {
    child: tokio::process::Child,
    signals: tempfile::TempDir,
    artifacts: PathBuf,
}

impl Browser {
    fn start(dir: &Path, console: &Console, fleet: &[serde_json::Value]) -> Self {
        // Screenshots go where tests/console.rs puts them.
        let artifacts = std::env::var_os("AIRLOCK_CONSOLE_ARTIFACTS")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(REPO).join("target/console-artifacts"));
        std::fs::create_dir_all(&artifacts).unwrap();
        let signals = tempfile::tempdir().unwrap();
        let child = tokio::process::Command::new("node")
            .arg("fleet-central.test.mjs")
            .current_dir(dir)
            .env("CONSOLE_URL", &console.url)
            .env("FLEET", serde_json::Value::from(fleet.to_vec()).to_string())
            .env("SIGNALS", signals.path())
            .env("ARTIFACTS", &artifacts)
            .env("CHROMIUM", CHROMIUM)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn node");
        Self {
            child,
            signals,
            artifacts,
        }
    }

    /// Waits until the browser test writes `name`; fails with its output
    /// when it ends first.
    async fn wait_for(&mut self, name: &str) {
        let deadline = Instant::now() + BROWSER_TIMEOUT;
        while !self.signals.path().join(name).exists() {
            if self.child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                let _ = self.child.start_kill();
                let log = tokio::time::timeout(Duration::from_secs(10), self.output()).await;
                panic!("the browser test never said {name:?}:\n{log:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn signal(&self, name: &str) {
        std::fs::write(self.signals.path().join(name), "").unwrap();
    }

    async fn output(&mut self) -> String {
        use tokio::io::AsyncReadExt;
        let (mut out, mut err) = (String::new(), String::new());
        if let Some(mut pipe) = self.child.stdout.take() {
            let _ = pipe.read_to_string(&mut out).await;
        }
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = pipe.read_to_string(&mut err).await;
        }
        format!("--- node stdout ---\n{out}\n--- node stderr ---\n{err}")
    }

    /// Waits for it to end; its log, once it passed.
    async fn finish(mut self) -> String {
        let log = tokio::time::timeout(BROWSER_TIMEOUT, self.output())
            .await
            .expect("the browser test ran over its time");
        let status = self.child.wait().await.unwrap();
        assert_eq!(
            status.code(),
            Some(0),
            "the browser test failed (screenshots in {}):\n{log}",
            self.artifacts.display()
        );
        log
    }
}

fn ids(nodes: &[&Node]) -> BTreeSet<String> {
    nodes.iter().map(|n| n.id()).collect()
}

fn time_of(session: &serde_json::Value, field: &str) -> SystemTime {
    humantime::parse_rfc3339(session[field].as_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_recording_at_once_into_one_postgres_are_searched_verified_and_seen_in_the_console()
 {
    let started = Instant::now();
    let browser_dir = Path::new(REPO).join("tests/console");
    check_browser_prerequisites(&browser_dir);
    let mut timings = Vec::new();
    let lap = |what: &str, timings: &mut Vec<String>| {
        timings.push(format!("{what} at {:.1?}", started.elapsed()));
    };

    // The pods come first: their bridge, and so its gateway address, exists
    // once their first container runs, and the store listens there. They
    // go last (locals drop in reverse), the network after its containers:
    // `network rm -f` would stop them with podman's 10 s timeout.
    let net = Net::new("fleet");
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new();
    let public_ca = sidecar_ca(dir.path(), &pki.ca_pem);
    let pay_pod = Pod::new("fleet-pay", &net);
    let search_pod = Pod::new("fleet-search", &net);
    let pay_app = app(&pay_pod, &public_ca);
    let search_app = app(&search_pod, &public_ca);
    let pg = PgServer::start_listening_on(&[&net.gateway], &[&net.subnet]);
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let port = relay_at(&net.gateway, upstream.addr);
    let fleet = Fleet {
        pg,
        pki,
        upstream,
        gateway: net.gateway.clone(),
        port,
        dir,
    };
    std::fs::write(fleet.policy(), policy_text(port)).unwrap();
    lap("pods, store and upstream ready", &mut timings);

    let run_pay = Node::new("fleet-run-pay", "pay");
    let run_search = Node::new("fleet-run-search", "search");
    let live_pay = Node::new("fleet-live-pay", "pay");
    let pod_pay = Node::new("fleet-pod-pay", "pay");
    let pod_search = Node::new("fleet-pod-search", "search");
    let nodes = [&run_pay, &run_search, &live_pay, &pod_pay, &pod_search];

    // Unguarded, an app reaches the store: the subnet is let in, for the
    // sidecars. The control that makes the refusal below mean something.
    let pg_port = fleet.pg.port();
    let out = pay_app
        .python(&[], &store_probe(&fleet.gateway, pg_port, false))
        .await;
    assert_eq!(out.stdout.trim(), "postgres answered", "unguarded: {out:?}");

    // The long-lived nodes: two sidecars and a live session.
    let mut pay_sidecar = fleet.sidecar(&pod_pay, &pay_app.pid()).ready().await;
    let mut search_sidecar = fleet.sidecar(&pod_search, &search_app.pid()).ready().await;
    let live = Live::start(&fleet, &live_pay);
    lap("sidecars and session started", &mut timings);

    // All five at once: each app, the session and both runs make allowed
    // and refused requests.
    let run = |node: &Node, rounds: u32| {
        let mut args = vec![
            "run".to_string(),
            "--workspace".into(),
            node.ws().to_str().unwrap().into(),
        ];
        args.extend(fleet.upstream_args());
        args.extend(node.recording(&fleet.pg.url_without_password()));
        args.extend(["--".into(), "sh".into(), "-c".into()]);
        args.push(requests_script(&fleet, node.host, rounds));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = node.airlock(&args);
        cmd.env("PGPASSWORD", fleet.pg.password());
        let mut cmd = tokio::process::Command::from(cmd);
        async move { cmd.stdin(Stdio::null()).output().await.unwrap() }
    };
    let live_script = requests_script(&fleet, "live-pay", 3);
    let (pay_run, search_run, pay_codes, search_codes, session_out) = tokio::join!(
        run(&run_pay, 3),
        run(&run_search, 3),
        app_requests(&fleet, &pay_app, "pod-pay", 3),
        app_requests(&fleet, &search_app, "pod-search", 3),
        live.sh(&live_script),
    );
    lap("concurrent requests done", &mut timings);
    for (what, out) in [
        ("run pay", &pay_run),
        ("run search", &search_run),
        ("session exec", &session_out),
    ] {
        assert_eq!(out.status.code(), Some(0), "{what}: {}", show(out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), decided(3), "{what}");
    }
    assert_eq!(pay_codes, decided(3), "{}", pay_sidecar.log());
    assert_eq!(search_codes, decided(3), "{}", search_sidecar.log());
    // Only the allowed requests reached the upstream: three GETs per node.
    let targets = fleet.upstream.targets();
    assert_eq!(targets.len(), 15, "{targets:?}");
    assert!(
        targets.iter().all(|t| t.starts_with("/echo/")),
        "{targets:?}"
    );

    // While the sidecars and the session still run, the store already has
    // their sessions, unended, up to their last event, and a refusal in a
    // pod is found there.
    let running = [&live_pay, &pod_pay, &pod_search];
    wait_until_shipped(&fleet, &running);
    let central = central_sessions(&fleet);
    for node in running {
        let id = node.id();
        let session = central.iter().find(|s| s["id"] == id.as_str()).unwrap();
        assert!(session["ended"].is_null(), "{}: {session:#}", node.host);
    }
    assert_eq!(
        search(
            &fleet,
            &[
                "--host",
                "api.test",
                "--verdict",
                "deny",
                "--label",
                "pod=fleet-pod-pay"
            ]
        ),
        ids(&[&pod_pay])
    );
    // The sidecars' connections to the store come from inside their pods
    // (their own capture rules let the marked sockets out)...
    let clients = fleet
        .pg
        .psql("SELECT DISTINCT host(client_addr) FROM pg_stat_activity WHERE usename = 'airlock'");
    for app in [&pay_app, &search_app] {
        let address = pod_address(&app.pid());
        assert!(
            clients.lines().any(|c| c == address),
            "no connection from the pod at {address}: {clients}"
        );
    }
    // ...and the app's own, in any spelling, are captured by its sidecar and
    // never reach the store: the app cannot write into the fleet's record.
    for (user, forge_mark) in [("10001", false), ("0", true)] {
        let out = pay_app
            .python(
                &["--user", user],
                &store_probe(&fleet.gateway, pg_port, forge_mark),
            )
            .await;
        assert!(
            !out.stdout.contains("postgres answered") && out.stdout.contains("refused"),
            "the app (uid {user}) reached the store past its sidecar: {out:?}"
        );
        // Without CAP_NET_ADMIN, even uid 0 cannot wear the sidecar's mark.
        assert_eq!(forge_mark, out.stdout.contains("mark refused"), "{out:?}");
    }
    let out = pay_app
        .exec(
            &[],
            &[
                "curl",
                "-sS",
                "--max-time",
                "5",
                &format!("http://{}:{pg_port}/", fleet.gateway),
            ],
        )
        .await;
    assert!(!out.stdout.contains("postgres"), "{out:?}");
    lap("live sessions central", &mut timings);

    // The console on the central store, in Chromium, while three of the
    // five still run: it shows them running, then ended, by itself.
    let console = Console::start_central(AIRLOCK, &fleet.central()).await;
    let expected: Vec<serde_json::Value> = nodes
        .iter()
        .map(|n| {
            serde_json::json!({
                "id": n.id(),
                "node": n.host,
                "team": n.team,
                "pod": n.host,
                "running": running.iter().any(|r| r.host == n.host),
            })
        })
        .collect();
    let mut browser = Browser::start(&browser_dir, &console, &expected);
    browser.wait_for("running-seen").await;
    lap("console showed the running ones", &mut timings);

    live.stop();
    assert_eq!(pay_sidecar.stop(), Some(0), "{}", pay_sidecar.log());
    assert_eq!(search_sidecar.stop(), Some(0), "{}", search_sidecar.log());
    wait_until_shipped(&fleet, &nodes);
    lap("all stopped and shipped", &mut timings);

    // They recorded at the same time: every session began before any ended.
    let central = central_sessions(&fleet);
    assert_eq!(central.len(), 5, "{central:#?}");
    let last_start = central.iter().map(|s| time_of(s, "started")).max().unwrap();
    let first_end = central.iter().map(|s| time_of(s, "ended")).min().unwrap();
    assert!(
        last_start < first_end,
        "the five did not overlap: {central:#?}"
    );
    // Each is its node's, with its labels.
    for node in nodes {
        let id = node.id();
        let session = central.iter().find(|s| s["id"] == id.as_str()).unwrap();
        assert_eq!(session["host"], node.host, "{session:#}");
        assert_eq!(
            session["labels"],
            serde_json::json!({"team": node.team, "pod": node.host}),
            "{session:#}"
        );
    }

    // Search across the fleet, narrowed by label and by node.
    let all = ids(&nodes);
    assert_eq!(search(&fleet, &["--host", "api.test"]), all);
    assert_eq!(
        search(&fleet, &["--host", "api.test", "--verdict", "deny"]),
        all
    );
    assert_eq!(
        search(&fleet, &["--host", "api.test", "--label", "team=pay"]),
        ids(&[&run_pay, &live_pay, &pod_pay])
    );
    assert_eq!(
        search(&fleet, &["--url", "/admin/", "--label", "team=search"]),
        ids(&[&run_search, &pod_search])
    );
    assert_eq!(
        search(
            &fleet,
            &["--host", "api.test", "--node", "fleet-pod-search"]
        ),
        ids(&[&pod_search])
    );

    assert_central_exactly_once(&fleet, &nodes);
    lap("searched and compared", &mut timings);

    assert_verified_against_enrolled_keys(&fleet, &nodes[..4], &pod_search);
    lap("verified", &mut timings);

    // The browser's last checks, on the list it has followed live.
    browser.signal("checked");
    let browser_log = browser.finish().await;
    println!("{browser_log}");
    lap("console checked", &mut timings);
    assert!(!browser_log.contains(fleet.pg.password()));
    println!("fleet timings: {}", timings.join("; "));
}
