//! `ip route add default dev lo src 127.0.0.1` over rtnetlink (see rtnetlink(7)),
//! built by hand with safe socket calls. The preferred source matters: without
//! it the kernel picks no source for non-loopback destinations (127.0.0.1 has
//! host scope) and replies from the proxy would go to 0.0.0.0.

use nix::errno::Errno;
use nix::sys::socket::SockProtocol;

use crate::netlink::{
    Message, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, NetlinkError, Socket,
};

const RTM_NEWROUTE: u16 = 24;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;
const RTA_OIF: u16 = 4;
const RTA_PREFSRC: u16 = 7;

/// The RTM_NEWROUTE request for 0.0.0.0/0 via `ifindex` with source 127.0.0.1.
fn request(ifindex: u32) -> Vec<u8> {
    let rtmsg = [
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
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    let mut msg = Message::new(RTM_NEWROUTE, flags, 1);
    msg.header(&rtmsg)
        .attr(RTA_OIF, &ifindex.to_ne_bytes())
        .attr(RTA_PREFSRC, &[127, 0, 0, 1]);
    msg.finish()
}

/// Why the default route could not be added.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RouteError {
    #[error("if_nametoindex(lo): {0}")]
    LoopbackIndex(#[source] Errno),
    #[error("add default route via lo: {0}")]
    Netlink(#[from] NetlinkError),
}

pub(crate) fn default_route_via_lo() -> Result<(), RouteError> {
    let ifindex = nix::net::if_::if_nametoindex("lo").map_err(RouteError::LoopbackIndex)?;
    Socket::open(SockProtocol::NetlinkRoute)?.request(&request(ifindex), 1)?;
    Ok(())
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
