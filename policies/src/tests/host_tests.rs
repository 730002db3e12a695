use std::net::IpAddr;

use crate::{Host, HostPattern};

fn norm(s: &str) -> String {
    Host::parse(s)
        .map(|h| h.to_string())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn pat(s: &str) -> HostPattern {
    HostPattern::parse(s).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn host_normalisation() {
    assert_eq!(norm("API.GitHub.COM"), "api.github.com");
    assert_eq!(norm("example.com."), "example.com");
    assert_eq!(norm("bücher.example"), "xn--bcher-kva.example");
    assert_eq!(norm("BÜCHER.example"), "xn--bcher-kva.example");
    assert_eq!(norm("_sip._tcp.example.com"), "_sip._tcp.example.com");
    assert_eq!(norm("[::1]"), "::1");
    assert_eq!(norm("::1"), "::1");
    assert_eq!(norm("[2001:DB8:0:0::1]"), "2001:db8::1");
    assert_eq!(norm("127.0.0.1"), "127.0.0.1");
    assert_eq!(
        "EXAMPLE.org"
            .parse::<Host>()
            .map(|h| h.as_str().to_owned())
            .ok()
            .as_deref(),
        Some("example.org")
    );
}

#[test]
fn host_ip() {
    assert_eq!(
        Host::parse("10.1.2.3").ok().and_then(|h| h.ip()),
        "10.1.2.3".parse::<IpAddr>().ok()
    );
    assert_eq!(
        Host::parse("[::1]").ok().and_then(|h| h.ip()),
        "::1".parse::<IpAddr>().ok()
    );
    assert_eq!(Host::parse("example.com").ok().and_then(|h| h.ip()), None);
}

#[test]
fn host_rejections_name_the_problem() {
    let err = Host::parse("a..b").err().map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            "invalid host \"a..b\": empty label; hosts look like \"api.example.com\" or \"*.example.com\""
        )
    );
    for bad in [
        "",
        ".",
        "a b.com",
        "exa mple",
        "host:443",
        "*.example.com",
        "a/b",
        "-bad.com",
        "bad-.com",
        "127.1",
        "0x7f.0.0.1",
        "1.2.3.4.5",
        "[example.com]",
        "a@b.com",
    ] {
        assert!(Host::parse(bad).is_err(), "{bad:?} should be rejected");
    }
    let long = format!("{}.com", "a.".repeat(130));
    assert!(Host::parse(&long).is_err());
    let long_label = format!("{}.com", "a".repeat(64));
    assert!(Host::parse(&long_label).is_err());
}

#[test]
fn wildcard_matches_subdomains_not_apex() {
    let p = pat("*.pypi.org");
    assert!(p.matches(&super::host("files.pypi.org")));
    assert!(p.matches(&super::host("a.b.pypi.org")));
    assert!(p.matches(&super::host("A.PyPI.org.")));
    assert!(!p.matches(&super::host("pypi.org")));
    assert!(!p.matches(&super::host("evilpypi.org")));
    assert!(!p.matches(&super::host("pypi.org.evil.com")));
    assert_eq!(p.to_string(), "*.pypi.org");
}

#[test]
fn exact_any_ip_and_cidr_patterns() {
    assert!(pat("Example.COM").matches(&super::host("example.com")));
    assert!(!pat("example.com").matches(&super::host("www.example.com")));
    assert!(pat("*").matches(&super::host("anything.example")));
    assert!(pat("*").matches(&super::host("10.0.0.1")));
    let net = pat("10.0.0.0/8");
    assert!(net.matches(&super::host("10.200.3.4")));
    assert!(!net.matches(&super::host("11.0.0.1")));
    assert!(!net.matches(&super::host("example.com")));
    // IPv4-mapped IPv6 is the same address.
    assert!(net.matches(&super::host("::ffff:10.1.1.1")));
    let v6 = pat("fd00::/8");
    assert!(v6.matches(&super::host("fd12::1")));
    assert!(!v6.matches(&super::host("fe80::1")));
    assert!(pat("[::1]").matches(&super::host("::1")));
    assert_eq!(pat("10.0.0.0/8").to_string(), "10.0.0.0/8");
}

#[test]
fn bad_patterns_are_rejected() {
    for bad in [
        "*.",
        "*.*.com",
        "a.*.com",
        "**",
        "10.0.0.1/8",
        "10.0.0.0/33",
        "x/8",
        "*.10.0.0.1",
        "*example.com",
    ] {
        assert!(
            HostPattern::parse(bad).is_err(),
            "{bad:?} should be rejected"
        );
    }
}
