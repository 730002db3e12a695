//! Connections that are not intercepted: `protocol = "tcp"` rules (an opaque
//! tunnel for SSH and other non-HTTP protocols, including those where the
//! server speaks first) and `tls = "passthrough"` rules (certificate-pinned
//! clients: the TLS session is the upstream's own, checked only by its SNI).
//! Both through the explicit proxy and, for TCP, from inside `airlock run`
//! where the host is known only from the sandbox's DNS query. And what is
//! refused: other ports, other SNI, non-HTTP bytes without a rule.

use std::time::Duration;

use airlock_test_support::client::try_connect_tunnel;
use airlock_test_support::isolation::Isolation;
use airlock_test_support::per_isolation;
use airlock_test_support::pki::{TestPki, tls_client};
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::server::TestServer;
use airlock_test_support::upstream::Upstream;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

const BANNER: &str = "SSH-2.0-AirlockTestServer\r\n";
const STEP: Duration = Duration::from_secs(10);

/// A server-speaks-first line protocol, like SSH: a banner on accept, then
/// every line echoed back. Counts the connections it accepted.
async fn banner_server() -> TestServer {
    TestServer::tcp(|stream| async move {
        let (read, mut write) = stream.into_split();
        if write.write_all(BANNER.as_bytes()).await.is_err() {
            return;
        }
        let mut lines = BufReader::new(read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if write
                .write_all(format!("echo {line}\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    })
    .await
}

/// Read until EOF or `STEP`; what arrived.
async fn read_to_end<S: AsyncRead + Unpin>(io: &mut S) -> (String, bool) {
    let mut out = Vec::new();
    let closed = matches!(
        tokio::time::timeout(STEP, io.read_to_end(&mut out)).await,
        Ok(Ok(_)) | Ok(Err(_))
    );
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

fn connection_events(proxy: &AirlockProxy) -> Vec<serde_json::Value> {
    proxy
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "connection")
        .collect()
}

#[tokio::test]
async fn tcp_rule_tunnels_a_protocol_where_the_server_speaks_first() {
    let ssh = banner_server().await;
    let other = banner_server().await;
    let policy = format!(
        "version = 1\n[[allow]]\nhost = \"git.test\"\nport = {}\nprotocol = \"tcp\"\n",
        ssh.port()
    );
    let mut opts = ProxyOptions::new(&policy);
    opts.resolve = vec!["git.test:127.0.0.1".into()];
    let proxy = AirlockProxy::start(AIRLOCK, opts);

    // The banner arrives without the client sending a byte first, then the
    // tunnel carries both directions untouched.
    let tcp = try_connect_tunnel(&proxy, &format!("git.test:{}", ssh.port()))
        .await
        .unwrap();
    let (read, mut write) = tcp.into_split();
    let mut lines = BufReader::new(read).lines();
    let banner = tokio::time::timeout(STEP, lines.next_line()).await;
    assert_eq!(
        banner.unwrap().unwrap().unwrap_or_default(),
        BANNER.trim_end()
    );
    write.write_all(b"ping through the tunnel\n").await.unwrap();
    let echoed = tokio::time::timeout(STEP, lines.next_line()).await;
    assert_eq!(
        echoed.unwrap().unwrap().as_deref(),
        Some("echo ping through the tunnel")
    );
    drop(write);
    drop(lines);

    // Another port of the same host has no rule: the bytes the client sends
    // are not HTTP or TLS, so the connection is closed and nothing reaches
    // the server there.
    let before = other.accepted();
    match try_connect_tunnel(&proxy, &format!("git.test:{}", other.port())).await {
        Err(head) => assert!(head.starts_with("HTTP/1.1 403"), "{head}"),
        Ok(mut tcp) => {
            tcp.write_all(b"SSH-2.0-client\r\n").await.unwrap();
            let (got, closed) = read_to_end(&mut tcp).await;
            assert!(closed, "the refused connection stayed open");
            assert!(!got.contains("SSH-2.0-Airlock"), "{got:?}");
        }
    }
    assert_eq!(other.accepted(), before);

    // On record: the tunnel, allowed by the tcp rule; the other port, denied.
    let events = connection_events(&proxy);
    let allowed = events
        .iter()
        .find(|e| e["target"] == format!("git.test:{}", ssh.port()))
        .unwrap_or_else(|| panic!("no connection event for the tunnel: {events:?}"));
    assert_eq!(allowed["decision"], "allow", "{allowed}");
    assert_eq!(allowed["handling"], "tunnel", "{allowed}");
    let denied = events
        .iter()
        .find(|e| e["target"] == format!("git.test:{}", other.port()))
        .unwrap_or_else(|| panic!("no connection event for the other port: {events:?}"));
    assert_eq!(denied["decision"], "deny", "{denied}");
}

async fn tcp_rule_inside_the_sandbox_knows_the_host_from_dns_under(isolation: Isolation) {
    let ssh = banner_server().await;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "version = 1\n[[allow]]\nhost = \"git.test\"\nport = {}\nprotocol = \"tcp\"\n",
            ssh.port()
        ),
    )
    .unwrap();
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    // A client that, like ssh, connects by name, reads the banner first and
    // then talks; and one that tries the same server by its bare address.
    let script = format!(
        r#"
import socket
s = socket.create_connection(("git.test", {port}), timeout=10)
f = s.makefile("rwb")
print(f.readline().decode().strip())
f.write(b"hello from the sandbox\n"); f.flush()
print(f.readline().decode().strip())
s.close()
try:
    s = socket.create_connection(("127.0.0.1", {port}), timeout=10)
    s.sendall(b"SSH-2.0-client\r\n")
    print("bare address:", s.recv(100) or b"closed")
except OSError as e:
    print("bare address refused:", type(e).__name__)
"#,
        port = ssh.port()
    );
    let out = tokio::process::Command::new(AIRLOCK)
        .arg("run")
        .args(isolation.args())
        .arg("--no-audit")
        .arg("--policy")
        .arg(&policy)
        .arg("--workspace")
        .arg(ws.path())
        .args(["--resolve", "git.test:127.0.0.1", "--timeout", "60s", "--"])
        .args(["/usr/bin/python3", "-c", &script])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("SSH-2.0-AirlockTestServer"), "{out:?}");
    assert_eq!(lines.next(), Some("echo hello from the sandbox"), "{out:?}");
    let bare = lines.next().unwrap_or_default();
    assert!(
        bare == "bare address: b'closed'" || bare.starts_with("bare address refused"),
        "the bare address reached the server: {out:?}"
    );
    // Only the named connection reached the server.
    assert_eq!(ssh.accepted(), 1, "{out:?}");
}

per_isolation!(tokio tcp_rule_inside_the_sandbox_knows_the_host_from_dns_under => tcp_rule_inside_the_sandbox_knows_the_host_from_dns, tcp_rule_inside_gvisor_knows_the_host_from_dns);

#[tokio::test]
async fn passthrough_keeps_the_upstreams_own_certificate() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["pinned.test", "other.test"]))).await;
    let port = upstream.port();
    let policy = format!(
        "version = 1\n[[allow]]\nhost = \"pinned.test\"\nport = {port}\ntls = \"passthrough\"\n"
    );
    let mut opts = ProxyOptions::new(&policy);
    opts.resolve = vec!["pinned.test:127.0.0.1".into()];
    let proxy = AirlockProxy::start(AIRLOCK, opts);
    let authority = format!("pinned.test:{port}");

    // A client that pins the upstream's CA (and does not trust Airlock's)
    // completes its handshake: the certificate it sees is the upstream's own.
    let tcp = try_connect_tunnel(&proxy, &authority).await.unwrap();
    let mut tls = tls_client(&pki.ca_pem, &[b"http/1.1"])
        .connect("pinned.test".try_into().unwrap(), tcp)
        .await
        .expect("the pinned client's handshake went through the proxy untouched");
    tls.write_all(
        format!("GET /echo/pinned HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let (reply, _) = read_to_end(&mut tls).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("/echo/pinned"), "{reply}");
    assert_eq!(upstream.hits(), 1);

    // A client trusting Airlock's CA fails: nothing is intercepted here.
    let tcp = try_connect_tunnel(&proxy, &authority).await.unwrap();
    let intercepted = tls_client(&proxy.ca_pem, &[b"http/1.1"])
        .connect("pinned.test".try_into().unwrap(), tcp)
        .await;
    assert!(intercepted.is_err(), "passthrough was intercepted");

    // The SNI must name the rule's host: another name in the same tunnel is
    // cut off before the upstream sees a byte of it.
    let tcp = try_connect_tunnel(&proxy, &authority).await.unwrap();
    let other = tls_client(&pki.ca_pem, &[b"http/1.1"])
        .connect("other.test".try_into().unwrap(), tcp)
        .await;
    assert!(other.is_err(), "SNI other.test was passed through");
    assert_eq!(upstream.hits(), 1);

    let events = connection_events(&proxy);
    assert!(
        events
            .iter()
            .all(|e| e["handling"] == "passthrough" && e["decision"] == "allow"),
        "{events:?}"
    );
    // The close is recorded when the proxy's side of the connection ends,
    // which may be just after the client saw it: wait for it briefly.
    let deadline = std::time::Instant::now() + STEP;
    loop {
        let refused = proxy.events().into_iter().any(|e| {
            e["kind"] == "connection_closed"
                && e["error"].as_str().unwrap_or("").contains("other.test")
        });
        if refused {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the SNI refusal is not on record: {:?}",
            proxy.events()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
