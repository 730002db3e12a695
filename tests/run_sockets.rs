//! Which sockets a command inside `airlock run` can open, tried from inside a
//! real sandbox by python3: the address families it needs (IPv4 and IPv6,
//! netlink's routing protocol to read its own addresses, Unix sockets as
//! `--allow-unix-sockets` says) work; every other family, every other netlink
//! protocol and io_uring's way around socket(2) are refused with the errno a
//! kernel without them gives. Each refusal is also tried on the host, so the
//! test shows which ones the host kernel would have allowed (the sandbox's
//! filter, not a missing module, refused them).
//!
//! The same probe runs under `--isolation gvisor`, where the sockets are
//! gVisor's own (its sentry opens real ones only for inet and netlink
//! route, in the namespace the proxy captures); where gVisor answers
//! differently, the test names the documented difference (docs/isolation.md).

use std::collections::BTreeMap;
use std::path::Path;

use airlock_test_support::client::ClientOutput;
use airlock_test_support::isolation::Isolation;
use airlock_test_support::per_isolation;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

const PY: &str = "/usr/bin/python3";

/// Tries each `name family type protocol` line of stdin-less argv[1] with
/// socket(2) (`pair` as the name's prefix: socketpair(2)) and prints
/// `name ok` or `name ERRNO`. Then io_uring_setup(2) (425 on x86_64 and
/// aarch64), the loopback TCP and UDP round trips, and if_nameindex(3).
const PROBE: &str = r#"
import ctypes, errno, os, socket, sys

def outcome(make):
    try:
        made = make()
        for s in made if isinstance(made, tuple) else (made,):
            s.close()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

for line in sys.argv[1].strip().splitlines():
    name, family, kind, proto = line.split()
    family, kind, proto = int(family, 0), int(kind, 0), int(proto, 0)
    if name.startswith("pair"):
        print(name, outcome(lambda: socket.socketpair(family, kind, proto)))
    else:
        print(name, outcome(lambda: socket.socket(family, kind, proto)))

libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 8, params)
print("io_uring_setup", "ok" if fd >= 0 else errno.errorcode[ctypes.get_errno()])

def round_trip(family, host):
    try:
        srv = socket.socket(family, socket.SOCK_STREAM)
        srv.bind((host, 0))
        srv.listen(1)
        c = socket.create_connection(srv.getsockname()[:2], timeout=5)
        conn, _ = srv.accept()
        c.sendall(b"tcp")
        tcp = conn.recv(3).decode()
        u = socket.socket(family, socket.SOCK_DGRAM)
        u.bind((host, 0))
        u.sendto(b"udp", u.getsockname())
        return tcp + "+" + u.recv(3).decode()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

print("loopback_v4", round_trip(socket.AF_INET, "127.0.0.1"))
try:
    print("if_nameindex", ",".join(n for _, n in socket.if_nameindex()))
except OSError as e:
    print("if_nameindex", errno.errorcode.get(e.errno, str(e.errno)))
"#;

/// What is tried: name, family, type, protocol (address_families(7),
/// netlink(7), packet(7), vsock(7)), and what the sandbox must answer.
const REFUSED: &[(&str, &str, &str)] = &[
    ("vsock_stream", "40 1 0", "EAFNOSUPPORT"),
    ("vsock_dgram", "40 2 0", "EAFNOSUPPORT"),
    ("packet_raw", "17 3 0x0300", "EAFNOSUPPORT"),
    ("packet_dgram", "17 2 0x0300", "EAFNOSUPPORT"),
    ("inet_sock_packet", "2 10 0x0300", "EPERM"),
    ("inet_raw", "2 3 1", "EPERM"),
    ("inet6_raw", "10 3 58", "EPERM"),
    ("bluetooth_hci", "31 3 1", "EAFNOSUPPORT"),
    ("can_raw", "29 3 1", "EAFNOSUPPORT"),
    ("tipc", "30 5 0", "EAFNOSUPPORT"),
    ("rds", "21 5 0", "EAFNOSUPPORT"),
    ("alg", "38 5 0", "EAFNOSUPPORT"),
    ("xdp", "44 3 0", "EAFNOSUPPORT"),
    ("pf_key", "15 3 2", "EAFNOSUPPORT"),
    ("pppox", "24 1 0", "EAFNOSUPPORT"),
    ("llc", "26 2 0", "EAFNOSUPPORT"),
    ("kcm", "41 2 0", "EAFNOSUPPORT"),
    ("qipcrtr", "42 2 0", "EAFNOSUPPORT"),
    ("smc", "43 1 0", "EAFNOSUPPORT"),
    ("mctp", "45 2 0", "EAFNOSUPPORT"),
    ("future_family_46", "46 1 0", "EAFNOSUPPORT"),
    ("future_family_200", "200 2 0", "EAFNOSUPPORT"),
    ("netlink_sock_diag", "16 3 4", "EPROTONOSUPPORT"),
    ("netlink_xfrm", "16 3 6", "EPROTONOSUPPORT"),
    ("netlink_audit", "16 3 9", "EPROTONOSUPPORT"),
    ("netlink_connector", "16 3 11", "EPROTONOSUPPORT"),
    ("netlink_netfilter", "16 3 12", "EPROTONOSUPPORT"),
    ("netlink_uevent", "16 2 15", "EPROTONOSUPPORT"),
    ("netlink_generic", "16 3 16", "EPROTONOSUPPORT"),
    ("inet_smc_protocol", "2 1 256", "EPROTONOSUPPORT"),
    ("inet6_sctp", "10 1 132", "EPROTONOSUPPORT"),
    ("inet_dccp", "2 6 33", "ESOCKTNOSUPPORT"),
    ("pair_tipc", "30 5 0", "EAFNOSUPPORT"),
    ("pair_inet", "2 1 0", "EAFNOSUPPORT"),
];

