//! The capture rules as one nf_tables batch over nfnetlink: the messages and
//! expressions `nft -f` would send for the same script (its
//! `--debug=netlink` shows them), built here so that a sandbox's start runs
//! no `nft` process. The attribute numbers are the kernel's uapi
//! (linux/netfilter/nf_tables.h), which only ever grows.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

use nix::sys::socket::SockProtocol;

use super::{CaptureRules, Chain, ChainKind, Match, Namespace, Policy, Rule, Verdict};
use crate::netlink::{
    Message, NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST, NetlinkError, Socket,
};

/// Why the capture rules could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "load the capture rules ({what}): {source}; the kernel needs nf_tables (module nf_tables) and airlock CAP_NET_ADMIN in the namespace"
    )]
    Refused {
        /// The table, chain or rule the kernel refused.
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("load the capture rules: {0}")]
    Netlink(#[source] NetlinkError),
}

// nfnetlink (linux/netfilter/nfnetlink.h) and nf_tables' messages.
const NFNL_MSG_BATCH_BEGIN: u16 = libc::NFNL_MSG_BATCH_BEGIN as u16;
const NFNL_MSG_BATCH_END: u16 = libc::NFNL_MSG_BATCH_END as u16;
const NFNL_SUBSYS_NFTABLES: u16 = libc::NFNL_SUBSYS_NFTABLES as u16;
const NFT_MSG_NEWTABLE: u16 = libc::NFT_MSG_NEWTABLE as u16;
const NFT_MSG_DELTABLE: u16 = libc::NFT_MSG_DELTABLE as u16;
const NFT_MSG_NEWCHAIN: u16 = libc::NFT_MSG_NEWCHAIN as u16;
const NFT_MSG_NEWRULE: u16 = libc::NFT_MSG_NEWRULE as u16;

// Attributes.
const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;

/// Each expression's own attributes: `enum nft_<name>_attributes` in
/// linux/netfilter/nf_tables.h, which libc does not carry.
mod expr_attr {
    pub(super) mod meta {
        pub(crate) const DREG: u16 = 1;
        pub(crate) const KEY: u16 = 2;
    }
    pub(super) mod ct {
        pub(crate) const DREG: u16 = 1;
        pub(crate) const KEY: u16 = 2;
    }
    pub(super) mod payload {
        pub(crate) const DREG: u16 = 1;
        pub(crate) const BASE: u16 = 2;
        pub(crate) const OFFSET: u16 = 3;
        pub(crate) const LEN: u16 = 4;
    }
    pub(super) mod bitwise {
        pub(crate) const SREG: u16 = 1;
        pub(crate) const DREG: u16 = 2;
        pub(crate) const LEN: u16 = 3;
        pub(crate) const MASK: u16 = 4;
        pub(crate) const XOR: u16 = 5;
    }
    pub(super) mod cmp {
        pub(crate) const SREG: u16 = 1;
        pub(crate) const OP: u16 = 2;
        pub(crate) const DATA: u16 = 3;
    }
    pub(super) mod immediate {
        pub(crate) const DREG: u16 = 1;
        pub(crate) const DATA: u16 = 2;
    }
    pub(super) mod redir {
        pub(crate) const REG_PROTO_MIN: u16 = 1;
        pub(crate) const FLAGS: u16 = 3;
    }
    pub(super) mod nat {
        pub(crate) const TYPE: u16 = 1;
        pub(crate) const FAMILY: u16 = 2;
        pub(crate) const REG_ADDR_MIN: u16 = 3;
        pub(crate) const REG_PROTO_MIN: u16 = 5;
        pub(crate) const FLAGS: u16 = 7;
    }
    pub(super) mod reject {
        pub(crate) const TYPE: u16 = 1;
        pub(crate) const ICMP_CODE: u16 = 2;
    }
}

