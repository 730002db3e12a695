//! Real podman containers for the tests of `airlock sidecar` against them
//! (tests/containers.rs): podman as this machine needs it, the images
//! scripts/build-test-images makes, containers and networks removed on
//! drop, and listeners on a network's gateway address.
//!
//! Every name is unique to the test process and call ([`unique`]), because
//! nextest runs tests in parallel processes. Podman missing is a failure,
//! with the fix, not a skip.

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::client::ClientOutput;

/// `podman` with the runtime and cgroup manager this machine needs: crun
/// refuses the host's hybrid cgroup layout, and there is no systemd to
/// manage cgroups. Flags, not a containers.conf, so the host's
/// configuration stays as it was.
pub fn podman() -> Command {
    static PRESENT: OnceLock<()> = OnceLock::new();
    PRESENT.get_or_init(|| {
        let version = Command::new("podman").arg("--version").output();
        assert!(
            version.is_ok_and(|o| o.status.success()),
            "podman is missing: the container tests need podman and runc \
             (Debian: apt-get install podman runc; scripts/setup installs them)"
        );
        sweep_stale();
    });
    bare_podman()
}

fn bare_podman() -> Command {
    let mut cmd = Command::new("podman");
    cmd.args(RUNC.0).args(["--cgroup-manager", "cgroupfs"]);
    cmd
}

/// The OCI runtime a container runs under, as podman's global options.
#[derive(Debug, Clone, Copy)]
pub struct Runtime(pub &'static [&'static str]);

/// runc: the host's kernel, namespaces and seccomp (the default here).
pub const RUNC: Runtime = Runtime(&["--runtime", "runc"]);

/// gVisor's runsc. Its own network stack refuses to start here ("cannot
/// run with network enabled in root network namespace"), so the sentry
/// uses real sockets in the container's network namespace
/// (`network=host`): where the sidecar's rules apply.
pub const RUNSC: Runtime = Runtime(&["--runtime", "runsc", "--runtime-flag", "network=host"]);

/// Removes what test processes that were killed (a timeout, SIGKILL: no
/// drop ran) left behind: pods, containers, networks and volumes named by
/// [`unique`] for a process that no longer exists. Those of live processes,
/// tests running now, stay.
fn sweep_stale() {
    let stale = |name: &str| {
        let mut parts = name.rsplit('-');
        let (n, pid) = (parts.next(), parts.next());
        name.starts_with("al-")
            && n.is_some_and(|n| n.parse::<u32>().is_ok())
            && pid
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    for (list, remove) in [
        (
            &["pod", "ls", "--format", "{{.Name}}"][..],
            &["pod", "rm", "-f", "-t", "0"][..],
        ),
        (
            &["ps", "-a", "--format", "{{.Names}}"],
            &["rm", "-f", "-t", "0"],
        ),
        (
            &["network", "ls", "--format", "{{.Name}}"],
            &["network", "rm", "-f"],
        ),
        (
            &["volume", "ls", "--format", "{{.Name}}"],
            &["volume", "rm", "-f"],
        ),
    ] {
        let Ok(out) = bare_podman().args(list).output() else {
            continue;
        };
        let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|n| stale(n))
            .map(str::to_owned)
            .collect();
        if !names.is_empty() {
            let _ = bare_podman().args(remove).args(&names).output();
        }
    }
}

/// Runs podman, asserts success, returns stdout (trimmed).
pub fn pod_ok(args: &[&str]) -> String {
    let out = podman().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "podman {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `--ulimit` flags within the host's hard limits: podman's defaults
/// (nofile 1048576) are above this machine's, and runc then refuses to start.
pub fn ulimits() -> Vec<String> {
    static LIMITS: OnceLock<Vec<String>> = OnceLock::new();
    LIMITS
        .get_or_init(|| {
            let out = Command::new("bash")
                .args(["-c", "ulimit -Hn; ulimit -Hu"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            // 4096 is plenty for these tests; above it, runc may be refused
            // (seen with nproc=96365 here) even within the shell's limits.
            let mut lines = text
                .lines()
                .map(|l| l.trim().parse::<u64>().map_or(4096, |n| n.min(4096)));
            let (n, u) = (lines.next().unwrap(), lines.next().unwrap());
            vec![
                "--ulimit".into(),
                format!("nofile={n}:{n}"),
                "--ulimit".into(),
                format!("nproc={u}:{u}"),
            ]
        })
        .clone()
}

/// The images, built once per test process (and reused across runs while
/// their inputs are the same: scripts/build-test-images).
#[derive(Debug)]
pub struct Images {
    /// The Airlock image (deploy/Dockerfile.prebuilt).
    pub airlock: String,
    /// The app image: curl, python3.
    pub app: String,
}

/// Builds (or finds) the images with `REPO/scripts/build-test-images
/// AIRLOCK`, once per test process; later calls return the first result.
pub fn images(repo: &str, airlock: &str) -> &'static Images {
    static IMAGES: OnceLock<Images> = OnceLock::new();
    IMAGES.get_or_init(|| {
        drop(podman());
        let started = Instant::now();
        let out = Command::new(format!("{repo}/scripts/build-test-images"))
            .arg(airlock)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "scripts/build-test-images: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let get = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("no {key}= in {text}"))
                .to_owned()
        };
        #[allow(clippy::print_stderr)] // into the test's log
        {
            eprintln!("images ready in {:?}", started.elapsed());
        }
        Images {
            airlock: get("airlock"),
            app: get("app"),
        }
    })
}

/// A name unique to this process and call, for containers, pods, volumes:
/// `al-TAG-PID-N` (what [`sweep_stale`] recognises).
pub fn unique(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "al-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A podman object removed on drop (`podman rm -f`, `pod rm -f`, ...).
#[derive(Debug)]
pub struct Removed(Vec<String>);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = podman().args(&self.0).output();
    }
}

