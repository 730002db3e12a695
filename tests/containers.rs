//! `airlock sidecar` against real containers: podman (Debian's 4.3, with
//! runc and the cgroupfs cgroup manager) runs them on its real bridge
//! network, from images built here without a registry
//! (scripts/build-test-images). Covers the three ways docs/sidecar.md
//! deploys the sidecar: attached from the host to a running container
//! (`--pid`), the Airlock image with an app in its network namespace (the
//! compose pattern), and the Kubernetes pod manifest (`podman kube play`).
//!
//! The upstream (`api.test`) and bait listeners live on the host, bound to
//! the bridge's gateway address, so they are reachable from the containers
//! and from nowhere else. Every container, pod and volume has a name unique
//! to this process and test, and is removed on drop, even on failure.
//! Podman missing is a failure, not a skip: scripts/setup installs it.
//! The podman plumbing is `airlock_test_support::podman`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use airlock_test_support::audit_cli::audit_ok;
use airlock_test_support::configmap::ConfigMapDir;
use airlock_test_support::pki::TestPki;
use airlock_test_support::podman::{
    self, Container, Images, Net, Removed, confinement, listen_at, nsenter_ok, pod_ok, podman,
    remove_on_drop, ulimits, unique,
};
use airlock_test_support::proxy::init_ca;
use airlock_test_support::server::{self, bait};
use airlock_test_support::sidecar::Sidecar;
use airlock_test_support::upstream::Upstream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();
const REPO: &str = env!("CARGO_MANIFEST_DIR");
const TABLE: &str = "airlock_sidecar_15001";

fn images() -> &'static Images {
    podman::images(REPO, AIRLOCK)
}

/// The TLS upstream `api.test`, reachable at the gateway: bytes relayed to
/// a test upstream on the host's loopback, which counts the requests.
async fn upstream_at(gw: &str, pki: &TestPki) -> (Upstream, u16) {
    let upstream = Upstream::start(Some(pki.server_config(&["api.test", "evil.test"]))).await;
    let listener = listen_at(gw);
    let port = listener.local_addr().unwrap().port();
    let to = upstream.addr;
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut out) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
        }
    });
    (upstream, port)
}

/// A bait on `listener` (see [`bait`]) and its port.
fn tcp_bait(listener: tokio::net::TcpListener) -> (u16, Arc<AtomicUsize>) {
    let port = listener.local_addr().unwrap().port();
    (port, bait(listener))
}

/// A UDP bait (see [`server::udp_bait`]) at `ip`:`port` (0: any), and its port.
fn udp_bait(ip: &str, port: u16) -> (u16, Arc<AtomicUsize>) {
    let socket = std::net::UdpSocket::bind((ip, port)).unwrap();
    let port = socket.local_addr().unwrap().port();
    (port, server::udp_bait(socket))
}

