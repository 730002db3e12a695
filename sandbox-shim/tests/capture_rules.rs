//! The capture rules loaded over netlink are, in the kernel, exactly the
//! table `nft -f` makes of their script: each load runs in a network
//! namespace of its own (a thread's, after unshare(2)), and `nft
//! --debug=netlink list` reads back what the kernel holds, expression by
//! expression. Needs root and the `nft` program (the
//! Debian package `nftables`, installed by scripts/setup).

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Command, Stdio};

use airlock_shim::capture_rules::{CaptureRules, Namespace, NatPriority, SocketMark, TableName};
use nix::sched::{CloneFlags, unshare};

fn sidecar(port: u16) -> CaptureRules {
    CaptureRules {
        table: TableName::for_port(port),
        namespace: Namespace::Shared,
        nat_priority: NatPriority::BEFORE_DSTNAT,
        exempt_mark: Some(SocketMark(0x4149_524c)),
        dns: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 15053),
        transparent: SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
    }
}

/// Runs `f` on a thread in a fresh network namespace (children it starts
/// are in that namespace too).
fn in_fresh_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            unshare(CloneFlags::CLONE_NEWNET)
                .expect("unshare(CLONE_NEWNET): run the tests as root");
            f()
        })
        .join()
        .expect("the namespace's thread")
    })
}

fn nft(args: &[&str], stdin: &str) -> String {
    let mut child = Command::new("nft")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nft (Debian package nftables; scripts/setup installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn ruleset() -> String {
    nft(&["list", "ruleset"], "")
}

/// The kernel's tables, each rule as its expressions (`--debug=netlink`:
/// what the kernel holds, which the text can hide) and as text.
fn expressions() -> String {
    nft(&["--debug=netlink", "list", "ruleset"], "")
}

fn loaded_by_netlink(rules: &CaptureRules, read: fn() -> String) -> String {
    in_fresh_netns(|| {
        rules.install().expect("install over netlink");
        read()
    })
}

fn loaded_by_nft(rules: &CaptureRules) -> String {
    in_fresh_netns(|| {
        nft(&["-f", "-"], &rules.script());
        expressions()
    })
}

#[test]
fn the_kernel_holds_the_same_table_whether_netlink_or_nft_loaded_it() {
    let dnat = CaptureRules {
        transparent: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 15001),
        ..sidecar(15001)
    };
    for rules in [CaptureRules::sandbox(), sidecar(15001), dnat] {
        let by_netlink = loaded_by_netlink(&rules, expressions);
        assert!(
            by_netlink.contains(&format!("table inet {} {{", rules.table.as_str())),
            "{by_netlink}"
        );
        assert_eq!(by_netlink, loaded_by_nft(&rules), "{}", rules.script());
    }
}

#[test]
fn a_sidecars_table_replaces_itself_and_its_removal_touches_nothing_else() {
    let (installed_twice, after_removal, removing_again) = in_fresh_netns(|| {
        nft(&["add", "table", "inet", "foreign"], "");
        let rules = sidecar(15001);
        let other_port = sidecar(16001);
        rules.install().unwrap();
        other_port.install().unwrap();
        rules.install().unwrap();
        let installed_twice = ruleset();
        rules.remove().unwrap();
        let after_removal = ruleset();
        (installed_twice, after_removal, rules.remove().unwrap_err())
    });
    let once = loaded_by_netlink(&sidecar(15001), ruleset);
    let nat_chains = installed_twice.matches("chain nat_output").count();
    assert_eq!(nat_chains, 2, "{installed_twice}");
    assert!(
        installed_twice.contains(once.trim_end()),
        "{installed_twice}"
    );
    assert_eq!(
        installed_twice
            .matches("meta mark 0x4149524c return")
            .count(),
        2,
        "a replaced table's rules were not doubled: {installed_twice}"
    );
    assert!(
        !after_removal.contains("airlock_sidecar_15001"),
        "{after_removal}"
    );
    assert!(after_removal.contains("table inet airlock_sidecar_16001"));
    assert!(after_removal.contains("table inet foreign"));
    // Refused by the kernel: one line naming what, why and the fix.
    let line = removing_again.to_string();
    assert!(
        line.starts_with(
            "load the capture rules (table inet airlock_sidecar_15001): No such file or directory"
        ),
        "{line}"
    );
    assert!(line.contains("nf_tables") && !line.contains('\n'), "{line}");
}
