//! End-to-end tests of `airlock proxy` with real clients (curl over HTTP/1.1
//! and HTTP/2, python3, node, openssl, a WebSocket client) against real TLS
//! servers on loopback.

use airlock_test_support::client::{ClientOutput, curl, run};
use airlock_test_support::pki::{TestPki, tls_client, untrusted_server_config};
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::upstream::{Extra, Upstream};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// A proxy whose policy allows `api.test` and `other.test` on the upstream's port,
/// both pinned to loopback, with `rules` added to the policy.
struct Setup {
    _pki: TestPki,
    upstream: Upstream,
    proxy: AirlockProxy,
}

impl Setup {
    async fn new(policy: impl Fn(u16) -> String) -> Self {
        Self::with_env(policy, &[]).await
    }

    async fn with_env(policy: impl Fn(u16) -> String, env: &[(&str, &str)]) -> Self {
        let pki = TestPki::new();
        let upstream = Upstream::start(Some(pki.server_config(&["api.test", "other.test"]))).await;
        let text = policy(upstream.port());
        let mut opts = ProxyOptions::new(&text);
        opts.upstream_ca = Some(&pki.ca_pem);
        opts.resolve = vec!["api.test:127.0.0.1".into(), "other.test:127.0.0.1".into()];
        opts.env = env.to_vec();
        opts.dns = true;
        let proxy = AirlockProxy::start(AIRLOCK, opts);
        Self {
            _pki: pki,
            upstream,
            proxy,
        }
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.upstream.port())
    }
}

fn read_only(port: u16) -> String {
    format!(
        r#"
version = 1
default = "deny"

[[allow]]
host = "api.test"
port = {port}
methods = ["GET", "HEAD"]
paths = ["/echo", "/echo/**", "/sse", "/bytes/*"]
"#
    )
}

#[tokio::test]
async fn allowed_request_over_http1_and_http2() {
    let s = Setup::new(read_only).await;
    let url = s.url("api.test", "/echo?x=1");
    for version in ["--http1.1", "--http2"] {
        let (code, body, out) = curl(&s.proxy, &[version, &url]).await;
        assert_eq!(code, 200, "{version}: {out:?}");
        let echo: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(echo["method"], "GET");
        assert!(
            echo["uri"].as_str().unwrap().ends_with("/echo?x=1"),
            "{echo}"
        );
    }
    // The upstream negotiated HTTP/2 with the proxy either way.
    let (_, body, _) = curl(&s.proxy, &["--http2", &url]).await;
    let echo: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["version"], "HTTP/2.0");
    let events = s.proxy.events();
    let allowed: Vec<_> = events
        .iter()
        .filter(|e| e["kind"] == "request" && e["decision"] == "allow")
        .collect();
    assert_eq!(allowed.len(), 3, "{events:#?}");
    assert!(
        allowed[0]["rule"]
            .as_str()
            .unwrap()
            .ends_with("policy.toml:5")
    );
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "response" && e["status"] == 200)
    );
}

#[tokio::test]
async fn denied_host_gets_a_403_naming_the_rule_to_add() {
    let s = Setup::new(read_only).await;
    let (code, body, out) = curl(&s.proxy, &["-i", &s.url("other.test", "/echo")]).await;
    assert_eq!(code, 403, "{out:?}");
    assert!(
        body.to_lowercase().contains("x-airlock-decision: deny"),
        "{body}"
    );
    assert!(body.contains("GET https://other.test:"), "{body}");
    // What a person (or an agent) reads: the request, why, who decided, the fix.
    assert!(
        body.contains("\nreason:     no rule allows this host\n"),
        "{body}"
    );
    assert!(
        body.lines()
            .any(|l| l.starts_with("decided by: ") && l.ends_with("(default: deny)")),
        "{body}"
    );
    assert!(
        body.to_lowercase()
            .contains("x-airlock-reason: no rule allows this host"),
        "{body}"
    );
    assert!(body.contains("[[allow]]\nhost = \"other.test\""), "{body}");
    assert_eq!(
        s.upstream.hits(),
        0,
        "a denied request reached the upstream"
    );
}