/// The registers: the verdict's, and two 16-byte data registers.
const NFT_REG_VERDICT: u32 = libc::NFT_REG_VERDICT as u32;
const NFT_REG_1: u32 = libc::NFT_REG_1 as u32;
const NFT_REG_2: u32 = libc::NFT_REG_2 as u32;

const NF_INET_LOCAL_OUT: u32 = libc::NF_INET_LOCAL_OUT as u32;
const NF_DROP: u32 = libc::NF_DROP as u32;
const NF_ACCEPT: u32 = libc::NF_ACCEPT as u32;
/// NF_NAT_RANGE_PROTO_SPECIFIED (linux/netfilter/nf_nat.h).
const NAT_PORT_GIVEN: u32 = 1 << 1;
/// conntrack's state bits as `ct state` loads them (nf_conntrack_common.h).
const CT_ESTABLISHED: u32 = 1 << 1;
const CT_RELATED: u32 = 1 << 2;

/// Installs `rules` in this thread's network namespace: one batch, one
/// transaction.
pub(super) fn install(rules: &CaptureRules) -> Result<(), LoadError> {
    let mut batch = Batch::new();
    let table = rules.table.as_str();
    if rules.namespace == Namespace::Shared {
        // As the script: declare, delete, create, so that an older copy is
        // replaced and a missing one is no error.
        batch.table(NFT_MSG_NEWTABLE, table, "table");
        batch.table(NFT_MSG_DELTABLE, table, "table (old copy)");
    }
    batch.table(NFT_MSG_NEWTABLE, table, "table");
    // The chains, then their rules, as nft orders them (the kernel's
    // handles then match a table `nft -f` made).
    let chains = rules.chains();
    for chain in &chains {
        batch.chain(table, chain);
    }
    for chain in &chains {
        for (n, rule) in chain.rules.iter().enumerate() {
            batch.rule(table, chain.name, n + 1, rule);
        }
    }
    batch.send()
}

/// Deletes this table and nothing else.
pub(super) fn remove(rules: &CaptureRules) -> Result<(), LoadError> {
    let mut batch = Batch::new();
    batch.table(NFT_MSG_DELTABLE, rules.table.as_str(), "table");
    batch.send()
}

/// A batch being built: its messages and, by sequence number, what each is.
struct Batch {
    bytes: Vec<u8>,
    what: Vec<String>,
}

impl Batch {
    fn new() -> Self {
        let mut batch = Self {
            bytes: Vec::new(),
            what: Vec::new(),
        };
        batch.push_control(NFNL_MSG_BATCH_BEGIN);
        batch
    }

    fn seq(&self) -> u32 {
        self.what.len() as u32 + 1
    }

    /// The batch's begin and end carry the subsystem and want no answer.
    fn push_control(&mut self, kind: u16) {
        let mut msg = Message::new(kind, NLM_F_REQUEST, 0);
        msg.header(&nfgenmsg(libc::AF_UNSPEC as u8, NFNL_SUBSYS_NFTABLES));
        self.bytes.extend(msg.finish());
    }

    fn push(&mut self, kind: u16, flags: u16, what: String, fill: impl FnOnce(&mut Message)) {
        let kind = (NFNL_SUBSYS_NFTABLES << 8) | kind;
        let mut msg = Message::new(kind, NLM_F_REQUEST | NLM_F_ACK | flags, self.seq());
        msg.header(&nfgenmsg(libc::NFPROTO_INET as u8, 0));
        fill(&mut msg);
        self.bytes.extend(msg.finish());
        self.what.push(what);
    }

    fn table(&mut self, kind: u16, table: &str, what: &str) {
        let flags = if kind == NFT_MSG_NEWTABLE {
            NLM_F_CREATE
        } else {
            0
        };
        self.push(kind, flags, format!("{what} inet {table}"), |m| {
            m.attr_str(NFTA_TABLE_NAME, table);
        });
    }

