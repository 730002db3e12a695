//! End-to-end behaviour of the sandbox with real namespaces, real nftables,
//! real cgroups and real processes (run as root; see unprivileged.rs for the
//! ordinary-user side).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use airlock_shim::{ExitKind, Sandbox, ShimError, check_prerequisites};
use airlock_test_support::shim::{os, read, run, spec, workspace};
use nix::sys::socket::{getsockopt, sockopt::OriginalDst};

const PY: &str = "/usr/bin/python3";

fn original_dst(stream: &std::net::TcpStream) -> SocketAddr {
    let dst = getsockopt(stream, OriginalDst).expect("SO_ORIGINAL_DST");
    let ip = std::net::Ipv4Addr::from(u32::from_be(dst.sin_addr.s_addr));
    SocketAddr::from((ip, u16::from_be(dst.sin_port)))
}

#[test]
fn prerequisites_are_met_on_this_machine() {
    check_prerequisites().expect("namespaces usable");
}

#[test]
fn exit_code_propagates_and_env_is_exactly_the_given_one() {
    let ws = workspace();
    let mut s = spec(
        ws.path(),
        "tr '\\0' '\\n' < /proc/$$/environ > env.txt; pwd > pwd.txt; exit 7",
    );
    s.env.push(("AIRLOCK_TEST".into(), "x y=z".into()));
    let out = run(s);
    assert_eq!(out.status, ExitKind::Exited(7));
    assert_eq!(out.exit_code(), 7);
    assert!(!out.timed_out && !out.oom_killed && out.message().is_none());
    let mut env: Vec<String> = read(ws.path(), "env.txt")
        .lines()
        .map(String::from)
        .collect();
    env.sort();
    assert_eq!(
        env,
        vec![
            "AIRLOCK_TEST=x y=z",
            "LANG=C.UTF-8",
            "PATH=/usr/local/bin:/usr/bin:/bin"
        ]
    );
    let ws_real = std::fs::canonicalize(ws.path()).unwrap();
    assert_eq!(read(ws.path(), "pwd.txt").trim(), ws_real.to_str().unwrap());
}

#[test]
fn signals_and_missing_commands_map_to_shell_codes() {
    let ws = workspace();
    let out = run(spec(ws.path(), "kill -TERM $$"));
    assert_eq!(out.status, ExitKind::Signaled(15));
    assert_eq!(out.exit_code(), 143);
    let mut s = spec(ws.path(), "");
    s.command = vec![os("definitely-not-a-command-xyz")];
    assert_eq!(run(s).exit_code(), 127);
}

#[test]
fn filesystem_is_read_only_except_workspace_and_private_tmp() {
    let ws = workspace();
    let marker = format!("/tmp/airlock-host-marker-{}", std::process::id());
    std::fs::write(&marker, "host").unwrap();
    let script = format!(
        "touch ws-ok && echo ws >> r; \
         touch /etc/airlock-x 2>/dev/null && echo etc-writable >> r; \
         touch /usr/airlock-x 2>/dev/null && echo usr-writable >> r; \
         touch /run/airlock-x 2>/dev/null && echo run-writable >> r; \
         echo data > /tmp/t && cat /tmp/t >> r; \
         test -e {marker} && echo host-tmp-visible >> r; \
         test -e /root/.bashrc -o -e /root/.cargo && echo root-home-visible >> r; \
         echo 1 > /proc/sys/kernel/core_pattern 2>/dev/null && echo sysctl-writable >> r; \
         test -c /dev/null && echo x > /dev/null && echo devnull >> r; \
         test -e /dev/vda && echo disk-visible >> r; \
         head -c 4 /dev/urandom | wc -c >> r; \
         hostname >> r"
    );
    let out = run(spec(ws.path(), &script));
    std::fs::remove_file(&marker).ok();
    assert_eq!(out.exit_code(), 0);
    assert_eq!(read(ws.path(), "r"), "ws\ndata\ndevnull\n4\nairlock\n");
    assert!(
        ws.path().join("ws-ok").exists(),
        "workspace writes reach the host"
    );
    assert!(
        !std::path::Path::new("/tmp/t").exists(),
        "sandbox /tmp is private"
    );
}

