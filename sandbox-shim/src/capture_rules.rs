//! The nftables capture rules, for both places Airlock captures traffic: the
//! sandbox's own network namespace and an app's namespace that `airlock
//! sidecar` joins. One builder, parameterised by socket mark, NAT priority and
//! the listeners' addresses, and one `nft` runner. See nft(8).
//!
//! Every TCP connection leaving the namespace goes to the transparent
//! listener, all DNS (port 53, any destination) to the resolver, loopback
//! traffic stays local, and everything else is rejected: other UDP (QUIC,
//! NTP, ...), ICMP and IPv6. Packets carrying the exempt mark (the sidecar's
//! own sockets, socket(7) `SO_MARK`) are left alone; setting a mark needs
//! CAP_NET_ADMIN, so the captured program cannot forge it.

use std::fmt;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use crate::spec::{DNS_ADDR, TRANSPARENT_ADDR};

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
// order of accept rules): kept so that both rulesets stay byte-identical to
// the ones Airlock has always loaded (pinned by the test below and by
// `src/sidecar/rules.rs`).
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

    /// The whole table, as one `nft -f` batch (applied all or nothing).
    pub fn script(&self) -> String {
        let table = self.table.as_str();
        let mut script = String::new();
        if self.namespace == Namespace::Shared {
            // Declaring the table first makes the delete succeed when there
            // is no older copy, so a restart replaces it in one transaction.
            script += &format!("table inet {table}\ndelete table inet {table}\n");
        }
        let (nat, filter, filter_policy) = match self.namespace {
            Namespace::Private => ("nat_out", "filter_out", "drop"),
            Namespace::Shared => ("nat_output", "filter_output", "accept"),
        };
        script += &format!("table inet {table} {{\n");
        let nat_hook = format!("type nat hook output priority {};", self.nat_priority.0);
        script += &chain(nat, &nat_hook, "accept", &self.nat_rules());
        let filter_hook = "type filter hook output priority 0;";
        script += &chain(filter, filter_hook, filter_policy, &self.filter_rules());
        script += "}\n";
        script
    }

    /// Deletes this table and nothing else.
    pub fn removal_script(&self) -> String {
        format!("delete table inet {}\n", self.table.as_str())
    }

    fn nat_rules(&self) -> Vec<String> {
        let mut rules: Vec<String> = self
            .exempt_mark
            .map(|mark| format!("meta mark {mark} return"))
            .into_iter()
            .collect();
        if self.namespace == Namespace::Private {
            rules.extend(self.to_resolver());
        }
        for proto in ["udp", "tcp"] {
            rules.push(format!(
                "meta nfproto ipv4 {proto} dport 53 {}",
                nat_to(self.dns)
            ));
        }
        rules.push(self.loopback(match self.namespace {
            Namespace::Private => "accept",
            Namespace::Shared => "return",
        }));
        rules.push(format!(
            "meta nfproto ipv4 meta l4proto tcp {}",
            nat_to(self.transparent)
        ));
        rules
    }

    fn filter_rules(&self) -> Vec<String> {
        const ESTABLISHED: &str = "ct state established,related accept";
        let mut rules: Vec<String> = self
            .exempt_mark
            .map(|mark| format!("meta mark {mark} accept"))
            .into_iter()
            .collect();
        match self.namespace {
            // The policy drops: name the two places traffic may go.
            Namespace::Private => {
                rules.push(ESTABLISHED.to_string());
                rules.push(self.loopback("accept"));
                rules.push(accept_to("tcp", self.transparent));
                rules.extend(self.to_resolver());
            }
            Namespace::Shared => {
                rules.push(self.loopback("accept"));
                rules.push("ip6 daddr ::1 accept".to_string());
                rules.push(ESTABLISHED.to_string());
            }
        }
        // Refuse the rest at once rather than let the program wait on a drop.
        rules.push("meta l4proto tcp reject with tcp reset".to_string());
        rules.push("reject with icmpx type admin-prohibited".to_string());
        rules
    }

    fn to_resolver(&self) -> [String; 2] {
        [accept_to("udp", self.dns), accept_to("tcp", self.dns)]
    }

    fn loopback(&self, verdict: &str) -> String {
        let family = match self.namespace {
            Namespace::Private => "meta nfproto ipv4 ",
            Namespace::Shared => "",
        };
        format!("{family}ip daddr 127.0.0.0/8 {verdict}")
    }
}

fn chain(name: &str, hook: &str, policy: &str, rules: &[String]) -> String {
    let mut chain = format!("  chain {name} {{\n    {hook} policy {policy};\n");
    for rule in rules {
        chain += &format!("    {rule}\n");
    }
    chain + "  }\n"
}

/// The NAT statement that sends a connection to `addr`. For locally
/// generated packets `redirect` maps to 127.0.0.1 (nft(8)), so a listener
/// there needs only its port; any other address needs a `dnat`.
fn nat_to(addr: SocketAddrV4) -> String {
    if *addr.ip() == Ipv4Addr::LOCALHOST {
        format!("redirect to :{}", addr.port())
    } else {
        format!("dnat ip to {addr}")
    }
}

fn accept_to(proto: &str, addr: SocketAddrV4) -> String {
    format!(
        "meta nfproto ipv4 ip daddr {} {proto} dport {} accept",
        addr.ip(),
        addr.port()
    )
}

/// Why `nft` did not load a script.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("cannot run {}: {source}", .nft.display())]
    Spawn {
        nft: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("feed nft: {0}")]
    Feed(#[source] std::io::Error),
    #[error("wait for nft: {0}")]
    Wait(#[source] std::io::Error),
    #[error("nft refused the capture rules ({status}): {stderr}")]
    Refused {
        status: ExitStatus,
        /// nft's complaint, on one line.
        stderr: String,
    },
}

/// The `nft` program.
#[derive(Debug, Clone)]
pub struct Nft(PathBuf);

impl Nft {
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self(program.into())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Runs `nft -f -` on `script`.
    pub fn load(&self, script: &str) -> Result<(), NftError> {
        let mut command = Command::new(&self.0);
        // nft needs nothing from our environment; PATH only finds a bare
        // `nft` (the child's PATH is searched once the environment is cleared).
        command.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        let mut child = command
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| NftError::Spawn {
                nft: self.0.clone(),
                source,
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(script.as_bytes()).map_err(NftError::Feed)?;
        }
        let out = child.wait_with_output().map_err(NftError::Wait)?;
        if !out.status.success() {
            return Err(NftError::Refused {
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .replace('\n', " "),
            });
        }
        Ok(())
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

    #[test]
    fn removal_deletes_only_this_table() {
        assert_eq!(
            sidecar().removal_script(),
            "delete table inet airlock_sidecar_15001\n"
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