    fn chain(&mut self, table: &str, chain: &Chain) {
        let kind = match chain.kind {
            ChainKind::Nat => "nat",
            ChainKind::Filter => "filter",
        };
        let policy = match chain.policy {
            Policy::Accept => NF_ACCEPT,
            Policy::Drop => NF_DROP,
        };
        let what = format!("chain {}", chain.name);
        self.push(NFT_MSG_NEWCHAIN, NLM_F_CREATE, what, |m| {
            m.attr_str(NFTA_CHAIN_TABLE, table)
                .attr_str(NFTA_CHAIN_NAME, chain.name)
                .nested(NFTA_CHAIN_HOOK, |m| {
                    m.attr_be32(NFTA_HOOK_HOOKNUM, NF_INET_LOCAL_OUT)
                        .attr_be32(NFTA_HOOK_PRIORITY, chain.priority as u32);
                })
                .attr_be32(NFTA_CHAIN_POLICY, policy)
                .attr_str(NFTA_CHAIN_TYPE, kind);
        });
    }

    fn rule(&mut self, table: &str, chain: &str, n: usize, rule: &Rule) {
        let what = format!("rule {n} of chain {chain}: {rule}");
        let exprs = expressions(rule);
        self.push(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, what, |m| {
            m.attr_str(NFTA_RULE_TABLE, table)
                .attr_str(NFTA_RULE_CHAIN, chain)
                .nested(NFTA_RULE_EXPRESSIONS, |m| {
                    for expr in &exprs {
                        m.nested(NFTA_LIST_ELEM, |m| expr.encode(m));
                    }
                });
        });
    }

    fn send(mut self) -> Result<(), LoadError> {
        self.push_control(NFNL_MSG_BATCH_END);
        let socket = Socket::open(SockProtocol::NetlinkNetFilter).map_err(LoadError::Netlink)?;
        match socket.request(&self.bytes, self.what.len()) {
            Ok(()) => Ok(()),
            Err(NetlinkError::Refused { seq, source }) => Err(LoadError::Refused {
                what: self.what(seq),
                source,
            }),
            Err(e) => Err(LoadError::Netlink(e)),
        }
    }
}

impl Batch {
    /// What the message with this sequence number asked for; 0 is the
    /// batch's begin (refused when the kernel has no nf_tables).
    fn what(&self, seq: u32) -> String {
        match seq.checked_sub(1).and_then(|i| self.what.get(i as usize)) {
            Some(what) => what.clone(),
            None if seq == 0 => "the nf_tables batch".to_string(),
            None => format!("message {seq}"),
        }
    }
}

/// `struct nfgenmsg`: family, version 0, resource id (big-endian).
fn nfgenmsg(family: u8, res_id: u16) -> [u8; 4] {
    let id = res_id.to_be_bytes();
    [family, libc::NFNETLINK_V0 as u8, id[0], id[1]]
}

/// One nf_tables expression, as `nft --debug=netlink` names them.
#[derive(Debug, PartialEq, Eq)]
enum Expr {
    /// `meta load KEY => reg 1`
    Meta(u32),
    /// `ct load state => reg 1`
    CtState,
    /// `payload load LEN @ BASE + OFFSET => reg 1`
    Payload { base: u32, offset: u32, len: u32 },
    /// `bitwise reg 1 = (reg 1 & MASK) ^ 0`
    Mask(Vec<u8>),
    /// `cmp eq|neq reg 1 DATA`
    Cmp { equal: bool, data: Vec<u8> },
    /// `immediate reg N DATA`
    Value { reg: u32, data: Vec<u8> },
    /// `immediate reg 0 VERDICT`
    Verdict(i32),
    /// `redir proto_min reg 1`
    Redirect,
    /// `nat dnat ip addr_min reg 1 proto_min reg 2`
    Dnat,
    /// `reject type T [code C]`
    Reject { kind: u32, icmp_code: Option<u8> },
}

