//! The nftables capture rules, for both places Airlock captures traffic: the
//! sandbox's own network namespace and an app's namespace that `airlock
//! sidecar` joins. One model, parameterised by socket mark, NAT priority and
//! the listeners' addresses, loaded over netlink (`netlink.rs`: no `nft`
//! process, whose start was a third of a sandbox's) and written out in nft's
//! language for people and tests. See nft(8).
//!
//! Every TCP connection leaving the namespace goes to the transparent
//! listener, all DNS (port 53, any destination) to the resolver, loopback
//! traffic stays local, and everything else is rejected: other UDP (QUIC,
//! NTP, ...), ICMP and IPv6. Packets carrying the exempt mark (the sidecar's
//! own sockets, socket(7) `SO_MARK`) are left alone; setting a mark needs
//! CAP_NET_ADMIN, so the captured program cannot forge it.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::spec::{DNS_ADDR, TRANSPARENT_ADDR};

mod netlink;

pub use netlink::LoadError;

/// An nftables table name, so it is never confused with other strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName(String);

impl TableName {
    /// The sandbox's table: its namespace holds nothing else.
    fn sandbox() -> Self {
        Self("airlock".to_string())
    }

    /// A sidecar's table, named by its transparent port so that sidecars with
    /// different ports in one namespace never touch each other's table.
    pub fn for_port(transparent_port: u16) -> Self {
        Self(format!("airlock_sidecar_{transparent_port}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A socket mark (socket(7) `SO_MARK`) whose packets are not captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketMark(pub u32);

impl fmt::Display for SocketMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Where the NAT chain runs among the namespace's NAT chains (lower first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatPriority(pub i32);

impl NatPriority {
    /// The usual `dstnat` priority (nft(8), "PRIORITY").
    pub const DSTNAT: Self = Self(-100);
    /// Before the `dstnat` chains of iptables-nft or Docker: a connection is
    /// NATed once, by the first chain that maps it (nft(8), "NAT
    /// STATEMENTS"), so Docker's redirect of its DNS must not get there first.
    pub const BEFORE_DSTNAT: Self = Self(-110);
}

/// Whose network namespace the rules go into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    /// Made by Airlock for one sandbox, holding nothing else: the table is
    /// new, IPv6 is off, and the filter drops all but the listeners.
    Private,
    /// The app's, which outlives the sidecar and may hold other tables: the
    /// table replaces an older copy of itself, and IPv6 loopback works.
    Shared,
}

/// Everything the ruleset depends on.
#[derive(Debug, Clone)]
pub struct CaptureRules {
    pub table: TableName,
    pub namespace: Namespace,
    pub nat_priority: NatPriority,
    pub exempt_mark: Option<SocketMark>,
    /// The resolver (UDP and TCP).
    pub dns: SocketAddrV4,
    /// The transparent TCP listener.
    pub transparent: SocketAddrV4,
}

// The two namespaces spell some equivalent rules differently (chain names,
// `accept` or `return` in a base chain, a redundant `meta nfproto ipv4`, the
// order of accept rules): kept so that both rulesets stay the ones Airlock
// has always loaded (their text is pinned by the test below and by
// `src/sidecar/rules.rs`, and the kernel's view of both loads by
// `tests/capture_rules.rs`).
impl CaptureRules {
    /// Redirect everything TCP to the listener, DNS to 127.0.0.53, reject the rest
    /// (UDP incl. QUIC, ICMP, IPv6). Replies from the handed-over sockets are
    /// `established` and pass. Traffic to 127.0.0.0/8 stays on the sandbox's own
    /// `lo`: that loopback belongs to this namespace alone (the host's is not in
    /// it), so programs that talk to a local server they started keep working.
    pub fn sandbox() -> Self {
        Self {
            table: TableName::sandbox(),
            namespace: Namespace::Private,
            nat_priority: NatPriority::DSTNAT,
            exempt_mark: None,
            dns: DNS_ADDR,
            transparent: TRANSPARENT_ADDR,
        }
    }

    /// Installs the table in this thread's network namespace in one
    /// nf_tables transaction (all or nothing); in a shared namespace it
    /// replaces an older copy of itself in the same transaction.
    pub fn install(&self) -> Result<(), LoadError> {
        netlink::install(self)
    }

    /// Deletes this table and nothing else.
    pub fn remove(&self) -> Result<(), LoadError> {
        netlink::remove(self)
    }

    /// The same table in nft's language, as one `nft -f` batch: what
    /// `nft list table` shows once [`CaptureRules::install`] has run.
    pub fn script(&self) -> String {
        let table = self.table.as_str();
        let mut script = String::new();
        if self.namespace == Namespace::Shared {
            // Declaring the table first makes the delete succeed when there
            // is no older copy, so a restart replaces it in one transaction.
            script += &format!("table inet {table}\ndelete table inet {table}\n");
        }
        script += &format!("table inet {table} {{\n");
        for chain in self.chains() {
            script += &chain.to_string();
        }
        script += "}\n";
        script
    }

    /// The NAT chain, then the filter chain.
    fn chains(&self) -> [Chain; 2] {
        let (nat, filter, filter_policy) = match self.namespace {
            Namespace::Private => ("nat_out", "filter_out", Policy::Drop),
            Namespace::Shared => ("nat_output", "filter_output", Policy::Accept),
        };
        [
            Chain {
                name: nat,
                kind: ChainKind::Nat,
                priority: self.nat_priority.0,
                policy: Policy::Accept,
                rules: self.nat_rules(),
            },
            Chain {
                name: filter,
                kind: ChainKind::Filter,
                priority: 0,
                policy: filter_policy,
                rules: self.filter_rules(),
            },
        ]
    }

    fn nat_rules(&self) -> Vec<Rule> {
        let mut rules: Vec<Rule> = self
            .exempt_mark
            .map(|mark| Rule::new([Match::Mark(mark)], Verdict::Return))
            .into_iter()
            .collect();
        if self.namespace == Namespace::Private {
            rules.extend(self.to_resolver());
        }
        for proto in [Proto::Udp, Proto::Tcp] {
            rules.push(Rule::new(
                [Match::Ipv4, Match::Dport(proto, 53)],
                Verdict::To(self.dns),
            ));
        }
        rules.push(self.loopback(match self.namespace {
            Namespace::Private => Verdict::Accept,
            Namespace::Shared => Verdict::Return,
        }));
        rules.push(Rule::new(
            [Match::Ipv4, Match::L4(Proto::Tcp)],
            Verdict::To(self.transparent),
        ));
        rules
    }

    fn filter_rules(&self) -> Vec<Rule> {
        let established = Rule::new([Match::EstablishedOrRelated], Verdict::Accept);
        let mut rules: Vec<Rule> = self
            .exempt_mark
            .map(|mark| Rule::new([Match::Mark(mark)], Verdict::Accept))
            .into_iter()
            .collect();
        match self.namespace {
            // The policy drops: name the two places traffic may go.
            Namespace::Private => {
                rules.push(established);
                rules.push(self.loopback(Verdict::Accept));
                rules.push(accept_to(Proto::Tcp, self.transparent));
                rules.extend(self.to_resolver());
            }
            Namespace::Shared => {
                rules.push(self.loopback(Verdict::Accept));
                rules.push(Rule::new([Match::Ipv6Loopback], Verdict::Accept));
                rules.push(established);
            }
        }
        // Refuse the rest at once rather than let the program wait on a drop.
        rules.push(Rule::new([Match::L4(Proto::Tcp)], Verdict::TcpReset));
        rules.push(Rule::new([], Verdict::AdminProhibited));
        rules
    }

    fn to_resolver(&self) -> [Rule; 2] {
        [
            accept_to(Proto::Udp, self.dns),
            accept_to(Proto::Tcp, self.dns),
        ]
    }

    fn loopback(&self, verdict: Verdict) -> Rule {
        let to_loopback = Match::Daddr(Ipv4Addr::new(127, 0, 0, 0), 8);
        match self.namespace {
            Namespace::Private => Rule::new([Match::Ipv4, to_loopback], verdict),
            Namespace::Shared => Rule::new([to_loopback], verdict),
        }
    }
}

fn accept_to(proto: Proto, addr: SocketAddrV4) -> Rule {
    Rule::new(
        [
            Match::Ipv4,
            Match::Daddr(*addr.ip(), 32),
            Match::Dport(proto, addr.port()),
        ],
        Verdict::Accept,
    )
}

/// A base chain on the output hook.
struct Chain {
    name: &'static str,
    kind: ChainKind,
    priority: i32,
    policy: Policy,
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, Copy)]
enum ChainKind {
    Nat,
    Filter,
}

#[derive(Debug, Clone, Copy)]
enum Policy {
    Accept,
    Drop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Tcp,
    Udp,
}

/// What a rule checks; a rule matches when all of its checks do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Match {
    /// An IPv4 packet.
    Ipv4,
    /// To an IPv4 network (address, prefix length).
    Daddr(Ipv4Addr, u8),
    /// To IPv6's loopback.
    Ipv6Loopback,
    /// Of one transport protocol.
    L4(Proto),
    /// Of one transport protocol, to one port.
    Dport(Proto, u16),
    /// Sent by a socket carrying this mark.
    Mark(SocketMark),
    /// Part of a connection conntrack already knows.
    EstablishedOrRelated,
}

/// What happens to a packet a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accept,
    /// Leave this chain (a shared namespace's later chains still see it).
    Return,
    /// Send the connection to a listener.
    To(SocketAddrV4),
    TcpReset,
    /// ICMP (or ICMPv6) "administratively prohibited".
    AdminProhibited,
}

