//! The sandbox network namespace: only `lo`, a default route through it, and
//! nftables rules (living and dying with the namespace) that send every TCP
//! connection to the transparent listener and all DNS to the DNS sockets;
//! everything else is rejected. See network_namespaces(7), nft(8).

use std::net::{SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};

use crate::capture_rules::{CaptureRules, LoadError};
use crate::route::RouteError;
use crate::spec::{DNS_ADDR, TRANSPARENT_ADDR};
use crate::sys;

/// The three sockets handed to the proxy (they stay in this namespace forever).
pub(crate) struct Sockets {
    pub transparent: TcpListener,
    pub dns_udp: UdpSocket,
    pub dns_tcp: TcpListener,
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
    #[error(transparent)]
    CaptureRules(#[from] LoadError),
}

/// IPv6 goes nowhere: no addresses at all (the nft rules reject it too).
fn disable_ipv6() {
    for conf in ["all", "default", "lo"] {
        // Missing when the kernel has no IPv6: nothing to disable then.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{conf}/disable_ipv6"), "1");
    }
}

/// Run inside the fresh network namespace while still privileged in it.
pub(crate) fn setup() -> Result<Sockets, NetError> {
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
    CaptureRules::sandbox().install()?;
    Ok(Sockets {
        transparent,
        dns_udp,
        dns_tcp,
    })
}
