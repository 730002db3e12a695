//! The proxy under bad input and faults: it answers with an error, never
//! panics or hangs, and keeps serving everyone else.

use std::time::Duration;

use airlock_test_support::client::curl;
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::upstream::Upstream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn policy(port: u16, paths: &str) -> String {
    format!("version = 1\n[[allow]]\nhost = \"api.test\"\nport = {port}\npaths = [{paths}]\n")
}

async fn setup(paths: &str) -> (TestPki, Upstream, AirlockProxy) {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let text = policy(upstream.port(), paths);
    let mut opts = ProxyOptions::new(&text);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    let proxy = AirlockProxy::start(AIRLOCK, opts);
    (pki, upstream, proxy)
}

/// Send raw bytes to the proxy and return what it answered (until close or 5 s).
async fn raw(proxy: &AirlockProxy, bytes: &[u8]) -> String {
    let mut tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let _ = tcp.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

async fn still_serves(proxy: &AirlockProxy, upstream: &Upstream) {
    let url = format!("https://api.test:{}/echo", upstream.port());
    let (code, _, out) = curl(proxy, &[&url]).await;
    assert_eq!(code, 200, "the proxy stopped serving: {out:?}");
}

#[tokio::test]
async fn sighup_reloads_the_policy_without_dropping_connections() {
    use tokio::io::AsyncBufReadExt;
    let (_pki, upstream, proxy) = setup("\"/echo\", \"/sse\"").await;
    let other = format!("https://api.test:{}/other", upstream.port());
    assert_eq!(curl(&proxy, &[&other]).await.0, 403);

    // A long-lived stream is open while the policy changes.
    let mut sse = tokio::process::Command::new("curl")
        .args(["-sS", "-N", "--max-time", "20", "--proxy"])
        .arg(proxy.proxy_url())
        .arg("--cacert")
        .arg(&proxy.ca_pem)
        .arg(format!("https://api.test:{}/sse", upstream.port()))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(sse.stdout.take().unwrap()).lines();
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some("data: first")
    );

    // A broken policy is refused and the old one stays.
    std::fs::write(&proxy.policy, "version = 1\n[[allow]]\nhots = 1\n").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proxy.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    wait_for_stderr(&proxy, "policy reload failed").await;
    assert_eq!(curl(&proxy, &[&other]).await.0, 403);

    std::fs::write(
        &proxy.policy,
        policy(upstream.port(), "\"/echo\", \"/sse\", \"/other\""),
    )
    .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proxy.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    wait_for_stderr(&proxy, "reloaded policy").await;
    assert_eq!(curl(&proxy, &[&other]).await.0, 200);

    upstream.release_sse();
    let mut rest = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push(line);
    }
    assert!(
        rest.contains(&"data: second".to_owned()),
        "stream broken by reload: {rest:?}"
    );
}

async fn wait_for_stderr(proxy: &AirlockProxy, needle: &str) {
    for _ in 0..100 {
        if proxy
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(needle))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "proxy never said {needle:?}: {:?}",
        proxy.stderr.lock().unwrap()
    );
}

#[tokio::test]
async fn malformed_and_oversized_requests_get_errors() {
    let (_pki, upstream, proxy) = setup("\"/echo\"").await;
    let garbage = raw(&proxy, b"\x00\x01\x02 junk junk\r\n\r\n").await;
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage:?}");
    let mut huge = b"GET http://api.test/echo HTTP/1.1\r\nHost: api.test\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 200 * 1024));
    huge.extend_from_slice(b"\r\n\r\n");
    let answer = raw(&proxy, &huge).await;
    // The proxy answers 431 after the first 64 KiB and closes; the kernel may
    // then reset the connection under the rest of our 200 KiB (unread data at
    // close, see tcp(7)), so an empty answer is allowed here.
    assert!(
        answer.is_empty()
            || answer.starts_with("HTTP/1.1 431")
            || answer.starts_with("HTTP/1.1 400"),
        "{answer:?}"
    );
    let no_port = raw(
        &proxy,
        b"CONNECT api.test HTTP/1.1\r\nHost: api.test\r\n\r\n",
    )
    .await;
    assert!(no_port.starts_with("HTTP/1.1 400"), "{no_port:?}");
    let relative = raw(&proxy, b"GET /echo HTTP/1.1\r\nHost: api.test\r\n\r\n").await;
    assert!(relative.starts_with("HTTP/1.1 400"), "{relative:?}");
    assert!(relative.contains("absolute URL"), "{relative:?}");
    still_serves(&proxy, &upstream).await;
}

#[tokio::test]
async fn garbage_and_truncated_tls_and_abrupt_disconnects() {
    let (_pki, upstream, proxy) = setup("\"/echo\"").await;
    let connect = format!(
        "CONNECT api.test:{port} HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n",
        port = upstream.port()
    );
    for tail in [
        b"\x16\x03\x01\x00\x05garbage-not-a-hello".to_vec(),
        b"\x16\x03\x01\x40\x00partial".to_vec(),
        b"\xff\xfe\xfd binary junk".to_vec(),
        Vec::new(),
    ] {
        let mut tcp = TcpStream::connect(proxy.addr).await.unwrap();
        tcp.write_all(connect.as_bytes()).await.unwrap();
        let mut buf = [0u8; 256];
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        let _ = tcp.write_all(&tail).await;
        drop(tcp); // abrupt close mid-handshake
    }
    assert_eq!(upstream.hits(), 0);
    still_serves(&proxy, &upstream).await;
}

#[tokio::test]
async fn dead_upstream_gives_502_with_the_reason() {
    let (_pki, upstream, _proxy) = setup("\"/echo\"").await;
    // A port with nothing listening: bind then drop to find one.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pki = TestPki::new();
    let text = policy(free, "\"/echo\"");
    let mut opts = ProxyOptions::new(&text);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    let proxy = AirlockProxy::start(AIRLOCK, opts);
    let (code, body, _) = curl(&proxy, &[&format!("https://api.test:{free}/echo")]).await;
    assert_eq!(code, 502, "{body}");
    assert!(body.to_lowercase().contains("refused"), "{body}");
    drop(upstream);
}