const NFT_META_MARK: u32 = libc::NFT_META_MARK as u32;
const NFT_META_NFPROTO: u32 = libc::NFT_META_NFPROTO as u32;
const NFT_META_L4PROTO: u32 = libc::NFT_META_L4PROTO as u32;
const NETWORK_HEADER: u32 = libc::NFT_PAYLOAD_NETWORK_HEADER as u32;
const TRANSPORT_HEADER: u32 = libc::NFT_PAYLOAD_TRANSPORT_HEADER as u32;

/// The expressions of one rule. A check on an IP header or a port needs
/// the packet's family or protocol checked first (an inet table sees both
/// families), which `nft` adds the same way unless the rule already says it.
fn expressions(rule: &Rule) -> Vec<Expr> {
    let mut exprs = Vec::new();
    let mut family = None;
    let mut proto = None;
    let mut need_family = |exprs: &mut Vec<Expr>, wanted: u8| {
        if family != Some(wanted) {
            exprs.extend(equals_meta(NFT_META_NFPROTO, vec![wanted]));
            family = Some(wanted);
        }
    };
    let ipv4 = libc::NFPROTO_IPV4 as u8;
    for check in &rule.matches {
        match *check {
            Match::Ipv4 => need_family(&mut exprs, ipv4),
            Match::Daddr(addr, prefix) => {
                need_family(&mut exprs, ipv4);
                exprs.extend(daddr(addr, prefix));
            }
            Match::Ipv6Loopback => {
                need_family(&mut exprs, libc::NFPROTO_IPV6 as u8);
                exprs.push(Expr::Payload {
                    base: NETWORK_HEADER,
                    offset: 24,
                    len: 16,
                });
                exprs.push(Expr::eq(Ipv6Addr::LOCALHOST.octets().to_vec()));
            }
            Match::L4(p) => {
                exprs.extend(equals_meta(NFT_META_L4PROTO, vec![p.number()]));
                proto = Some(p);
            }
            Match::Dport(p, port) => {
                if proto != Some(p) {
                    exprs.extend(equals_meta(NFT_META_L4PROTO, vec![p.number()]));
                    proto = Some(p);
                }
                exprs.push(Expr::Payload {
                    base: TRANSPORT_HEADER,
                    offset: 2,
                    len: 2,
                });
                exprs.push(Expr::eq(port.to_be_bytes().to_vec()));
            }
            Match::Mark(mark) => {
                exprs.extend(equals_meta(NFT_META_MARK, mark.0.to_ne_bytes().to_vec()));
            }
            Match::EstablishedOrRelated => {
                exprs.push(Expr::CtState);
                exprs.push(Expr::Mask(
                    (CT_ESTABLISHED | CT_RELATED).to_ne_bytes().to_vec(),
                ));
                exprs.push(Expr::Cmp {
                    equal: false,
                    data: 0u32.to_ne_bytes().to_vec(),
                });
            }
        }
    }
    exprs.extend(verdict(rule.verdict));
    exprs
}

fn equals_meta(key: u32, value: Vec<u8>) -> [Expr; 2] {
    [Expr::Meta(key), Expr::eq(value)]
}

/// The destination address within `prefix` bits: whole bytes are compared
/// as loaded (nft loads only those), a partial byte through a mask.
fn daddr(addr: Ipv4Addr, prefix: u8) -> Vec<Expr> {
    let prefix = prefix.min(32);
    if prefix == 0 {
        // Every address: nothing to load (a zero-length load is refused).
        return Vec::new();
    }
    let len = usize::from(prefix.div_ceil(8));
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
    let network = (u32::from(addr) & mask).to_be_bytes();
    let mut exprs = vec![Expr::Payload {
        base: NETWORK_HEADER,
        offset: 16,
        len: len as u32,
    }];
    if !prefix.is_multiple_of(8) {
        exprs.push(Expr::Mask(mask.to_be_bytes()[..len].to_vec()));
    }
    exprs.push(Expr::eq(network[..len].to_vec()));
    exprs
}