/// One rule: its checks, then its verdict.
struct Rule {
    matches: Vec<Match>,
    verdict: Verdict,
}

impl Rule {
    fn new(matches: impl IntoIterator<Item = Match>, verdict: Verdict) -> Self {
        Self {
            matches: matches.into_iter().collect(),
            verdict,
        }
    }
}

impl Proto {
    fn name(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
        }
    }

    /// Its IP protocol number.
    fn number(self) -> u8 {
        match self {
            Self::Tcp => libc::IPPROTO_TCP as u8,
            Self::Udp => libc::IPPROTO_UDP as u8,
        }
    }
}

impl fmt::Display for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ChainKind::Nat => "nat",
            ChainKind::Filter => "filter",
        };
        let policy = match self.policy {
            Policy::Accept => "accept",
            Policy::Drop => "drop",
        };
        writeln!(f, "  chain {} {{", self.name)?;
        writeln!(
            f,
            "    type {kind} hook output priority {}; policy {policy};",
            self.priority
        )?;
        for rule in &self.rules {
            writeln!(f, "    {rule}")?;
        }
        writeln!(f, "  }}")
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for m in &self.matches {
            write!(f, "{m} ")?;
        }
        write!(f, "{}", self.verdict)
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ipv4 => write!(f, "meta nfproto ipv4"),
            Self::Daddr(addr, 32) => write!(f, "ip daddr {addr}"),
            Self::Daddr(addr, prefix) => write!(f, "ip daddr {addr}/{prefix}"),
            Self::Ipv6Loopback => write!(f, "ip6 daddr ::1"),
            Self::L4(proto) => write!(f, "meta l4proto {}", proto.name()),
            Self::Dport(proto, port) => write!(f, "{} dport {port}", proto.name()),
            Self::Mark(mark) => write!(f, "meta mark {mark}"),
            Self::EstablishedOrRelated => write!(f, "ct state established,related"),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Accept => write!(f, "accept"),
            Self::Return => write!(f, "return"),
            // For locally generated packets `redirect` maps to 127.0.0.1
            // (nft(8)), so a listener there needs only its port; any other
            // address needs a `dnat`.
            Self::To(addr) if *addr.ip() == Ipv4Addr::LOCALHOST => {
                write!(f, "redirect to :{}", addr.port())
            }
            Self::To(addr) => write!(f, "dnat ip to {addr}"),
            Self::TcpReset => write!(f, "reject with tcp reset"),
            Self::AdminProhibited => write!(f, "reject with icmpx type admin-prohibited"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sidecar() -> CaptureRules {
        CaptureRules {
            table: TableName::for_port(15001),
            namespace: Namespace::Shared,
            nat_priority: NatPriority::BEFORE_DSTNAT,
            exempt_mark: Some(SocketMark(0x4149_524c)),
            dns: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 15053),
            transparent: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 15001),
        }
    }

    #[test]
    fn the_sandbox_ruleset_is_byte_identical_to_the_one_airlock_always_loaded() {
        assert_eq!(CaptureRules::sandbox().script(), SANDBOX);
    }

    #[test]
    fn a_listener_off_127_0_0_1_is_reached_by_dnat_not_redirect() {
        let rules = CaptureRules {
            transparent: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 15001),
            ..sidecar()
        };
        assert!(
            rules
                .script()
                .contains("meta l4proto tcp dnat ip to 127.0.0.2:15001\n")
        );
    }

    // Taken from the code before the two rulesets became one builder; the
    // sidecar's is pinned where its parameters are chosen (src/sidecar/rules.rs).
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
