//! `airlock sidecar` guarding a "pod" built here out of real namespaces: the
//! pod's network namespace has a veth link to a second namespace, "the
//! internet", where the TLS upstream (`api.test`) and some bait listeners
//! live. The app runs inside the pod as uid 65534 (curl, python3) and knows
//! nothing about a proxy; the sidecar joins the pod's namespace like a
//! service-mesh sidecar. Every test has its own namespaces (removed on drop,
//! even on failure) and runs as root, like the rest of the suite.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_test_support::audit_cli::audit_ok;
use airlock_test_support::client::ClientOutput;
use airlock_test_support::configmap::ConfigMapDir;
use airlock_test_support::console::{Console, since_recorded};
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::init_ca;
use airlock_test_support::server::{self, bait};
use airlock_test_support::sidecar::Sidecar;
use airlock_test_support::upstream::Upstream;
use tokio::io::AsyncWriteExt;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// The address of the "internet" side of the veth link; the upstream lives here.
const NET_IP: &str = "10.254.0.1";
/// The pod's own address.
const POD_IP: &str = "10.254.0.2";
const NET_IP6: &str = "fd00:254::1";
const POD_IP6: &str = "fd00:254::2";
/// The sidecar's admin endpoint inside the pod (its default).
const ADMIN: &str = "127.0.0.1:15021";
const TABLE: &str = "airlock_sidecar_15001";

const POLICY: &str = r#"version = 1
[[allow]]
host = "api.test"
port = 443
methods = ["GET"]
paths = ["/echo", "/echo/**"]
"#;

/// Same length as `POLICY_WITH_ADMIN`, but /admin spelled so it matches nothing.
const POLICY_WITH_ADMIN: &str = r#"version = 1
[[allow]]
host = "api.test"
port = 443
methods = ["GET"]
paths = ["/echo", "/echo/**", "/admin"]
"#;
const POLICY_WITHOUT_ADMIN: &str = r#"version = 1
[[allow]]
host = "api.test"
port = 443
methods = ["GET"]
paths = ["/echo", "/echo/**", "/xdmin"]
"#;

fn sh(program: &str, args: &[&str]) -> std::process::Output {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    out
}

/// A pod network namespace plus an "internet" namespace, linked by veth.
struct Pod {
    name: String,
    net: String,
    dir: tempfile::TempDir,
    pids: Mutex<Vec<u32>>,
}

impl Drop for Pod {
    fn drop(&mut self) {
        for pid in self.pids.lock().map(|p| p.clone()).unwrap_or_default() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        for ns in [&self.name, &self.net] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.name));
    }
}

impl Pod {
    fn new(tag: &str) -> Self {
        let id = std::process::id();
        let pod = Self {
            name: format!("alsc-{tag}-{id}"),
            net: format!("alsn-{tag}-{id}"),
            dir: tempfile::tempdir().unwrap(),
            pids: Mutex::default(),
        };
        let (p, n) = (pod.name.as_str(), pod.net.as_str());
        sh("ip", &["netns", "add", p]);
        sh("ip", &["netns", "add", n]);
        for ns in [p, n] {
            sh("ip", &["-n", ns, "link", "set", "lo", "up"]);
        }
        sh(
            "ip",
            &[
                "-n", p, "link", "add", "eth0", "type", "veth", "peer", "name", "up0", "netns", n,
            ],
        );
        for (ns, dev, ip, ip6) in [(p, "eth0", POD_IP, POD_IP6), (n, "up0", NET_IP, NET_IP6)] {
            sh(
                "ip",
                &["-n", ns, "addr", "add", &format!("{ip}/24"), "dev", dev],
            );
            sh(
                "ip",
                &[
                    "-n",
                    ns,
                    "-6",
                    "addr",
                    "add",
                    &format!("{ip6}/64"),
                    "dev",
                    dev,
                    "nodad",
                ],
            );
            sh("ip", &["-n", ns, "link", "set", dev, "up"]);
        }
        sh("ip", &["-n", p, "route", "add", "default", "via", NET_IP]);
        sh(
            "ip",
            &["-n", p, "-6", "route", "add", "default", "via", NET_IP6],
        );
        // The app's resolver is "outside" (`ip netns exec` mounts this over /etc/resolv.conf).
        std::fs::create_dir_all(format!("/etc/netns/{p}")).unwrap();
        std::fs::write(
            format!("/etc/netns/{p}/resolv.conf"),
            format!("nameserver {NET_IP}\n"),
        )
        .unwrap();
        // The CA: the key stays in the 0700 ca/ directory; the app gets a copy of ca.pem.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(pod.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        init_ca(AIRLOCK, &pod.dir.path().join("ca"));
        std::fs::copy(pod.dir.path().join("ca/ca.pem"), pod.ca_pem()).unwrap();
        std::fs::set_permissions(pod.ca_pem(), std::fs::Permissions::from_mode(0o644)).unwrap();
        pod.write_policy(POLICY);
        pod
    }

    fn ca_pem(&self) -> PathBuf {
        self.dir.path().join("app-ca.pem")
    }

    fn policy(&self) -> PathBuf {
        self.dir.path().join("policy.toml")
    }

    fn write_policy(&self, text: &str) {
        std::fs::write(self.policy(), text).unwrap();
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("audit/audit.db")
    }

