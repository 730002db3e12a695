//! The capture rules a sidecar installs in the app's network namespace: the
//! sandbox's model and netlink loader (`airlock_shim::capture_rules`), with
//! the sidecar's table, mark, priority and ports.
//!
//! One nftables table per sidecar, `inet airlock_sidecar_<transparent port>`:
//! a restarted sidecar with the same configuration replaces its own table in
//! one atomic transaction (nf_tables applies a batch all or nothing), and a
//! clean exit deletes exactly that table and nothing else.
//!
//! What the table does (OUTPUT hook only, i.e. traffic from this namespace):
//! - the NAT chain runs at priority -110, before the usual `dstnat` (-100)
//!   chains of iptables-nft or Docker in the same namespace: a connection
//!   is NATed once, by the first chain that maps it (nft(8), "NAT
//!   STATEMENTS"), so Docker's redirect of its embedded DNS at 127.0.0.11
//!   must not get there first;
//! - packets carrying the sidecar's socket mark (its own upstream and DNS
//!   sockets, see socket(7) `SO_MARK`) are left alone; setting a mark needs
//!   CAP_NET_ADMIN, so the app cannot forge it, whatever its uid;
//! - DNS (UDP and TCP port 53, any destination, IPv4) goes to the resolver;
//! - other IPv4 TCP, except to 127.0.0.0/8, goes to the transparent listener;
//! - everything else leaving the namespace is rejected: IPv6 (TCP reset;
//!   Airlock's DNS never hands out IPv6 addresses), other UDP (QUIC, NTP,
//!   ...) and ICMP. Loopback traffic and replies on connections others opened
//!   to the app (`ct state established`) pass.
//!
//! The rules go in before the listeners are bound, and stay when the sidecar
//! dies: a redirect to a port nobody listens on is answered with a reset
//! (UDP: port unreachable), so traffic fails instead of bypassing the proxy.

use std::net::{Ipv4Addr, SocketAddrV4};

pub(crate) use airlock_shim::capture_rules::TableName;
use airlock_shim::capture_rules::{self, Namespace, NatPriority, SocketMark};

/// The sidecar's socket mark unless `--socket-mark` says otherwise ("AIRL").
pub(crate) const DEFAULT_MARK: u32 = 0x4149_524c;

/// Everything the ruleset depends on.
#[derive(Debug, Clone)]
pub(crate) struct CaptureRules {
    pub table: TableName,
    pub mark: u32,
    pub transparent_port: u16,
    pub dns_port: u16,
}

impl CaptureRules {
    /// Install (or atomically replace) the table.
    pub(crate) fn install(&self) -> anyhow::Result<()> {
        Ok(self.capture().install()?)
    }

    /// Delete the table this sidecar installed; nothing else is touched.
    pub(crate) fn remove(&self) -> anyhow::Result<()> {
        Ok(self.capture().remove()?)
    }

    /// The listeners are on 127.0.0.1 (see `--transparent-port`, `--dns-port`).
    fn capture(&self) -> capture_rules::CaptureRules {
        capture_rules::CaptureRules {
            table: self.table.clone(),
            namespace: Namespace::Shared,
            nat_priority: NatPriority::BEFORE_DSTNAT,
            exempt_mark: Some(SocketMark(self.mark)),
            dns: SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.dns_port),
            transparent: SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.transparent_port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> CaptureRules {
        CaptureRules {
            table: TableName::for_port(15001),
            mark: DEFAULT_MARK,
            transparent_port: 15001,
            dns_port: 15053,
        }
    }

    #[test]
    fn the_mark_is_exempted_before_anything_is_redirected() {
        let script = rules().capture().script();
        let mark = script.find("meta mark 0x4149524c return").unwrap();
        let dns = script.find("udp dport 53 redirect to :15053").unwrap();
        let tcp = script.find("meta l4proto tcp redirect to :15001").unwrap();
        let loopback = script.find("ip daddr 127.0.0.0/8 return").unwrap();
        // DNS to a loopback resolver is captured too; other loopback traffic is not.
        assert!(mark < dns && dns < loopback && loopback < tcp);
    }

    #[test]
    fn the_redirects_run_before_other_nat_chains() {
        assert!(
            rules()
                .capture()
                .script()
                .contains("type nat hook output priority -110;")
        );
    }

    #[test]
    fn the_table_replaces_itself_atomically() {
        let script = rules().capture().script();
        assert!(script.starts_with(
            "table inet airlock_sidecar_15001\ndelete table inet airlock_sidecar_15001\n"
        ));
    }

    #[test]
    fn the_sidecar_ruleset_is_pinned() {
        assert_eq!(rules().capture().script(), SIDECAR);
    }

    const SIDECAR: &str = r#"table inet airlock_sidecar_15001
delete table inet airlock_sidecar_15001
table inet airlock_sidecar_15001 {
  chain nat_output {
    type nat hook output priority -110; policy accept;
    meta mark 0x4149524c return
    meta nfproto ipv4 udp dport 53 redirect to :15053
    meta nfproto ipv4 tcp dport 53 redirect to :15053
    ip daddr 127.0.0.0/8 return
    meta nfproto ipv4 meta l4proto tcp redirect to :15001
  }
  chain filter_output {
    type filter hook output priority 0; policy accept;
    meta mark 0x4149524c accept
    ip daddr 127.0.0.0/8 accept
    ip6 daddr ::1 accept
    ct state established,related accept
    meta l4proto tcp reject with tcp reset
    reject with icmpx type admin-prohibited
  }
}
"#;
}