pub fn remove_on_drop(args: &[&str]) -> Removed {
    Removed(args.iter().map(|s| s.to_string()).collect())
}

/// A container removed on drop.
#[derive(Debug)]
pub struct Container {
    pub name: String,
    runtime: Runtime,
    _rm: Removed,
}

impl Container {
    /// `podman run -d --name NAME ARGS...`, with the ulimits this host needs.
    pub fn run(tag: &str, args: &[&str]) -> Self {
        Self::run_under(RUNC, tag, args)
    }

    /// [`Container::run`] under `runtime`.
    pub fn run_under(runtime: Runtime, tag: &str, args: &[&str]) -> Self {
        drop(podman());
        let name = unique(tag);
        let rm = remove_on_drop(&["rm", "-f", "-t", "0", &name]);
        let mut argv: Vec<String> = vec!["run".into(), "-d".into(), "--name".into(), name.clone()];
        argv.extend(ulimits());
        argv.extend(args.iter().map(|s| s.to_string()));
        let out = Command::new("podman")
            .args(runtime.0)
            .args(["--cgroup-manager", "cgroupfs"])
            .args(&argv)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "podman {argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self {
            name,
            runtime,
            _rm: rm,
        }
    }

    /// `podman run -d --pod POD --name NAME ARGS...`: a container in `pod`,
    /// sharing its network namespace.
    pub fn run_in(pod: &Pod, tag: &str, args: &[&str]) -> Self {
        let name = unique(tag);
        let rm = remove_on_drop(&["rm", "-f", "-t", "0", &name]);
        let out = podman()
            .env("CONTAINERS_CONF", pod.conf.path())
            .args(["run", "-d", "--pod", &pod.name, "--name", &name])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "podman run --pod {} {args:?}: {}",
            pod.name,
            String::from_utf8_lossy(&out.stderr)
        );
        Self {
            name,
            runtime: RUNC,
            _rm: rm,
        }
    }

    pub fn pid(&self) -> String {
        pod_ok(&["inspect", "-f", "{{.State.Pid}}", &self.name])
    }

    /// `podman exec` (as the container's user unless `extra` says otherwise).
    pub async fn exec(&self, extra: &[&str], argv: &[&str]) -> ClientOutput {
        let out = tokio::process::Command::new("podman")
            .args(self.runtime.0)
            .args(["--cgroup-manager", "cgroupfs", "exec"])
            .args(extra)
            .arg(&self.name)
            .args(argv)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        ClientOutput::from(out)
    }

    /// curl in the container: (HTTP status, body, output).
    pub async fn curl(&self, url: &str, extra: &[&str]) -> (u16, String, ClientOutput) {
        let mut argv = vec!["curl", "-sS", "--max-time", "10", "-w", "\n%{http_code}"];
        argv.extend_from_slice(extra);
        argv.push(url);
        let out = self.exec(&[], &argv).await;
        let (body, code) = out.stdout.rsplit_once('\n').unwrap_or(("", &out.stdout));
        (code.trim().parse().unwrap_or(0), body.to_owned(), out)
    }

    pub async fn python(&self, extra: &[&str], script: &str) -> ClientOutput {
        self.exec(extra, &["python3", "-c", script]).await
    }

    /// The rules in the container's network namespace (no counters).
    pub fn ruleset(&self) -> String {
        nsenter_ok(&self.pid(), &["nft", "-s", "list", "ruleset"])
    }

    pub fn logs(&self) -> String {
        let out = podman().args(["logs", &self.name]).output().unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

/// A podman bridge network of the test's own, removed on drop. Not the
/// default `podman` network: when a container on a bridge goes, Linux gives
/// the bridge the MAC address of another port, and the containers that
/// remain cannot reach the gateway until their ARP entry expires (seen here
/// with netavark 1.4). Tests running in parallel would break each other's
/// connections. Without podman's DNS (aardvark), like the default network:
/// the containers use the host's resolvers, or the test's own.
#[derive(Debug)]
pub struct Net {
    pub name: String,
    pub gateway: String,
    /// The network's subnet in CIDR form, e.g. `10.89.0.0/24`.
    pub subnet: String,
    pub bridge: String,
    _rm: Removed,
}

impl Net {
    pub fn new(tag: &str) -> Self {
        let name = unique(tag);
        pod_ok(&["network", "create", "--disable-dns", &name]);
        let rm = remove_on_drop(&["network", "rm", "-f", &name]);
        let info = pod_ok(&[
            "network",
            "inspect",
            &name,
            "-f",
            "{{.NetworkInterface}} {{range .Subnets}}{{.Gateway}} {{.Subnet}}{{end}}",
        ]);
        let mut parts = info.split(' ');
        let (bridge, gateway, subnet) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        Self {
            gateway: gateway.to_owned(),
            subnet: subnet.to_owned(),
            bridge: bridge.to_owned(),
            name,
            _rm: rm,
        }
    }
}

/// A podman pod on a [`Net`], removed (with its containers) on drop. Its
/// containers share the network namespace of its infra container, as a
/// Kubernetes pod's do.
#[derive(Debug)]
pub struct Pod {
    pub name: String,
    /// A containers.conf with [`ulimits`] for this pod's commands only:
    /// the infra container gets podman's defaults otherwise, which runc
    /// refuses here, and `pod create` has no `--ulimit` for it.
    conf: tempfile::NamedTempFile,
    _rm: Removed,
}

impl Pod {
    pub fn new(tag: &str, net: &Net) -> Self {
        let name = unique(tag);
        let limits = ulimits();
        let conf = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            conf.path(),
            format!(
                "[containers]\ndefault_ulimits = [\"{}\", \"{}\"]\n",
                limits[1], limits[3]
            ),
        )
        .unwrap();
        let rm = remove_on_drop(&["pod", "rm", "-f", "-t", "0", &name]);
        let out = podman()
            .env("CONTAINERS_CONF", conf.path())
            .args(["pod", "create", "--network", &net.name, "--name", &name])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "podman pod create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self {
            name,
            conf,
            _rm: rm,
        }
    }
}

