//! The proxy's edges, tried from inside `airlock run` by a hostile program
//! under each isolation (namespaces and gVisor), in one sandbox per
//! isolation: DNS to another resolver over UDP and TCP, a port no rule
//! names, plain HTTP on the TLS port, a Host or an SNI naming another host
//! than the connection's, an upstream whose certificate no trusted CA
//! signed, bytes that are neither HTTP nor TLS, and the host's abstract
//! Unix sockets. Every one is refused the same way under both, and what
//! reached the proxy is on record.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

use airlock_test_support::isolation::Isolation;
use airlock_test_support::per_isolation;
use airlock_test_support::pki::TestPki;
use airlock_test_support::sandbox::{SandboxFixture, assert_on_record};
use airlock_test_support::upstream::{Extra, Upstream};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// Tries each edge and prints one `name<TAB>json` line per attempt.
const PROBE: &str = include_str!("fixtures/run_edges.py");

async fn the_proxys_edges_hold_from_inside_the_sandbox_under(isolation: Isolation) {
    let f = SandboxFixture::new(AIRLOCK, isolation, &["api.test"], Extra::default()).await;
    // An upstream whose certificate another CA signed: the policy allows
    // it, the proxy must still not talk to it.
    let rogue = TestPki::new();
    let bad = Upstream::start(Some(rogue.server_config(&["badcert.test"]))).await;
    let port = f.port();
    let policy = f.write_policy(&format!(
        "[[allow]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"GET\"]\npaths = [\"/echo\", \"/echo/**\"]\n\
         [[allow]]\nhost = \"badcert.test\"\nport = {}\nmethods = [\"GET\"]\npaths = [\"/echo\"]\n",
        bad.port()
    ));
    // A host process listening on an abstract Unix socket.
    let name = format!("airlock-edges-{}-{}", std::process::id(), isolation.name());
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    listener.set_nonblocking(true).unwrap();
    let out = f
        .run(
            &policy,
            &[
                "--allow-unix-sockets",
                "--resolve",
                "badcert.test:127.0.0.1",
            ],
            &[
                "python3",
                "-c",
                PROBE,
                &port.to_string(),
                &name,
                &bad.port().to_string(),
            ],
        )
        .await;
    assert_eq!(out.status, 0, "{out:?}");
    let seen: std::collections::HashMap<&str, String> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k, serde_json::from_str::<String>(v).unwrap()))
        .collect();
    assert_eq!(seen.len(), 10, "{out:?}");
    let timeline = f.timeline(&out);
    // DNS sent to another resolver, over UDP and TCP, is answered by
    // Airlock's (a synthetic address) and on record, refused by name.
    for (name, query) in [
        ("dns_other_resolver_udp", "exfil-udp.test"),
        ("dns_other_resolver_tcp", "exfil-tcp.test"),
    ] {
        assert!(
            seen[name].starts_with("answered 198.18."),
            "{name}: {seen:#?}"
        );
        assert!(
            timeline
                .lines()
                .any(|l| l.contains(&format!("dns   {query} A -> 198.18.")) && l.contains("[deny")),
            "{query} not on record:\n{timeline}"
        );
    }
    // A port no rule names: the proxy's 403, on record.
    assert_eq!(seen["other_port"], "403 ", "{seen:#?}");
    assert_on_record(&timeline, "GET", "https://api.test:8443/echo", 403);
    // Plain HTTP to the TLS port: the upstream does not speak it; 502.
    assert_eq!(seen["plain_http_on_tls_port"], "502 ", "{seen:#?}");
    assert_on_record(
        &timeline,
        "GET",
        &format!("http://api.test:{port}/echo"),
        502,
    );
    // A Host naming another host than the connection's: domain fronting.
    assert!(
        seen["host_mismatch"].contains("(domain fronting refused)"),
        "{seen:#?}"
    );
    assert_on_record(
        &timeline,
        "GET",
        &format!("https://other.test:{port}/echo"),
        403,
    );
    // An SNI naming another host than the connection's: no handshake; the
    // same client with the right SNI gets through (so the refusal is the
    // SNI's).
    assert!(seen["sni_mismatch"].starts_with("refused "), "{seen:#?}");
    assert_eq!(seen["sni_match"], "answered HTTP/1.1 200 OK", "{seen:#?}");
    // An upstream certificate no trusted CA signed: 502, never spoken to.
    assert!(
        seen["bad_certificate"].contains("invalid peer certificate"),
        "{seen:#?}"
    );
    assert_on_record(
        &timeline,
        "GET",
        &format!("https://badcert.test:{}/echo", bad.port()),
        502,
    );
    assert_eq!(bad.hits(), 0);
    // Neither HTTP nor TLS: closed.
    assert_eq!(seen["not_tls"], "closed", "{seen:#?}");
    // The host's abstract Unix socket is another namespace's (another
    // kernel's, under gVisor): refused, and the listener heard nothing.
    assert_eq!(
        seen["unix_abstract"], "error ConnectionRefusedError",
        "{seen:#?}"
    );
    assert!(
        listener
            .accept()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock)
    );
    // Only the one allowed request reached the upstream.
    assert_eq!(f.upstream.targets(), ["/echo"], "{timeline}");
    f.assert_verifies(&out);
}

per_isolation!(tokio the_proxys_edges_hold_from_inside_the_sandbox_under =>
    the_proxys_edges_hold_from_inside_the_sandbox,
    the_proxys_edges_hold_from_inside_gvisor);
