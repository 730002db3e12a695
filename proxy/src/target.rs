//! Where a connection or request is going, and whether its parts agree.
//!
//! A connection has one destination, fixed before any request is read: the
//! CONNECT authority, the name behind a synthetic DNS address, or the literal
//! address dialled. Every Host header, `:authority` and absolute URL on that
//! connection must name the same host and port — otherwise a client could
//! present an allowed name to the policy and reach another (domain fronting).

use airlock_policy::{Host, Scheme};

/// A host and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub host: Host,
    pub port: u16,
}

impl Target {
    /// `host:port` as it appears in a URL authority (IPv6 in brackets).
    pub fn authority(&self) -> String {
        format!("{}:{}", host_for_url(&self.host), self.port)
    }

    /// The authority as a URL needs it: the port only when not the scheme's default.
    pub fn url_authority(&self, scheme: Scheme) -> String {
        if self.port == default_port(scheme) {
            host_for_url(&self.host)
        } else {
            self.authority()
        }
    }

    pub fn url(&self, scheme: Scheme, path_and_query: &str) -> String {
        format!(
            "{}://{}{}",
            scheme_str(scheme),
            self.url_authority(scheme),
            path_and_query
        )
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.authority())
    }
}

pub fn default_port(scheme: Scheme) -> u16 {
    match scheme {
        Scheme::Http => 80,
        Scheme::Https => 443,
    }
}

pub fn scheme_str(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Http => "http",
        Scheme::Https => "https",
    }
}

fn host_for_url(host: &Host) -> String {
    match host.ip() {
        Some(std::net::IpAddr::V6(_)) => format!("[{host}]"),
        _ => host.to_string(),
    }
}

/// Why an authority string is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid authority {0:?}")]
pub struct BadAuthority(pub String);

/// Parse `host[:port]` (IPv6 in brackets); `default` applies when no port is given.
pub fn parse_authority(s: &str, default: u16) -> Result<Target, BadAuthority> {
    let bad = || BadAuthority(s.to_owned());
    if s.contains('@') {
        return Err(bad()); // userinfo has no place in a proxied authority
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(bad)?;
        match after {
            "" => (h, None),
            p => (h, Some(p.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            Some(_) => return Err(bad()), // bare IPv6 without brackets
            None => (s, None),
        }
    };
    let port = match port {
        None => default,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n != 0 && !p.starts_with('+') => n,
            _ => return Err(bad()),
        },
    };
    Ok(Target {
        host: Host::parse(host).map_err(|_| bad())?,
        port,
    })
}

/// Does `authority` (a Host header or URL authority) name `target`?
pub fn names(authority: &str, target: &Target, scheme: Scheme) -> bool {
    parse_authority(authority, default_port(scheme)).is_ok_and(|t| &t == target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(h: &str, p: u16) -> Target {
        Target {
            host: Host::parse(h).unwrap(),
            port: p,
        }
    }

    #[test]
    fn authorities_parse() {
        assert_eq!(
            parse_authority("Example.COM.", 443).unwrap(),
            t("example.com", 443)
        );
        assert_eq!(
            parse_authority("a.example:8443", 443).unwrap(),
            t("a.example", 8443)
        );
        assert_eq!(parse_authority("[::1]:80", 443).unwrap(), t("::1", 80));
        assert!(parse_authority("::1", 443).is_err());
        assert!(parse_authority("user@a.example", 443).is_err());
        assert!(parse_authority("a.example:0", 443).is_err());
        assert!(parse_authority("a.example:+80", 443).is_err());
        assert!(parse_authority("a.example:99999", 443).is_err());
    }

    #[test]
    fn host_must_name_the_connection() {
        let target = t("api.example.com", 443);
        assert!(names("api.example.com", &target, Scheme::Https));
        assert!(names("API.example.com:443", &target, Scheme::Https));
        assert!(!names("api.example.com:8443", &target, Scheme::Https));
        assert!(!names("evil.example.com", &target, Scheme::Https));
        assert!(!names("api.example.com", &target, Scheme::Http));
    }
}