/// How a running container is confined, as the kernel and podman see it:
/// "CAPS ro=READ_ONLY user=USER nnp=NO_NEW_PRIVS", e.g.
/// "[CAP_NET_ADMIN] ro=true user=0 nnp=1".
pub fn confinement(name: &str) -> String {
    let info = pod_ok(&[
        "inspect",
        "-f",
        "{{.EffectiveCaps}} ro={{.HostConfig.ReadonlyRootfs}} user={{.Config.User}} {{.State.Pid}}",
        name,
    ]);
    let (info, pid) = info.rsplit_once(' ').unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nnp = status
        .lines()
        .find_map(|l| l.strip_prefix("NoNewPrivs:"))
        .unwrap()
        .trim()
        .to_owned();
    format!("{info} nnp={nnp}")
}

/// A command in the network namespace of `pid`, run from the host as root.
pub fn nsenter_ok(pid: &str, argv: &[&str]) -> String {
    let out = Command::new("nsenter")
        .args(["-t", pid, "-n", "--"])
        .args(argv)
        .output()
        .unwrap();
    assert!(out.status.success(), "nsenter {argv:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A TCP listener on the host at `ip` (the bridge's gateway): reachable
/// from the containers on the bridge, not from other machines. With
/// IP_FREEBIND (ip(7)): a network's bridge and its address appear only
/// with its first container, and some tests need the port before that.
pub fn listen_at(ip: &str) -> tokio::net::TcpListener {
    use nix::sys::socket::{
        AddressFamily, Backlog, SockFlag, SockType, SockaddrIn, bind, listen, setsockopt, socket,
        sockopt,
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    setsockopt(&fd, sockopt::IpFreebind, &true).unwrap();
    let addr: std::net::SocketAddrV4 = format!("{ip}:0").parse().unwrap();
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::from(addr),
    )
    .unwrap();
    listen(&fd, Backlog::new(128).unwrap()).unwrap();
    tokio::net::TcpListener::from_std(std::net::TcpListener::from(fd)).unwrap()
}

/// A TCP relay at `ip` (a bridge's gateway) to `to` (a test server on the
/// host's loopback), and its port: the server becomes reachable from the
/// containers on that bridge, and from nowhere else.
pub fn relay_at(ip: &str, to: std::net::SocketAddr) -> u16 {
    let listener = listen_at(ip);
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut out) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
        }
    });
    port
}