#[test]
fn ro_rw_grants_and_hide_are_honoured() {
    let ws = workspace();
    let extra = workspace();
    let ro = extra.path().join("ro");
    let rw = extra.path().join("rw");
    let secret = ro.join("ca");
    std::fs::create_dir_all(&rw).unwrap();
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(ro.join("f"), "ro-content").unwrap();
    std::fs::write(secret.join("ca.key"), "KEY").unwrap();
    let script = format!(
        "cat {ro}/f >> r; echo; touch {ro}/new 2>/dev/null && echo ro-writable >> r; \
         touch {rw}/new && echo rw-ok >> r; \
         test -e {secret}/ca.key && echo key-visible >> r; true",
        ro = ro.display(),
        rw = rw.display(),
        secret = secret.display()
    );
    let mut s = spec(ws.path(), &script);
    s.ro = vec![ro.clone()];
    s.rw = vec![rw.clone()];
    s.hide = vec![secret.clone()];
    let out = run(s);
    assert_eq!(out.exit_code(), 0);
    assert_eq!(read(ws.path(), "r"), "ro-contentrw-ok\n");
    assert!(rw.join("new").exists());
}

#[test]
fn ca_bundle_is_mounted_read_only() {
    let ws = workspace();
    let mut s = spec(
        ws.path(),
        &format!(
            "cat {} > a; cat /etc/ssl/certs/ca-certificates.crt > b; echo x >> {} 2>/dev/null && echo writable > c; cat /etc/resolv.conf > d; true",
            airlock_shim::CA_BUNDLE_PATH,
            airlock_shim::CA_BUNDLE_PATH
        ),
    );
    s.ca_bundle_pem = Some(b"-----BEGIN CERTIFICATE-----\nTEST\n".to_vec());
    assert_eq!(run(s).exit_code(), 0);
    assert_eq!(read(ws.path(), "a"), "-----BEGIN CERTIFICATE-----\nTEST\n");
    if std::path::Path::new("/etc/ssl/certs/ca-certificates.crt").exists() {
        assert_eq!(read(ws.path(), "b"), read(ws.path(), "a"));
    }
    assert!(!ws.path().join("c").exists());
    assert!(read(ws.path(), "d").contains("nameserver 127.0.0.53"));
}

#[test]
fn namespaces_hide_host_processes_and_refuse_mount_and_unshare() {
    let ws = workspace();
    let script = "ls -d /proc/[0-9]* | sed 's,/proc/,,' > pids; \
                  mount -t tmpfs none /mnt 2>/dev/null && echo mounted >> r; \
                  unshare -r true 2>/dev/null && echo unshared >> r; \
                  unshare -n true 2>/dev/null && echo unshared-net >> r; \
                  grep CapEff /proc/self/status >> r; \
                  grep NoNewPrivs /proc/self/status >> r; \
                  grep Seccomp: /proc/self/status >> r; true";
    assert_eq!(run(spec(ws.path(), script)).exit_code(), 0);
    let pids: Vec<u32> = read(ws.path(), "pids")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(pids.contains(&1), "init is pid 1: {pids:?}");
    assert!(pids.iter().all(|p| *p < 20), "only sandbox pids: {pids:?}");
    let r = read(ws.path(), "r");
    assert!(!r.contains("mounted") && !r.contains("unshared"), "{r}");
    assert!(r.contains("CapEff:\t0000000000000000"), "{r}");
    assert!(r.contains("NoNewPrivs:\t1"), "{r}");
    assert!(r.contains("Seccomp:\t2"), "{r}");
}

#[test]
fn tcp_leaves_only_through_the_transparent_listener() {
    // A real service on the host's loopback must stay unreachable directly.
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let host_port = host.local_addr().unwrap().port();
    let ws = workspace();
    let script = format!(
        r#"
import socket
out = open("r", "w")
s = socket.create_connection(("203.0.113.7", 443), timeout=5)
s.sendall(b"hello")
out.write(s.recv(100).decode() + "\n")
s.close()
# The sandbox's loopback is its own: nothing there is redirected, and the
# host's loopback services are simply not in this namespace.
for port in [9, {host_port}]:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5)
        out.write("reached 127.0.0.1:%d\n" % port)
    except ConnectionRefusedError:
        out.write("refused 127.0.0.1:%d\n" % port)
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
c = socket.create_connection(srv.getsockname(), timeout=5)
peer, _ = srv.accept()
c.sendall(b"local")
out.write("local server: %s\n" % peer.recv(5).decode())
"#
    );
    let mut s = spec(ws.path(), "");
    s.command = vec![os(PY), os("-c"), os(&script)];
    let mut sb = Sandbox::spawn(s).unwrap();
    let net = sb.take_network().expect("network handles");
    assert!(sb.take_network().is_none());
    assert_eq!(net.transparent_addr, "127.0.0.1:15001".parse().unwrap());
    let proxy = std::thread::spawn(move || {
        let (mut c, peer) = net.transparent.accept().unwrap();
        let dst = original_dst(&c);
        assert!(
            peer.ip().is_loopback(),
            "replies need a routable source: {peer}"
        );
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).unwrap();
        c.write_all(format!("via-proxy {dst}").as_bytes()).unwrap();
        dst
    });
    sb.release().unwrap();
    let out = sb.wait().unwrap();
    assert_eq!(out.exit_code(), 0);
    assert_eq!(
        proxy.join().unwrap(),
        "203.0.113.7:443".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(
        read(ws.path(), "r"),
        format!(
            "via-proxy 203.0.113.7:443\nrefused 127.0.0.1:9\nrefused 127.0.0.1:{host_port}\nlocal server: local\n"
        )
    );
    assert!(
        host.accept().is_err(),
        "host loopback service was reached directly"
    );
}

