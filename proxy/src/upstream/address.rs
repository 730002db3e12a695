//! Which upstream addresses are public.
//!
//! The proxy connects from the host's network, so an address that is private to
//! the host (loopback, RFC 1918, link-local — where cloud metadata lives — and
//! friends) would let sandboxed code reach services it must not. Those are
//! refused unless the operator pinned them (`--resolve`) or the policy names
//! them explicitly.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// True when `ip` is routable on the public internet.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // 169.254/16, including 169.254.169.254 metadata
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network", RFC 1122
        || (a == 100 && (64..128).contains(&b)) // shared address space, RFC 6598 (Alibaba metadata)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments, RFC 6890
        || (a == 198 && (b == 18 || b == 19)) // benchmarking, RFC 2544 (Airlock's synthetic DNS range)
        || a >= 240) // reserved, RFC 1112
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    // Addresses that embed an IPv4 address are judged by that address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let seg = ip.segments();
    if seg[0] == 0x64 && seg[1] == 0xff9b {
        // NAT64, RFC 6052
        let [.., a, b, c, d] = ip.octets();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    if seg[0] == 0x2002 {
        // 6to4, RFC 3056
        let [_, _, a, b, c, d, ..] = ip.octets();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (seg[0] & 0xfe00) == 0xfc00 // unique local, RFC 4193 (AWS metadata fd00:ec2::254)
        || (seg[0] & 0xffc0) == 0xfe80 // link-local
        || (seg[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
        || seg[..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible (deprecated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_metadata_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "0.0.0.0",
            "198.18.0.5",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "fd00:ec2::254",
            "fe80::1",
            "::",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip} must not be public");
        }
    }

    #[test]
    fn public_addresses_are_public() {
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "140.82.112.3",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip} must be public");
        }
    }
}
