//! The sandbox network namespace: only `lo`, a default route through it, and
//! nftables rules (living and dying with the namespace) that send every TCP
//! connection to the transparent listener and all DNS to the DNS sockets;
//! everything else is rejected. See network_namespaces(7), nft(8).

use std::io::Write;
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};

use crate::spec::{DNS_ADDR, TRANSPARENT_ADDR};
use crate::sys;

/// The three sockets handed to the proxy (they stay in this namespace forever).
pub struct Sockets {
    pub transparent: TcpListener,
    pub dns_udp: UdpSocket,
    pub dns_tcp: TcpListener,
}

/// Redirect everything TCP to the listener, DNS to 127.0.0.53, reject the rest
/// (UDP incl. QUIC, ICMP, IPv6). Replies from the handed-over sockets are
/// `established` and pass. Traffic to 127.0.0.0/8 stays on the sandbox's own
/// `lo`: that loopback belongs to this namespace alone (the host's is not in
/// it), so programs that talk to a local server they started keep working.
fn ruleset() -> String {
    let (dns_ip, dns_port) = DNS_ADDR.split_once(':').unwrap_or(("127.0.0.53", "53"));
    let (lst_ip, lst_port) = TRANSPARENT_ADDR
        .split_once(':')
        .unwrap_or(("127.0.0.1", "15001"));
    format!(
        "table inet airlock {{
  chain nat_out {{
    type nat hook output priority -100; policy accept;
    meta nfproto ipv4 ip daddr {dns_ip} udp dport {dns_port} accept
    meta nfproto ipv4 ip daddr {dns_ip} tcp dport {dns_port} accept
    meta nfproto ipv4 udp dport 53 dnat ip to {dns_ip}:{dns_port}
    meta nfproto ipv4 tcp dport 53 dnat ip to {dns_ip}:{dns_port}
    meta nfproto ipv4 ip daddr 127.0.0.0/8 accept
    meta nfproto ipv4 meta l4proto tcp redirect to :{lst_port}
  }}
  chain filter_out {{
    type filter hook output priority 0; policy drop;
    ct state established,related accept
    meta nfproto ipv4 ip daddr 127.0.0.0/8 accept
    meta nfproto ipv4 ip daddr {lst_ip} tcp dport {lst_port} accept
    meta nfproto ipv4 ip daddr {dns_ip} udp dport {dns_port} accept
    meta nfproto ipv4 ip daddr {dns_ip} tcp dport {dns_port} accept
    meta l4proto tcp reject with tcp reset
    reject with icmpx type admin-prohibited
  }}
}}
"
    )
}

fn load_rules(nft: &Path) -> Result<(), String> {
    let mut child = Command::new(nft)
        .args(["-f", "-"])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("run {}: {e}", nft.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(ruleset().as_bytes())
            .map_err(|e| format!("feed nft: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("wait for nft: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "nft refused the sandbox ruleset ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// IPv6 goes nowhere: no addresses at all (the nft rules reject it too).
fn disable_ipv6() {
    for conf in ["all", "default", "lo"] {
        // Missing when the kernel has no IPv6: nothing to disable then.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{conf}/disable_ipv6"), "1");
    }
}

/// Run inside the fresh network namespace while still privileged in it.
pub fn setup(nft: &Path) -> Result<Sockets, String> {
    let ctl = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| format!("control socket: {e}"))?;
    sys::loopback_up(ctl.as_fd()).map_err(|e| format!("bring lo up: {e}"))?;
    disable_ipv6();
    crate::route::default_route_via_lo()?;
    let transparent =
        TcpListener::bind(TRANSPARENT_ADDR).map_err(|e| format!("bind {TRANSPARENT_ADDR}: {e}"))?;
    let dns_udp = UdpSocket::bind(DNS_ADDR).map_err(|e| format!("bind udp {DNS_ADDR}: {e}"))?;
    let dns_tcp = TcpListener::bind(DNS_ADDR).map_err(|e| format!("bind tcp {DNS_ADDR}: {e}"))?;
    load_rules(nft)?;
    Ok(Sockets {
        transparent,
        dns_udp,
        dns_tcp,
    })
}
