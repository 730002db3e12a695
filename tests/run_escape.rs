//! Security review of `airlock run` from the outside: real programs inside the
//! sandbox try to get out (literal IPs, UDP, DNS, the host's loopback, the
//! proxy's own port, IPv6, secrets in the home, writes outside the workspace,
//! mounts and namespaces, host processes, the CA key), and every attempt is
//! checked twice: the program inside sees a refusal, and the thing it aimed
//! at (an upstream's request counter, a host listener, a host file) was never
//! reached. Then: many sessions at once, `kill -9` of airlock, an ordinary
//! user, and the limits and exit statuses.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use airlock_test_support::pki::TestPki;
use airlock_test_support::skip_or_fail;
use airlock_test_support::upstream::{Extra, Upstream};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();
const PY: &str = "/usr/bin/python3";
/// No single `airlock run` in this file may take longer than this.
const RUN_DEADLINE: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------
// Fixtures.

/// What one `airlock run` printed.
#[derive(Debug)]
struct Output {
    status: i32,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

/// Run a program to completion, killed (and the test failed) after [`RUN_DEADLINE`].
async fn run_program(program: &str, args: Vec<OsString>, env: &[(&str, &str)]) -> Output {
    let start = Instant::now();
    let child = tokio::process::Command::new(program)
        .args(&args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(RUN_DEADLINE, child)
        .await
        .unwrap_or_else(|_| panic!("{program} {args:?} did not finish within {RUN_DEADLINE:?}"))
        .unwrap();
    Output {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// An allowed upstream `api.test` pinned to the host's 127.0.0.1, a policy
/// allowing GET /echo and /echo/**, and a private audit database.
struct Fixture {
    pki: TestPki,
    upstream: Upstream,
    dir: tempfile::TempDir,
}

impl Fixture {
    async fn new() -> Self {
        let pki = TestPki::new();
        // Every request is answered `upstream saw PATH?QUERY`: plain text
        // that curl, python, node, git and pip all take as it is.
        let extra = Extra {
            say_target: true,
            ..Extra::default()
        };
        let upstream = Upstream::start_with(Some(pki.server_config(&["api.test"])), extra).await;
        let dir = tempfile::tempdir().unwrap();
        let f = Self { pki, upstream, dir };
        let policy = format!(
            "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {}\nmethods = [\"GET\"]\npaths = [\"/echo\", \"/echo/**\"]\n",
            f.port()
        );
        std::fs::write(f.policy(), policy).unwrap();
        std::fs::create_dir_all(f.dir.path().join("audit")).unwrap();
        f
    }

    fn port(&self) -> u16 {
        self.upstream.port()
    }

    fn policy(&self) -> PathBuf {
        self.dir.path().join("policy.toml")
    }

    fn audit_db(&self) -> PathBuf {
        self.dir.path().join("audit/audit.db")
    }

    fn audit_key(&self) -> PathBuf {
        self.dir.path().join("audit/audit.key")
    }

    /// The `airlock run` arguments up to (not including) `--`.
    fn run_args(&self, workspace: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = os(&["run", "--policy"]);
        args.push(self.policy().into());
        args.push("--workspace".into());
        args.push(workspace.into());
        args.push("--upstream-ca".into());
        args.push(self.pki.ca_pem.clone().into());
        args.extend(os(&["--resolve", "api.test:127.0.0.1", "--audit-db"]));
        args.push(self.audit_db().into());
        args.push("--audit-key".into());
        args.push(self.audit_key().into());
        args.extend(os(&["--timeout", "60s"]));
        args
    }

    fn workspace(&self, name: &str) -> PathBuf {
        let ws = self.dir.path().join(name);
        std::fs::create_dir_all(&ws).unwrap();
        ws
    }
}

/// A string no other test run will produce.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}{}{nanos}", std::process::id())
}

/// One of the host's own non-loopback IPv4 addresses, if it has any.
fn host_ipv4() -> Option<std::net::Ipv4Addr> {
    let probe = UdpSocket::bind("0.0.0.0:0").ok()?;
    probe.connect("192.0.2.1:9").ok()?;
    match probe.local_addr().ok()?.ip() {
        std::net::IpAddr::V4(ip) if !ip.is_loopback() && !ip.is_unspecified() => Some(ip),
        _ => None,
    }
}

/// Did anything connect to this (non-blocking) listener?
fn accepted(listener: &TcpListener) -> Option<SocketAddr> {
    listener.accept().ok().map(|(_, peer)| peer)
}

/// Did any datagram arrive on this (non-blocking) socket?
fn received(socket: &UdpSocket) -> Option<(usize, SocketAddr)> {
    let mut buf = [0u8; 2048];
    socket.recv_from(&mut buf).ok()
}

// ---------------------------------------------------------------------------
// 1. Escape attempts, all in one session.

const ESCAPE_SCRIPT: &str = r#"
import json, os, socket, subprocess, sys

P = json.loads(sys.argv[1])

def report(name, **observed):
    print(name + "\t" + json.dumps(observed), flush=True)

def run(argv, timeout=20):
    try:
        r = subprocess.run(argv, capture_output=True, timeout=timeout)
        return {"rc": r.returncode, "out": r.stdout.decode(errors="replace")[-600:],
                "err": r.stderr.decode(errors="replace")[-300:]}
    except subprocess.TimeoutExpired:
        return {"rc": "timeout", "out": "", "err": ""}
    except OSError as e:
        return {"rc": "oserror", "out": "", "err": str(e)}

def tcp(addr, family=socket.AF_INET, send=None, timeout=5):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(addr)
    except OSError as e:
        s.close()
        return {"connected": False, "error": type(e).__name__ + ": " + str(e)}
    reply = b""
    error = None
    try:
        if send is not None:
            s.sendall(send)
        while len(reply) < 4096:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    except OSError as e:
        error = type(e).__name__ + ": " + str(e)
    s.close()
    return {"connected": True, "reply": reply.decode(errors="replace")[:600], "error": error}

def udp(addr, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(1.5)
    out = {}
    try:
        s.connect(addr)
        s.send(b"airlock-escape-udp")
        out["sent"] = True
        data = s.recv(2048)
        out["reply"] = data.decode(errors="replace")
    except OSError as e:
        out["error"] = type(e).__name__ + ": " + str(e)
    s.close()
    return out

def read(path):
    try:
        with open(path, "rb") as f:
            return {"read": True, "content": f.read(4096).decode(errors="replace")}
    except OSError as e:
        return {"read": False, "error": type(e).__name__ + ": " + str(e)}

def write(path):
    try:
        with open(path, "w") as f:
            f.write(P["marker"])
        return {"written": True}
    except OSError as e:
        return {"written": False, "error": type(e).__name__ + ": " + str(e)}

def listdir(path):
    try:
        return {"entries": sorted(os.listdir(path))}
    except OSError as e:
        return {"error": type(e).__name__ + ": " + str(e)}

curl = ["curl", "-sS", "-m", "10", "-w", "\n%{http_code}"]

# Literal IPs of a host the policy does not allow: plain HTTP and HTTPS.
report("ip_http", **run(curl + ["-i", "http://203.0.113.10/"]))
report("ip_https", **run(curl + ["-i", "https://203.0.113.10/"]))
if P["host_ip"]:
    # The host's own address, port of a host listener: through the proxy, if at all.
    report("host_ip_tcp", **tcp((P["host_ip"], P["tcp_port"]),
           send=b"GET / HTTP/1.1\r\nHost: " + P["host_ip"].encode() + b"\r\nConnection: close\r\n\r\n"))

# UDP out: a public resolver's QUIC port, the host's loopback, the host's address.
report("udp_public", **udp(("8.8.4.4", 443)))
report("udp_host_loopback", **udp(("127.0.0.1", P["udp_port"])))
if P["host_ip"]:
    report("udp_host_ip", **udp((P["host_ip"], P["udp_port"])))

# Names that the policy does not list.
for name in ["unlisted.example", "example.com"]:
    try:
        report("dns_" + name, resolved=[a[4][0] for a in socket.getaddrinfo(name, 443)])
    except OSError as e:
        report("dns_" + name, error=type(e).__name__ + ": " + str(e))

# The host's loopback (a listener the test runs on the host's 127.0.0.1).
report("host_loopback_tcp", **tcp(("127.0.0.1", P["tcp_port"]), send=b"hello\n"))

# The proxy's own listener, with a request that would be allowed.
req = ("GET /echo/direct HTTP/1.1\r\nHost: api.test:%d\r\nConnection: close\r\n\r\n" % P["upstream_port"]).encode()
report("proxy_port", **tcp(("127.0.0.1", 15001), send=req))

# IPv6: documentation prefix and the loopback.
report("ipv6_global", **tcp(("2001:db8::1", 443, 0, 0), family=socket.AF_INET6, timeout=3))
report("ipv6_loopback", **tcp(("::1", P["tcp_port"], 0, 0), family=socket.AF_INET6, timeout=3))
report("ipv6_udp", **udp(("2001:db8::1", 443, 0, 0), family=socket.AF_INET6))

# The invoking user's home and its secrets.
report("ssh_key", **read(P["home"] + "/.ssh/id_ed25519"))
report("home_file", **read(P["home"] + "/notes.txt"))
report("home_list", **listdir(P["home"]))
report("root_ssh", **listdir("/root/.ssh"))

# Writes outside the workspace.
for path in ["/etc/airlock-test-" + P["marker"], "/usr/airlock-test-" + P["marker"],
             "/var/tmp/airlock-test-" + P["marker"], P["outside"] + "/airlock-test-" + P["marker"]]:
    report("write " + path, **write(path))
report("outside_visible", **read(P["outside"] + "/visible.txt"))
report("write_tmp", **write("/tmp/airlock-test-" + P["marker"]))
report("write_workspace", **write("in-workspace.txt"))

# Mounts and namespaces.
report("mount", **run(["mount", "-t", "tmpfs", "none", "/mnt"]))
report("unshare_r", **run(["unshare", "-r", "true"]))
report("unshare_n", **run(["unshare", "-n", "true"]))
report("nsenter", **run(["nsenter", "-t", "1", "-m", "true"]))

# Host processes.
report("kill_host", **run(["sh", "-c", "kill -0 %d" % P["host_pid"]]))
try:
    os.kill(P["host_pid"], 0)
    report("os_kill_host", signalled=True)
except OSError as e:
    report("os_kill_host", signalled=False, error=type(e).__name__)
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
cmdlines = []
for p in pids:
    try:
        with open("/proc/%d/cmdline" % p, "rb") as f:
            cmdlines.append(f.read().replace(b"\0", b" ").decode(errors="replace")[:200])
    except OSError:
        pass
report("proc", pids=pids, cmdlines=cmdlines)
report("init_environ", **read("/proc/1/environ"))
report("init_mem", **read("/proc/1/mem"))

# The CA key and the audit database.
report("ca_key", **read(P["ca_dir"] + "/ca-key.pem"))
report("ca_dir", **listdir(P["ca_dir"]))
report("ca_parent", **listdir(P["ca_parent"]))
report("audit_db", **read(P["audit_db"]))
print("done", flush=True)
"#;

fn parse_report(stdout: &str) -> HashMap<String, serde_json::Value> {
    stdout
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_owned(), serde_json::from_str(v).unwrap()))
        .collect()
}

#[tokio::test]
async fn escape_attempts_fail() {
    escape_attempts_fail_under(&[]).await;
}

/// The same attempts from inside gVisor (`--isolation gvisor`), with the
/// same outcome.
#[tokio::test]
async fn escape_attempts_fail_under_gvisor() {
    escape_attempts_fail_under(&["--isolation", "gvisor"]).await;
}

/// Every escape attempt, under the isolation `isolation` (extra `run`
/// options) chooses.
// The session's report on stderr, as the tests themselves may print.
#[allow(clippy::print_stderr)]
async fn escape_attempts_fail_under(isolation: &[&str]) {
    let f = Fixture::new().await;
    let marker = unique("escape-");

    // Host-side targets that must never hear from the sandbox.
    let tcp = TcpListener::bind("0.0.0.0:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let tcp_port = tcp.local_addr().unwrap().port();
    let tcp6 = TcpListener::bind(("::1", tcp_port)).ok();
    if let Some(l) = &tcp6 {
        l.set_nonblocking(true).unwrap();
    }
    let udp = UdpSocket::bind("0.0.0.0:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let host_ip = host_ipv4();
    let host_sleep = KillOnDrop(
        std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap(),
    );

    // A home with a key, and a persistent CA, both where the sandbox could
    // otherwise see them (the sandbox's /tmp is private, /var/tmp is not).
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    std::fs::write(
        home.path().join(".ssh/id_ed25519"),
        format!("-----BEGIN OPENSSH PRIVATE KEY----- {marker}\n"),
    )
    .unwrap();
    std::fs::write(home.path().join("notes.txt"), format!("{marker}\n")).unwrap();
    let ca_parent = tempfile::tempdir_in("/var/tmp").unwrap();
    let ca_dir = ca_parent.path().join("ca");
    let init = run_program(
        AIRLOCK,
        vec![
            "ca".into(),
            "init".into(),
            "--dir".into(),
            ca_dir.clone().into(),
        ],
        &[],
    )
    .await;
    assert_eq!(init.status, 0, "ca init: {init:?}");
    assert!(ca_dir.join("ca-key.pem").exists());
    let outside = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(outside.path().join("visible.txt"), &marker).unwrap();

    let ws = f.workspace("ws");
    let params = serde_json::json!({
        "marker": marker,
        "host_ip": host_ip.map(|ip| ip.to_string()),
        "tcp_port": tcp_port,
        "udp_port": udp_port,
        "upstream_port": f.port(),
        "home": home.path(),
        "outside": outside.path(),
        "host_pid": host_sleep.0.id(),
        "ca_dir": ca_dir,
        "ca_parent": ca_parent.path(),
        "audit_db": f.audit_db(),
    });
    let mut args = f.run_args(&ws);
    args.extend(os(isolation));
    args.push("--ca-dir".into());
    args.push(ca_dir.clone().into());
    // Even an explicit read-only grant of its parent must not expose the CA key.
    args.push("--ro".into());
    args.push(ca_parent.path().into());
    args.extend(os(&["--", PY, "-c", ESCAPE_SCRIPT, &params.to_string()]));
    let home_str = home.path().to_str().unwrap().to_owned();
    let out = run_program(AIRLOCK, args, &[("HOME", home_str.as_str())]).await;
    drop(host_sleep);
    eprintln!(
        "escape session took {:?}\n{}\n{}",
        out.elapsed, out.stdout, out.stderr
    );
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.ends_with("done\n"), "{out:?}");
    let r = parse_report(&out.stdout);
    let get = |k: &str| {
        r.get(k)
            .unwrap_or_else(|| panic!("no result for {k}: {out:?}"))
            .clone()
    };
    let text = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or("").to_owned();

    // Literal IP, plain HTTP: Airlock's own 403, nothing forwarded.
    let v = get("ip_http");
    assert_eq!(v["rc"], 0, "ip_http: {v}");
    assert!(text(&v, "out").ends_with("\n403"), "ip_http: {v}");
    assert!(
        text(&v, "out")
            .to_ascii_lowercase()
            .contains("x-airlock-decision: deny"),
        "ip_http: {v}"
    );
    // Literal IP over TLS: a TLS failure or Airlock's 403, never an answer from elsewhere.
    let v = get("ip_https");
    let o = text(&v, "out");
    assert!(
        v["rc"] != 0 || (o.ends_with("\n403") && o.to_ascii_lowercase().contains("x-airlock")),
        "ip_https: {v}"
    );
    // The host's own address: the proxy refuses, the host listener hears nothing.
    if host_ip.is_some() {
        let v = get("host_ip_tcp");
        let reply = text(&v, "reply");
        assert!(
            reply.is_empty() || reply.starts_with("HTTP/1.1 403"),
            "host_ip_tcp: {v}"
        );
    }

    // UDP: no answer inside, nothing on the host socket.
    for k in ["udp_public", "udp_host_loopback", "udp_host_ip", "ipv6_udp"] {
        if k == "udp_host_ip" && host_ip.is_none() {
            continue;
        }
        let v = get(k);
        assert!(v.get("reply").is_none(), "{k}: {v}");
        assert!(v.get("error").is_some(), "{k}: {v}");
    }

    // Unlisted names resolve only to synthetic addresses (198.18.0.0/15),
    // which lead nowhere but to the proxy's refusal.
    for k in ["dns_unlisted.example", "dns_example.com"] {
        let v = get(k);
        let resolved = v["resolved"]
            .as_array()
            .unwrap_or_else(|| panic!("{k}: {v}"));
        assert!(!resolved.is_empty(), "{k}: {v}");
        for ip in resolved {
            let ip: std::net::Ipv4Addr = ip.as_str().unwrap().parse().unwrap();
            let [a, b, ..] = ip.octets();
            assert!(a == 198 && (b == 18 || b == 19), "{k}: {v}");
        }
    }
    assert!(
        out.stderr.contains("no rule allows unlisted.example"),
        "{out:?}"
    );

    // The host's loopback is not the sandbox's.
    let v = get("host_loopback_tcp");
    assert_eq!(v["connected"], false, "host_loopback_tcp: {v}");
    assert!(
        text(&v, "error").contains("ConnectionRefused"),
        "host_loopback_tcp: {v}"
    );

    // The proxy's own port: closed without an HTTP answer.
    let v = get("proxy_port");
    assert!(
        !text(&v, "reply").contains("HTTP/"),
        "the proxy answered a connection to its own port: {v}"
    );

    // IPv6 goes nowhere.
    for k in ["ipv6_global", "ipv6_loopback"] {
        let v = get(k);
        assert_eq!(v["connected"], false, "{k}: {v}");
    }

    // Secrets in the home: not readable, the marker never shows.
    for k in ["ssh_key", "home_file"] {
        let v = get(k);
        assert!(!v.to_string().contains(&marker), "{k}: {v}");
        assert_eq!(v["read"], false, "{k}: {v}");
    }
    let v = get("home_list");
    assert!(
        v["entries"].as_array().is_some_and(|e| e.is_empty()) || v.get("error").is_some(),
        "home_list: {v}"
    );

    // Writes outside the workspace fail; /tmp is private.
    for path in [
        format!("/etc/airlock-test-{marker}"),
        format!("/usr/airlock-test-{marker}"),
        format!("/var/tmp/airlock-test-{marker}"),
        format!("{}/airlock-test-{marker}", outside.path().display()),
    ] {
        let v = get(&format!("write {path}"));
        assert_eq!(v["written"], false, "write {path}: {v}");
        assert!(!Path::new(&path).exists(), "{path} appeared on the host");
    }
    // Positive control: /var/tmp is visible (read-only), so the failures above are real refusals.
    assert_eq!(get("outside_visible")["content"], marker.as_str());
    assert_eq!(get("write_tmp")["written"], true);
    assert!(
        !Path::new(&format!("/tmp/airlock-test-{marker}")).exists(),
        "the sandbox's /tmp is the host's"
    );
    assert_eq!(get("write_workspace")["written"], true);
    assert_eq!(
        std::fs::read_to_string(ws.join("in-workspace.txt")).unwrap(),
        marker
    );

    // No mounts, no new namespaces, no entering the host's. The documented
    // difference under gVisor (docs/isolation.md): `unshare` reaches
    // gVisor's kernel, which makes user and network namespaces of its own,
    // nothing of the host's (the host's listeners below still hear nothing).
    let gvisor = isolation.contains(&"gvisor");
    for k in ["mount", "unshare_r", "unshare_n", "nsenter"] {
        let v = get(k);
        if gvisor && k.starts_with("unshare") {
            continue;
        }
        assert!(v["rc"] != 0, "{k} succeeded: {v}");
    }

    // Host processes are invisible and cannot be signalled.
    let v = get("kill_host");
    assert!(v["rc"] != 0, "kill -0 <host pid> succeeded: {v}");
    let v = get("os_kill_host");
    assert_eq!(v["signalled"], false, "{v}");
    let v = get("proc");
    let pids = v["pids"].as_array().unwrap();
    assert!(pids.len() <= 6, "too many processes visible: {v}");
    assert!(
        pids.iter().all(|p| p.as_u64().unwrap() < 100),
        "host pids visible: {v}"
    );
    assert!(!v.to_string().contains("sleep 60"), "{v}");
    // Nor does any command line it can read show airlock's own arguments.
    for cmdline in v["cmdlines"].as_array().unwrap() {
        let cmdline = cmdline.as_str().unwrap();
        assert!(
            !cmdline.contains("--ca-dir") && !cmdline.contains("--audit-db"),
            "airlock's command line is visible: {v}"
        );
    }
    // PID 1 inside is a fork of airlock (holding its memory and environment).
    // Under gVisor PID 1 is the command itself, in gVisor's kernel: what it
    // reads there is its own clean environment, nothing of airlock's.
    for k in ["init_environ", "init_mem"] {
        let v = get(k);
        if gvisor {
            let seen = v.to_string();
            let db = f.audit_db().display().to_string();
            assert!(!seen.contains(&marker) && !seen.contains(&db), "{k}: {v}");
            continue;
        }
        assert_eq!(v["read"], false, "{k}: {v}");
    }

    // The CA key and the audit database are hidden.
    for k in ["ca_key", "audit_db"] {
        let v = get(k);
        assert_eq!(v["read"], false, "{k}: {v}");
    }
    assert!(
        get("ca_dir")["entries"]
            .as_array()
            .is_some_and(|e| e.is_empty()),
        "{}",
        get("ca_dir")
    );
    // The grant itself works (so the hide is what keeps the key out).
    assert_eq!(get("ca_parent")["entries"], serde_json::json!(["ca"]));

    // And nothing reached anything on the host.
    assert_eq!(accepted(&tcp), None, "the host TCP listener was reached");
    if let Some(l) = &tcp6 {
        assert_eq!(accepted(l), None, "the host [::1] listener was reached");
    }
    assert_eq!(received(&udp), None, "a UDP datagram reached the host");
    assert_eq!(
        f.upstream.hits(),
        0,
        "a request reached the upstream: {:?}",
        f.upstream.targets()
    );
    assert_eq!(f.upstream.connections(), 0);
}

// ---------------------------------------------------------------------------
// 2. Many sessions at once.

#[tokio::test]
async fn twenty_sessions_in_parallel() {
    let f = Fixture::new().await;
    let port = f.port();
    let started = Instant::now();
    let runs = (0..20).map(|i| {
        let ws = f.workspace(&format!("ws-{i}"));
        let mut args = f.run_args(&ws);
        let script = format!(
            "curl -sS -m 30 https://api.test:{port}/echo?session={i}-x > out.txt && echo mine-{i} > mine-{i}.txt && ls -A . && echo parent: && ls -A ..",
        );
        args.extend(os(&["--", "sh", "-c", &script]));
        async move { (i, ws, run_program(AIRLOCK, args, &[]).await) }
    });
    let results = futures_util::future::join_all(runs).await;
    eprintln!("20 parallel sessions took {:?}", started.elapsed());
    for (i, ws, out) in &results {
        assert_eq!(out.status, 0, "session {i}: {out:?}");
        assert_eq!(
            out.stdout,
            format!("mine-{i}.txt\nout.txt\nparent:\nws-{i}\n"),
            "session {i} saw more than its own workspace: {out:?}"
        );
        let body = std::fs::read_to_string(ws.join("out.txt")).unwrap();
        assert_eq!(body, format!("upstream saw /echo?session={i}-x\n"));
        let files: BTreeSet<String> = std::fs::read_dir(ws)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            files,
            BTreeSet::from([format!("mine-{i}.txt"), "out.txt".to_owned()])
        );
    }
    let mut seen = f.upstream.targets();
    seen.sort();
    let mut expected: Vec<String> = (0..20).map(|i| format!("/echo?session={i}-x")).collect();
    expected.sort();
    assert_eq!(
        seen, expected,
        "the upstream got exactly one request per session"
    );
    let sessions = run_program(
        AIRLOCK,
        vec![
            "audit".into(),
            "sessions".into(),
            "--json".into(),
            "--audit-db".into(),
            f.audit_db().into(),
        ],
        &[],
    )
    .await;
    let sessions: serde_json::Value = serde_json::from_str(&sessions.stdout).unwrap();
    assert_eq!(sessions.as_array().map(Vec::len), Some(20), "{sessions}");
}

// ---------------------------------------------------------------------------
// 3. kill -9 of airlock.

/// Every directory under an `airlock` cgroup parent, in every hierarchy.
fn airlock_cgroups() -> BTreeSet<PathBuf> {
    fn walk(dir: &Path, depth: usize, out: &mut BTreeSet<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                continue;
            }
            let path = e.path();
            if e.file_name() == "airlock" {
                for c in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                    if c.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                        out.insert(c.path());
                    }
                }
            } else if depth > 0 {
                walk(&path, depth - 1, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(Path::new("/sys/fs/cgroup"), 4, &mut out);
    out
}

/// Host pids whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == std::process::id() as i32 {
            continue;
        }
        if let Ok(raw) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            if cmd.contains(needle) {
                found.push((pid, cmd));
            }
        }
    }
    found
}