#[test]
fn dns_is_captured_and_other_udp_icmp_ipv6_go_nowhere() {
    let ws = workspace();
    let script = r#"
import socket
out = open("r", "w")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.sendto(b"dns-query", ("8.8.8.8", 53))
data, peer = s.recvfrom(100)
out.write("dns:%s from %s:%d\n" % (data.decode(), peer[0], peer[1]))
t = socket.create_connection(("9.9.9.9", 53), timeout=5)
t.sendall(b"tcp-dns")
out.write("tcpdns:%s\n" % t.recv(100).decode())
for target in [("1.1.1.1", 443), ("127.0.0.1", 5353)]:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(1)
    try:
        u.sendto(b"quic", target)
        u.recvfrom(100)
        out.write("udp-leaked\n")
    except OSError as e:
        out.write("udp-blocked\n")
for fam, addr in [(socket.AF_INET6, ("2001:db8::1", 443)), (socket.AF_INET6, ("::1", 80))]:
    try:
        socket.socket(fam, socket.SOCK_STREAM).connect(addr)
        out.write("ipv6-connected\n")
    except OSError:
        out.write("ipv6-blocked\n")
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    out.write("raw-allowed\n")
except OSError:
    out.write("raw-blocked\n")
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    out.write("packet-allowed\n")
except OSError:
    out.write("packet-blocked\n")
"#;
    let mut s = spec(ws.path(), "");
    s.command = vec![os(PY), os("-c"), os(script)];
    let mut sb = Sandbox::spawn(s).unwrap();
    let net = sb.take_network().unwrap();
    let udp = std::thread::spawn(move || {
        let mut buf = [0u8; 100];
        let (n, from) = net.dns_udp.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"dns-query");
        net.dns_udp.send_to(b"answer", from).unwrap();
        let (mut c, _) = net.dns_tcp.accept().unwrap();
        let mut q = [0u8; 7];
        c.read_exact(&mut q).unwrap();
        c.write_all(b"tcp-answer").unwrap();
        // Nothing else may arrive on the DNS socket.
        net.dns_udp
            .set_read_timeout(Some(Duration::from_millis(2500)))
            .unwrap();
        net.dns_udp.recv_from(&mut buf).is_err()
    });
    sb.release().unwrap();
    assert_eq!(sb.wait().unwrap().exit_code(), 0);
    assert!(udp.join().unwrap(), "unexpected extra UDP datagram");
    let r = read(ws.path(), "r");
    assert_eq!(
        r,
        "dns:answer from 8.8.8.8:53\ntcpdns:tcp-answer\nudp-blocked\nudp-blocked\nipv6-blocked\nipv6-blocked\nraw-blocked\npacket-blocked\n"
    );
}

#[test]
fn timeout_kills_the_whole_tree_with_124() {
    let ws = workspace();
    let mut s = spec(
        ws.path(),
        "sleep 1000.111 & sleep 1000.111 & sleep 1000.111; echo never > r",
    );
    s.limits.timeout = Some(Duration::from_millis(500));
    let start = Instant::now();
    let out = run(s);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(out.timed_out);
    assert_eq!(out.exit_code(), 124);
    assert!(out.message().unwrap().contains("time limit"));
    assert!(!ws.path().join("r").exists());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        processes_with_arg("1000.111"),
        0,
        "sleepers survived the timeout"
    );
}

fn processes_with_arg(needle: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd).contains(needle)
        {
            n += 1;
        }
    }
    n
}