fn verdict(verdict: Verdict) -> Vec<Expr> {
    match verdict {
        Verdict::Accept => vec![Expr::Verdict(NF_ACCEPT as i32)],
        Verdict::Return => vec![Expr::Verdict(libc::NFT_RETURN)],
        Verdict::To(addr) => to(addr),
        Verdict::TcpReset => vec![Expr::Reject {
            kind: libc::NFT_REJECT_TCP_RST as u32,
            icmp_code: None,
        }],
        Verdict::AdminProhibited => vec![Expr::Reject {
            kind: libc::NFT_REJECT_ICMPX_UNREACH as u32,
            icmp_code: Some(libc::NFT_REJECT_ICMPX_ADMIN_PROHIBITED as u8),
        }],
    }
}

/// As the script's `redirect to :PORT` (a listener on 127.0.0.1) or
/// `dnat ip to ADDR:PORT`.
fn to(addr: SocketAddrV4) -> Vec<Expr> {
    let port = addr.port().to_be_bytes().to_vec();
    if *addr.ip() == Ipv4Addr::LOCALHOST {
        vec![
            Expr::Value {
                reg: NFT_REG_1,
                data: port,
            },
            Expr::Redirect,
        ]
    } else {
        vec![
            Expr::Value {
                reg: NFT_REG_1,
                data: addr.ip().octets().to_vec(),
            },
            Expr::Value {
                reg: NFT_REG_2,
                data: port,
            },
            Expr::Dnat,
        ]
    }
}

impl Expr {
    fn eq(data: Vec<u8>) -> Self {
        Self::Cmp { equal: true, data }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Meta(_) => "meta",
            Self::CtState => "ct",
            Self::Payload { .. } => "payload",
            Self::Mask(_) => "bitwise",
            Self::Cmp { .. } => "cmp",
            Self::Value { .. } | Self::Verdict(_) => "immediate",
            Self::Redirect => "redir",
            Self::Dnat => "nat",
            Self::Reject { .. } => "reject",
        }
    }

    /// `NFTA_EXPR_NAME`, then the expression's own attributes.
    fn encode(&self, m: &mut Message) {
        use expr_attr::*;
        m.attr_str(NFTA_EXPR_NAME, self.name());
        m.nested(NFTA_EXPR_DATA, |m| match self {
            Self::Meta(key) => {
                m.attr_be32(meta::DREG, NFT_REG_1)
                    .attr_be32(meta::KEY, *key);
            }
            Self::CtState => {
                m.attr_be32(ct::DREG, NFT_REG_1)
                    .attr_be32(ct::KEY, libc::NFT_CT_STATE as u32);
            }
            Self::Payload { base, offset, len } => {
                m.attr_be32(payload::DREG, NFT_REG_1)
                    .attr_be32(payload::BASE, *base)
                    .attr_be32(payload::OFFSET, *offset)
                    .attr_be32(payload::LEN, *len);
            }
            Self::Mask(mask) => {
                m.attr_be32(bitwise::SREG, NFT_REG_1)
                    .attr_be32(bitwise::DREG, NFT_REG_1)
                    .attr_be32(bitwise::LEN, mask.len() as u32)
                    .nested(bitwise::MASK, |m| value(m, mask))
                    .nested(bitwise::XOR, |m| value(m, &vec![0; mask.len()]));
            }
            Self::Cmp { equal, data } => {
                let op = if *equal {
                    libc::NFT_CMP_EQ
                } else {
                    libc::NFT_CMP_NEQ
                };
                m.attr_be32(cmp::SREG, NFT_REG_1)
                    .attr_be32(cmp::OP, op as u32)
                    .nested(cmp::DATA, |m| value(m, data));
            }
            Self::Value { reg, data } => {
                m.attr_be32(immediate::DREG, *reg)
                    .nested(immediate::DATA, |m| value(m, data));
            }
            Self::Verdict(code) => {
                m.attr_be32(immediate::DREG, NFT_REG_VERDICT)
                    .nested(immediate::DATA, |m| {
                        m.nested(NFTA_DATA_VERDICT, |m| {
                            m.attr_be32(NFTA_VERDICT_CODE, *code as u32);
                        });
                    });
            }
            Self::Redirect => {
                m.attr_be32(redir::REG_PROTO_MIN, NFT_REG_1)
                    .attr_be32(redir::FLAGS, NAT_PORT_GIVEN);
            }
            Self::Dnat => {
                m.attr_be32(nat::TYPE, libc::NFT_NAT_DNAT as u32)
                    .attr_be32(nat::FAMILY, libc::NFPROTO_IPV4 as u32)
                    .attr_be32(nat::REG_ADDR_MIN, NFT_REG_1)
                    .attr_be32(nat::REG_PROTO_MIN, NFT_REG_2)
                    .attr_be32(nat::FLAGS, NAT_PORT_GIVEN);
            }
            Self::Reject { kind, icmp_code } => {
                m.attr_be32(reject::TYPE, *kind);
                if let Some(code) = icmp_code {
                    m.attr(reject::ICMP_CODE, &[*code]);
                }
            }
        });
    }
}