#[tokio::test]
async fn denied_method_and_path() {
    let s = Setup::new(read_only).await;
    let (code, body, _) = curl(
        &s.proxy,
        &["-X", "POST", "-d", "x", &s.url("api.test", "/echo")],
    )
    .await;
    assert_eq!(code, 403);
    assert!(body.contains("POST"), "{body}");
    assert!(body.contains("methods = [\"POST\"]"), "{body}");
    let (code, body, _) = curl(&s.proxy, &[&s.url("api.test", "/admin")]).await;
    assert_eq!(code, 403);
    assert!(body.contains("paths = [\"/admin\"]"), "{body}");
    // Path tricks do not get around the path rule.
    for tricky in ["/echo/../admin", "/echo/%2e%2e/admin", "/echo%2fadmin"] {
        let (code, _, out) = curl(&s.proxy, &["--path-as-is", &s.url("api.test", tricky)]).await;
        assert_eq!(code, 403, "{tricky}: {out:?}");
    }
    assert_eq!(s.upstream.hits(), 0);
}

#[tokio::test]
async fn deny_rule_overrides_allow() {
    let s = Setup::new(|port| {
        format!(
            r#"
version = 1
[[allow]]
host = "api.test"
port = {port}

[[deny]]
host = "api.test"
methods = ["DELETE"]
"#
        )
    })
    .await;
    let (code, _, _) = curl(&s.proxy, &["-X", "PUT", &s.url("api.test", "/echo")]).await;
    assert_eq!(code, 200);
    let (code, body, _) = curl(&s.proxy, &["-X", "DELETE", &s.url("api.test", "/echo")]).await;
    assert_eq!(code, 403);
    assert!(body.contains("[[deny]] rule at"), "{body}");
    assert!(body.contains("policy.toml:7"), "{body}");
    assert_eq!(s.upstream.hits(), 1);
}