    fn netns_path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Run `f` on a thread inside namespace `ns` (setns(2) moves only the
    /// calling thread); sockets it creates stay in that namespace.
    fn inside<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
                nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// A TCP listener in the "internet" namespace.
    fn listen_outside(&self, addr: &str) -> tokio::net::TcpListener {
        let addr: SocketAddr = addr.parse().unwrap();
        let std = Self::inside(&self.net, || std::net::TcpListener::bind(addr).unwrap());
        std.set_nonblocking(true).unwrap();
        tokio::net::TcpListener::from_std(std).unwrap()
    }

    /// The TLS upstream `api.test` at NET_IP:443 (bytes relayed to a real
    /// test server on the host's loopback, which counts the requests).
    async fn upstream(&self, pki: &TestPki) -> Upstream {
        let upstream = Upstream::start(Some(pki.server_config(&["api.test", "evil.test"]))).await;
        let listener = self.listen_outside(&format!("{NET_IP}:443"));
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
        upstream
    }

    /// A bait outside (see [`bait`]).
    fn tcp_bait(&self, addr: &str) -> Arc<AtomicUsize> {
        bait(self.listen_outside(addr))
    }

    /// A UDP socket outside that counts datagrams.
    fn udp_bait(&self, addr: &str) -> Arc<AtomicUsize> {
        let addr: SocketAddr = addr.parse().unwrap();
        let socket = Self::inside(&self.net, || std::net::UdpSocket::bind(addr).unwrap());
        server::udp_bait(socket)
    }

    /// `airlock sidecar --netns` (or other `target` flags) for this pod.
    fn sidecar(&self, pki: &TestPki, extra: &[&str]) -> Sidecar {
        self.sidecar_with_policy(pki, &self.policy(), extra)
    }

    /// The same, enforcing the policy file at `policy`.
    fn sidecar_with_policy(&self, pki: &TestPki, policy: &Path, extra: &[&str]) -> Sidecar {
        let mut cmd = Command::new(AIRLOCK);
        cmd.arg("sidecar")
            .arg("--policy")
            .arg(policy)
            .arg("--ca-dir")
            .arg(self.dir.path().join("ca"))
            .arg("--upstream-ca")
            .arg(&pki.ca_pem)
            .args(["--resolve", &format!("api.test:{NET_IP}")])
            .arg("--audit-db")
            .arg(self.db())
            .arg("--audit-key")
            .arg(self.dir.path().join("audit/audit.key"))
            .args(extra);
        if !extra.contains(&"--pid") {
            cmd.arg("--netns").arg(self.netns_path());
        }
        let sidecar = Sidecar::spawn(cmd);
        self.pids.lock().unwrap().push(sidecar.id());
        sidecar
    }

    /// Run a command inside the pod as uid/gid 65534, without capabilities.
    async fn app(&self, argv: &[&str], env: &[(&str, &str)]) -> ClientOutput {
        self.exec(
            &[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
            ],
            argv,
            env,
        )
        .await
    }

    /// Run `prefix` + `argv` inside the pod.
    async fn exec(&self, prefix: &[&str], argv: &[&str], env: &[(&str, &str)]) -> ClientOutput {
        let out = tokio::process::Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(prefix)
            .args(argv)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        ClientOutput::from(out)
    }

    /// The app's curl, trusting the sidecar's CA: (HTTP status, body, output).
    async fn curl(&self, url: &str, extra: &[&str]) -> (u16, String, ClientOutput) {
        let ca = self.ca_pem();
        let mut argv = vec![
            "curl",
            "-sS",
            "--max-time",
            "10",
            "--cacert",
            ca.to_str().unwrap(),
            "-w",
            "\n%{http_code}",
        ];
        argv.extend_from_slice(extra);
        argv.push(url);
        let out = self.app(&argv, &[]).await;
        let (body, code) = out.stdout.rsplit_once('\n').unwrap_or(("", &out.stdout));
        (code.trim().parse().unwrap_or(0), body.to_owned(), out)
    }

    /// The app's python3 urllib with SSL_CERT_FILE: prints "STATUS\nBODY".
    async fn python_get(&self, url: &str) -> ClientOutput {
        let script = format!(
            r#"
import urllib.request, urllib.error
try:
    r = urllib.request.urlopen("{url}", timeout=10)
    print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
"#
        );
        let ca = self.ca_pem();
        self.app(
            &["/usr/bin/python3", "-c", &script],
            &[("SSL_CERT_FILE", ca.to_str().unwrap())],
        )
        .await
    }

    /// GET an admin endpoint (at the default address) from inside the pod: (status, body).
    async fn admin(&self, path: &str) -> (u16, String) {
        self.admin_at(ADMIN, path).await
    }

    /// GET `path` from an admin endpoint listening on `addr` inside the pod.
    async fn admin_at(&self, addr: &str, path: &str) -> (u16, String) {
        let out = self
            .exec(
                &[],
                &[
                    "curl",
                    "-s",
                    "--max-time",
                    "5",
                    "-w",
                    "\n%{http_code}",
                    &format!("http://{addr}{path}"),
                ],
                &[],
            )
            .await;
        let (body, code) = out.stdout.rsplit_once('\n').unwrap_or(("", &out.stdout));
        (code.trim().parse().unwrap_or(0), body.to_owned())
    }

    fn nft_tables(&self) -> String {
        let out = sh(
            "ip",
            &["netns", "exec", &self.name, "nft", "list", "tables"],
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn audit(&self, args: &[&str]) -> String {
        audit_ok(AIRLOCK, &self.db(), args)
    }
}

/// A pod with the upstream and a ready sidecar.
async fn pod_with_sidecar(tag: &str, extra: &[&str]) -> (Pod, TestPki, Upstream, Sidecar) {
    let pod = Pod::new(tag);
    let pki = TestPki::new();
    let upstream = pod.upstream(&pki).await;
    let sidecar = pod.sidecar(&pki, extra).ready().await;
    (pod, pki, upstream, sidecar)
}

fn assert_refusal_names_rule(body: &str) {
    assert!(body.contains("Airlock refused this request."), "{body}");
    assert!(body.contains("paths = [\"/admin\"]"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_and_python_in_the_pod_are_allowed_and_denied_by_policy() {
    let (pod, _pki, upstream, mut sidecar) = pod_with_sidecar("allow", &["--events", "-"]).await;

    let (code, body, out) = pod.curl("https://api.test/echo", &[]).await;
    assert_eq!(code, 200, "{out:?}\n{}", sidecar.log());
    assert!(body.contains("\"method\":\"GET\""), "{body}");
    assert_eq!(upstream.hits(), 1);

    let (code, body, out) = pod.curl("https://api.test/admin", &[]).await;
    assert_eq!(code, 403, "{out:?}");
    assert_refusal_names_rule(&body);
    assert_eq!(
        upstream.hits(),
        1,
        "a denied request must not reach upstream"
    );

    let out = pod.python_get("https://api.test/echo/py").await;
    assert!(out.stdout.starts_with("200\n"), "{out:?}");
    assert_eq!(upstream.hits(), 2);
    let out = pod.python_get("https://api.test/admin").await;
    assert!(out.stdout.starts_with("403\n"), "{out:?}");
    assert_refusal_names_rule(&out.stdout);
    assert_eq!(upstream.hits(), 2);

    // An unlisted name is refused like an unlisted path: a 403 that names the
    // rule to add (the app sees no "could not resolve host").
    let (code, body, out) = pod.curl("https://evil.test/echo", &[]).await;
    assert_eq!(code, 403, "{out:?}");
    assert!(body.contains("host = \"evil.test\""), "{body}");
    assert_eq!(upstream.hits(), 2);

    assert_eq!(sidecar.stop(), Some(0), "{}", sidecar.log());

    // The session record: sidecar mode, says what it cannot see, has the traffic.
    let sessions: serde_json::Value =
        serde_json::from_str(&pod.audit(&["sessions", "--json"])).unwrap();
    let session = &sessions[0];
    assert_eq!(session["mode"], "sidecar", "{session:#}");
    let id = session["id"].as_str().unwrap();
    let timeline = pod.audit(&["timeline", id]);
    assert!(
        timeline.contains(
            "note: sidecar mode: network and DNS events only; exec and file events are not visible"
        ),
        "{timeline}"
    );
    let jsonl = pod.dir.path().join("session.jsonl");
    pod.audit(&[
        "export",
        id,
        "--format",
        "jsonl",
        "--out",
        jsonl.to_str().unwrap(),
    ]);
    let events: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let http: Vec<_> = events.iter().filter(|e| e["kind"] == "http").collect();
    assert!(
        http.iter()
            .any(|e| e.to_string().contains("/echo") && e["status"] == 200),
        "{http:#?}"
    );
    assert!(
        http.iter()
            .any(|e| e.to_string().contains("/admin") && e["status"] == 403),
        "{http:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "dns" && e["name"] == "api.test"),
        "{events:#?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| e["kind"] == "exec" || e["kind"] == "file")
    );

    // The same events streamed as JSON lines on stdout, for log pipelines.
    let streamed = sidecar.stdout_events();
    assert!(
        streamed
            .iter()
            .any(|e| e["kind"] == "dns" && e["name"] == "api.test"),
        "{streamed:#?}"
    );
    assert!(
        streamed.iter().any(|e| e.to_string().contains("/admin")),
        "{streamed:#?}"
    );
    let verify = Command::new(AIRLOCK)
        .args(["audit", "verify", id, "--audit-db"])
        .arg(pod.db())
        .arg("--audit-key")
        .arg(pod.dir.path().join("audit/audit.key"))
        .output()
        .unwrap();
    assert!(verify.status.success(), "{verify:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_process_cannot_bypass_the_sidecar() {
    let (pod, _pki, upstream, sidecar) = pod_with_sidecar("bypass", &[]).await;
    let tcp = pod.tcp_bait(&format!("{NET_IP}:8080"));
    let udp = pod.udp_bait(&format!("{NET_IP}:9999"));
    let dns = pod.udp_bait(&format!("{NET_IP}:53"));
    let tcp6 = pod.tcp_bait(&format!("[{NET_IP6}]:8080"));
    // Like Docker's embedded DNS: an iptables-style (priority -100) NAT chain
    // sending 127.0.0.11:53 elsewhere, here to the bait resolver.
    let docker_like = format!(
        "add table ip docker_like {{ chain output {{ type nat hook output priority -100; policy accept; ip daddr 127.0.0.11 udp dport 53 dnat to {NET_IP}:53; }}; }}"
    );
    sh("ip", &["netns", "exec", &pod.name, "nft", &docker_like]);

    // Direct TCP to the upstream's address on another port: captured, refused.
    let (code, body, out) = pod.curl(&format!("http://{NET_IP}:8080/"), &[]).await;
    assert!(!body.contains("bypassed"), "{out:?}");
    assert_ne!(code, 200, "{out:?}");
    // Direct TLS to the upstream's address, SNI evil.test: captured, refused.
    let (code, _, out) = pod
        .curl(
            "https://evil.test/echo",
            &["--resolve", &format!("evil.test:443:{NET_IP}")],
        )
        .await;
    assert_ne!(code, 200, "{out:?}");

    let probe = format!(
        r#"
import socket, struct
def query(name):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    for part in name.split("."):
        q += bytes([len(part)]) + part.encode()
    return q + b"\0" + struct.pack(">HH", 1, 1)
# UDP that is not DNS.
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(2)
try:
    u.sendto(b"hello", ("{NET_IP}", 9999))
    print("udp", u.recv(100))
except OSError as e:
    print("udp refused", e)
# DNS to an outside resolver: answered by the sidecar, not by that resolver.
d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
d.settimeout(5)
d.sendto(query("api.test"), ("{NET_IP}", 53))
answer = d.recv(512)
print("dns answer", ".".join(str(b) for b in answer[-4:]))
d.sendto(query("api.test"), ("127.0.0.11", 53))
answer = d.recv(512)
print("docker dns answer", ".".join(str(b) for b in answer[-4:]))
# IPv6.
s6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s6.settimeout(5)
try:
    s6.connect(("{NET_IP6}", 8080))
    print("ipv6 connected", s6.recv(100))
except OSError as e:
    print("ipv6 refused", e)
"#
    );
    let out = pod.app(&["/usr/bin/python3", "-c", &probe], &[]).await;
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains("udp refused"), "{out:?}");
    // 198.18.0.0/15: the sidecar's synthetic addresses, not the bait's "bypassed".
    assert!(out.stdout.contains("\ndns answer 198.1"), "{out:?}");
    assert!(out.stdout.contains("docker dns answer 198.1"), "{out:?}");
    assert!(out.stdout.contains("ipv6 refused"), "{out:?}");

    // Root inside the app container, without CAP_NET_ADMIN, with airlock's
    // own uid (0): cannot set airlock's socket mark, and its traffic is captured.
    let root_probe = format!(
        r#"
import socket
caps = [l for l in open("/proc/self/status") if l.startswith("CapEff")]
print("uid", __import__("os").getuid(), caps[0].split()[1])
s = socket.socket()
try:
    s.setsockopt(socket.SOL_SOCKET, 36, {mark})  # SO_MARK, see socket(7)
    print("mark set")
except PermissionError:
    print("mark refused")
s.settimeout(5)
try:
    s.connect(("{NET_IP}", 8080))
    s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    print("got", s.recv(200))
except OSError as e:
    print("refused", e)
"#,
        mark = 0x4149_524c
    );
    let out = pod
        .exec(
            &[
                "setpriv",
                "--reuid=0",
                "--regid=0",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ],
            &["/usr/bin/python3", "-c", &root_probe],
            &[],
        )
        .await;
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains("uid 0 0000000000000000"), "{out:?}");
    assert!(out.stdout.contains("mark refused"), "{out:?}");
    assert!(!out.stdout.contains("bypassed"), "{out:?}");

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(tcp.load(Ordering::SeqCst), 0, "TCP bypassed the sidecar");
    assert_eq!(udp.load(Ordering::SeqCst), 0, "UDP bypassed the sidecar");
    assert_eq!(dns.load(Ordering::SeqCst), 0, "DNS bypassed the sidecar");
    assert_eq!(tcp6.load(Ordering::SeqCst), 0, "IPv6 bypassed the sidecar");
    assert_eq!(upstream.hits(), 0, "{}", sidecar.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_fails_until_the_sidecar_is_ready() {
    let pod = Pod::new("ready");
    let pki = TestPki::new();
    let upstream = pod.upstream(&pki).await;
    let sidecar = pod.sidecar(&pki, &["--start-delay", "6s"]);
    sidecar.wait_for("capture rules installed", 1).await;
    let started = Instant::now();

    // The admin endpoint comes up first and says "not ready".
    let (code, body) = loop {
        let (code, body) = pod.admin("/readyz").await;
        if code != 0 {
            break (code, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(code, 503, "{body}");
    // The app's traffic fails rather than bypassing: DNS and direct connections.
    let (code, _, out) = pod.curl("https://api.test/echo", &[]).await;
    assert_ne!(out.status, 0, "{code} {out:?}");
    let (code, _, out) = pod
        .curl(
            "https://api.test/echo",
            &["--resolve", &format!("api.test:443:{NET_IP}")],
        )
        .await;
    assert_ne!(out.status, 0, "{code} {out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the checks took longer than the start delay"
    );
    assert_eq!(upstream.hits(), 0);

    // `airlock sidecar --wait-ready` holds an app until then, and exits 0.
    let out = pod
        .exec(
            &[],
            &[
                AIRLOCK,
                "sidecar",
                "--wait-ready",
                ADMIN,
                "--wait-timeout",
                "20s",
            ],
            &[],
        )
        .await;
    assert_eq!(out.status, 0, "{out:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "ready too early"
    );
    assert_eq!(pod.admin("/readyz").await.0, 200);
    let (code, _, out) = pod.curl("https://api.test/echo", &[]).await;
    assert_eq!(code, 200, "{out:?}\n{}", sidecar.log());
    assert_eq!(upstream.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_ready_times_out_with_a_useful_message() {
    let out = Command::new(AIRLOCK)
        .args([
            "sidecar",
            "--wait-ready",
            "127.0.0.1:9",
            "--wait-timeout",
            "1s",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not ready within 1s"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_reloads_on_file_change_and_sighup_without_dropping_connections() {
    let (pod, _pki, upstream, sidecar) = pod_with_sidecar("reload", &[]).await;
    // One keep-alive connection across both reloads: python reads a path per
    // stdin line and prints the status and its local port.
    let script = r#"
import http.client, ssl, sys
conn = http.client.HTTPSConnection("api.test", 443, context=ssl.create_default_context(), timeout=10)
for line in sys.stdin:
    conn.request("GET", line.strip())
    r = conn.getresponse()
    r.read()
    print(r.status, conn.sock.getsockname()[1], flush=True)
"#;
    let ca = pod.ca_pem();
    let mut python = tokio::process::Command::new("ip")
        .args(["netns", "exec", &pod.name])
        .args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ])
        .args(["/usr/bin/python3", "-c", script])
        .env("SSL_CERT_FILE", &ca)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = python.stdin.take().unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(python.stdout.take().unwrap()));
    let mut get = async |path: &str| -> (u16, String) {
        stdin
            .write_all(format!("{path}\n").as_bytes())
            .await
            .unwrap();
        let line = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
            .await
            .expect("python answered")
            .unwrap()
            .unwrap_or_default();
        let (status, port) = line.split_once(' ').unwrap_or(("0", ""));
        (status.parse().unwrap_or(0), port.to_owned())
    };

    let (status, port) = get("/echo").await;
    assert_eq!(status, 200);
    let (status, _) = get("/admin").await;
    assert_eq!(status, 403);

    // File change: noticed within a second or so.
    pod.write_policy(POLICY_WITH_ADMIN);
    sidecar.wait_for("airlock: reloaded policy", 1).await;
    let (status, same) = get("/admin").await;
    assert_eq!(status, 200, "{}", sidecar.log());
    assert_eq!(
        same, port,
        "the keep-alive connection must survive the reload"
    );

    // SIGHUP: a rewrite the file watch cannot see (same inode, length, mtime).
    let modified = std::fs::metadata(pod.policy()).unwrap().modified().unwrap();
    pod.write_policy(POLICY_WITHOUT_ADMIN);
    std::fs::File::options()
        .write(true)
        .open(pod.policy())
        .unwrap()
        .set_modified(modified)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, _) = get("/admin").await;
    assert_eq!(status, 200, "the file watch must not have seen it");
    sidecar.signal(nix::sys::signal::Signal::SIGHUP);
    sidecar.wait_for("airlock: reloaded policy", 2).await;
    let (status, same) = get("/admin").await;
    assert_eq!(status, 403, "{}", sidecar.log());
    assert_eq!(
        same, port,
        "the keep-alive connection must survive the reload"
    );
    assert_eq!(upstream.hits(), 3);

    // A broken policy keeps the one in force.
    pod.write_policy("this is not toml [");
    sidecar.wait_for("policy reload failed", 1).await;
    let (status, _) = get("/echo").await;
    assert_eq!(status, 200);
}

/// An organisation's base policy, shipped as its own ConfigMap: GET of
/// /echo and everything under it.
const ORG_BASE_V1: &str = r#"version = 1
[[allow]]
host = "api.test"
port = 443
methods = ["GET"]
paths = ["/echo", "/echo/**"]
"#;

/// The base tightened: /echo alone.
const ORG_BASE_V2: &str = r#"version = 1
[[allow]]
host = "api.test"
port = 443
methods = ["GET"]
paths = ["/echo"]
"#;

/// A team's policy (its own ConfigMap) on top of the base at `base`;
/// `admin` adds GET /admin.
fn team_policy(base: &Path, admin: bool) -> String {
    let mut text = format!(
        "version = 1\nextends = [{:?}]\n",
        base.display().to_string()
    );
    if admin {
        text.push_str("\n[[allow]]\nhost = \"api.test\"\nport = 443\nmethods = [\"GET\"]\npaths = [\"/admin\"]\n");
    }
    text
}

/// The record's events as JSON lines (`audit export --format jsonl`).
fn recorded(pod: &Pod) -> Vec<serde_json::Value> {
    let sessions: serde_json::Value =
        serde_json::from_str(&pod.audit(&["sessions", "--json"])).unwrap();
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    pod.audit(&["export", &id, "--format", "jsonl", "--out", "-"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_update_decides_the_next_request_and_is_on_record_with_the_new_policys_hash() {
    let pod = Pod::new("cmswap");
    let pki = TestPki::new();
    let upstream = pod.upstream(&pki).await;
    // Two ConfigMap volumes as the kubelet lays them out: the base and the
    // team's policy, which extends the base by its mounted path.
    let base = ConfigMapDir::new(
        &pod.dir.path().join("org-base"),
        &[("base.toml", ORG_BASE_V1)],
    );
    let base_file = base.path("base.toml");
    let (team_v1, team_v2) = (
        team_policy(&base_file, false),
        team_policy(&base_file, true),
    );
    let team = ConfigMapDir::new(&pod.dir.path().join("team"), &[("policy.toml", &team_v1)]);
    let sidecar = pod
        .sidecar_with_policy(&pki, &team.path("policy.toml"), &[])
        .ready()
        .await;
    assert_eq!(pod.curl("https://api.test/echo/a", &[]).await.0, 200);
    assert_eq!(pod.curl("https://api.test/admin", &[]).await.0, 403);

    // The team's ConfigMap updated: the next request is the new version's.
    team.update(&[("policy.toml", &team_v2)]);
    sidecar.wait_for("airlock: reloaded policy", 1).await;
    assert_eq!(
        pod.curl("https://api.test/admin", &[]).await.0,
        200,
        "{}",
        sidecar.log()
    );
    // The base's ConfigMap updated, the team's untouched: the base decides.
    base.update(&[("base.toml", ORG_BASE_V2)]);
    sidecar.wait_for("airlock: reloaded policy", 2).await;
    assert_eq!(
        pod.curl("https://api.test/echo/b", &[]).await.0,
        403,
        "{}",
        sidecar.log()
    );
    assert_eq!(pod.curl("https://api.test/echo", &[]).await.0, 200);
    assert_eq!(upstream.hits(), 3);

    // On record: each reload, with the hash of the policy now in force and
    // of every file it was read from, before the first request it decided.
    let events = recorded(&pod);
    let reloads: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "note" && e.get("policy").is_some())
        .collect();
    assert_eq!(reloads.len(), 2, "{events:#?}");
    let sha = |text: &str| airlock_auditor::sha256_hex(text.as_bytes());
    let top = team.path("policy.toml").display().to_string();
    for (reload, base_text) in reloads.iter().zip([ORG_BASE_V1, ORG_BASE_V2]) {
        let policy = &reload["policy"];
        assert_eq!(policy["name"], top.as_str(), "{reload:#}");
        assert_eq!(policy["sha256"], sha(&team_v2), "{reload:#}");
        assert_eq!(policy["text"], team_v2.as_str(), "{reload:#}");
        let files = policy["files"].as_array().unwrap();
        assert_eq!(files.len(), 2, "{reload:#}");
        assert_eq!(files[0]["sha256"], sha(base_text), "{reload:#}");
        assert!(
            files[0]["name"].as_str().unwrap().ends_with("base.toml"),
            "{reload:#}"
        );
        assert_eq!(files[1]["name"], top.as_str(), "{reload:#}");
        assert_eq!(files[1]["sha256"], sha(&team_v2), "{reload:#}");
        assert!(
            reload["text"].as_str().unwrap().contains(&sha(&team_v2)),
            "{reload:#}"
        );
    }
    // The session began under the first version.
    let sessions: serde_json::Value =
        serde_json::from_str(&pod.audit(&["sessions", "--json"])).unwrap();
    assert_eq!(sessions[0]["policy_sha256"], sha(&team_v1));
    let seq = |e: &serde_json::Value| e["seq"].as_u64().unwrap();
    // Each exchange by its decision: the first of its records.
    let http = |path: &str| -> Vec<(u64, String, String)> {
        let mut seen = std::collections::HashSet::new();
        events
            .iter()
            .filter(|e| e["kind"] == "http" && e["url"].as_str().is_some_and(|u| u.ends_with(path)))
            .filter(|e| seen.insert(e["exchange"].to_string()))
            .map(|e| {
                let text = |k: &str| e[k].as_str().unwrap_or("").to_owned();
                (seq(e), text("decision"), text("rule"))
            })
            .collect()
    };
    let (first, second) = (seq(reloads[0]), seq(reloads[1]));
    let admin = http("/admin");
    assert_eq!(admin.len(), 2, "{admin:?}");
    assert!(admin[0].0 < first && admin[0].1 == "deny", "{admin:?}");
    assert!(admin[1].0 > first && admin[1].1 == "allow", "{admin:?}");
    assert!(
        admin[1].2.starts_with(&format!("{top}:")),
        "decided by the team's file: {admin:?}"
    );
    let echo_b = http("/echo/b");
    assert!(
        echo_b.len() == 1 && echo_b[0].0 > second && echo_b[0].1 == "deny",
        "{echo_b:?}"
    );
    let timeline = pod.audit(&[
        "timeline",
        sessions[0]["id"].as_str().unwrap(),
        "--kind",
        "note",
    ]);
    assert!(
        timeline.contains(&format!("policy reloaded: {top} sha256 {}", sha(&team_v2))),
        "{timeline}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_report_requests_latency_dns_connections_and_audit_lag() {
    let (pod, _pki, _upstream, _sidecar) = pod_with_sidecar("metrics", &[]).await;
    assert_eq!(pod.curl("https://api.test/echo", &[]).await.0, 200);
    assert_eq!(pod.curl("https://api.test/admin", &[]).await.0, 403);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (code, metrics) = pod.admin("/metrics").await;
    assert_eq!(code, 200);
    for needle in [
        "airlock_requests_total{decision=\"allow\",host=\"api.test\"} 1",
        "airlock_requests_total{decision=\"deny\",host=\"api.test\"} 1",
        "airlock_request_duration_seconds_bucket{le=\"+Inf\"} ",
        "airlock_request_duration_seconds_count ",
        "airlock_dns_queries_total{decision=\"allow\"} ",
        "airlock_connections_open ",
        "airlock_audit_lag_seconds ",
        "# TYPE airlock_request_duration_seconds histogram",
    ] {
        assert!(
            metrics.contains(needle),
            "missing {needle:?} in:\n{metrics}"
        );
    }
    assert_eq!(pod.admin("/healthz").await.0, 200);
    assert_eq!(pod.admin("/nope").await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_exit_removes_exactly_its_table() {
    let pod = Pod::new("clean");
    sh(
        "ip",
        &[
            "netns",
            "exec",
            &pod.name,
            "nft",
            "add",
            "table",
            "inet",
            "foreign_test",
        ],
    );
    let pki = TestPki::new();
    let events = pod.dir.path().join("events.jsonl");
    let upstream = pod.upstream(&pki).await;
    // An older manifest's --nft (no program there) changes nothing: the
    // rules go in over netlink.
    let mut sidecar = pod
        .sidecar(
            &pki,
            &[
                "--events",
                events.to_str().unwrap(),
                "--nft",
                "/nonexistent/nft",
            ],
        )
        .ready()
        .await;
    let tables = pod.nft_tables();
    assert!(
        tables.contains(TABLE) && tables.contains("foreign_test"),
        "{tables}"
    );
    assert_eq!(pod.curl("https://api.test/echo", &[]).await.0, 200);
    assert_eq!(sidecar.stop(), Some(0), "{}", sidecar.log());
    let tables = pod.nft_tables();
    assert!(!tables.contains(TABLE), "{tables}");
    assert!(tables.contains("foreign_test"), "{tables}");
    assert!(
        sidecar.log().contains("removed nft table inet"),
        "{}",
        sidecar.log()
    );
    assert!(
        sidecar
            .log()
            .contains("airlock: --nft is ignored: the capture rules are loaded over netlink"),
        "{}",
        sidecar.log()
    );
    // --events FILE got the JSON lines.
    let lines = std::fs::read_to_string(&events).unwrap();
    assert!(
        lines
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .any(|e| e["kind"] == "dns" && e["name"] == "api.test"),
        "{lines}"
    );
    assert_eq!(upstream.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_the_rules_stay_and_traffic_fails() {
    let (pod, _pki, upstream, mut sidecar) = pod_with_sidecar("kill", &[]).await;
    assert_eq!(pod.curl("https://api.test/echo", &[]).await.0, 200);
    sidecar.signal(nix::sys::signal::Signal::SIGKILL);
    sidecar.wait();
    assert!(pod.nft_tables().contains(TABLE));
    let (_, _, out) = pod.curl("https://api.test/echo", &[]).await;
    assert_ne!(out.status, 0, "{out:?}");
    let (_, _, out) = pod
        .curl(
            "https://api.test/echo",
            &["--resolve", &format!("api.test:443:{NET_IP}")],
        )
        .await;
    assert_ne!(out.status, 0, "{out:?}");
    let out = pod.python_get("https://api.test/echo").await;
    assert_ne!(out.status, 0, "{out:?}");
    assert_eq!(upstream.hits(), 1, "traffic bypassed a dead sidecar");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pid_joins_the_network_namespace_of_a_process() {
    let pod = Pod::new("pid");
    let pki = TestPki::new();
    let upstream = pod.upstream(&pki).await;
    let mut sleeper = tokio::process::Command::new("ip")
        .args(["netns", "exec", &pod.name, "sleep", "600"])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = sleeper.id().unwrap();
    pod.pids.lock().unwrap().push(pid);
    // `ip netns exec` joins, then execs `sleep` in the same process.
    let want = std::fs::metadata(pod.netns_path()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !same_file(&format!("/proc/{pid}/ns/net"), &want) {
        assert!(Instant::now() < deadline, "sleep never entered the pod");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = pid.to_string();
    let mut sidecar = pod.sidecar(&pki, &["--pid", &pid]).ready().await;
    assert!(pod.nft_tables().contains(TABLE));
    let (code, _, out) = pod.curl("https://api.test/echo", &[]).await;
    assert_eq!(code, 200, "{out:?}\n{}", sidecar.log());
    assert_eq!(upstream.hits(), 1);
    assert_eq!(sidecar.stop(), Some(0));
    assert!(!pod.nft_tables().contains(TABLE));
    let _ = sleeper.kill().await;
}

fn same_file(path: &str, want: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(Path::new(path))
        .map(|m| m.ino() == want.ino() && m.dev() == want.dev())
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_a_secret_file_are_injected_for_the_pod_and_never_recorded() {
    const SECRET: &str = "sk-sidecar-0123456789abcdef";
    let pod = Pod::new("cred");
    // The secret comes from a file only the sidecar can read (a mounted
    // Kubernetes secret, say); the app in the pod never sees it.
    let token = pod.dir.path().join("token");
    std::fs::write(&token, format!("{SECRET}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    pod.write_policy(&format!(
        "{POLICY}\n[[credential]]\nname = \"api\"\nhosts = [\"api.test\"]\nheader = \"Authorization\"\nvalue = \"Bearer ${{file:{}}}\"\n",
        token.display()
    ));
    let pki = TestPki::new();
    let upstream = pod.upstream(&pki).await;
    let mut sidecar = pod.sidecar(&pki, &[]).ready().await;

    let out = pod.app(&["cat", token.to_str().unwrap()], &[]).await;
    assert_ne!(out.status, 0, "the app could read the secret file: {out:?}");

    let (code, body, out) = pod
        .curl(
            "https://api.test/echo",
            &["-H", "Authorization: Bearer forged-by-the-app"],
        )
        .await;
    assert_eq!(code, 200, "{out:?}\n{}", sidecar.log());
    assert_eq!(
        upstream.last_header("authorization").as_deref(),
        Some(format!("Bearer {SECRET}").as_str()),
        "the upstream must receive the real secret"
    );
    assert!(!body.contains(SECRET), "secret echoed to the app: {body}");
    assert!(body.contains("[secret:api]"), "{body}");
    assert!(!body.contains("forged-by-the-app"), "{body}");

    assert_eq!(sidecar.stop(), Some(0), "{}", sidecar.log());
    assert!(
        !sidecar.log().contains(SECRET),
        "secret in the sidecar's log"
    );
    // Not in the audit record, neither exported nor in the database's bytes.
    let sessions: serde_json::Value =
        serde_json::from_str(&pod.audit(&["sessions", "--json"])).unwrap();
    let id = sessions[0]["id"].as_str().unwrap();
    let jsonl = pod.dir.path().join("cred.jsonl");
    pod.audit(&[
        "export",
        id,
        "--format",
        "jsonl",
        "--out",
        jsonl.to_str().unwrap(),
    ]);
    let exported = std::fs::read_to_string(&jsonl).unwrap();
    assert!(exported.contains("[secret:api]"), "{exported}");
    assert!(!exported.contains(SECRET));
    for file in std::fs::read_dir(pod.db().parent().unwrap()).unwrap() {
        let bytes = std::fs::read(file.unwrap().path()).unwrap();
        assert!(
            !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "secret in the audit files"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_listens_where_it_is_told() {
    const ELSEWHERE: &str = "127.0.0.1:15099";
    let (pod, _pki, _upstream, _sidecar) = pod_with_sidecar("admin", &["--admin", ELSEWHERE]).await;
    assert_eq!(pod.admin_at(ELSEWHERE, "/healthz").await.0, 200);
    assert_eq!(pod.admin_at(ELSEWHERE, "/readyz").await.0, 200);
    // Nothing on the default port.
    assert_eq!(pod.admin("/healthz").await.0, 0);
    let out = pod
        .exec(
            &[],
            &[
                AIRLOCK,
                "sidecar",
                "--wait-ready",
                ELSEWHERE,
                "--wait-timeout",
                "5s",
            ],
            &[],
        )
        .await;
    assert_eq!(out.status, 0, "{out:?}");
}

/// `POLICY`, and POST /echo/pay/** held for a person.
const POLICY_WITH_ASK: &str = r#"version = 1
[[allow]]
host = "api.test"
port = 443
methods = ["GET"]
paths = ["/echo", "/echo/**"]

[[ask]]
host = "api.test"
port = 443
methods = ["POST"]
paths = ["/echo/pay/**"]
reason = "payments need a person"
timeout = "60s"
"#;

/// The approvals API on the sidecar's admin endpoint, called from inside
/// the pod as root with `token`: (status, JSON answer).
async fn approvals_api(
    pod: &Pod,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> (u16, serde_json::Value) {
    let auth = format!("Authorization: Bearer {token}");
    let url = format!("http://{ADMIN}{path}");
    let mut argv = vec![
        "curl",
        "-s",
        "--max-time",
        "5",
        "-X",
        method,
        "-H",
        &auth,
        "-w",
        "\n%{http_code}",
    ];
    if let Some(body) = body {
        argv.extend([
            "-H",
            "content-type: application/json",
            "--data-binary",
            body,
        ]);
    }
    argv.push(&url);
    let out = pod.exec(&[], &argv, &[]).await;
    let (answer, code) = out.stdout.rsplit_once('\n').unwrap_or(("", &out.stdout));
    let json = serde_json::from_str(answer).unwrap_or(serde_json::Value::Null);
    (code.trim().parse().unwrap_or(0), json)
}

/// The app (uid 65534) holds a POST, then, once the test hands it the
/// approval's id, tries to decide it itself through the admin endpoint it
/// shares with the sidecar, and to read the token file; prints what each
/// try got (a JSON line), then the held request's status and body.
const SELF_APPROVING_APP: &str = r#"
import json, os, sys, threading, time, urllib.request, urllib.error
talk, tokens, marker = sys.argv[1], sys.argv[2], sys.argv[3]
held = {}
def send():
    req = urllib.request.Request("https://api.test/echo/pay/" + marker, data=b'{"amount": 3}',
                                 method="POST", headers={"content-type": "application/json"})
    try:
        r = urllib.request.urlopen(req, timeout=60)
        held["got"] = [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        held["got"] = [e.code, e.read().decode()]
thread = threading.Thread(target=send)
thread.start()
while not os.path.exists(talk + "/id"):
    time.sleep(0.05)
approval = open(talk + "/id").read().strip()
def admin(method, path, token=None, body=None):
    req = urllib.request.Request("http://127.0.0.1:15021" + path, data=body, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        return urllib.request.urlopen(req, timeout=5).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return repr(e)
decision = json.dumps({"decision": "approve", "scope": "session"}).encode()
tries = {
    "list": admin("GET", "/v1/approvals"),
    "approve": admin("POST", "/v1/approvals/" + approval, body=decision),
    "guessed": admin("POST", "/v1/approvals/" + approval, "guessed-guessed-guessed", decision),
}
try:
    open(tokens).read()
    tries["tokens"] = "read"
except OSError as e:
    tries["tokens"] = e.errno
print(json.dumps(tries), flush=True)
open(talk + "/tried", "w").close()
thread.join()
print(json.dumps(held["got"]))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_tokens_let_a_person_decide_and_the_app_cannot() {
    use std::os::unix::fs::PermissionsExt;
    let pod = Pod::new("ask");
    pod.write_policy(POLICY_WITH_ASK);
    // The token file: mode 0600, in a directory only root may enter.
    let secret = pod.dir.path().join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let tokens = secret.join("approval-tokens");
    let marker = format!("sidecar-ask-{}", std::process::id());
    let token = format!("tok-{marker}-0123456789");
    std::fs::write(&tokens, format!("ops-bot:{token}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Where the app and the test leave word for each other.
    let talk = pod.dir.path().join("talk");
    std::fs::create_dir(&talk).unwrap();
    std::fs::set_permissions(&talk, std::fs::Permissions::from_mode(0o777)).unwrap();
    let pki = TestPki::new();
    let upstream = pod.upstream(&pki).await;
    let mut sidecar = pod
        .sidecar(&pki, &["--approval-token-file", tokens.to_str().unwrap()])
        .ready()
        .await;

    let ca = pod.ca_pem();
    let argv = [
        "/usr/bin/python3",
        "-c",
        SELF_APPROVING_APP,
        talk.to_str().unwrap(),
        tokens.to_str().unwrap(),
        &marker,
    ];
    let env = [("SSL_CERT_FILE", ca.to_str().unwrap())];
    let app = pod.app(&argv, &env);
    let person = async {
        // Found, and decided, through the admin endpoint with the token alone.
        let deadline = Instant::now() + Duration::from_secs(30);
        let id = loop {
            let (code, list) = approvals_api(&pod, "GET", "/v1/approvals", &token, None).await;
            assert_eq!(code, 200, "{list}\n{}", sidecar.log());
            let mine = list["pending"].as_array().and_then(|p| {
                p.iter()
                    .find(|v| v["url"].as_str().is_some_and(|u| u.contains(&marker)))
                    .map(|v| v["id"].as_str().unwrap().to_owned())
            });
            if let Some(id) = mine {
                break id;
            }
            assert!(Instant::now() < deadline, "held: {list}\n{}", sidecar.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(upstream.hits(), 0, "held, not forwarded");
        std::fs::write(talk.join("id"), &id).unwrap();
        let tried = talk.join("tried");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !tried.exists() {
            assert!(Instant::now() < deadline, "the app tried to decide");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let one = format!("/v1/approvals/{id}");
        let (code, still) = approvals_api(&pod, "GET", &one, &token, None).await;
        assert_eq!(code, 200, "{still}");
        assert_eq!(still["pending"]["id"], id.as_str(), "still held: {still}");
        let decision = r#"{"decision": "approve", "note": "checked by ops"}"#;
        let (code, decided) = approvals_api(&pod, "POST", &one, &token, Some(decision)).await;
        assert_eq!(code, 200, "{decided}");
        assert_eq!(decided["decided"]["by"], "token ops-bot", "{decided}");
        id
    };
    let (out, id) = tokio::join!(app, person);
    let mut lines = out.stdout.lines();
    let tries: serde_json::Value = serde_json::from_str(lines.next().unwrap_or(""))
        .unwrap_or_else(|e| panic!("the app's tries ({e}): {out:?}\n{}", sidecar.log()));
    assert_eq!(
        tries,
        serde_json::json!({"list": 401, "approve": 401, "guessed": 401, "tokens": 13}),
        "{out:?}"
    );
    let held: serde_json::Value = serde_json::from_str(lines.next().unwrap_or("")).unwrap();
    assert_eq!(held[0], 200, "the approved request completes: {out:?}");
    assert!(held[1].as_str().unwrap().contains(&marker), "{out:?}");
    assert_eq!(upstream.hits(), 1);

    assert_eq!(sidecar.stop(), Some(0), "{}", sidecar.log());
    let sessions: serde_json::Value =
        serde_json::from_str(&pod.audit(&["sessions", "--json"])).unwrap();
    let session = sessions[0]["id"].as_str().unwrap();
    let timeline = pod.audit(&["timeline", session]);
    assert!(
        timeline.contains(&format!(
            "approval {id} approved once by token ops-bot after"
        )),
        "{timeline}"
    );
    assert!(timeline.contains("\"checked by ops\""), "{timeline}");
    let jsonl = pod.dir.path().join("ask.jsonl");
    pod.audit(&[
        "export",
        session,
        "--format",
        "jsonl",
        "--out",
        jsonl.to_str().unwrap(),
    ]);
    let decided: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"] == "approval_decided")
        .collect();
    assert_eq!(decided.len(), 1, "{decided:#?}");
    assert_eq!(decided[0]["by"], "token ops-bot", "{decided:#?}");
    assert_eq!(decided[0]["outcome"], "approved", "{decided:#?}");
    pod.audit(&[
        "verify",
        session,
        "--audit-key",
        pod.dir.path().join("audit/audit.key").to_str().unwrap(),
    ]);
    assert!(!sidecar.log().contains(&token), "the token is never logged");
}

/// `--approval-webhook` from inside the pod: the sidecar's announcement
/// carries its socket mark, so its own capture rules let it out to the
/// receiver (unmarked, it would be redirected to the sidecar's proxy and
/// refused). The person then decides with `airlock approve` on the host.
#[tokio::test(flavor = "multi_thread")]
async fn the_webhook_reaches_a_receiver_outside_the_pod() {
    use tokio::io::AsyncReadExt;
    let pod = Pod::new("hook");
    pod.write_policy(POLICY_WITH_ASK);
    let pki = TestPki::new();
    let upstream = pod.upstream(&pki).await;
    let receiver = pod.listen_outside(&format!("{NET_IP}:8099"));
    let hook = format!("http://{NET_IP}:8099/airlock");
    let sidecar = pod
        .sidecar(&pki, &["--approval-webhook", &hook])
        .ready()
        .await;
    let marker = format!("sidecar-hook-{}", std::process::id());
    let url = format!("https://api.test/echo/pay/{marker}");
    let ca = pod.ca_pem();
    let argv = ["curl", "-s", "-X", "POST", "-d", "{}", &url];
    let env = [("CURL_CA_BUNDLE", ca.to_str().unwrap())];
    let app = pod.app(&argv, &env);
    let person = async {
        let accepted = tokio::time::timeout(Duration::from_secs(30), receiver.accept()).await;
        let (mut stream, _) = accepted
            .unwrap_or_else(|_| panic!("no announcement reached the receiver\n{}", sidecar.log()))
            .unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 8192];
        // One small POST: read until its JSON body has ended.
        while !request.ends_with(b"}") {
            let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
                .await
                .expect("the announcement arrives whole")
                .unwrap();
            assert!(n > 0, "the announcement was cut short");
            request.extend_from_slice(&buf[..n]);
        }
        let _ = stream
            .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
            .await;
        let text = String::from_utf8_lossy(&request).into_owned();
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
        let announced: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(announced["kind"], "approval_requested", "{announced}");
        assert!(
            announced["approval"]["url"]
                .as_str()
                .unwrap()
                .contains(&marker),
            "{announced}"
        );
        assert_eq!(upstream.hits(), 0, "held, not forwarded");
        let id = announced["approval"]["id"].as_str().unwrap().to_owned();
        let approved = Command::new(AIRLOCK)
            .args(["approve", &id])
            .output()
            .unwrap();
        assert!(approved.status.success(), "{approved:?}");
    };
    let (out, ()) = tokio::join!(app, person);
    assert!(
        out.stdout.contains(&marker),
        "the approved request completes: {out:?}"
    );
    assert_eq!(upstream.hits(), 1);
}

/// The forensic console follows a sidecar as it records (docs/console.md):
/// the app's refused request is on the live stream within a second, and the
/// stream ends when the sidecar stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_a_refusal_in_the_pod_as_it_happens() {
    let (pod, _pki, _upstream, mut sidecar) = pod_with_sidecar("console", &[]).await;
    let (code, _, out) = pod.curl("https://api.test/echo", &[]).await;
    assert_eq!(code, 200, "{out:?}\n{}", sidecar.log());
    let key = pod.dir.path().join("audit/audit.key");
    let console = Console::start(AIRLOCK, &pod.db(), &key).await;
    let sessions: serde_json::Value =
        serde_json::from_str(&pod.audit(&["sessions", "--json"])).unwrap();
    assert_eq!(sessions[0]["mode"], "sidecar", "{sessions:#}");
    let mut live = console.live(sessions[0]["id"].as_str().unwrap(), 0).await;
    live.until(Duration::from_secs(5), |e, d| {
        e == "ev" && d["kind"] == "http" && d["verdict"] == "allow"
    })
    .await;

    let (code, _, out) = pod.curl("https://api.test/admin", &[]).await;
    assert_eq!(code, 403, "{out:?}");
    let (ev, _) = live
        .until(Duration::from_secs(5), |e, d| {
            e == "ev"
                && d["verdict"] == "deny"
                && d["summary"].as_str().is_some_and(|s| s.contains("/admin"))
        })
        .await;
    let lag = since_recorded(&ev);
    assert!(
        lag < Duration::from_secs(1),
        "shown {lag:?} after it was recorded: {ev}"
    );

    assert_eq!(sidecar.stop(), Some(0), "{}", sidecar.log());
    live.until(Duration::from_secs(10), |e, _| e == "end").await;
}