#[test]
fn memory_bomb_is_killed_and_reported() {
    let ws = workspace();
    let mut s = spec(ws.path(), "head -c 2000m /dev/zero | tail > /dev/null");
    s.command = vec![
        os(PY),
        os("-c"),
        os("x = []\nwhile True: x.append(bytearray(1 << 20))"),
    ];
    s.limits.memory_bytes = Some(64 << 20);
    let mut sb = Sandbox::spawn(s).unwrap();
    let cgroups = sb.cgroup_paths();
    assert!(!cgroups.is_empty(), "root gets a cgroup");
    assert!(sb.notices().is_empty(), "{:?}", sb.notices());
    sb.release().unwrap();
    let out = sb.wait().unwrap();
    assert!(out.oom_killed, "{out:?}");
    assert_eq!(out.exit_code(), 137);
    assert_eq!(
        out.message().as_deref(),
        Some("airlock: killed: memory limit (--memory 64M) exceeded")
    );
    assert!(cgroups.iter().all(|c| !c.exists()), "cgroup removed");
}

#[test]
fn fork_bomb_is_contained_by_pids() {
    let ws = workspace();
    let script = r#"
import os, time
n = 0
try:
    for _ in range(500):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError:
    pass
open("r", "w").write(str(n))
"#;
    let mut s = spec(ws.path(), "");
    s.command = vec![os(PY), os("-c"), os(script)];
    s.limits.pids = Some(20);
    s.limits.timeout = Some(Duration::from_secs(20));
    let start = Instant::now();
    let out = run(s);
    assert_eq!(out.exit_code(), 0);
    let forked: u32 = read(ws.path(), "r").parse().unwrap();
    assert!(forked < 20, "forked {forked} children with --pids 20");
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "children died with the command"
    );
}

#[test]
fn cpus_throttle() {
    let ws = workspace();
    let script = "import time\nt=time.time()\nc=time.process_time()\nwhile time.time()-t < 1: pass\nopen('r','w').write(str(time.process_time()-c))";
    let mut s = spec(ws.path(), "");
    s.command = vec![os(PY), os("-c"), os(script)];
    s.limits.cpus = Some(0.2);
    assert_eq!(run(s).exit_code(), 0);
    let cpu: f64 = read(ws.path(), "r").parse().unwrap();
    assert!(
        cpu < 0.5,
        "busy loop used {cpu}s CPU in 1s wall with --cpus 0.2"
    );
}

#[test]
fn twenty_sandboxes_in_parallel() {
    let handles: Vec<_> = (0..20)
        .map(|i| {
            std::thread::spawn(move || {
                let ws = workspace();
                let mut s = spec(ws.path(), &format!("echo {i} > r; exit {}", i % 5));
                s.limits.memory_bytes = Some(128 << 20);
                let out = run(s);
                (i, out.exit_code(), read(ws.path(), "r"))
            })
        })
        .collect();
    for h in handles {
        let (i, code, r) = h.join().unwrap();
        assert_eq!(code, i % 5);
        assert_eq!(r.trim(), i.to_string());
    }
}

#[test]
fn bad_specs_fail_with_actionable_errors() {
    let ws = workspace();
    let mut s = spec(ws.path(), "true");
    s.workspace = "/nonexistent/airlock".into();
    let err = Sandbox::spawn(s).unwrap_err();
    assert!(matches!(err, ShimError::Path { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/airlock"));
    let mut s = spec(ws.path(), "true");
    s.workspace = "/".into();
    assert!(matches!(Sandbox::spawn(s), Err(ShimError::InvalidSpec(_))));
    let mut s = spec(ws.path(), "true");
    s.command.clear();
    assert!(matches!(Sandbox::spawn(s), Err(ShimError::InvalidSpec(_))));
}

#[test]
fn user_switch_when_root() {
    let ws = workspace();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut s = spec(
        ws.path(),
        "id -u > r; id -g >> r; grep CapEff /proc/self/status >> r",
    );
    s.user = Some(airlock_shim::UserSpec {
        uid: 4242,
        gid: 4343,
    });
    assert_eq!(run(s).exit_code(), 0);
    assert_eq!(
        read(ws.path(), "r"),
        "4242\n4343\nCapEff:\t0000000000000000\n"
    );
}

#[test]
fn startup_is_fast() {
    let ws = workspace();
    // Warm caches once, then measure.
    let mut s = spec(ws.path(), "");
    s.command = vec![os("/bin/true")];
    run(s.clone());
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(run(s.clone()).exit_code(), 0);
        best = best.min(t.elapsed());
    }
    eprintln!("airlock-shim /bin/true: best of 5 = {best:?}");
    assert!(best < Duration::from_millis(200), "{best:?}");
}
