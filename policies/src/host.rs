//! Host names and host patterns: the normalisation every match goes through.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// Longest host name DNS can carry in presentation form (RFC 1035 §2.3.4).
const MAX_HOST_LEN: usize = 253;
/// Longest single label (RFC 1035 §2.3.4).
const MAX_LABEL_LEN: usize = 63;

/// A normalized host: lower-case ASCII, no trailing dot, IDNA → punycode,
/// IP literals canonicalized (IPv6 without brackets).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Host(String);

/// Why a host or host pattern was rejected; reads as one line naming the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid host {input:?}: {problem}; hosts look like \"api.example.com\" or \"*.example.com\""
)]
pub struct HostError {
    input: String,
    problem: String,
}

impl HostError {
    fn new(input: &str, problem: impl Into<String>) -> Self {
        Self {
            input: input.to_owned(),
            problem: problem.into(),
        }
    }

    /// The text that was rejected.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl Host {
    /// Parses and normalizes a host name or IP literal ("[::1]" and "::1" both work).
    pub fn parse(s: &str) -> Result<Self, HostError> {
        if s.is_empty() {
            return Err(HostError::new(s, "empty host"));
        }
        let unbracketed = s
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .unwrap_or(s);
        if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            return Ok(Self(ip.to_string()));
        }
        if unbracketed.len() != s.len() {
            return Err(HostError::new(s, "brackets are only for IPv6 literals"));
        }
        if s.contains(':') {
            return Err(HostError::new(
                s,
                "contains ':' (give the port separately, and write IPv6 literals like \"::1\")",
            ));
        }
        if s.contains('*') {
            return Err(HostError::new(
                s,
                "wildcards are only allowed in rule host patterns, as a leading \"*.\"",
            ));
        }
        let without_dot = s.strip_suffix('.').unwrap_or(s);
        let ascii = idna::domain_to_ascii(without_dot)
            .map_err(|_| HostError::new(s, "not a valid internationalized domain name"))?;
        validate_dns_name(s, &ascii)?;
        Ok(Self(ascii))
    }

    /// The normalized text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Some if this host is an IP literal.
    pub fn ip(&self) -> Option<IpAddr> {
        self.0.parse().ok()
    }
}