/// The host's nftables rules, without counters (`nft -s`: they change as
/// other traffic flows) and without the tables podman's netavark manages
/// (iptables-nft's `ip nat`/`ip filter` with NETAVARK chains): the container
/// tests, which nextest runs in parallel with this one, add and remove
/// per-container chains there. Airlock never touches those tables.
fn nft_ruleset() -> String {
    let out = std::process::Command::new("nft")
        .args(["-s", "list", "ruleset"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    without_netavark_tables(&String::from_utf8_lossy(&out.stdout))
}

/// `nft list ruleset` output less every top-level `table ... { ... }` block
/// that mentions NETAVARK.
fn without_netavark_tables(ruleset: &str) -> String {
    let mut kept = String::new();
    let mut table = String::new();
    for line in ruleset.lines() {
        if line.starts_with("table ") || !table.is_empty() {
            table.push_str(line);
            table.push('\n');
            if line == "}" {
                if !table.contains("NETAVARK") {
                    kept.push_str(&table);
                }
                table.clear();
            }
        } else {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept.push_str(&table);
    kept
}

/// Whether a line of `ip link`/`ip route` output is podman's: its bridge
/// (`podman0`, created with the first container and removed with the last)
/// and the host end of each container's veth pair.
fn is_podmans(line: &str) -> bool {
    line.contains("podman") || line.trim_start().starts_with("veth") || line.contains("dev veth")
}

/// The host's interfaces (names and state, not counters) and routes, less
/// podman's (see [`is_podmans`]).
fn host_links_and_routes() -> String {
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "ip -o link show | cut -d' ' -f2,3; ip route show table all",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !is_podmans(l))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The host's mounts, less those other tests running in parallel make and
/// remove (tmpfs under their temp dirs, `ip netns` bind mounts, and the
/// root filesystems and /dev/shm of the container tests' podman containers).
fn host_mounts() -> String {
    std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .filter(|l| {
            let mount_point = l.split(' ').nth(1).unwrap_or("");
            !mount_point.starts_with("/tmp/.tmp")
                && !mount_point.starts_with("/run/netns")
                && !mount_point.starts_with("/var/lib/containers/")
                && !mount_point.starts_with("/run/containers/")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Kills (SIGKILL) and reaps a child when dropped, so a failing test leaves nothing running.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// Multi-threaded: the upstream keeps serving while this test blocks in sleeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_leaves_nothing_behind() {
    let f = Fixture::new().await;
    let ws = f.workspace("ws");
    // Digits only, so `sleep` itself carries it (GNU sleep adds its arguments).
    let marker = format!(
        "0.{}{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let nft_before = nft_ruleset();
    let mounts_before = host_mounts();
    let net_before = host_links_and_routes();
    let mut args = f.run_args(&ws);
    // Limits, so that there are cgroups to leave behind.
    args.extend(os(&["--memory", "256M", "--pids", "64", "--cpus", "1"]));
    args.extend(os(&[
        "--",
        "sh",
        "-c",
        &format!(
            "echo started; curl -sS -o /dev/null https://api.test:{}/echo/before-kill; sleep 300 {marker}; echo never",
            f.port()
        ),
    ]));
    let mut child = KillOnDrop(
        std::process::Command::new(AIRLOCK)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let airlock_pid = child.0.id();
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line == "started" => break,
            Ok(_) => {}
            Err(_) => panic!("airlock run never printed 'started'"),
        }
    }
    // Wait until the sandboxed `sleep` is running (the curl went through first).
    let running = Instant::now() + Duration::from_secs(30);
    while !processes_with(&marker)
        .iter()
        .any(|(_, c)| c.starts_with("sleep 300"))
    {
        assert!(
            Instant::now() < running,
            "sleep never started: {:?}",
            processes_with(&marker)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let procs = processes_with(&marker);
    // airlock, the supervisor, init, sh, sleep.
    assert!(procs.len() >= 4, "{procs:?}");
    let prefix = format!("{airlock_pid}-");
    let ours = |set: &BTreeSet<PathBuf>| -> Vec<PathBuf> {
        set.iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .cloned()
            .collect()
    };
    let cgroups_running = ours(&airlock_cgroups());
    assert!(
        !cgroups_running.is_empty(),
        "no cgroup found for airlock pid {airlock_pid}"
    );
    assert_eq!(f.upstream.hits(), 1);

    let killed_at = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(airlock_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.0.wait();
    let mut left;
    loop {
        left = (processes_with(&marker), ours(&airlock_cgroups()));
        if (left.0.is_empty() && left.1.is_empty()) || killed_at.elapsed() > Duration::from_secs(5)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "kill -9: sandbox gone after {:?} (cgroups while running: {cgroups_running:?})",
        killed_at.elapsed()
    );
    assert!(
        left.0.is_empty(),
        "processes survived kill -9 of airlock: {:?}",
        left.0
    );
    assert!(
        left.1.is_empty(),
        "cgroups survived kill -9 of airlock: {:?}",
        left.1
    );
    assert_eq!(nft_ruleset(), nft_before, "the host's nftables changed");
    assert_eq!(host_mounts(), mounts_before, "the host's mounts changed");
    assert_eq!(
        host_links_and_routes(),
        net_before,
        "the host's interfaces or routes changed"
    );

    // The audit trail is incomplete, not broken.
    let mut verify_args: Vec<OsString> = os(&["audit", "verify", "--all", "--audit-db"]);
    verify_args.push(f.audit_db().into());
    verify_args.push("--audit-key".into());
    verify_args.push(f.audit_key().into());
    let verify = run_program(AIRLOCK, verify_args, &[]).await;
    eprintln!("audit verify after kill -9: {verify:?}");
    assert!(!verify.stdout.contains("TAMPERED"), "{verify:?}");
    assert!(
        verify.status == 0 || (verify.status == 1 && verify.stdout.contains("INCOMPLETE")),
        "{verify:?}"
    );
    assert!(
        verify
            .stdout
            .contains("unsigned tail event(s), session never finished")
            || verify.stdout.contains(": intact:"),
        "{verify:?}"
    );
}

// ---------------------------------------------------------------------------
// 4. An ordinary user.

const TEST_USER: &str = "airlock-run-test";

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

fn sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test]
async fn unprivileged_user_runs_sandboxes_too() {
    let (Some(runuser), Some(useradd)) = (which("runuser"), which("useradd")) else {
        skip_or_fail("runuser or useradd is missing");
        return;
    };
    if sysctl("/proc/sys/user/max_user_namespaces") == Some(0)
        || sysctl("/proc/sys/kernel/unprivileged_userns_clone") == Some(0)
        || sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1)
    {
        skip_or_fail("unprivileged user namespaces are disabled");
        return;
    }
    let add = std::process::Command::new(&useradd)
        .args(["-m", TEST_USER])
        .output()
        .unwrap();
    assert!(
        add.status.success() || String::from_utf8_lossy(&add.stderr).contains("already exists"),
        "useradd: {add:?}"
    );
    let home = format!("/home/{TEST_USER}");

    let f = Fixture::new().await;
    // Everything the user needs lives in one world-accessible directory,
    // including a copy of the binary (the shared target dir stays untouched).
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o777);
    let airlock = dir.path().join("airlock");
    std::fs::copy(AIRLOCK, &airlock).unwrap();
    chmod(&airlock, 0o755);
    let policy = dir.path().join("policy.toml");
    std::fs::copy(f.policy(), &policy).unwrap();
    chmod(&policy, 0o644);
    let ca = dir.path().join("upstream-ca.pem");
    std::fs::copy(&f.pki.ca_pem, &ca).unwrap();
    chmod(&ca, 0o644);
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    chmod(&ws, 0o777);
    let audit = dir.path().join("audit");
    std::fs::create_dir(&audit).unwrap();
    chmod(&audit, 0o777);

    let port = f.port();
    // The other clients, as files in the workspace (the only place both the
    // user and the sandbox can see: /tmp is private inside).
    std::fs::write(ws.join("client.py"), UNPRIVILEGED_PYTHON).unwrap();
    std::fs::write(ws.join("client.js"), UNPRIVILEGED_NODE).unwrap();
    let base = format!("https://api.test:{port}");
    let script = format!(
        "id -u; curl -sS -m 20 -o /dev/null -w '%{{http_code}}\\n' {base}/echo/unprivileged; \
         curl -sS -m 20 -o /dev/null -w '%{{http_code}}\\n' {base}/admin; \
         /usr/bin/python3 client.py {base}; node client.js {base}; \
         git ls-remote {base}/echo/git >/dev/null 2>&1; \
         /usr/bin/python3 -m pip download -q --no-deps --no-cache-dir --disable-pip-version-check \
           --retries 0 -d /tmp/dl --index-url {base}/echo/pip/ nothing >/dev/null 2>&1; \
         grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/self/status; \
         touch ws-file; touch /etc/airlock-unpriv 2>/dev/null && echo etc-writable; true"
    );
    let mut args: Vec<OsString> = vec![
        "-u".into(),
        TEST_USER.into(),
        "--".into(),
        "env".into(),
        format!("HOME={home}").into(),
        "PATH=/usr/local/bin:/usr/bin:/bin".into(),
        airlock.into(),
        "run".into(),
        "--policy".into(),
        policy.into(),
        "--workspace".into(),
        ws.clone().into(),
        "--upstream-ca".into(),
        ca.into(),
    ];
    args.extend(os(&["--resolve", "api.test:127.0.0.1", "--audit-db"]));
    args.push(audit.join("audit.db").into());
    args.push("--audit-key".into());
    args.push(audit.join("audit.key").into());
    args.extend(os(&[
        "--memory",
        "1G",
        "--timeout",
        "60s",
        "--",
        "sh",
        "-c",
    ]));
    args.push(script.into());
    let out = run_program(runuser.to_str().unwrap(), args, &[]).await;
    eprintln!("unprivileged session took {:?}", out.elapsed);
    assert_eq!(out.status, 0, "{out:?}");
    let uid = std::process::Command::new("id")
        .args(["-u", TEST_USER])
        .output()
        .unwrap();
    let uid = String::from_utf8_lossy(&uid.stdout).trim().to_owned();
    assert_eq!(
        out.stdout,
        format!(
            "{uid}\n200\n403\nurllib 200\nrequests 200\nurllib denied 403 deny\nnode 200\n\
             CapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n"
        ),
        "{out:?}"
    );
    assert!(
        out.stderr.contains(
            "cgroups unavailable as an unprivileged user: --memory enforced with RLIMIT_AS instead"
        ),
        "{out:?}"
    );
    assert!(
        out.stderr.contains("airlock: refused GET https://api.test"),
        "{out:?}"
    );
    // The file written inside belongs to the user, not to root.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(ws.join("ws-file")).unwrap();
    assert_eq!(meta.uid().to_string(), uid);
    // Every client trusted the session CA and went through the proxy; git and
    // pip got this upstream's plain-text answers (not a repository, not an
    // index), which is enough to show that their requests arrived.
    let seen = f.upstream.targets();
    assert_eq!(
        seen[..4],
        [
            "/echo/unprivileged",
            "/echo/py-urllib",
            "/echo/py-requests",
            "/echo/node"
        ],
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|p| p.starts_with("/echo/git/info/refs?service=git-upload-pack")),
        "{seen:?}"
    );
    assert!(seen.iter().any(|p| p == "/echo/pip/nothing/"), "{seen:?}");
}

const UNPRIVILEGED_PYTHON: &str = r#"
import sys, urllib.error, urllib.request
import requests
base = sys.argv[1]
print("urllib", urllib.request.urlopen(base + "/echo/py-urllib", timeout=20).status)
print("requests", requests.get(base + "/echo/py-requests", timeout=20).status_code)
try:
    urllib.request.urlopen(base + "/admin", timeout=20)
except urllib.error.HTTPError as e:
    print("urllib denied", e.code, e.headers["x-airlock-decision"])
"#;

const UNPRIVILEGED_NODE: &str = r#"
require("https").get(process.argv[2] + "/echo/node", (r) => {
  r.resume();
  r.on("end", () => console.log("node", r.statusCode));
}).on("error", (e) => { console.error(e); process.exit(1); });
"#;

// ---------------------------------------------------------------------------
// 5. Limits and exit statuses.

async fn run_simple(extra: &[&str], command: &[&str]) -> Output {
    let ws = tempfile::tempdir().unwrap();
    let mut args: Vec<OsString> = os(&["run", "--no-audit", "--workspace"]);
    args.push(ws.path().into());
    args.extend(os(extra));
    args.push("--".into());
    args.extend(os(command));
    run_program(AIRLOCK, args, &[]).await
}

#[tokio::test]
async fn limits_and_exit_status() {
    let oom = "l = []\nwhile True:\n    l.append(bytearray(16 << 20))\n";
    let oom_cmd = [PY, "-c", oom];
    let (timeout, memory, seven, term, bad_memory, missing, bad_workspace) = tokio::join!(
        run_simple(&["--timeout", "1s"], &["sleep", "30"]),
        run_simple(&["--memory", "64M"], &oom_cmd),
        run_simple(&[], &["sh", "-c", "exit 7"]),
        run_simple(&[], &["sh", "-c", "kill -TERM $$"]),
        run_simple(&["--memory", "lots"], &["true"]),
        run_simple(&[], &["/nonexistent"]),
        run_program(
            AIRLOCK,
            os(&[
                "run",
                "--no-audit",
                "--workspace",
                "/does/not/exist",
                "--",
                "true"
            ]),
            &[]
        ),
    );

    assert_eq!(timeout.status, 124, "{timeout:?}");
    assert!(timeout.stderr.contains("time limit"), "{timeout:?}");
    assert!(timeout.elapsed < Duration::from_secs(10), "{timeout:?}");

    assert_eq!(memory.status, 137, "{memory:?}");
    assert!(
        memory
            .stderr
            .contains("airlock: killed: memory limit (--memory 64M) exceeded"),
        "{memory:?}"
    );

    assert_eq!(seven.status, 7, "{seven:?}");
    assert_eq!(term.status, 143, "{term:?}");

    assert_eq!(bad_memory.status, 125, "{bad_memory:?}");
    let first = bad_memory.stderr.lines().next().unwrap_or("");
    assert!(
        first.starts_with("airlock: ") && first.contains("lots") && first.contains("--memory"),
        "{bad_memory:?}"
    );

    assert_eq!(missing.status, 127, "{missing:?}");
    assert!(missing.stderr.contains("/nonexistent"), "{missing:?}");

    assert_eq!(bad_workspace.status, 125, "{bad_workspace:?}");
    assert_eq!(bad_workspace.stderr.lines().count(), 1, "{bad_workspace:?}");
    assert!(
        bad_workspace.stderr.contains("/does/not/exist")
            && bad_workspace.stderr.contains("no such"),
        "{bad_workspace:?}"
    );
    eprintln!("timeout {:?}, oom {:?}", timeout.elapsed, memory.elapsed);
}

// ---------------------------------------------------------------------------
// Known gaps, found while writing the tests above. They assert the secure
// behaviour and fail today; run with `--run-ignored all` to see them.

/// A host daemon listening on a Unix socket anywhere the sandbox can see
/// (outside the fresh /run and /tmp) would be reachable: connect(2) on a
/// socket needs write permission on the inode, which a read-only mount does
/// not take away. So the sandbox cannot create AF_UNIX sockets at all unless
/// `--allow-unix-sockets` is given; socketpair(2) keeps working.
#[tokio::test]
async fn host_unix_sockets_are_out_of_reach() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let sock = dir.path().join("daemon.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let ws = tempfile::tempdir().unwrap();
    let script = format!(
        "import socket\ntry:\n    s = socket.socket(socket.AF_UNIX)\n    s.settimeout(5)\n    s.connect({:?})\n    s.sendall(b'from the sandbox')\n    print('connected')\nexcept OSError as e:\n    print('refused', e)\na, b = socket.socketpair()\na.sendall(b'pair')\nprint('socketpair', b.recv(4).decode())\n",
        sock.to_str().unwrap()
    );
    let mut args: Vec<OsString> = os(&["run", "--no-audit", "--workspace"]);
    args.push(ws.path().into());
    args.extend(os(&["--timeout", "30s", "--", PY, "-c", &script]));
    let out = run_program(AIRLOCK, args, &[]).await;
    let reached = listener.accept().is_ok();
    assert!(
        !reached && out.stdout.starts_with("refused"),
        "the sandbox reached a host Unix socket at {}: {out:?}",
        sock.display()
    );
    assert!(out.stdout.contains("socketpair pair"), "{out:?}");

    // Opting in lets a program use Unix sockets of its own (in its private /tmp).
    let local = "import socket\nsrv = socket.socket(socket.AF_UNIX)\nsrv.bind('/tmp/s')\nsrv.listen(1)\nc = socket.socket(socket.AF_UNIX)\nc.connect('/tmp/s')\nprint('local unix ok')\n";
    let mut args: Vec<OsString> = os(&["run", "--no-audit", "--allow-unix-sockets", "--workspace"]);
    args.push(ws.path().into());
    args.extend(os(&["--timeout", "30s", "--", PY, "-c", local]));
    let out = run_program(AIRLOCK, args, &[]).await;
    assert_eq!(out.stdout, "local unix ok\n", "{out:?}");
}

/// As root, the usual host secrets are hidden from the uid-0 command.
#[tokio::test]
async fn root_only_host_secrets_are_hidden() {
    if !nix::unistd::geteuid().is_root() {
        skip_or_fail("only meaningful when airlock runs as root");
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut args: Vec<OsString> = os(&["run", "--no-audit", "--workspace"]);
    args.push(ws.path().into());
    args.extend(os(&[
        "--timeout",
        "30s",
        "--",
        "sh",
        "-c",
        "cat /etc/shadow; ls /etc/ssh | wc -l",
    ]));
    let out = run_program(AIRLOCK, args, &[]).await;
    assert!(!out.stdout.contains("root:"), "{out:?}");
}

/// When airlock runs as root the command is uid 0 (without capabilities),
/// so it still owns every root-owned file of the host it can see: mode 0600
/// secrets outside the hidden list (e.g. /etc/shadow, TLS and SSH host keys)
/// are readable, and an allowed upstream is then enough to send them out.
#[tokio::test]
#[ignore = "known limitation: as root without --user, the uid-0 command can read root-owned files outside the hidden list; use --user"]
async fn root_owned_host_secrets_are_not_readable() {
    if !nix::unistd::geteuid().is_root() {
        skip_or_fail("only meaningful when airlock runs as root");
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let secret = dir.path().join("server.key");
    let marker = unique("root-secret-");
    std::fs::write(&secret, &marker).unwrap();
    chmod(&secret, 0o600);
    chmod(dir.path(), 0o755);
    let ws = tempfile::tempdir().unwrap();
    let mut args: Vec<OsString> = os(&["run", "--no-audit", "--workspace"]);
    args.push(ws.path().into());
    args.extend(os(&["--timeout", "30s", "--", "cat"]));
    args.push(secret.clone().into());
    let out = run_program(AIRLOCK, args, &[]).await;
    assert!(
        out.status != 0 && !out.stdout.contains(&marker),
        "the sandbox read the root-only file {}: {out:?}",
        secret.display()
    );
}

/// Where unprivileged user namespaces are switched off, an ordinary user's
/// `airlock run` says so in one line naming the sysctl (exit 125) instead of
/// failing somewhere inside. The sysctl is faked for airlock alone: a file
/// bind-mounted over it in a mount namespace of its own.
#[tokio::test]
async fn disabled_user_namespaces_are_named_with_their_sysctl() {
    if !nix::unistd::geteuid().is_root() || which("setpriv").is_none() {
        skip_or_fail("needs root (to fake the sysctl) and setpriv");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    let airlock = dir.path().join("airlock");
    std::fs::copy(AIRLOCK, &airlock).unwrap();
    chmod(&airlock, 0o755);
    let fake = dir.path().join("max_user_namespaces");
    std::fs::write(&fake, "0\n").unwrap();
    chmod(&fake, 0o644);
    let script = format!(
        "mount --bind {fake} /proc/sys/user/max_user_namespaces && \
         exec setpriv --reuid=65534 --regid=65534 --clear-groups {airlock} run --no-audit -- true",
        fake = fake.display(),
        airlock = airlock.display(),
    );
    let out = run_program(
        "unshare",
        os(&["-m", "--propagation", "private", "sh", "-c", &script]),
        &[],
    )
    .await;
    assert_eq!(out.status, 125, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(
        out.stderr
            .contains("unprivileged user namespaces are disabled (user.max_user_namespaces=0)")
            && out.stderr.contains("or run as root"),
        "{out:?}"
    );
}