/// What must keep working, whatever the flags.
const ALLOWED: &[(&str, &str)] = &[
    ("inet_tcp", "2 1 0"),
    ("inet_udp", "2 2 17"),
    ("inet6_tcp", "10 0x80001 6"), // SOCK_STREAM | SOCK_CLOEXEC
    ("inet6_udp", "10 2 0"),
    ("netlink_route_raw", "16 3 0"),
    ("netlink_route_dgram", "16 2 0"),
    ("pair_unix_stream", "1 1 0"),
    ("pair_unix_dgram", "1 2 0"),
];

/// Decided by `--allow-unix-sockets`.
const UNIX: &[(&str, &str)] = &[("unix_stream", "1 1 0"), ("unix_dgram", "1 2 0")];

fn probe_lines() -> String {
    let refused = REFUSED.iter().map(|(name, spec, _)| (name, spec));
    let others = ALLOWED.iter().chain(UNIX).map(|(name, spec)| (name, spec));
    refused
        .chain(others)
        .map(|(name, spec)| format!("{name} {spec}\n"))
        .collect()
}

/// The probe's `name outcome` lines.
fn outcomes(out: &ClientOutput) -> BTreeMap<String, String> {
    assert_eq!(out.status, 0, "the probe failed: {out:?}");
    out.stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// `airlock run --no-audit ARGS -- COMMAND` with the workspace as cwd.
fn airlock_run(ws: &Path, args: &[&str], command: &[&str]) -> ClientOutput {
    let out = std::process::Command::new(AIRLOCK)
        .current_dir(ws)
        .args(["run", "--no-audit", "--timeout", "60s"])
        .args(args)
        .arg("--")
        .args(command)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .output()
        .unwrap();
    ClientOutput::from(out)
}

fn probe_in_sandbox(args: &[&str]) -> BTreeMap<String, String> {
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    let lines = probe_lines();
    outcomes(&airlock_run(ws.path(), args, &[PY, "-c", PROBE, &lines]))
}

/// What gVisor's kernel answers where it differs from the namespace
/// sandbox's filter (docs/isolation.md, "Sockets under gVisor"): another
/// errno for the same refusal, and two families it implements itself.
const GVISOR_DIFFERS: &[(&str, &str)] = &[
    // Refused all the same, with gVisor's errno: it has no raw or packet
    // sockets without --net-raw, and no SCTP, DCCP or SMC protocol.
    ("inet_sock_packet", "EAFNOSUPPORT"),
    ("inet_raw", "EAFNOSUPPORT"),
    ("inet6_raw", "EAFNOSUPPORT"),
    ("inet_smc_protocol", "EAFNOSUPPORT"),
    ("inet6_sctp", "EAFNOSUPPORT"),
    ("inet_dccp", "EAFNOSUPPORT"),
    ("pair_inet", "ESOCKTNOSUPPORT"),
    // gVisor's own uevent socket: the sentry's, it hears nothing of the
    // host's devices and sends nothing anywhere.
    ("netlink_uevent", "ok"),
];

/// What `isolation` must answer for a refused `name` that the namespace
/// sandbox refuses with `errno`.
fn refusal(isolation: Isolation, name: &str, errno: &'static str) -> &'static str {
    match isolation {
        Isolation::Namespaces => errno,
        Isolation::Gvisor => GVISOR_DIFFERS
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(errno, |(_, e)| e),
    }
}

fn probe_on_host() -> BTreeMap<String, String> {
    let out = std::process::Command::new(PY)
        .args(["-c", PROBE, &probe_lines()])
        .output()
        .unwrap();
    outcomes(&ClientOutput::from(out))
}

#[test]
fn only_inet_inet6_netlink_route_and_unix_as_flagged_sockets_can_be_created() {
    let host = probe_on_host();
    let inside = probe_in_sandbox(&[]);

    let mut wrong = Vec::new();
    for (name, _, expected) in REFUSED {
        if inside.get(*name).map(String::as_str) != Some(*expected) {
            wrong.push(format!(
                "{name}: {:?}, expected {expected}",
                inside.get(*name)
            ));
        }
    }
    for (name, _) in ALLOWED {
        if inside.get(*name).map(String::as_str) != Some("ok") {
            wrong.push(format!("{name}: {:?}, expected ok", inside.get(*name)));
        }
    }
    for (name, _) in UNIX {
        if inside.get(*name).map(String::as_str) != Some("EACCES") {
            wrong.push(format!(
                "{name} (no flag): {:?}, expected EACCES",
                inside.get(*name)
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}\ninside: {inside:#?}");

    // The families the host kernel offers are the ones this test really
    // exercises; netlink's other protocols exist on every Linux.
    let host_allows: Vec<&str> = REFUSED
        .iter()
        .filter(|(name, _, _)| host.get(*name).map(String::as_str) == Some("ok"))
        .map(|(name, _, _)| *name)
        .collect();
    eprintln!("refused in the sandbox although the host kernel allows them: {host_allows:?}");
    for name in ["netlink_audit", "netlink_generic", "netlink_sock_diag"] {
        assert!(host_allows.contains(&name), "host: {host:#?}");
    }

    // Still usable for what a program needs: loopback TCP and UDP inside the
    // sandbox's own namespace, and reading its interfaces over NETLINK_ROUTE.
    assert_eq!(inside["loopback_v4"], "tcp+udp", "{inside:#?}");
    assert!(
        inside["if_nameindex"].split(',').any(|n| n == "lo"),
        "{inside:#?}"
    );
}

/// Under gVisor: every family the namespace sandbox refuses is refused by
/// gVisor's kernel too (its errno where it differs), the needed ones work,
/// and `AF_UNIX` sockets exist with or without `--allow-unix-sockets`: they
/// are the sentry's own, never a host socket file (the escape suite tries
/// the host's podman socket). io_uring is gVisor's own, in the sentry: what
/// it could open is a sentry socket like any other, in the captured
/// namespace.
#[test]
fn under_gvisor_other_families_are_refused_and_unix_sockets_are_gvisors_own() {
    for flag in [&[][..], &["--allow-unix-sockets"][..]] {
        let args = [&Isolation::Gvisor.args()[..], flag].concat();
        let inside = probe_in_sandbox(&args);
        let mut wrong = Vec::new();
        for (name, _, errno) in REFUSED {
            let want = refusal(Isolation::Gvisor, name, errno);
            if inside.get(*name).map(String::as_str) != Some(want) {
                wrong.push(format!("{name}: {:?}, expected {want}", inside.get(*name)));
            }
        }
        for (name, _) in ALLOWED.iter().chain(UNIX) {
            if inside.get(*name).map(String::as_str) != Some("ok") {
                wrong.push(format!("{name}: {:?}, expected ok", inside.get(*name)));
            }
        }
        assert!(
            wrong.is_empty(),
            "{flag:?}: {wrong:#?}\ninside: {inside:#?}"
        );
        assert_eq!(inside["io_uring_setup"], "ok", "{inside:#?}");
        assert_eq!(inside["loopback_v4"], "tcp+udp", "{inside:#?}");
        assert!(
            inside["if_nameindex"].split(',').any(|n| n == "lo"),
            "{inside:#?}"
        );
    }
}

#[test]
fn io_uring_cannot_create_sockets_around_the_filter() {
    let inside = probe_in_sandbox(&["--allow-unix-sockets"]);
    assert_eq!(inside["io_uring_setup"], "EPERM", "{inside:#?}");
}

#[test]
fn unix_sockets_follow_the_flag_and_socketpair_always_works() {
    let with_flag = probe_in_sandbox(&["--allow-unix-sockets"]);
    for (name, _) in UNIX.iter().chain(ALLOWED) {
        assert_eq!(with_flag[*name], "ok", "{name}: {with_flag:#?}");
    }
    // The flag opens AF_UNIX, nothing else.
    for (name, _, expected) in REFUSED {
        assert_eq!(with_flag[*name], *expected, "{name}: {with_flag:#?}");
    }
}

/// `ip` reads its addresses over NETLINK_ROUTE; changes need CAP_NET_ADMIN,
/// which the command does not hold (rtnetlink(7)), so netlink stays read-only.
/// gVisor's netlink refuses the same changes with EACCES ("Permission
/// denied") rather than EPERM.
fn ip_reads_its_own_addresses_but_cannot_change_them_under(isolation: Isolation) {
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    let script = "ip -brief addr show dev lo; \
                  ip link set dev lo mtu 1280 2>&1 && echo CHANGED; \
                  ip addr add 192.0.2.1/32 dev lo 2>&1 && echo CHANGED; \
                  ip route add 198.51.100.0/24 dev lo 2>&1 && echo CHANGED; \
                  true";
    let out = airlock_run(ws.path(), &isolation.args(), &["sh", "-c", script]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.contains("127.0.0.1/8"), "{out:?}");
    assert!(!out.stdout.contains("CHANGED"), "{out:?}");
    let refused = match isolation {
        Isolation::Namespaces => {
            assert!(out.stdout.starts_with("lo "), "{out:?}");
            "Operation not permitted"
        }
        Isolation::Gvisor => "Permission denied",
    };
    assert_eq!(out.stdout.matches(refused).count(), 3, "{out:?}");
}

per_isolation!(sync ip_reads_its_own_addresses_but_cannot_change_them_under =>
    ip_reads_its_own_addresses_but_cannot_change_them,
    ip_reads_its_own_addresses_but_cannot_change_them_under_gvisor);