/// The host end of podman's bridge: its IPv6 link-local address, for an
/// IPv6 bait the container can reach without the sidecar.
fn bridge_link_local(bridge: &str) -> Option<(String, u32)> {
    // The kernel adds it a moment after the first container brings the
    // bridge up, and it is usable once duplicate address detection is done.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new("ip")
            .args(["-6", "-o", "addr", "show", "dev", bridge, "scope", "link"])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let addr = text
            .split_whitespace()
            .skip_while(|w| *w != "inet6")
            .nth(1)
            .and_then(|a| a.split('/').next());
        if let Some(addr) = addr.filter(|_| !text.contains("tentative")) {
            let index = nix::net::if_::if_nametoindex(bridge).ok()?;
            return Some((addr.to_owned(), index));
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn policy(port: u16) -> String {
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

/// What a guarded-container test shares: a CA directory for the sidecar,
/// the bundle the app trusts, the policy, the audit database.
struct Host {
    dir: tempfile::TempDir,
    pki: TestPki,
}

impl Host {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let host = Self {
            dir: tempfile::tempdir().unwrap(),
            pki: TestPki::new(),
        };
        std::fs::set_permissions(host.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        init_ca(AIRLOCK, &host.dir.path().join("ca"));
        // The app trusts the sidecar's CA and, for the unguarded control
        // requests, the upstream's own.
        let public = host.public_ca_dir();
        std::fs::create_dir(&public).unwrap();
        let bundle = [
            std::fs::read_to_string(host.dir.path().join("ca/ca.pem")).unwrap(),
            std::fs::read_to_string(&host.pki.ca_pem).unwrap(),
        ]
        .concat();
        std::fs::write(public.join("ca.pem"), bundle).unwrap();
        std::fs::set_permissions(
            public.join("ca.pem"),
            std::fs::Permissions::from_mode(0o444),
        )
        .unwrap();
        host
    }

    fn public_ca_dir(&self) -> PathBuf {
        self.dir.path().join("ca-public")
    }

    fn policy_file(&self) -> PathBuf {
        self.dir.path().join("policy.toml")
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("audit/audit.db")
    }

    /// The app container: an ordinary uid, no capabilities, read-only root,
    /// no-new-privileges, the CA through a read-only volume.
    fn app(&self, tag: &str, net: &Net, extra: &[&str], argv: &[&str]) -> Container {
        self.app_under(podman::RUNC, tag, net, extra, argv)
    }

    /// [`Host::app`] under the OCI runtime `runtime`.
    fn app_under(
        &self,
        runtime: podman::Runtime,
        tag: &str,
        net: &Net,
        extra: &[&str],
        argv: &[&str],
    ) -> Container {
        let ca = format!("{}:/etc/airlock/ca:ro", self.public_ca_dir().display());
        let mut args = vec![
            "--network",
            &net.name,
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
        ];
        args.extend_from_slice(extra);
        args.push(&images().app);
        args.extend_from_slice(argv);
        Container::run_under(runtime, tag, &args)
    }

    /// `airlock sidecar --pid PID` from the host.
    fn sidecar(&self, pid: &str, gw: &str, extra: &[&str]) -> Sidecar {
        let mut cmd = Command::new(AIRLOCK);
        cmd.args(["sidecar", "--pid", pid, "--policy"])
            .arg(self.policy_file())
            .arg("--ca-dir")
            .arg(self.dir.path().join("ca"))
            .arg("--upstream-ca")
            .arg(&self.pki.ca_pem)
            .args(["--resolve", &format!("api.test:{gw}")])
            .arg("--audit-db")
            .arg(self.db())
            .arg("--audit-key")
            .arg(self.dir.path().join("audit/audit.key"))
            .args(extra);
        Sidecar::spawn(cmd)
    }

    fn audit(&self, args: &[&str]) -> String {
        audit_ok(AIRLOCK, &self.db(), args)
    }
}

/// Waits until the container's eth0 has a usable IPv6 link-local address:
/// a new address stays "tentative" while the kernel checks that it is
/// unique (duplicate address detection, RFC 4862 §5.4), and until then a
/// socket cannot send from it (EADDRNOTAVAIL).
fn wait_for_ipv6_link_local(pid: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let addrs = nsenter_ok(
            pid,
            &[
                "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "link",
            ],
        );
        if addrs.contains("inet6") && !addrs.contains("tentative") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "eth0 has no usable IPv6 link-local address: {addrs:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The probes of everything that must not leave a guarded container:
/// non-DNS UDP, ICMP (a ping socket, which root without capabilities may
/// open), IPv6, and DNS to the container's own resolver and to another
/// one (with `dns`). Prints one line per probe. 192.0.2.53 (TEST-NET-1,
/// RFC 5737) answers nowhere: the probes never need the internet.
fn leak_probe(gw: &str, udp_port: u16, v6: Option<(&str, u32, u16)>, dns: bool) -> String {
    let dns = if dns { "True" } else { "False" };
    let v6 = match v6 {
        Some((addr, scope, port)) => format!("({addr:?}, {port}, 0, {scope})"),
        None => "None".into(),
    };
    format!(
        r#"
import socket, struct
def query(name):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    for part in name.split("."):
        q += bytes([len(part)]) + part.encode()
    return q + b"\0" + struct.pack(">HH", 1, 1)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(2)
try:
    u.sendto(b"hello", ("{gw}", {udp_port}))
    print("udp got", u.recv(100))
except OSError as e:
    print("udp refused", e)
try:
    p = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    p.settimeout(2)
    p.sendto(b"\x08\x00\x00\x00\x00\x01\x00\x01ping", ("{gw}", 0))
    print("icmp got", p.recv(100)[:1])
except OSError as e:
    print("icmp refused", e)
nameserver = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
for server in (nameserver, "192.0.2.53") if {dns} else ():
    d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    d.settimeout(3)
    try:
        d.sendto(query("api.test"), (server, 53))
        a = d.recv(512)
        print("dns", server == nameserver and "own" or server, "rcode", a[3] & 15, "answer", ".".join(str(b) for b in a[-4:]))
    except OSError as e:
        print("dns", server == nameserver and "own" or server, "failed", e)
v6 = {v6}
if v6:
    s6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s6.settimeout(3)
    try:
        s6.connect(v6)
        print("ipv6 got", s6.recv(100))
    except OSError as e:
        print("ipv6 refused", e)
"#
    )
}

/// Behind a ready sidecar: curl and python reach the allowed URL by name,
/// through the sidecar's DNS and CA (two requests upstream); `/admin` is
/// refused by the policy, never forwarded; and neither a literal IP nor the
/// name pinned to the upstream's real address (/etc/hosts, a cached lookup)
/// gets past the capture (the address stands for itself, so it is refused).
async fn only_what_the_policy_allows_passes(
    app: &Container,
    sidecar: &Sidecar,
    port: u16,
    gw: &str,
    bait_port: u16,
) {
    let url = format!("https://api.test:{port}/echo");
    let (code, body, out) = app.curl(&url, &[]).await;
    assert_eq!(code, 200, "{out:?}\n{}", sidecar.log());
    assert!(body.contains("/echo"), "{body}");
    let out = app
        .python(
            &[],
            &format!(
                "import urllib.request; print(urllib.request.urlopen('{url}/py', timeout=10).status)"
            ),
        )
        .await;
    assert_eq!(out.stdout.trim(), "200", "{out:?}\n{}", sidecar.log());
    let (code, body, out) = app
        .curl(&format!("https://api.test:{port}/admin"), &[])
        .await;
    assert_eq!(code, 403, "{out:?}");
    assert!(body.contains("Airlock refused this request."), "{body}");
    let (code, body, out) = app.curl(&format!("http://{gw}:{bait_port}/"), &[]).await;
    assert!(code != 200 && !body.contains("bypassed"), "{out:?}");
    let (code, _, out) = app
        .curl(&format!("https://{gw}:{port}/echo"), &["-k"])
        .await;
    assert_ne!(code, 200, "{out:?}");
    let direct = format!("api.test:{port}:{gw}");
    let (code, _, out) = app.curl(&url, &["--resolve", &direct]).await;
    assert_ne!(code, 200, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_podman_container_is_guarded_from_the_host() {
    let host = Host::new();
    let net = Net::new("guard");
    // Its own resolver: a bait on the bridge, which must never hear a query.
    let app = host.app(
        "guard",
        &net,
        &["--dns", &net.gateway],
        &["sleep", "infinity"],
    );
    let gw = net.gateway.clone();
    let (upstream, port) = upstream_at(&gw, &host.pki).await;
    std::fs::write(host.policy_file(), policy(port)).unwrap();
    let (bait_port, tcp) = tcp_bait(listen_at(&gw));
    let (udp_port, udp) = udp_bait(&gw, 0);
    let (_, dns) = udp_bait(&gw, 53);
    let v6 = bridge_link_local(&net.bridge).map(|(addr, scope)| {
        let std = std::net::TcpListener::bind(SocketAddr::V6(std::net::SocketAddrV6::new(
            addr.parse().unwrap(),
            0,
            0,
            scope,
        )))
        .unwrap();
        std.set_nonblocking(true).unwrap();
        let (port, count) = tcp_bait(tokio::net::TcpListener::from_std(std).unwrap());
        // The container's end of the link: `%eth0` scope.
        (addr, port, count)
    });
    assert!(
        v6.is_some(),
        "{}: no IPv6 link-local address, so the IPv6 check cannot run",
        net.bridge
    );
    let direct = format!("api.test:{port}:{gw}");
    let url = format!("https://api.test:{port}/echo");
    wait_for_ipv6_link_local(&app.pid());
    let eth0 = 2; // the container's eth0 (lo is 1)
    let v6_target = v6.as_ref().map(|(a, p, _)| (a.as_str(), eth0, *p));

    // Unguarded, every path is open: the controls that make the checks
    // below mean something.
    let (code, _, out) = app.curl(&url, &["--resolve", &direct]).await;
    assert_eq!(code, 200, "unguarded: {out:?}");
    let (code, body, out) = app.curl(&format!("http://{gw}:{bait_port}/"), &[]).await;
    assert!(code == 200 && body.contains("bypassed"), "{out:?}");
    let out = app
        .python(
            &["--user", "0"],
            &leak_probe(&gw, udp_port, v6_target, false),
        )
        .await;
    assert!(out.stdout.contains("udp got"), "{out:?}");
    assert!(out.stdout.contains("icmp got"), "{out:?}");
    if v6.is_some() {
        assert!(out.stdout.contains("ipv6 got"), "{out:?}");
    }
    let unguarded_hits = upstream.hits();
    let (tcp0, udp0) = (tcp.load(Ordering::SeqCst), udp.load(Ordering::SeqCst));
    let v6_0 = v6.as_ref().map_or(0, |v| v.2.load(Ordering::SeqCst));
    // Someone else's table in the container's namespace, which a clean stop must keep.
    nsenter_ok(&app.pid(), &["nft", "add", "table", "inet", "foreign_test"]);
    let rules_before = app.ruleset();

    let pid = app.pid();
    let mut sidecar = host.sidecar(&pid, &gw, &[]).ready().await;
    assert!(app.ruleset().contains(TABLE));

    only_what_the_policy_allows_passes(&app, &sidecar, port, &gw, bait_port).await;
    let out = app
        .python(
            &["--user", "0"],
            &leak_probe(&gw, udp_port, v6_target, true),
        )
        .await;
    assert!(out.stdout.contains("udp refused"), "{out:?}");
    assert!(out.stdout.contains("icmp refused"), "{out:?}");
    // Whatever resolver is asked, the sidecar answers (198.18.0.0/15: its synthetic addresses).
    for server in ["own", "192.0.2.53"] {
        assert!(
            out.stdout
                .contains(&format!("dns {server} rcode 0 answer 198.1")),
            "{server}: {out:?}"
        );
    }
    if v6.is_some() {
        assert!(out.stdout.contains("ipv6 refused"), "{out:?}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(tcp.load(Ordering::SeqCst), tcp0, "TCP bypassed the sidecar");
    assert_eq!(udp.load(Ordering::SeqCst), udp0, "UDP bypassed the sidecar");
    assert_eq!(dns.load(Ordering::SeqCst), 0, "DNS bypassed the sidecar");
    if let Some((_, _, count)) = &v6 {
        assert_eq!(
            count.load(Ordering::SeqCst),
            v6_0,
            "IPv6 bypassed the sidecar"
        );
    }
    // curl and python: two allowed requests, nothing else.
    assert_eq!(upstream.hits(), unguarded_hits + 2, "{}", sidecar.log());

    // A clean stop removes Airlock's table and nothing else.
    assert_eq!(sidecar.stop(), Some(0), "{}", sidecar.log());
    assert_eq!(app.ruleset(), rules_before);
    let (code, _, out) = app.curl(&url, &["--resolve", &direct]).await;
    assert_eq!(code, 200, "unguarded again: {out:?}");

    // Audited: one sidecar session with the allowed and refused requests.
    let sessions: serde_json::Value =
        serde_json::from_str(&host.audit(&["sessions", "--json"])).unwrap();
    let session = sessions[0]["id"].as_str().unwrap();
    let timeline = host.audit(&["timeline", session]);
    assert!(timeline.contains("sidecar mode"), "{timeline}");
    assert!(timeline.contains("/admin"), "{timeline}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_the_container_fails_closed_and_a_restart_gives_its_network_back() {
    let host = Host::new();
    let net = Net::new("kill");
    let app = host.app("kill", &net, &[], &["sleep", "infinity"]);
    let gw = net.gateway.clone();
    let (upstream, port) = upstream_at(&gw, &host.pki).await;
    std::fs::write(host.policy_file(), policy(port)).unwrap();
    let url = format!("https://api.test:{port}/echo");
    let direct = format!("api.test:{port}:{gw}");

    let mut sidecar = host.sidecar(&app.pid(), &gw, &[]).ready().await;
    assert_eq!(app.curl(&url, &[]).await.0, 200, "{}", sidecar.log());
    sidecar.signal(nix::sys::signal::Signal::SIGKILL);
    sidecar.wait();
    assert!(app.ruleset().contains(TABLE), "kill -9 leaves the rules");
    for extra in [&[][..], &["--resolve", &direct][..]] {
        let (_, _, out) = app.curl(&url, extra).await;
        assert_ne!(out.status, 0, "{out:?}");
    }
    assert_eq!(upstream.hits(), 1, "traffic bypassed a dead sidecar");

    // A restart makes a new network namespace, without the rules.
    pod_ok(&["restart", "-t", "0", &app.name]);
    assert!(!app.ruleset().contains(TABLE));
    let (code, _, out) = app.curl(&url, &["--resolve", &direct]).await;
    assert_eq!(code, 200, "after a restart: {out:?}");
    assert_eq!(upstream.hits(), 2);
}

/// A DNS server at `gw`:53 that answers every A query with `gw`: the
/// "cluster DNS" a busy app resolves `api.test` with before a sidecar
/// exists. Port 53 on the bridge's address: only this test binds it.
fn dns_at(gw: &str) {
    let std = std::net::UdpSocket::bind((gw, 53)).unwrap();
    std.set_nonblocking(true).unwrap();
    let socket = tokio::net::UdpSocket::from_std(std).unwrap();
    let ip: std::net::Ipv4Addr = gw.parse().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            if n < 12 {
                continue;
            }
            // The question ends after its name's terminating zero + type + class.
            let Some(end) = buf[12..n].iter().position(|b| *b == 0).map(|z| 12 + z + 5) else {
                continue;
            };
            let qtype = u16::from_be_bytes([buf[end - 4], buf[end - 3]]);
            let mut answer = buf[..end.min(n)].to_vec();
            answer[2] = 0x81; // a response, recursion desired
            answer[3] = 0x80; // recursion available, no error
            let count: u8 = u8::from(qtype == 1);
            answer[6..12].copy_from_slice(&[0, count, 0, 0, 0, 0]);
            if count == 1 {
                answer.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4]);
                answer.extend_from_slice(&ip.octets());
            }
            let _ = socket.send_to(&answer, from).await;
        }
    });
}

/// The order people deploy in: the app is already busy when the sidecar
/// attaches. It resolves `api.test` by DNS for every request, as a client
/// of a cluster's DNS does. Every request after the sidecar's rules is
/// either refused (before it is ready) or goes through it and is audited;
/// none reaches the upstream unaudited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_attached_to_a_busy_app_captures_every_request_after_its_rules() {
    let host = Host::new();
    let net = Net::new("busy");
    let gw = net.gateway.clone();
    // The port is known once the upstream listens on the bridge, which
    // exists once the app runs: the app waits for the test to write it.
    let script = r#"
import os, sys, time, urllib.request
while not os.path.exists("/etc/airlock/ca/port"):
    time.sleep(0.05)
port = open("/etc/airlock/ca/port").read()
for n in range(2000):
    try:
        s = urllib.request.urlopen("https://api.test:%s/echo/n%d" % (port, n), timeout=5).status
    except Exception as e:
        s = type(e).__name__ + ":" + str(e).replace(" ", "_")
    print(n, s, flush=True)
    time.sleep(0.05)
"#;
    let busy = host.app("busy", &net, &["--dns", &gw], &["python3", "-c", script]);
    let (upstream, port) = upstream_at(&gw, &host.pki).await;
    dns_at(&gw);
    std::fs::write(host.policy_file(), policy(port)).unwrap();
    std::fs::write(host.public_ca_dir().join("port"), port.to_string()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while upstream.hits() < 5 {
        assert!(
            Instant::now() < deadline,
            "the app never got going: {}",
            busy.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut sidecar = host.sidecar(&busy.pid(), &gw, &[]).ready().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The app stops before the sidecar does: after a clean stop its
    // requests would go direct again, rightly.
    pod_ok(&["stop", "-t", "0", &busy.name]);
    let logs = busy.logs();
    assert_eq!(sidecar.stop(), Some(0), "{}", sidecar.log());

    // Which requests did the sidecar see? Its audit names their paths.
    let sessions: serde_json::Value =
        serde_json::from_str(&host.audit(&["sessions", "--json"])).unwrap();
    let timeline = host.audit(&["timeline", sessions[0]["id"].as_str().unwrap()]);
    let audited = |n: &str| timeline.contains(&format!("/echo/n{n} "));
    let mut first_audited = None;
    for line in logs.lines() {
        let Some((n, status)) = line.split_once(' ') else {
            continue;
        };
        if audited(n) {
            first_audited.get_or_insert(n.parse::<u32>().unwrap());
            assert_eq!(status, "200", "{line}");
        } else if let Some(first) = first_audited {
            // After the first captured request, an unaudited one must have failed.
            assert!(
                status != "200" || n.parse::<u32>().unwrap() < first,
                "request {n} bypassed the sidecar: {logs}\n{timeline}"
            );
        }
    }
    let first = first_audited.unwrap_or_else(|| panic!("nothing captured: {logs}\n{timeline}"));
    assert!(first > 3, "the app was busy before the sidecar: {logs}");
    let ok = logs.lines().filter(|l| l.ends_with(" 200")).count();
    // At most one more: a request in flight when the app was stopped.
    let hits = upstream.hits();
    assert!(
        hits == ok || hits == ok + 1,
        "{hits} hits, {ok} seen: {logs}"
    );
    eprintln!(
        "busy app: {} requests, first captured n{first}, {} failed around the switch",
        logs.lines().count(),
        logs.lines().filter(|l| !l.ends_with(" 200")).count()
    );
}

/// A YAML file of deploy/ as JSON (python3's yaml: PyYAML, python3-yaml in
/// scripts/setup), so the tests run what the file says, not a copy of it.
fn yaml(path: &str) -> serde_json::Value {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
            &format!("{REPO}/{path}"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "reading {path} (needs python3-yaml): {out:?}"
    );
    let docs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    docs[0].clone()
}

/// Writes `value` as YAML (podman's reader; JSON would do for YAML, but
/// podman 4.3 reads it no better).
fn write_yaml(path: &std::path::Path, value: &serde_json::Value) {
    use std::io::Write;
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; yaml.safe_dump(json.load(sys.stdin), open(sys.argv[1], 'w'))",
        ])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(value.to_string().as_bytes())
        .unwrap();
    assert!(
        child.wait().unwrap().success(),
        "writing {}",
        path.display()
    );
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// A named volume, removed on drop.
fn volume(tag: &str) -> (String, Removed) {
    let name = unique(tag);
    pod_ok(&["volume", "create", &name]);
    let rm = remove_on_drop(&["volume", "rm", "-f", &name]);
    (name, rm)
}

/// deploy/docker-compose.yml, run service by service with podman as
/// compose would: `airlock-ca` (twice: a second `up` finds its volumes
/// full), `airlock` with the capabilities, read-only root,
/// no-new-privileges, tmpfs and healthcheck the file declares, and `app` in
/// its network namespace (`network_mode: service:airlock` is
/// `--network container:airlock`), with the CA through the public volume.
/// The file's own commands, capabilities and options are read from it; the
/// test only points the policy at its upstream and adds `--upstream-ca`,
/// `--resolve` and an approval token file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_the_compose_pattern_and_enforces_and_audits_the_app() {
    let compose = yaml("deploy/docker-compose.yml");
    let services = &compose["services"];
    let images = images();
    let size = pod_ok(&["image", "inspect", "-f", "{{.Size}}", &images.airlock]);
    eprintln!("airlock image {}: {size} bytes", images.airlock);

    let host = Host::new();
    let net = Net::new("compose");
    let gw = net.gateway.clone();
    let (ca, _ca_rm) = volume("ca");
    let (public, _public_rm) = volume("ca-public");
    let (audit, _audit_rm) = volume("audit");

    // airlock-ca, as the file says, twice.
    let ca_service = &services["airlock-ca"];
    let entrypoint = strings(&ca_service["entrypoint"]);
    let command = strings(&ca_service["command"]);
    assert_eq!(entrypoint, ["/bin/sh", "-c"]);
    for _ in 0..2 {
        let mut args = vec!["run".to_owned(), "--rm".into()];
        args.extend(ulimits());
        for cap in strings(&ca_service["cap_drop"]) {
            args.extend(["--cap-drop".into(), cap]);
        }
        args.extend([
            "-v".into(),
            format!("{ca}:/var/lib/airlock/ca"),
            "-v".into(),
            format!("{public}:/etc/airlock/ca-public"),
            "--entrypoint".into(),
            "/bin/sh".into(),
            images.airlock.clone(),
            "-c".into(),
            command[0].clone(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        pod_ok(&args);
    }

    // The sidecar.
    let (upstream, port) = upstream_at(&gw, &host.pki).await;
    std::fs::write(host.policy_file(), policy(port)).unwrap();
    let secret = tempfile::tempdir().unwrap();
    let token = format!("tok-{}-0123456789abcdef", std::process::id());
    std::fs::write(secret.path().join("tokens"), format!("ops:{token}\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(secret.path().join("tokens"), mode).unwrap();
    }
    let side = &services["airlock"];
    let mut args: Vec<String> = vec!["--network".into(), net.name.clone()];
    for cap in strings(&side["cap_drop"]) {
        args.extend(["--cap-drop".into(), cap]);
    }
    for cap in strings(&side["cap_add"]) {
        args.extend(["--cap-add".into(), cap]);
    }
    for opt in strings(&side["security_opt"]) {
        args.extend(["--security-opt".into(), opt.replace(":true", "")]);
    }
    assert_eq!(side["read_only"], true);
    // Docker and Kubernetes mount nothing writable on a read-only root;
    // podman would add tmpfs on /run and /tmp unless told not to.
    args.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
    for tmpfs in strings(&side["tmpfs"]) {
        args.extend(["--tmpfs".into(), tmpfs]);
    }
    let health = strings(&side["healthcheck"]["test"]);
    assert_eq!(health[0], "CMD");
    args.extend([
        "--health-cmd".into(),
        serde_json::to_string(&health[1..]).unwrap(),
    ]);
    for v in strings(&side["volumes"]) {
        let (from, rest) = v.split_once(':').unwrap();
        let from = match from {
            "./policy.toml" => host.policy_file().display().to_string(),
            "airlock-ca" => ca.clone(),
            "airlock-audit" => audit.clone(),
            other => panic!("a volume this test does not know: {other}"),
        };
        args.extend(["-v".into(), format!("{from}:{rest}")]);
    }
    args.extend([
        "-v".into(),
        format!(
            "{}:/etc/airlock/upstream-ca.pem:ro",
            host.pki.ca_pem.display()
        ),
        "-v".into(),
        format!("{}:/run/secrets:ro", secret.path().display()),
        images.airlock.clone(),
    ]);
    args.extend(strings(&side["command"]));
    args.extend([
        "--upstream-ca=/etc/airlock/upstream-ca.pem".into(),
        format!("--resolve=api.test:{gw}"),
        "--approval-token-file=/run/secrets/tokens".into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let airlock = Container::run("airlock", &args);
    // depends_on: service_healthy — what compose waits for.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !podman()
        .args(["healthcheck", "run", &airlock.name])
        .output()
        .unwrap()
        .status
        .success()
    {
        let running = pod_ok(&["inspect", "-f", "{{.State.Running}}", &airlock.name]);
        assert!(
            Instant::now() < deadline && running == "true",
            "airlock never healthy: {}",
            airlock.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The app, in airlock's network namespace.
    let app_service = &services["app"];
    assert_eq!(app_service["network_mode"], "service:airlock");
    let mut args: Vec<String> = vec![
        "--network".into(),
        format!("container:{}", airlock.name),
        "--user".into(),
        app_service["user"].as_str().unwrap().into(),
        "--read-only".into(),
        "--read-only-tmpfs=false".into(),
    ];
    for cap in strings(&app_service["cap_drop"]) {
        args.extend(["--cap-drop".into(), cap]);
    }
    for opt in strings(&app_service["security_opt"]) {
        args.extend(["--security-opt".into(), opt.replace(":true", "")]);
    }
    for (k, v) in app_service["environment"].as_object().unwrap() {
        args.extend(["-e".into(), format!("{k}={}", v.as_str().unwrap())]);
    }
    for v in strings(&app_service["volumes"]) {
        let (from, rest) = v.split_once(':').unwrap();
        assert_eq!(
            from, "airlock-ca-public",
            "the app mounts only the public CA"
        );
        args.extend(["-v".into(), format!("{public}:{rest}")]);
    }
    args.extend([images.app.clone(), "sleep".into(), "infinity".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let app = Container::run("app", &args);
    // What the file declares is what runs.
    assert_eq!(
        confinement(&airlock.name),
        "[CAP_NET_ADMIN] ro=true user= nnp=1"
    );
    assert_eq!(confinement(&app.name), "[] ro=true user=10001:10001 nnp=1");

    // Enforced: allowed, denied, and the CA key out of reach.
    let url = format!("https://api.test:{port}/echo");
    let (code, _, out) = app.curl(&url, &[]).await;
    assert_eq!(code, 200, "{out:?}\n{}", airlock.logs());
    let out = app
        .python(
            &[],
            &format!(
                "import urllib.request; print(urllib.request.urlopen('{url}/py', timeout=10).status)"
            ),
        )
        .await;
    assert_eq!(out.stdout.trim(), "200", "{out:?}");
    let (code, _, out) = app
        .curl(&format!("https://api.test:{port}/admin"), &[])
        .await;
    assert_eq!(code, 403, "{out:?}");
    let out = app.exec(&[], &["ls", "/var/lib/airlock/ca"]).await;
    assert_ne!(out.status, 0, "the app sees no CA key: {out:?}");
    // The admin endpoint: readable, but its approvals API wants the token.
    let admin = "http://127.0.0.1:15021";
    let (code, _, out) = app.curl(&format!("{admin}/readyz"), &[]).await;
    assert_eq!(code, 200, "{out:?}");
    for (method, path) in [("GET", "/v1/approvals"), ("POST", "/v1/approvals/x")] {
        let (code, _, out) = app
            .curl(&format!("{admin}{path}"), &["-X", method, "-d", "{}"])
            .await;
        assert_eq!(code, 401, "{method} {path}: {out:?}");
    }
    let auth = format!("Authorization: Bearer {token}");
    let list = nsenter_ok(
        &airlock.pid(),
        &["curl", "-s", "-H", &auth, &format!("{admin}/v1/approvals")],
    );
    assert!(list.contains("\"pending\""), "{list}");
    assert_eq!(upstream.hits(), 2);

    // Audited: stop airlock as compose does (SIGTERM), read its volume.
    pod_ok(&["stop", "-t", "10", &airlock.name]);
    let logs = airlock.logs();
    assert!(logs.contains("removed nft table inet"), "{logs}");
    let dir = PathBuf::from(pod_ok(&[
        "volume",
        "inspect",
        "-f",
        "{{.Mountpoint}}",
        &audit,
    ]));
    let audit_cli = |args: &[&str]| {
        let out = Command::new(AIRLOCK)
            .arg("audit")
            .args(args)
            .arg("--audit-db")
            .arg(dir.join("audit.db"))
            .output()
            .unwrap();
        assert!(out.status.success(), "airlock audit {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let sessions: serde_json::Value =
        serde_json::from_str(&audit_cli(&["sessions", "--json"])).unwrap();
    let session = sessions[0]["id"].as_str().unwrap().to_owned();
    let timeline = audit_cli(&["timeline", &session]);
    assert!(timeline.contains("/echo/py"), "{timeline}");
    assert!(timeline.contains("/admin"), "{timeline}");
    let key = dir.join("audit.key");
    audit_cli(&["verify", &session, "--audit-key", key.to_str().unwrap()]);
    // --events=-: the same events on the container's stdout, as JSON lines.
    assert!(
        logs.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|e| e["kind"] == "dns" && e["name"] == "api.test"),
        "{logs}"
    );

    // Once airlock's container stopped, the app's namespace lost its
    // interface: no network at all. `restart: unless-stopped` brings airlock
    // back in a new namespace, and the app stays in the old one, still
    // without a network (fail closed) until it is recreated too.
    pod_ok(&["start", &airlock.name]);
    let (code, _, out) = app.curl(&url, &[]).await;
    assert!(code != 200 && out.status != 0, "{out:?}");
    let out = app.exec(&[], &["ip", "-o", "addr"]).await;
    assert!(!out.stdout.contains("eth0"), "{out:?}");
    assert_eq!(upstream.hits(), 2);
}

/// The app the pod test runs instead of the manifest's (which fetches from
/// pypi.org): first waits for the sidecar's /readyz in the pod's shared
/// network namespace (podman has no startupProbe gating, see below), then
/// makes requests. Prints `ready after N` and one line per request.
const GATED_APP: &str = r#"
import sys, time, urllib.request
port, polls = sys.argv[1], 0
while True:
    polls += 1
    try:
        if urllib.request.urlopen("http://127.0.0.1:15021/readyz", timeout=1).status == 200:
            break
    except Exception:
        pass
    time.sleep(0.1)
print("ready after", polls, flush=True)
for n in range(5):
    try:
        s = urllib.request.urlopen("https://api.test:%s/echo/k%d" % (port, n), timeout=5).status
    except Exception as e:
        s = type(e).__name__
    print(n, s, flush=True)
for path in ("/admin",):
    try:
        s = urllib.request.urlopen("https://api.test:%s%s" % (port, path), timeout=5).status
    except urllib.error.HTTPError as e:
        s = e.code
    print(path, s, flush=True)
time.sleep(3600)
"#;

/// A policy the team's ConfigMap holds in the pod tests: the manifest's own
/// `extends` (the organisation's base, from its own ConfigMap), and with
/// `admin` GET /admin on the test's upstream too.
fn team_policy(extends: &serde_json::Value, port: u16, admin: bool) -> String {
    let mut text = format!("version = 1\nextends = {extends}\n");
    if admin {
        text.push_str(&format!(
            "\n[[allow]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"GET\"]\npaths = [\"/admin\"]\n"
        ));
    }
    text
}

/// What the kubelet does that podman 4.3 does not: resolve the downward
/// API's `fieldRef`s (podman knows only `metadata.name`) and expand
/// `$(VAR)` in `args` from the container's env (podman leaves it to the
/// shell, if any). `fields` are the values the kubelet would give.
fn as_the_kubelet_would(container: &mut serde_json::Value, fields: &[(&str, &str)]) {
    let mut values = std::collections::HashMap::new();
    for e in container["env"].as_array_mut().into_iter().flatten() {
        if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            let value = fields
                .iter()
                .find(|(f, _)| *f == path)
                .unwrap_or_else(|| panic!("no value for the downward API's {path}"))
                .1;
            e.as_object_mut().unwrap().remove("valueFrom");
            e["value"] = value.into();
        }
        if let (Some(name), Some(value)) = (e["name"].as_str(), e["value"].as_str()) {
            values.insert(name.to_owned(), value.to_owned());
        }
    }
    for a in container["args"].as_array_mut().into_iter().flatten() {
        let mut text = a.as_str().unwrap().to_owned();
        for (name, value) in &values {
            text = text.replace(&format!("$({name})"), value);
        }
        *a = text.into();
    }
}

/// The pod of deploy/kubernetes/pod.yaml, playing, its app done with its
/// first requests.
struct PlayedPod {
    /// Dropped first: the pod, then the volumes it used.
    _cleanup: Vec<Removed>,
    _net: Net,
    _host: Host,
    upstream: Upstream,
    port: u16,
    name: String,
    app: String,
    sidecar: String,
    audit_dir: PathBuf,
    /// The two ConfigMap volumes, as the kubelet lays them out.
    team: ConfigMapDir,
    base: ConfigMapDir,
    /// The manifest's `extends`, where the pod mounts the base.
    extends: serde_json::Value,
    /// The node the kubelet would say the pod runs on: this machine.
    node: String,
    /// How long `podman kube play` took.
    play_took: Duration,
}

impl PlayedPod {
    fn logs(&self, container: &str) -> String {
        let out = podman().args(["logs", container]).output().unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    fn db(&self) -> PathBuf {
        self.audit_dir.join("audit.db")
    }
}

/// deploy/kubernetes/pod.yaml under `podman kube play`, changed only where
/// podman 4.3 (Debian 12) cannot follow it or the test must point it at
/// its own upstream:
/// - podman has no native sidecars: it refuses probes on init containers
///   ("cannot create an init container that has either of lifecycle,
///   livenessProbe, readinessProbe, or startupProbe set") and runs init
///   containers to completion. So `airlock` becomes the first ordinary
///   container, without probes; and since podman starts all ordinary
///   containers at once (no startupProbe gating), the app itself waits
///   for /readyz (`GATED_APP`): the readiness ordering the manifest gets
///   from the kubelet, done by the app;
/// - `restartPolicy: Never`: under the default `Always`, podman 4.3
///   restarts the init container after it succeeds, then fails to remove
///   it (and a sidecar that cannot start would restart for ever here);
/// - no `ports`: podman publishes a containerPort on the host's 0.0.0.0;
/// - the downward API and `$(VAR)` in args: done by the test as the
///   kubelet does them ([`as_the_kubelet_would`]; namespace `default`, the
///   node this machine);
/// - emptyDir volumes become host-wide named volumes in podman, so they get
///   names unique to the test; the audit volume is a hostPath the test
///   reads; each ConfigMap volume is a hostPath laid out and updated as
///   the kubelet does one ([`ConfigMapDir`]: podman copies a ConfigMap's
///   data once into a named volume and never updates it);
/// - images, the policies' rules, `--upstream-ca` and `--resolve`: local.
async fn play_pod_manifest() -> PlayedPod {
    let images = images();
    let host = Host::new();
    let net = Net::new("kube");
    let gw = net.gateway.clone();
    let (upstream, port) = upstream_at(&gw, &host.pki).await;
    let name = unique("pod");
    // Dropped in order: the pod first, then the volumes it used.
    let mut cleanup = vec![remove_on_drop(&["pod", "rm", "-f", "-t", "0", &name])];
    let suffix = name.trim_start_matches("al-pod-").to_owned();
    let mut pod = yaml("deploy/kubernetes/pod.yaml");
    let team_map = yaml("deploy/kubernetes/policy-configmap.yaml");
    let base_map = yaml("deploy/kubernetes/base-policy-configmap.yaml");
    // The manifest's team policy extends the base where the pod mounts it;
    // the test keeps that and points the rules at its upstream: the base
    // allows GET /echo/**, the team adds nothing yet.
    let extends = python_toml(team_map["data"]["policy.toml"].as_str().unwrap())["extends"].clone();
    let base_key = base_map["data"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let team = ConfigMapDir::new(
        &host.dir.path().join("configmap-team"),
        &[("policy.toml", &team_policy(&extends, port, false))],
    );
    let base = ConfigMapDir::new(
        &host.dir.path().join("configmap-base"),
        &[(&base_key, &policy(port))],
    );
    let node = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();

    pod["metadata"]["name"] = name.clone().into();
    let spec = &mut pod["spec"];
    spec["restartPolicy"] = "Never".into();
    let inits = spec["initContainers"].as_array_mut().unwrap();
    let at = inits.iter().position(|c| c["name"] == "airlock").unwrap();
    let mut airlock = inits.remove(at);
    assert_eq!(airlock["restartPolicy"], "Always", "a native sidecar");
    assert_eq!(airlock["startupProbe"]["httpGet"]["path"], "/readyz");
    let obj = airlock.as_object_mut().unwrap();
    for key in [
        "restartPolicy",
        "startupProbe",
        "readinessProbe",
        "livenessProbe",
        "ports",
    ] {
        obj.remove(key);
    }
    as_the_kubelet_would(
        &mut airlock,
        &[
            ("metadata.name", &name),
            ("metadata.namespace", "default"),
            ("spec.nodeName", &node),
        ],
    );
    let args = airlock["args"].as_array_mut().unwrap();
    args.push("--upstream-ca=/etc/airlock/upstream/ca.pem".into());
    args.push(format!("--resolve=api.test:{gw}").into());
    airlock["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "upstream-ca", "mountPath": "/etc/airlock/upstream", "readOnly": true}));
    spec["containers"]
        .as_array_mut()
        .unwrap()
        .insert(0, airlock);
    let spec = spec.as_object_mut().unwrap();
    let mut containers: Vec<&mut serde_json::Value> = Vec::new();
    for (key, list) in spec.iter_mut() {
        if key == "initContainers" || key == "containers" {
            containers.extend(list.as_array_mut().unwrap().iter_mut());
        }
    }
    for c in containers {
        let image = match c["image"].as_str().unwrap() {
            "airlock:latest" => images.airlock.clone(),
            _ => images.app.clone(),
        };
        c["image"] = image.into();
        if c["name"] == "app" {
            // Base64: podman 4.3's YAML reader fails on a string with
            // escaped newlines ("did not find expected '-' indicator").
            use base64::Engine;
            let script = base64::engine::general_purpose::STANDARD.encode(GATED_APP);
            let exec = format!("import base64; exec(base64.b64decode('{script}'))");
            c["command"] = serde_json::json!(["python3", "-c", exec, port.to_string()]);
            c.as_object_mut().unwrap().remove("args");
        }
        for m in c["volumeMounts"].as_array_mut().unwrap() {
            let v = m["name"].as_str().unwrap().to_owned();
            if v != "upstream-ca" {
                m["name"] = format!("al-{v}-{suffix}").into();
            }
        }
    }
    let audit_dir = host.dir.path().join("pod-audit");
    std::fs::create_dir(&audit_dir).unwrap();
    let mut volume_names = Vec::new();
    for v in spec["volumes"].as_array_mut().unwrap() {
        let n = format!("al-{}-{suffix}", v["name"].as_str().unwrap());
        v["name"] = n.clone().into();
        let hostpath =
            |dir: &std::path::Path| serde_json::json!({"path": dir, "type": "Directory"});
        let map = v["configMap"]["name"].as_str().map(str::to_owned);
        let obj = v.as_object_mut().unwrap();
        if n.starts_with("al-airlock-audit") {
            obj.remove("emptyDir");
            obj.insert("hostPath".into(), hostpath(&audit_dir));
        } else if let Some(map) = map {
            let dir = match map.as_str() {
                m if m == team_map["metadata"]["name"] => team.dir(),
                m if m == base_map["metadata"]["name"] => base.dir(),
                other => panic!(
                    "pod.yaml mounts ConfigMap {other}, which deploy/kubernetes does not hold"
                ),
            };
            obj.remove("configMap");
            obj.insert("hostPath".into(), hostpath(dir));
        }
        volume_names.push(n);
    }
    let ca_dir = host.dir.path().join("upstream-ca");
    std::fs::create_dir(&ca_dir).unwrap();
    std::fs::copy(&host.pki.ca_pem, ca_dir.join("ca.pem")).unwrap();
    spec["volumes"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!(
            {"name": "upstream-ca", "hostPath": {"path": ca_dir, "type": "Directory"}}
        ));
    cleanup.extend(
        volume_names
            .iter()
            .map(|v| remove_on_drop(&["volume", "rm", "-f", v])),
    );
    let pod_file = host.dir.path().join("pod.yaml");
    write_yaml(&pod_file, &pod);
    // kube play has no --ulimit: the same limits, from a containers.conf
    // for this command only.
    let limits = ulimits();
    let conf = host.dir.path().join("containers.conf");
    std::fs::write(
        &conf,
        format!(
            "[containers]\ndefault_ulimits = [\"{}\", \"{}\"]\n",
            limits[1], limits[3]
        ),
    )
    .unwrap();
    let started = Instant::now();
    let out = podman()
        .env("CONTAINERS_CONF", &conf)
        .args(["kube", "play", "--network", &net.name])
        .arg(&pod_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kube play: {out:?}\n{}",
        std::fs::read_to_string(&pod_file).unwrap()
    );
    let played = PlayedPod {
        play_took: started.elapsed(),
        _cleanup: cleanup,
        _net: net,
        _host: host,
        upstream,
        port,
        app: format!("{name}-app"),
        sidecar: format!("{name}-airlock"),
        name,
        audit_dir,
        team,
        base,
        extends,
        node,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !played.logs(&played.app).contains("/admin ") {
        assert!(
            Instant::now() < deadline,
            "app: {}\nairlock: {}",
            played.logs(&played.app),
            played.logs(&played.sidecar)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    played
}

/// A TOML text as JSON (python3's tomllib).
fn python_toml(text: &str) -> serde_json::Value {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, tomllib; print(json.dumps(tomllib.loads(sys.argv[1])))",
            text,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_play_runs_the_pod_manifest_and_the_app_waits_for_readyz() {
    let played = play_pod_manifest().await;
    eprintln!("kube play took {:?}", played.play_took);
    let (app, sidecar, name) = (&played.app, &played.sidecar, &played.name);
    let app_log = played.logs(app);
    eprintln!("the app: {}", app_log.lines().next().unwrap_or(""));
    for n in 0..5 {
        assert!(app_log.contains(&format!("\n{n} 200\n")), "{app_log}");
    }
    assert!(app_log.contains("/admin 403"), "{app_log}");
    assert_eq!(played.upstream.hits(), 5, "{app_log}");
    let sidecar_log = played.logs(sidecar);
    assert!(
        sidecar_log.contains("airlock: sidecar ready"),
        "{sidecar_log}"
    );
    // The securityContexts, as podman applied them.
    assert_eq!(confinement(sidecar), "[CAP_NET_ADMIN] ro=true user=0 nnp=1");
    assert_eq!(confinement(app), "[] ro=true user=10001:10001 nnp=1");
    // The CA key stayed with airlock: the app mounts only the public copy.
    let out = podman()
        .args(["exec", app, "ls", "/var/lib/airlock/ca"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");

    // Audited, in the pod's audit volume: every request the upstream saw.
    // The app first, at once (python as pid 1 ignores SIGTERM), then the
    // pod: airlock gets SIGTERM and closes its session.
    pod_ok(&["stop", "-t", "0", app]);
    pod_ok(&["pod", "stop", "-t", "10", name]);
    let out = Command::new(AIRLOCK)
        .args(["audit", "sessions", "--json", "--audit-db"])
        .arg(played.db())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let sessions: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let session = sessions[0]["id"].as_str().unwrap();
    let out = Command::new(AIRLOCK)
        .args(["audit", "timeline", session, "--audit-db"])
        .arg(played.db())
        .output()
        .unwrap();
    let timeline = String::from_utf8_lossy(&out.stdout);
    for n in 0..5 {
        assert!(timeline.contains(&format!("/echo/k{n}")), "{timeline}");
    }
}

/// The app's GET of `path` on the upstream, from inside the pod (the
/// container's own environment: its CA), through the sidecar: the status.
fn app_get(played: &PlayedPod, path: &str) -> String {
    let script = format!(
        "import urllib.request, urllib.error\ntry:\n    print(urllib.request.urlopen('https://api.test:{}{path}', timeout=10).status)\nexcept urllib.error.HTTPError as e:\n    print(e.code)\n",
        played.port
    );
    pod_ok(&["exec", &played.app, "python3", "-c", &script])
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_update_under_a_running_pod_decides_the_next_request_and_is_on_record_with_its_hash()
 {
    let played = play_pod_manifest().await;
    let sha = |text: &str| airlock_auditor::sha256_hex(text.as_bytes());
    let audit = |args: &[&str]| audit_ok(AIRLOCK, &played.db(), args);
    // The labels the deployment fills in through the downward API.
    let sessions: serde_json::Value =
        serde_json::from_str(&audit(&["sessions", "--json"])).unwrap();
    let session = sessions[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        sessions[0]["labels"],
        serde_json::json!({"pod": played.name, "namespace": "default", "node": played.node}),
        "{sessions:#}"
    );
    let listed = audit(&["sessions", "--label", &format!("pod={}", played.name)]);
    assert!(listed.contains(&session[..14]), "{listed}");
    let team_v1 = team_policy(&played.extends, played.port, false);
    assert_eq!(sessions[0]["policy_sha256"], sha(&team_v1));
    assert_eq!(app_get(&played, "/admin"), "403");

    // The team's ConfigMap updated as the kubelet does it: the next
    // request is decided by the new version.
    let team_v2 = team_policy(&played.extends, played.port, true);
    played.team.update(&[("policy.toml", &team_v2)]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !played
        .logs(&played.sidecar)
        .contains("airlock: reloaded policy")
    {
        assert!(
            Instant::now() < deadline,
            "{}",
            played.logs(&played.sidecar)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        app_get(&played, "/admin"),
        "200",
        "{}",
        played.logs(&played.sidecar)
    );
    assert_eq!(played.upstream.hits(), 6);

    // On record: the reload, with the new policy's hash and its base's,
    // before the request it allowed.
    let events: Vec<serde_json::Value> =
        audit(&["export", &session, "--format", "jsonl", "--out", "-"])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    let reloads: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "note" && e.get("policy").is_some())
        .collect();
    assert_eq!(reloads.len(), 1, "{events:#?}");
    let in_force = &reloads[0]["policy"];
    assert_eq!(in_force["name"], "/etc/airlock/policy/policy.toml");
    assert_eq!(in_force["sha256"], sha(&team_v2), "{in_force:#}");
    assert_eq!(
        in_force["files"][0]["sha256"],
        sha(&policy(played.port)),
        "{in_force:#}"
    );
    assert_eq!(
        in_force["files"][1]["sha256"],
        sha(&team_v2),
        "{in_force:#}"
    );
    let at = reloads[0]["seq"].as_u64().unwrap();
    let admin: Vec<(u64, &str)> = events
        .iter()
        .filter(|e| e["kind"] == "http" && e["url"].as_str().is_some_and(|u| u.ends_with("/admin")))
        .map(|e| {
            (
                e["seq"].as_u64().unwrap(),
                e["decision"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        admin.iter().any(|(s, d)| *s < at && *d == "deny"),
        "{admin:?}"
    );
    assert!(
        admin.iter().any(|(s, d)| *s > at && *d == "allow"),
        "{admin:?}"
    );
    assert!(
        !admin.iter().any(|(s, d)| *s > at && *d == "deny"),
        "{admin:?}"
    );

    // The base's ConfigMap is watched too: its update reloads.
    played.base.update(&[("base.toml", "version = 1\n")]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while played
        .logs(&played.sidecar)
        .matches("airlock: reloaded policy")
        .count()
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "{}",
            played.logs(&played.sidecar)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(app_get(&played, "/echo/after-base"), "403");
    pod_ok(&["stop", "-t", "0", &played.app]);
    pod_ok(&["pod", "stop", "-t", "10", &played.name]);
    let verified = audit(&[
        "verify",
        &session,
        "--audit-key",
        played.audit_dir.join("audit.key").to_str().unwrap(),
    ]);
    assert!(verified.contains("intact"), "{verified}");
}

/// The sidecar guards a container whose OCI runtime is gVisor's runsc
/// (`podman --runtime runsc --runtime-flag network=host`): the sentry's
/// sockets live in the container's network namespace, where the sidecar's
/// rules are, so the same requests are allowed, refused and recorded, and
/// nothing bypasses it (TCP, UDP, a literal IP, another resolver).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_podman_container_under_gvisor_runsc_is_guarded_from_the_host() {
    let host = Host::new();
    let net = Net::new("gvguard");
    let app = host.app_under(
        podman::RUNSC,
        "gvguard",
        &net,
        &["--dns", &net.gateway],
        &["sleep", "infinity"],
    );
    // gVisor's kernel answers inside (its uname is 4.4.0), not the host's.
    let out = app.exec(&[], &["uname", "-r"]).await;
    assert_eq!(out.stdout.trim(), "4.4.0", "{out:?}");
    let gw = net.gateway.clone();
    let (upstream, port) = upstream_at(&gw, &host.pki).await;
    std::fs::write(host.policy_file(), policy(port)).unwrap();
    let (bait_port, tcp) = tcp_bait(listen_at(&gw));
    let (udp_port, udp) = udp_bait(&gw, 0);
    let (_, dns) = udp_bait(&gw, 53);
    let direct = format!("api.test:{port}:{gw}");
    let url = format!("https://api.test:{port}/echo");
    // Unguarded, the paths are open: the controls.
    let (code, _, out) = app.curl(&url, &["--resolve", &direct]).await;
    assert_eq!(code, 200, "unguarded: {out:?}");
    let (code, body, out) = app.curl(&format!("http://{gw}:{bait_port}/"), &[]).await;
    assert!(code == 200 && body.contains("bypassed"), "{out:?}");
    let out = app
        .python(&["--user", "0"], &leak_probe(&gw, udp_port, None, false))
        .await;
    assert!(out.stdout.contains("udp got"), "{out:?}");
    let unguarded_hits = upstream.hits();
    let (tcp0, udp0) = (tcp.load(Ordering::SeqCst), udp.load(Ordering::SeqCst));

    let mut sidecar = host.sidecar(&app.pid(), &gw, &[]).ready().await;
    only_what_the_policy_allows_passes(&app, &sidecar, port, &gw, bait_port).await;
    let out = app
        .python(&["--user", "0"], &leak_probe(&gw, udp_port, None, true))
        .await;
    assert!(out.stdout.contains("udp refused"), "{out:?}");
    for server in ["own", "192.0.2.53"] {
        assert!(
            out.stdout
                .contains(&format!("dns {server} rcode 0 answer 198.1")),
            "{server}: {out:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(tcp.load(Ordering::SeqCst), tcp0, "TCP bypassed the sidecar");
    assert_eq!(udp.load(Ordering::SeqCst), udp0, "UDP bypassed the sidecar");
    assert_eq!(dns.load(Ordering::SeqCst), 0, "DNS bypassed the sidecar");
    assert_eq!(upstream.hits(), unguarded_hits + 2, "{}", sidecar.log());
    assert_eq!(sidecar.stop(), Some(0), "{}", sidecar.log());
    let sessions: serde_json::Value =
        serde_json::from_str(&host.audit(&["sessions", "--json"])).unwrap();
    let session = sessions[0]["id"].as_str().unwrap();
    let timeline = host.audit(&["timeline", session]);
    assert!(timeline.contains("sidecar mode"), "{timeline}");
    assert!(timeline.contains("/admin"), "{timeline}");
}