/// Checks the post-IDNA form: labels, length, character set, and no
/// numeric-looking names that some resolvers/URL parsers read as IPv4
/// (e.g. "127.1" or "0x7f.1", see inet_aton(3)) — ambiguous, so refused.
fn validate_dns_name(input: &str, ascii: &str) -> Result<(), HostError> {
    if ascii.is_empty() {
        return Err(HostError::new(input, "empty host"));
    }
    if ascii.len() > MAX_HOST_LEN {
        return Err(HostError::new(
            input,
            format!("longer than {MAX_HOST_LEN} characters"),
        ));
    }
    for label in ascii.split('.') {
        if label.is_empty() {
            return Err(HostError::new(input, "empty label"));
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(HostError::new(
                input,
                format!("label longer than {MAX_LABEL_LEN} characters"),
            ));
        }
        if let Some(bad) = label
            .chars()
            .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-' | '_'))
        {
            return Err(HostError::new(input, format!("invalid character {bad:?}")));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(HostError::new(input, "a label starts or ends with '-'"));
        }
    }
    let last = ascii.rsplit('.').next().unwrap_or(ascii);
    let numeric = last.chars().all(|c| c.is_ascii_digit()) || last.starts_with("0x");
    if numeric {
        return Err(HostError::new(
            input,
            "looks like an incomplete or non-canonical IPv4 address; write it as a.b.c.d",
        ));
    }
    Ok(())
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Host {
    type Err = HostError;
    fn from_str(s: &str) -> Result<Self, HostError> {
        Self::parse(s)
    }
}

/// An IP network in CIDR notation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    fn parse(input: &str, addr: &str, prefix: &str) -> Result<Self, HostError> {
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| HostError::new(input, "the part before '/' is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| HostError::new(input, format!("prefix length must be 0..={max}")))?;
        let net = Self { addr, prefix };
        if net.network() != addr {
            return Err(HostError::new(
                input,
                format!(
                    "host bits are set; the network is {}/{prefix}",
                    net.network()
                ),
            ));
        }
        Ok(net)
    }

    fn bits(ip: IpAddr) -> (u128, u8) {
        match ip {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
            IpAddr::V6(v6) => (u128::from(v6), 128),
        }
    }

    fn mask(&self) -> u128 {
        let (_, width) = Self::bits(self.addr);
        let host_bits = u32::from(width - self.prefix);
        let all = if width == 32 {
            u128::from(u32::MAX)
        } else {
            u128::MAX
        };
        all.checked_shl(host_bits).map_or(0, |m| m & all)
    }

    fn network(&self) -> IpAddr {
        let (bits, _) = Self::bits(self.addr);
        let net = bits & self.mask();
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4(u32::try_from(net).unwrap_or(0).into()),
            IpAddr::V6(_) => IpAddr::V6(net.into()),
        }
    }

    /// Whether `ip` is inside this network. IPv4-mapped IPv6 addresses are
    /// compared as the IPv4 address they map to.
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        if ip.is_ipv4() != self.addr.is_ipv4() {
            return false;
        }
        let (bits, _) = Self::bits(ip);
        let (net, _) = Self::bits(self.addr);
        bits & self.mask() == net
    }

    /// Whether every address of `other` is inside this network.
    pub(crate) fn contains_net(&self, other: &Self) -> bool {
        other.prefix >= self.prefix && self.contains(other.addr)
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// A rule's host pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern(PatternKind);

#[derive(Clone, Debug, PartialEq, Eq)]
enum PatternKind {
    /// "*": any host.
    Any,
    /// An exact host name or IP literal.
    Exact(Host),
    /// "*.example.com": strict subdomains at any depth; holds "example.com".
    Subdomains(Host),
    /// "10.0.0.0/8".
    Cidr(IpNet),
}

impl HostPattern {
    /// Parses "api.example.com", "*.example.com", "*", "10.1.2.3", "::1" or "10.0.0.0/8".
    pub fn parse(s: &str) -> Result<Self, HostError> {
        if s == "*" {
            return Ok(Self(PatternKind::Any));
        }
        if let Some((addr, prefix)) = s.split_once('/') {
            let addr = addr
                .strip_prefix('[')
                .and_then(|a| a.strip_suffix(']'))
                .unwrap_or(addr);
            return Ok(Self(PatternKind::Cidr(IpNet::parse(s, addr, prefix)?)));
        }
        if let Some(parent) = s.strip_prefix("*.") {
            let parent = Host::parse(parent).map_err(|e| HostError::new(s, e.problem))?;
            if parent.ip().is_some() {
                return Err(HostError::new(
                    s,
                    "\"*.\" cannot prefix an IP address; use CIDR like \"10.0.0.0/8\"",
                ));
            }
            return Ok(Self(PatternKind::Subdomains(parent)));
        }
        Ok(Self(PatternKind::Exact(Host::parse(s)?)))
    }

    /// Whether `host` is matched by this pattern.
    pub fn matches(&self, host: &Host) -> bool {
        match &self.0 {
            PatternKind::Any => true,
            PatternKind::Exact(exact) => match (exact.ip(), host.ip()) {
                (Some(a), Some(b)) => a.to_canonical() == b.to_canonical(),
                _ => exact == host,
            },
            PatternKind::Subdomains(parent) => {
                host.ip().is_none()
                    && host
                        .as_str()
                        .strip_suffix(parent.as_str())
                        .is_some_and(|prefix| prefix.len() > 1 && prefix.ends_with('.'))
            }
            PatternKind::Cidr(net) => host.ip().is_some_and(|ip| net.contains(ip)),
        }
    }

    /// Whether this is the bare "*" pattern.
    pub fn is_any(&self) -> bool {
        matches!(self.0, PatternKind::Any)
    }

    /// Why this pattern is too broad to receive a secret, if it is: "*",
    /// any CIDR (a range of machines nobody vetted one by one), or a
    /// wildcard over a single label ("*.com" is a whole top-level domain).
    pub(crate) fn too_broad_for_secret(&self) -> Option<&'static str> {
        match &self.0 {
            PatternKind::Any => Some("would send the secret to every host"),
            PatternKind::Cidr(_) => Some("is an address range, not a host"),
            PatternKind::Subdomains(parent) if !parent.as_str().contains('.') => {
                Some("covers a whole top-level domain")
            }
            PatternKind::Exact(_) | PatternKind::Subdomains(_) => None,
        }
    }

    /// Whether this pattern names `ip` explicitly: an equal IP literal or a
    /// CIDR containing it (never "*", never a DNS name).
    pub fn names_ip(&self, ip: IpAddr) -> bool {
        match &self.0 {
            PatternKind::Exact(host) => host
                .ip()
                .is_some_and(|own| own.to_canonical() == ip.to_canonical()),
            PatternKind::Cidr(net) => net.contains(ip),
            PatternKind::Any | PatternKind::Subdomains(_) => false,
        }
    }

    /// Whether every host this pattern can match is also matched by `self`.
    pub fn covers(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (PatternKind::Any, _) => true,
            (_, PatternKind::Any) => false,
            (_, PatternKind::Exact(host)) => self.matches(host),
            (PatternKind::Subdomains(mine), PatternKind::Subdomains(theirs)) => {
                mine == theirs || self.matches(theirs)
            }
            (PatternKind::Cidr(mine), PatternKind::Cidr(theirs)) => mine.contains_net(theirs),
            _ => false,
        }
    }

    /// Whether some host could be matched by both patterns.
    pub fn overlaps(&self, other: &Self) -> bool {
        self.covers(other)
            || other.covers(self)
            || match (&self.0, &other.0) {
                (PatternKind::Cidr(a), PatternKind::Cidr(b)) => {
                    a.contains_net(b) || b.contains_net(a)
                }
                _ => false,
            }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            PatternKind::Any => f.write_str("*"),
            PatternKind::Exact(host) => host.fmt(f),
            PatternKind::Subdomains(parent) => write!(f, "*.{parent}"),
            PatternKind::Cidr(net) => net.fmt(f),
        }
    }
}

impl FromStr for HostPattern {
    type Err = HostError;
    fn from_str(s: &str) -> Result<Self, HostError> {
        Self::parse(s)
    }
}
