//! The sandbox network namespace: only `lo`, a default route through it, and
//! nftables rules (living and dying with the namespace) that send every TCP
//! connection to the transparent listener and all DNS to the DNS sockets;
//! everything else is rejected. See network_namespaces(7), nft(8).

use std::io::Write;
use std::net::{SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use nix::errno::Errno;
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};

use crate::route::RouteError;
use crate::spec::{DNS_ADDR, TRANSPARENT_ADDR};
use crate::sys;

/// The three sockets handed to the proxy (they stay in this namespace forever).
pub(crate) struct Sockets {
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
    let (dns_ip, dns_port) = (DNS_ADDR.ip(), DNS_ADDR.port());
    let (lst_ip, lst_port) = (TRANSPARENT_ADDR.ip(), TRANSPARENT_ADDR.port());
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

/// Why the sandbox's network could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NetError {
    #[error("control socket: {0}")]
    ControlSocket(#[source] Errno),
    #[error("bring lo up: {0}")]
    LoopbackUp(#[source] std::io::Error),
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error("bind {what}{addr}: {source}")]
    Bind {
        /// "" for the transparent listener, "udp " or "tcp " for DNS.
        what: &'static str,
        addr: SocketAddrV4,
        #[source]
        source: std::io::Error,
    },
    #[error("run {}: {source}", .nft.display())]
    NftSpawn {
        nft: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("feed nft: {0}")]
    NftFeed(#[source] std::io::Error),
    #[error("wait for nft: {0}")]
    NftWait(#[source] std::io::Error),
    #[error("nft refused the sandbox ruleset ({status}): {stderr}")]
    NftRefused { status: ExitStatus, stderr: String },
}

fn load_rules(nft: &Path) -> Result<(), NetError> {
    let mut child = Command::new(nft)
        .args(["-f", "-"])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NetError::NftSpawn {
            nft: nft.to_path_buf(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(ruleset().as_bytes())
            .map_err(NetError::NftFeed)?;
    }
    let out = child.wait_with_output().map_err(NetError::NftWait)?;
    if !out.status.success() {
        return Err(NetError::NftRefused {
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
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
pub(crate) fn setup(nft: &Path) -> Result<Sockets, NetError> {
    let ctl = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(NetError::ControlSocket)?;
    sys::loopback_up(ctl.as_fd()).map_err(NetError::LoopbackUp)?;
    disable_ipv6();
    crate::route::default_route_via_lo()?;
    let bind = |what, addr| move |source| NetError::Bind { what, addr, source };
    let transparent = TcpListener::bind(TRANSPARENT_ADDR).map_err(bind("", TRANSPARENT_ADDR))?;
    let dns_udp = UdpSocket::bind(DNS_ADDR).map_err(bind("udp ", DNS_ADDR))?;
    let dns_tcp = TcpListener::bind(DNS_ADDR).map_err(bind("tcp ", DNS_ADDR))?;
    load_rules(nft)?;
    Ok(Sockets {
        transparent,
        dns_udp,
        dns_tcp,
    })
}

#[cfg(test)]
mod tests {
    /// Today's ruleset, pinned before it moves into one module with the sidecar's.
    #[test]
    fn the_sandbox_ruleset_is_pinned() {
        assert_eq!(super::ruleset(), SANDBOX);
    }

    const SANDBOX: &str = r#"table inet airlock {
  chain nat_out {
    type nat hook output priority -100; policy accept;
    meta nfproto ipv4 ip daddr 127.0.0.53 udp dport 53 accept
    meta nfproto ipv4 ip daddr 127.0.0.53 tcp dport 53 accept
    meta nfproto ipv4 udp dport 53 dnat ip to 127.0.0.53:53
    meta nfproto ipv4 tcp dport 53 dnat ip to 127.0.0.53:53
    meta nfproto ipv4 ip daddr 127.0.0.0/8 accept
    meta nfproto ipv4 meta l4proto tcp redirect to :15001
  }
  chain filter_out {
    type filter hook output priority 0; policy drop;
    ct state established,related accept
    meta nfproto ipv4 ip daddr 127.0.0.0/8 accept
    meta nfproto ipv4 ip daddr 127.0.0.1 tcp dport 15001 accept
    meta nfproto ipv4 ip daddr 127.0.0.53 udp dport 53 accept
    meta nfproto ipv4 ip daddr 127.0.0.53 tcp dport 53 accept
    meta l4proto tcp reject with tcp reset
    reject with icmpx type admin-prohibited
  }
}
"#;
}
