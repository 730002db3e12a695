//! `ip route add default dev lo src 127.0.0.1` over rtnetlink (see rtnetlink(7)),
//! built by hand with safe socket calls. The preferred source matters: without
//! it the kernel picks no source for non-loopback destinations (127.0.0.1 has
//! host scope) and replies from the proxy would go to 0.0.0.0.

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType, recv, send, socket,
};

const RTM_NEWROUTE: u16 = 24;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;
const RTA_OIF: u16 = 4;
const RTA_PREFSRC: u16 = 7;

fn attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

/// The RTM_NEWROUTE request for 0.0.0.0/0 via `ifindex` with source 127.0.0.1.
fn request(ifindex: u32) -> Vec<u8> {
    let mut body = vec![
        libc::AF_INET as u8, // rtm_family
        0,                   // rtm_dst_len: default route
        0,                   // rtm_src_len
        0,                   // rtm_tos
        RT_TABLE_MAIN,
        RTPROT_BOOT,
        RT_SCOPE_LINK,
        RTN_UNICAST,
        0,
        0,
        0,
        0, // rtm_flags
    ];
    attr(&mut body, RTA_OIF, &ifindex.to_ne_bytes());
    attr(&mut body, RTA_PREFSRC, &[127, 0, 0, 1]);
    let mut msg = Vec::with_capacity(16 + body.len());
    msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&RTM_NEWROUTE.to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // pid: kernel
    msg.extend_from_slice(&body);
    msg
}

/// Why the default route could not be added.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RouteError {
    #[error("if_nametoindex(lo): {0}")]
    LoopbackIndex(#[source] Errno),
    #[error("netlink {step}: {source}")]
    Netlink {
        step: &'static str,
        #[source]
        source: Errno,
    },
    #[error("add default route via lo: {0}")]
    Refused(#[source] std::io::Error),
    #[error("add default route via lo: unexpected netlink answer")]
    UnexpectedAnswer,
}

pub(crate) fn default_route_via_lo() -> Result<(), RouteError> {
    let netlink = |step| move |source| RouteError::Netlink { step, source };
    let ifindex = nix::net::if_::if_nametoindex("lo").map_err(RouteError::LoopbackIndex)?;
    let sock = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(netlink("socket"))?;
    use std::os::fd::AsRawFd;
    send(sock.as_raw_fd(), &request(ifindex), MsgFlags::empty()).map_err(netlink("send"))?;
    let mut buf = [0u8; 1024];
    let n = recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(netlink("recv"))?;
    // nlmsghdr (16 bytes) then nlmsgerr { int error; ... }.
    let kind = buf.get(4..6).map(|b| u16::from_ne_bytes([b[0], b[1]]));
    let errno = buf
        .get(16..20)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    match (n >= 20, kind, errno) {
        (true, Some(NLMSG_ERROR), Some(0)) => Ok(()),
        (true, Some(NLMSG_ERROR), Some(e)) => {
            Err(RouteError::Refused(std::io::Error::from_raw_os_error(-e)))
        }
        _ => Err(RouteError::UnexpectedAnswer),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_is_well_formed() {
        let msg = super::request(1);
        assert_eq!(msg.len() % 4, 0);
        assert_eq!(
            u32::from_ne_bytes(msg[..4].try_into().unwrap()) as usize,
            msg.len()
        );
    }
}