#[tokio::test]
async fn body_constraints_and_quota() {
    let s = Setup::new(|port| {
        format!(
            r#"
version = 1
[[allow]]
host = "api.test"
port = {port}
methods = ["POST"]
paths = ["/echo/charges"]
max_requests = 2
[allow.body]
amount = {{ max = 100 }}
currency = {{ one_of = ["usd", "eur"] }}
"#
        )
    })
    .await;
    let url = s.url("api.test", "/echo/charges");
    let post = |body: &'static str| {
        let url = url.clone();
        let proxy = &s.proxy;
        async move {
            curl(
                proxy,
                &["-H", "content-type: application/json", "--data", body, &url],
            )
            .await
        }
    };
    let (code, body, _) = post(r#"{"amount": 500, "currency": "usd"}"#).await;
    assert_eq!(code, 403);
    assert!(body.contains("amount"), "{body}");
    let (code, body, _) = post(r#"{"amount": 50, "currency": "gbp"}"#).await;
    assert_eq!(code, 403);
    assert!(body.contains("currency"), "{body}");
    let (code, body, _) = post(r#"{"amount": 50, "currency": "usd"}"#).await;
    assert_eq!(code, 200, "{body}");
    let echo: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["body"], r#"{"amount": 50, "currency": "usd"}"#);
    let (code, _, _) = post(r#"{"amount": 1, "currency": "eur"}"#).await;
    assert_eq!(code, 200);
    let (code, body, _) = post(r#"{"amount": 1, "currency": "eur"}"#).await;
    assert_eq!(code, 403);
    assert!(body.contains("max_requests"), "{body}");
    assert_eq!(s.upstream.hits(), 2);
}

const SECRET: &str = "sk-live-0123456789abcdef";

fn with_credential(port: u16) -> String {
    format!(
        r#"
version = 1
[[allow]]
hosts = ["api.test", "other.test"]
port = {port}

[[credential]]
name = "test"
hosts = ["api.test"]
header = "Authorization"
value = "Bearer ${{env:TEST_TOKEN}}"
placeholder = "TEST_TOKEN"
"#
    )
}

#[tokio::test]
async fn credential_is_injected_and_scrubbed_from_the_echo() {
    let s = Setup::with_env(with_credential, &[("TEST_TOKEN", SECRET)]).await;
    // The client sends its own Authorization; Airlock replaces it.
    let (code, body, out) = curl(
        &s.proxy,
        &[
            "-i",
            "-H",
            "Authorization: Bearer forged",
            &s.url("api.test", "/echo"),
        ],
    )
    .await;
    assert_eq!(code, 200, "{out:?}");
    assert_eq!(
        s.upstream.last_header("authorization").as_deref(),
        Some(format!("Bearer {SECRET}").as_str()),
        "the upstream must receive the real secret"
    );
    assert!(
        !body.contains(SECRET),
        "secret echoed to the client: {body}"
    );
    assert!(body.contains("[secret:test]"), "{body}");
    assert!(!body.contains("forged"), "{body}");
    // Nowhere in the record either.
    let events = std::fs::read_to_string(&s.proxy.events).unwrap();
    assert!(!events.contains(SECRET));
    assert!(events.contains("[secret:test]"));
    assert!(!s.proxy.stderr.lock().unwrap().join("\n").contains(SECRET));
}

#[tokio::test]
async fn placeholder_is_swapped_only_for_its_hosts() {
    let s = Setup::with_env(with_credential, &[("TEST_TOKEN", SECRET)]).await;
    let dummy = s
        .proxy
        .placeholder("TEST_TOKEN")
        .expect("the proxy announces the placeholder");
    let header = format!("X-Api-Key: {dummy}");
    let (code, _, _) = curl(&s.proxy, &["-H", &header, &s.url("api.test", "/echo")]).await;
    assert_eq!(code, 200);
    assert_eq!(s.upstream.last_header("x-api-key").as_deref(), Some(SECRET));
    let (code, body, _) = curl(&s.proxy, &["-H", &header, &s.url("other.test", "/echo")]).await;
    assert_eq!(code, 200);
    assert_eq!(
        s.upstream.last_header("x-api-key").as_deref(),
        Some(dummy.as_str())
    );
    assert_eq!(s.upstream.last_header("authorization"), None);
    assert!(!body.contains(SECRET));
}

#[tokio::test]
async fn domain_fronting_is_refused() {
    let s = Setup::new(read_only).await;
    // Host header naming another host than the tunnel.
    let host = format!("Host: other.test:{}", s.upstream.port());
    let (code, body, _) = curl(&s.proxy, &["-H", &host, &s.url("api.test", "/echo")]).await;
    assert_eq!(code, 403);
    assert!(body.contains("domain fronting"), "{body}");
    // SNI naming another host than the tunnel: the handshake is refused.
    let out = run(
        "openssl",
        &[
            "s_client",
            "-proxy",
            &s.proxy.addr.to_string(),
            "-connect",
            &format!("api.test:{}", s.upstream.port()),
            "-servername",
            "other.test",
            "-CAfile",
            s.proxy.ca_pem.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_ne!(out.status, 0, "{out:?}");
    assert_eq!(s.upstream.hits(), 0);
}

#[tokio::test]
async fn invalid_upstream_certificate_is_refused() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(untrusted_server_config(&["api.test"]))).await;
    let policy = read_only(upstream.port());
    let mut opts = ProxyOptions::new(&policy);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    let proxy = AirlockProxy::start(AIRLOCK, opts);
    let url = format!("https://api.test:{}/echo", upstream.port());
    let (code, body, _) = curl(&proxy, &[&url]).await;
    assert_eq!(code, 502);
    assert!(body.contains("certificate"), "{body}");
    assert_eq!(upstream.hits(), 0);
}

#[tokio::test]
async fn dns_answers_every_name_with_a_synthetic_address_and_records_the_verdict() {
    let s = Setup::new(read_only).await;
    let dns = s.proxy.dns.unwrap();
    let script = r#"
import socket, struct, sys
def query(name, port):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.sendto(q, ("127.0.0.1", port))
    r = s.recv(512)
    rcode = r[3] & 0xF
    ancount = struct.unpack(">H", r[6:8])[0]
    ip = ".".join(str(b) for b in r[-4:]) if ancount else "-"
    return rcode, ancount, ip
port = int(sys.argv[1])
for name in sys.argv[2:]:
    print(name, *query(name, port))
"#;
    let out = run(
        "python3",
        &[
            "-c",
            script,
            &dns.port().to_string(),
            "api.test",
            "exfil-c2VjcmV0.unlisted.test",
            "bad!name.test",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("api.test 0 1 198.1"), "{lines:?}");
    // A name no rule allows gets an address too (the connection is where it is
    // refused, with a 403 that explains); it was forwarded nowhere.
    assert!(
        lines[1].starts_with("exfil-c2VjcmV0.unlisted.test 0 1 198.1"),
        "{lines:?}"
    );
    // A name that is not a host name is NXDOMAIN.
    assert_eq!(lines[2], "bad!name.test 3 0 -");
    let events = s.proxy.events();
    assert!(events.iter().any(|e| e["kind"] == "dns"
        && e["name"] == "exfil-c2VjcmV0.unlisted.test"
        && e["decision"] == "deny"
        // The record keeps a query's reason as its `rule`.
        && e["rule"] == "no rule allows this name"));
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "dns" && e["name"] == "api.test" && e["decision"] == "allow")
    );
}

#[tokio::test]
async fn server_sent_events_arrive_as_they_are_sent() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let s = Setup::new(read_only).await;
    let mut child = tokio::process::Command::new("curl")
        .args(["-sS", "-N", "--max-time", "20", "--proxy"])
        .arg(s.proxy.proxy_url())
        .arg("--cacert")
        .arg(&s.proxy.ca_pem)
        .arg(s.url("api.test", "/sse"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
        .await
        .expect("the first event must arrive before the upstream sends the second")
        .unwrap();
    assert_eq!(first.as_deref(), Some("data: first"));
    s.upstream.release_sse();
    let mut rest = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push(line);
    }
    assert!(rest.contains(&"data: second".to_owned()), "{rest:?}");
    let _ = child.wait().await;
}

#[tokio::test]
async fn websocket_echo_through_the_proxy() {
    use futures_util::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::Message;
    let s = Setup::new(|port| {
        format!("version = 1\n[[allow]]\nhost = \"api.test\"\nport = {port}\npaths = [\"/ws\"]\nupgrade = [\"websocket\"]\n")
    })
    .await;
    let authority = format!("api.test:{}", s.upstream.port());
    let mut tcp = tokio::net::TcpStream::connect(s.proxy.addr).await.unwrap();
    tcp.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = tcp.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let tls = tls_client(&s.proxy.ca_pem, &[b"http/1.1"])
        .connect("api.test".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let (mut ws, response) = tokio_tungstenite::client_async(format!("wss://{authority}/ws"), tls)
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    for text in ["hello", "through the airlock"] {
        ws.send(Message::text(text)).await.unwrap();
        let echoed = ws.next().await.unwrap().unwrap();
        assert_eq!(echoed.into_text().unwrap().as_str(), text);
    }
}

#[tokio::test]
async fn python_and_node_clients() {
    let s = Setup::new(read_only).await;
    let proxy = s.proxy.proxy_url();
    let ca = s.proxy.ca_pem.to_str().unwrap().to_owned();
    let python = r#"
import sys, urllib.request, urllib.error, ssl
ctx = ssl.create_default_context(cafile=sys.argv[2])
opener = urllib.request.build_opener(
    urllib.request.ProxyHandler({"https": sys.argv[1]}),
    urllib.request.HTTPSHandler(context=ctx))
for url in sys.argv[3:]:
    try:
        r = opener.open(url, timeout=20)
        print(r.status, r.read().decode()[:40].replace("\n", " "))
    except urllib.error.HTTPError as e:
        print(e.code, e.headers.get("x-airlock-decision"), e.read().decode().splitlines()[0])
"#;
    let allowed = s.url("api.test", "/echo");
    let denied = s.url("other.test", "/echo");
    let out = run(
        "python3",
        &["-c", python, &proxy, &ca, &allowed, &denied],
        &[],
    )
    .await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines.len() == 2 && lines[0].starts_with("200 {"), "{out:?}");
    assert_eq!(
        lines[1], "403 deny Airlock refused this request.",
        "{out:?}"
    );

    let node = r#"
const http = require('http'), tls = require('tls'), fs = require('fs');
const [proxy, ca, ...urls] = process.argv.slice(1);
const p = new URL(proxy);
async function get(url) {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({host: p.hostname, port: p.port, method: 'CONNECT', path: `${u.hostname}:${u.port}`});
    req.on('connect', (res, socket) => {
      const https = require('https');
      const r = https.get({host: u.hostname, port: u.port, path: u.pathname,
        createConnection: () => tls.connect({socket, servername: u.hostname, ca: fs.readFileSync(ca)})},
        (resp) => { let b = ''; resp.on('data', d => b += d); resp.on('end', () => resolve(`${resp.statusCode} ${resp.headers['x-airlock-decision'] || '-'}`)); });
      r.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}
(async () => { for (const u of urls) console.log(await get(u)); })().catch(e => { console.error(e); process.exit(1); });
"#;
    let out = run("node", &["-e", node, &proxy, &ca, &allowed, &denied], &[]).await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines, vec!["200 -", "403 deny"], "{out:?}");
}

#[tokio::test]
async fn private_upstream_addresses_need_an_explicit_pin() {
    // Even with default allow, a loopback address (the host's own services)
    // is refused unless pinned with --resolve or named by a rule.
    let upstream = Upstream::start(None).await;
    let policy = format!(
        "version = 1\ndefault = \"allow\"\n[[allow]]\nhost = \"api.test\"\nport = {}\n",
        upstream.port()
    );
    let proxy = AirlockProxy::start(AIRLOCK, ProxyOptions::new(&policy));
    let url = format!("http://127.0.0.1:{}/echo", upstream.port());
    let (code, body, _) = curl(&proxy, &[&url]).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("non-public"), "{body}");
    assert_eq!(upstream.hits(), 0);
}

#[tokio::test]
async fn grpc_trailers_pass_through_over_http2() {
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = Setup::new(|port| {
        format!("version = 1\n[[allow]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"POST\"]\npaths = [\"/grpc\"]\n")
    })
    .await;
    let authority = format!("api.test:{}", s.upstream.port());
    let mut tcp = tokio::net::TcpStream::connect(s.proxy.addr).await.unwrap();
    tcp.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = tcp.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let tls = tls_client(&s.proxy.ca_pem, &[b"h2"])
        .connect("api.test".try_into().unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::post(format!("https://{authority}/grpc"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            b"\0\0\0\0\x02yo",
        )))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-saw-te"], "trailers");
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected
        .trailers()
        .cloned()
        .expect("trailers must reach the client");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(&collected.to_bytes()[..], b"\0\0\0\0\x02hi");
}

#[tokio::test]
async fn credentials_never_travel_over_plain_http() {
    let upstream = Upstream::start(None).await;
    let policy = format!(
        r#"version = 1
[[allow]]
host = "api.test"
port = {port}

[[credential]]
name = "test"
hosts = ["api.test"]
header = "Authorization"
value = "Bearer ${{env:TEST_TOKEN}}"
"#,
        port = upstream.port()
    );
    let mut opts = ProxyOptions::new(&policy);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    opts.env = vec![("TEST_TOKEN", SECRET)];
    let proxy = AirlockProxy::start(AIRLOCK, opts);
    let url = format!("http://api.test:{}/echo", upstream.port());
    let (code, body, _) = curl(&proxy, &[&url]).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        upstream.last_header("authorization"),
        None,
        "secret sent in cleartext"
    );
    // A complete HTTP/1.1 response is recorded as complete.
    let responses: Vec<_> = proxy
        .events_when(|events| events.iter().any(|e| e["kind"] == "response"))
        .await
        .into_iter()
        .filter(|e| e["kind"] == "response")
        .collect();
    assert_eq!(responses.len(), 1);
    assert!(responses[0]["error"].is_null(), "{:?}", responses[0]);
}

#[tokio::test]
async fn report_mode_allows_and_records_what_deny_would_block() {
    let s = Setup::new(|port| {
        format!(
            "version = 1\ndefault = \"report\"\n[[allow]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"GET\"]\nmax_requests = 1\n"
        )
    })
    .await;
    for _ in 0..2 {
        let (code, _, _) = curl(&s.proxy, &[&s.url("api.test", "/echo")]).await;
        assert_eq!(code, 200);
    }
    let (code, _, _) = curl(&s.proxy, &["-X", "POST", &s.url("other.test", "/echo")]).await;
    assert_eq!(code, 200);
    let reports: Vec<_> = s
        .proxy
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "request" && e["decision"] == "report")
        .collect();
    assert_eq!(reports.len(), 2, "{reports:#?}");
    assert!(reports[0]["reason"].as_str().unwrap().contains("quota"));
    assert_eq!(s.upstream.hits(), 3);
}

/// The certificate a client sees for an intercepted host: minted for that
/// name by the session's CA, ECDSA P-256, valid for about a day, and the
/// same (cached) certificate on the next connection.
#[tokio::test]
async fn minted_leaf_is_ecdsa_p256_short_lived_and_cached() {
    let s = Setup::new(read_only).await;
    let script = format!(
        "set -e; for i in 1 2; do openssl s_client -proxy {proxy} -connect api.test:{port} -servername api.test \
           -CAfile {ca} -verify_return_error </dev/null 2>/dev/null | openssl x509 > leaf$i.pem; done; \
         openssl x509 -in leaf1.pem -noout -text; \
         openssl x509 -in leaf1.pem -noout -serial; openssl x509 -in leaf2.pem -noout -serial; \
         openssl x509 -in leaf1.pem -noout -checkend 3600 >/dev/null && echo valid-for-an-hour; \
         openssl x509 -in leaf1.pem -noout -checkend 90000 >/dev/null || echo expires-within-25h",
        proxy = s.proxy.addr,
        port = s.upstream.port(),
        ca = s.proxy.ca_pem.display(),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new("sh")
        .args(["-c", &script])
        .current_dir(dir.path())
        .output()
        .await
        .unwrap();
    let out = ClientOutput::from(out);
    assert_eq!(out.status, 0, "{out:?}");
    let text = &out.stdout;
    assert!(
        text.contains("Public Key Algorithm: id-ecPublicKey"),
        "{text}"
    );
    assert!(
        text.contains("prime256v1") || text.contains("P-256"),
        "{text}"
    );
    assert!(
        text.contains("Signature Algorithm: ecdsa-with-SHA256"),
        "{text}"
    );
    assert!(text.contains("DNS:api.test"), "{text}");
    assert!(text.contains("TLS Web Server Authentication"), "{text}");
    let serials: Vec<&str> = text.lines().filter(|l| l.starts_with("serial=")).collect();
    assert_eq!(serials.len(), 2, "{text}");
    assert_eq!(serials[0], serials[1], "the leaf was minted twice: {text}");
    assert!(
        text.contains("valid-for-an-hour\nexpires-within-25h"),
        "{text}"
    );
}

/// Upstream names are resolved by airlock, and the hosts file counts: a name
/// that only /etc/hosts knows reaches the address given there. That address
/// is loopback here, so it is used only once the policy names it (the
/// non-public rule), and the refusal before that says exactly this.
#[tokio::test]
async fn upstream_names_honour_the_hosts_file() {
    let pki = TestPki::new();
    let upstream = Upstream::start(Some(pki.server_config(&["hosts.test"]))).await;
    let port = upstream.port();
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n127.0.0.1 hosts.test\n").unwrap();
    // The proxy sees this hosts file in a mount namespace of its own; the
    // machine's /etc/hosts is untouched.
    let mount = format!(
        "mount --bind {} /etc/hosts && exec \"$0\" \"$@\"",
        hosts.display()
    );
    let wrapper = vec![
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        &mount,
    ];
    let start = |policy: &str| {
        let mut opts = ProxyOptions::new(policy);
        opts.upstream_ca = Some(&pki.ca_pem);
        opts.wrapper = wrapper.clone();
        AirlockProxy::start(AIRLOCK, opts)
    };
    let url = format!("https://hosts.test:{port}/echo");

    let name_only = format!("version = 1\n[[allow]]\nhost = \"hosts.test\"\nport = {port}\n");
    let proxy = start(&name_only);
    let (code, body, out) = curl(&proxy, &[&url]).await;
    assert_eq!(code, 403, "{out:?}");
    assert!(
        body.contains("hosts.test resolves to 127.0.0.1, a non-public address"),
        "{body}"
    );
    assert_eq!(upstream.hits(), 0);

    let with_address = format!("{name_only}\n[[allow]]\nhost = \"127.0.0.1\"\nport = {port}\n");
    let proxy = start(&with_address);
    let (code, body, out) = curl(&proxy, &[&url]).await;
    assert_eq!(code, 200, "{out:?}");
    assert!(body.contains("\"method\":\"GET\""), "{body}");
    assert_eq!(upstream.hits(), 1);
}

/// A request body streams through: the upstream sees its first bytes while
/// the client is still sending (the client waits for exactly that before
/// sending the rest), and 64 MiB pass without the proxy holding them.
#[tokio::test]
async fn request_bodies_stream_to_the_upstream() {
    let pki = TestPki::new();
    let extra = Extra::default();
    let started = extra.upload_started.clone();
    let upstream = Upstream::start_with(Some(pki.server_config(&["api.test"])), extra).await;
    let port = upstream.port();
    let policy = format!(
        "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {port}\nmethods = [\"POST\"]\npaths = [\"/upload\"]\n"
    );
    let mut opts = ProxyOptions::new(&policy);
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    let proxy = AirlockProxy::start(AIRLOCK, opts);

    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("upstream-saw-the-first-chunk");
    let signal = flag.clone();
    tokio::spawn(async move {
        if tokio::time::timeout(std::time::Duration::from_secs(20), started.notified())
            .await
            .is_ok()
        {
            std::fs::write(signal, "").unwrap();
        }
    });
    const CLIENT: &str = r#"
import http.client, os, ssl, sys, time
proxy, port, ca, flag = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
host, proxy_port = proxy.rsplit(":", 1)
c = http.client.HTTPSConnection(host, int(proxy_port), context=ssl.create_default_context(cafile=ca), timeout=30)
c.set_tunnel("api.test", port)
def body():
    yield b"x" * 65536
    deadline = time.time() + 20
    while not os.path.exists(flag):
        if time.time() > deadline:
            print("the upstream saw nothing before the body ended")
            break
        time.sleep(0.01)
    else:
        print("the upstream saw the first chunk while the client was still sending")
    chunk = b"y" * (1 << 20)
    for _ in range(64):
        yield chunk
c.request("POST", "/upload", body=body(), encode_chunked=True)
r = c.getresponse()
print(r.status, r.read().decode())
"#;
    let out = run(
        "python3",
        &[
            "-c",
            CLIENT,
            &proxy.addr.to_string(),
            &port.to_string(),
            proxy.ca_pem.to_str().unwrap(),
            flag.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(
        out.stdout,
        format!(
            "the upstream saw the first chunk while the client was still sending\n200 received {} bytes\n",
            65536 + 64 * (1 << 20)
        ),
        "{out:?}"
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", proxy.pid())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap();
    eprintln!("proxy peak RSS after a 64 MiB upload: {} KiB", peak_kib);
    assert!(
        peak_kib < 48 * 1024,
        "the proxy held the body: peak RSS {peak_kib} KiB"
    );
}

/// Context switches of each connection worker thread (`airlock-conn-N`).
fn worker_switches(pid: u32) -> std::collections::BTreeMap<String, u64> {
    let mut workers = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if !name.starts_with("airlock-conn-") {
            continue;
        }
        let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
        let switches = status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        workers.insert(name.trim().to_owned(), switches);
    }
    workers
}

/// `AIRLOCK_WORKER_THREADS` sets how many threads serve connections, and
/// connections are spread over all of them; HTTP/1.1 and HTTP/2 clients at
/// once all get their answers.
#[tokio::test]
async fn connections_are_spread_over_the_worker_threads() {
    let s = Setup::with_env(read_only, &[("AIRLOCK_WORKER_THREADS", "3")]).await;
    // A new thread names itself once it runs, which under load can be after
    // the proxy is already listening.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut before = worker_switches(s.proxy.pid());
    while before.len() < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        before = worker_switches(s.proxy.pid());
    }
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        ["airlock-conn-0", "airlock-conn-1", "airlock-conn-2"],
        "{before:?}"
    );
    let url = s.url("api.test", "/echo");
    let clients = (0..12).map(|n| {
        let version = if n % 2 == 0 { "--http1.1" } else { "--http2" };
        let url = url.clone();
        let proxy = &s.proxy;
        async move { curl(proxy, &[version, &url]).await }
    });
    for (code, _, out) in futures_util::future::join_all(clients).await {
        assert_eq!(code, 200, "{out:?}");
    }
    let after = worker_switches(s.proxy.pid());
    for (worker, switches) in &after {
        assert!(
            *switches > before[worker],
            "{worker} served no connection: before {before:?}, after {after:?}"
        );
    }
}