/// `NFTA_DATA_VALUE`: raw bytes, as the register holds them.
fn value(m: &mut Message, data: &[u8]) {
    m.attr(NFTA_DATA_VALUE, data);
}

#[cfg(test)]
mod tests {
    use super::super::Proto;
    use super::*;

    /// What `nft --debug=netlink -f` printed for the script's rules.
    #[test]
    fn the_expressions_are_the_ones_nft_sends_for_the_same_rules() {
        let dns = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 53), 53);
        let rule = Rule::new(
            [Match::Ipv4, Match::Dport(Proto::Udp, 53)],
            Verdict::To(dns),
        );
        assert_eq!(
            expressions(&rule),
            [
                Expr::Meta(NFT_META_NFPROTO),
                Expr::eq(vec![2]),
                Expr::Meta(NFT_META_L4PROTO),
                Expr::eq(vec![17]),
                Expr::Payload {
                    base: TRANSPORT_HEADER,
                    offset: 2,
                    len: 2
                },
                Expr::eq(vec![0, 53]),
                Expr::Value {
                    reg: NFT_REG_1,
                    data: vec![127, 0, 0, 53]
                },
                Expr::Value {
                    reg: NFT_REG_2,
                    data: vec![0, 53]
                },
                Expr::Dnat,
            ]
        );
        let loopback = Rule::new(
            [Match::Daddr(Ipv4Addr::new(127, 9, 9, 9), 8)],
            Verdict::Return,
        );
        assert_eq!(
            expressions(&loopback),
            [
                Expr::Meta(NFT_META_NFPROTO),
                Expr::eq(vec![2]),
                Expr::Payload {
                    base: NETWORK_HEADER,
                    offset: 16,
                    len: 1
                },
                Expr::eq(vec![127]),
                Expr::Verdict(libc::NFT_RETURN),
            ]
        );
    }

    #[test]
    fn a_prefix_off_a_byte_boundary_is_masked() {
        assert_eq!(
            daddr(Ipv4Addr::new(10, 20, 30, 40), 12),
            [
                Expr::Payload {
                    base: NETWORK_HEADER,
                    offset: 16,
                    len: 2
                },
                Expr::Mask(vec![0xff, 0xf0]),
                Expr::eq(vec![10, 16]),
            ]
        );
        assert_eq!(daddr(Ipv4Addr::new(10, 20, 30, 40), 0), []);
    }

    #[test]
    fn a_refusal_names_the_rule_in_nfts_words() {
        let mut batch = Batch::new();
        batch.rule(
            "t",
            "c",
            3,
            &Rule::new([Match::L4(Proto::Tcp)], Verdict::TcpReset),
        );
        assert_eq!(
            batch.what(1),
            "rule 3 of chain c: meta l4proto tcp reject with tcp reset"
        );
        assert_eq!(batch.what(0), "the nf_tables batch");
        assert_eq!(batch.what(9), "message 9");
    }
}
