//! No tunnel the policy didn't grant (issue 21, class 2).
//!
//! A hostile upstream answers `101 Switching Protocols` to anything, then
//! keeps reading the raw bytes as HTTP requests: if the proxy ever spliced
//! bytes after a 101, a smuggled `DELETE /admin/users/1` would reach it.
//! An honest WebSocket echo that reflects the injected credential checks
//! that a granted WebSocket works with a real client, is recorded message
//! by message and is scrubbed. Peers that stop speaking WebSocket end the
//! connection, and the record's last word is the relay's end event.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_test_support::client::intercepted;
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::server::TestServer;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

const SECRET: &str = "sk-live-ws-0123456789abcdef";
const SMUGGLED: &str = "DELETE /admin/users/1 HTTP/1.1";
const STEP: Duration = Duration::from_secs(10);

/// Everything a test upstream received, decrypted: raw bytes and the
/// request lines it parsed out of them.
#[derive(Default)]
struct Received {
    bytes: Vec<u8>,
    request_lines: Vec<String>,
}

type Log = Arc<Mutex<Received>>;

/// Accepts any upgrade: answers every request it can parse with 101 (the
/// protocol asked for, or "websocket" if none, with a valid
/// Sec-WebSocket-Accept when there is a key), then parses whatever comes
/// next on the connection as the next request.
struct HostileUpstream {
    server: TestServer,
    log: Log,
}

impl HostileUpstream {
    async fn start(pki: &TestPki) -> Self {
        // HTTP/1.1 only, so the proxy's requests arrive as text it can parse.
        let mut config = pki.server_config(&["api.test"]);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let log: Log = Arc::default();
        let shared = log.clone();
        let server = TestServer::tls(config, move |tls| serve_anything(tls, shared.clone())).await;
        Self { server, log }
    }

    fn port(&self) -> u16 {
        self.server.port()
    }

    fn request_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().request_lines.clone()
    }

    /// The upstream never saw the smuggled request, parsed or as raw bytes.
    fn assert_nothing_smuggled(&self) {
        let log = self.log.lock().unwrap();
        let raw = String::from_utf8_lossy(&log.bytes);
        assert!(
            !raw.contains("DELETE") && !raw.contains("/admin"),
            "the upstream received {raw:?}"
        );
        assert!(
            log.request_lines
                .iter()
                .all(|l| l.starts_with("GET /upgrade ") || l.starts_with("GET /granted ")),
            "unapproved requests reached the upstream: {:?}",
            log.request_lines
        );
    }
}

async fn serve_anything<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, log: Log) {
    let mut pending = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match io.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        log.lock().unwrap().bytes.extend_from_slice(&chunk[..n]);
        pending.extend_from_slice(&chunk[..n]);
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end]).into_owned();
            pending.drain(..end + 4);
            let mut lines = head.split("\r\n");
            let request_line = lines.next().unwrap_or_default().to_owned();
            log.lock().unwrap().request_lines.push(request_line);
            let header = |name: &str| {
                head.split("\r\n").skip(1).find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case(name)
                        .then(|| v.trim().to_owned())
                })
            };
            let protocol = header("upgrade").unwrap_or_else(|| "websocket".into());
            let mut reply = format!(
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: {protocol}\r\n"
            );
            if let Some(key) = header("sec-websocket-key") {
                reply.push_str(&format!(
                    "Sec-WebSocket-Accept: {}\r\n",
                    derive_accept_key(key.as_bytes())
                ));
            }
            reply.push_str("\r\n");
            if io.write_all(reply.as_bytes()).await.is_err() {
                return;
            }
            let _ = io.flush().await;
        }
    }
}

/// A WebSocket server that reflects the credential it was sent: on `/ws`
/// it first sends the Authorization header back as a text message, then
/// split across two fragments, then as a binary message, and then echoes
/// what it gets; "close please" makes it close with the secret as the
/// reason. On `/ws-broken` it sends one good message and then bytes that
/// are not WebSocket.
async fn echo_upstream(pki: &TestPki) -> TestServer {
    TestServer::tls(pki.server_config(&["ws.test"]), echo_connection).await
}

async fn echo_connection<S: AsyncRead + AsyncWrite + Unpin>(mut io: S) {
    // The handshake by hand, so the test sees exactly what arrived.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if io.read(&mut byte).await.unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
    let key = header("sec-websocket-key").unwrap_or_default();
    let authorization = header("authorization").unwrap_or_default();
    // The proxy must not have offered an extension it cannot see through.
    let extensions = header("sec-websocket-extensions");
    let reply = format!(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: {}\r\n\r\n",
        derive_accept_key(key.as_bytes())
    );
    if io.write_all(reply.as_bytes()).await.is_err() {
        return;
    }
    let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
        io,
        tokio_tungstenite::tungstenite::protocol::Role::Server,
        None,
    )
    .await;
    let _ = ws
        .send(Message::text(format!(
            "extensions offered: {}",
            extensions.as_deref().unwrap_or("none")
        )))
        .await;
    if path == "/ws-broken" {
        let _ = ws.send(Message::text("one good message")).await;
        let io = ws.get_mut();
        // RSV1 set, no extension negotiated: not WebSocket any more.
        let _ = io.write_all(b"\xC1\x05hello").await;
        let _ = io.flush().await;
        tokio::time::sleep(STEP).await;
        return;
    }
    let _ = ws
        .send(Message::text(format!("token={authorization}")))
        .await;
    let (first, second) = authorization.split_at(authorization.len() / 2);
    let _ = ws
        .send(Message::Frame(Frame::message(
            first.as_bytes().to_vec(),
            OpCode::Data(Data::Text),
            false,
        )))
        .await;
    let _ = ws
        .send(Message::Frame(Frame::message(
            second.as_bytes().to_vec(),
            OpCode::Data(Data::Continue),
            true,
        )))
        .await;
    let _ = ws
        .send(Message::binary(authorization.clone().into_bytes()))
        .await;
    while let Some(Ok(message)) = ws.next().await {
        match message {
            Message::Text(t) if t.as_str() == "close please" => {
                let _ = ws
                    .close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
                        code: 1000.into(),
                        reason: authorization.clone().into(),
                    }))
                    .await;
            }
            Message::Text(_) | Message::Binary(_) if ws.send(message.clone()).await.is_err() => {
                return;
            }
            Message::Close(_) => return,
            _ => {}
        }
    }
}

struct Setup {
    pki: TestPki,
    hostile: HostileUpstream,
    echo: TestServer,
    proxy: AirlockProxy,
    _audit: tempfile::TempDir,
    audit_db: std::path::PathBuf,
}

impl Setup {
    async fn new() -> Self {
        let pki = TestPki::new();
        let hostile = HostileUpstream::start(&pki).await;
        let echo = echo_upstream(&pki).await;
        let policy = format!(
            r#"version = 1

[[allow]]
host = "api.test"
port = {hostile}
methods = ["GET"]
paths = ["/upgrade"]

[[allow]]
host = "api.test"
port = {hostile}
methods = ["GET"]
paths = ["/granted"]
upgrade = ["websocket"]

[[allow]]
host = "ws.test"
port = {echo}
methods = ["GET"]
paths = ["/ws", "/ws-broken"]
upgrade = ["websocket"]

[[credential]]
name = "ws"
hosts = ["ws.test"]
header = "Authorization"
value = "Bearer ${{env:WS_TOKEN}}"
"#,
            hostile = hostile.port(),
            echo = echo.addr.port(),
        );
        let audit = tempfile::tempdir().unwrap();
        let audit_db = audit.path().join("audit.db");
        let mut opts = ProxyOptions::new(&policy);
        opts.upstream_ca = Some(&pki.ca_pem);
        opts.resolve = vec!["api.test:127.0.0.1".into(), "ws.test:127.0.0.1".into()];
        opts.env = vec![("WS_TOKEN", SECRET)];
        opts.extra = vec![
            "--audit-db".into(),
            audit_db.to_str().unwrap().into(),
            "--audit-key".into(),
            audit.path().join("audit.key").to_str().unwrap().into(),
        ];
        let proxy = AirlockProxy::start(AIRLOCK, opts);
        Self {
            pki,
            hostile,
            echo,
            proxy,
            _audit: audit,
            audit_db,
        }
    }

    /// A TLS connection to `host` through the proxy's CONNECT, speaking HTTP/1.1.
    async fn tls_to(&self, host: &str, port: u16) -> tokio_rustls::client::TlsStream<TcpStream> {
        intercepted(&self.proxy, &format!("{host}:{port}"), host, &[b"http/1.1"]).await
    }

    /// Sends `raw` to the hostile upstream through the proxy, then reads
    /// whatever comes back until the proxy closes or goes quiet.
    async fn exchange(&self, raw: &str) -> String {
        let mut tls = self.tls_to("api.test", self.hostile.port()).await;
        tls.write_all(raw.as_bytes()).await.unwrap();
        read_for_a_while(&mut tls).await
    }

    /// Events recorded so far, once `done` holds for them (the recorder
    /// writes asynchronously).
    async fn events_when(
        &self,
        done: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            let events = self.proxy.events();
            if done(&events) || tokio::time::Instant::now() > deadline {
                return events;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn read_for_a_while<S: AsyncRead + Unpin>(io: &mut S) -> String {
    String::from_utf8_lossy(&read_bytes_for_a_while(io).await).into_owned()
}

async fn read_bytes_for_a_while<S: AsyncRead + Unpin>(io: &mut S) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match tokio::time::timeout(Duration::from_millis(1500), io.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&chunk[..n]),
            _ => return out,
        }
    }
}

fn smuggling(port: u16, upgrade_headers: &str, path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: api.test:{port}\r\n{upgrade_headers}Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n\
         {SMUGGLED}\r\nHost: api.test:{port}\r\n\r\n"
    )
}

/// The refused request is in the record with its 403.
fn refusal_recorded(events: &[serde_json::Value], path: &str) -> bool {
    events.iter().any(|e| {
        e["kind"] == "request"
            && e["method"] == "GET"
            && e["url"].as_str().is_some_and(|u| u.ends_with(path))
            && e["decision"] == "deny"
            && e["status"] == 403
    })
}

#[tokio::test]
async fn upgrades_no_rule_grants_are_refused_with_403_and_never_reach_the_upstream() {
    let s = Setup::new().await;
    let port = s.hostile.port();
    // (variant, the upgrade headers, what the 403 must say)
    let variants = [
        (
            "h2c",
            "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
            "Airlock speaks HTTP/2 with both sides itself",
        ),
        (
            "h2c in mixed case",
            "CONNECTION: UPGRADE\r\nUPGRADE: H2C\r\n",
            "never grants",
        ),
        (
            "a made-up protocol",
            "Connection: Upgrade\r\nUpgrade: raw-tunnel/1\r\n",
            "no rule can grant this one",
        ),
        (
            "websocket without a granting rule",
            "Connection: Upgrade\r\nUpgrade: websocket\r\n",
            "upgrade = [\"websocket\"]",
        ),
        (
            "websocket in mixed case without a granting rule",
            "connection: UpGrAdE\r\nupgrade: WebSocket\r\n",
            "upgrade = [\"websocket\"]",
        ),
        (
            "Connection: keep-alive, Upgrade",
            "Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n",
            "upgrade = [\"websocket\"]",
        ),
        (
            "the connection option on a second Connection line",
            "Connection: keep-alive\r\nConnection: upgrade\r\nUpgrade: websocket\r\n",
            "upgrade = [\"websocket\"]",
        ),
        (
            "a second Upgrade header",
            "Connection: Upgrade\r\nUpgrade: websocket\r\nUpgrade: h2c\r\n",
            "Name exactly one protocol",
        ),
    ];
    for (variant, headers, advice) in variants {
        let reply = s.exchange(&smuggling(port, headers, "/upgrade")).await;
        assert!(
            reply.starts_with("HTTP/1.1 403"),
            "{variant}: expected a 403, got {reply:?}"
        );
        assert!(reply.contains(advice), "{variant}: {reply}");
        assert!(!reply.contains("101 Switching"), "{variant}: {reply}");
        // The pipelined DELETE was read as the next request and refused by the policy.
        assert_eq!(
            reply.matches("HTTP/1.1 403").count(),
            2,
            "{variant}: both requests refused: {reply}"
        );
    }
    // Even on the path that grants websocket, two protocols are one too many.
    let reply = s
        .exchange(&smuggling(
            port,
            "Connection: Upgrade\r\nUpgrade: websocket, h2c\r\n",
            "/granted",
        ))
        .await;
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(
        s.hostile.request_lines().is_empty(),
        "nothing reached the upstream: {:?}",
        s.hostile.request_lines()
    );
    s.hostile.assert_nothing_smuggled();
    let events = s.events_when(|e| refusal_recorded(e, "/granted")).await;
    assert!(refusal_recorded(&events, "/upgrade"), "{events:#?}");
    assert!(refusal_recorded(&events, "/granted"), "{events:#?}");
    let suggested = events.iter().any(|e| {
        e["kind"] == "request"
            && e["reason"]
                .as_str()
                .is_some_and(|r| r.contains("no rule grants an upgrade to websocket"))
    });
    assert!(suggested, "{events:#?}");
    let h2c = events
        .iter()
        .any(|e| e["kind"] == "request" && e["reason"].as_str().is_some_and(|r| r.contains("h2c")));
    assert!(h2c, "{events:#?}");
}

#[tokio::test]
async fn an_upstream_that_switches_protocols_unasked_gets_502_and_no_tunnel() {
    let s = Setup::new().await;
    let port = s.hostile.port();
    for headers in [
        // No upgrade asked for at all.
        "",
        // An Upgrade header without the connection option is no upgrade
        // (RFC 9110 §7.8) and is dropped as hop-by-hop.
        "Upgrade: h2c\r\n",
    ] {
        let mut tls = s.tls_to("api.test", port).await;
        tls.write_all(
            format!("GET /upgrade HTTP/1.1\r\nHost: api.test:{port}\r\n{headers}\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let reply = read_for_a_while(&mut tls).await;
        assert!(reply.starts_with("HTTP/1.1 502"), "{headers:?}: {reply}");
        assert!(
            reply.contains("switched protocols (101) although the request did not ask to"),
            "{reply}"
        );
        // The connection is still HTTP: the next request is decided (and refused).
        tls.write_all(format!("{SMUGGLED}\r\nHost: api.test:{port}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let reply = read_for_a_while(&mut tls).await;
        assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    }
    // The upstream got the approved request each time, without Upgrade, and nothing else.
    assert_eq!(
        s.hostile.request_lines(),
        vec!["GET /upgrade HTTP/1.1", "GET /upgrade HTTP/1.1"]
    );
    assert!(
        !String::from_utf8_lossy(&s.hostile.log.lock().unwrap().bytes)
            .to_ascii_lowercase()
            .contains("upgrade: h2c")
    );
    s.hostile.assert_nothing_smuggled();
    let events = s
        .events_when(|e| {
            e.iter()
                .filter(|e| e["kind"] == "response" && e["status"] == 502)
                .count()
                == 2
        })
        .await;
    let bad = events
        .iter()
        .filter(|e| e["kind"] == "response" && e["status"] == 502)
        .count();
    assert_eq!(bad, 2, "{events:#?}");
}

#[tokio::test]
async fn after_a_granted_upgrade_only_websocket_frames_reach_the_upstream() {
    let s = Setup::new().await;
    let port = s.hostile.port();
    // 1. Raw HTTP after the 101: not a WebSocket frame, so the relay ends.
    let mut tls = s.tls_to("api.test", port).await;
    let handshake = format!(
        "GET /granted HTTP/1.1\r\nHost: api.test:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
    );
    tls.write_all(handshake.as_bytes()).await.unwrap();
    let mut head = vec![0u8; 0];
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(tls.read(&mut byte).await.unwrap(), 1, "{head:?}");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{head:?}");
    tls.write_all(format!("{SMUGGLED}\r\nHost: api.test:{port}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let rest = read_bytes_for_a_while(&mut tls).await;
    // Airlock's close frame: 1002, protocol error (RFC 6455 §7.4.1).
    assert!(rest.starts_with(&[0x88]), "{rest:?}");
    assert_eq!(&rest[2..4], &1002u16.to_be_bytes(), "{rest:?}");

    // 2. A valid masked frame carrying an HTTP request: relayed as a
    // WebSocket message, re-masked with Airlock's own key, so the upstream
    // never sees the request in the clear.
    let mut tls = s.tls_to("api.test", port).await;
    tls.write_all(handshake.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(tls.read(&mut byte).await.unwrap(), 1);
        head.push(byte[0]);
    }
    let payload = format!("{SMUGGLED}\r\nHost: api.test:{port}\r\n\r\n");
    let mask = [0u8; 4]; // a zero mask: the client's bytes are the plaintext
    let mut frame = vec![0x82, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend_from_slice(payload.as_bytes());
    tls.write_all(&frame).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(tls);

    // Each upgrade asked for by the client reached the upstream once, and
    // without the extension the client offered.
    let lines = s.hostile.request_lines();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("GET /granted "))
            .count(),
        2,
        "{lines:?}"
    );
    let raw = String::from_utf8_lossy(&s.hostile.log.lock().unwrap().bytes).to_ascii_lowercase();
    assert!(!raw.contains("permessage-deflate"), "{raw}");
    s.hostile.assert_nothing_smuggled();

    let events = s.events_when(|e| websocket_ends(e).len() == 2).await;
    let ends = websocket_ends(&events);
    assert_eq!(ends.len(), 2, "{events:#?}");
    let broken = ends
        .iter()
        .find(|e| e["closed_by"] == "airlock")
        .unwrap_or_else(|| panic!("{ends:#?}"));
    assert_eq!(broken["close_code"], 1002);
    assert!(
        broken["error"]
            .as_str()
            .unwrap()
            .starts_with("the client stopped speaking WebSocket: reserved bits set"),
        "{broken}"
    );
    // The smuggled frame is in the record as what it was: a binary message.
    assert!(
        websocket_messages(&events)
            .iter()
            .any(|(d, o, p, _)| { d == "to_upstream" && o == "binary" && p.starts_with(SMUGGLED) })
    );
    assert_last_word_is_the_end(&events);
}

/// How each upgraded exchange's relay ended: its one `response` event
/// carries it, once the relay is over.
fn websocket_ends(events: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "response" && e["websocket"].is_object())
        .map(|e| &e["websocket"])
        .collect()
}

/// Every message relayed, in order: (direction, opcode, payload as lossy
/// text, fragments).
fn websocket_messages(events: &[serde_json::Value]) -> Vec<(String, String, String, u64)> {
    use base64::Engine;
    websocket_ends(events)
        .into_iter()
        .flat_map(|end| end["messages"].as_array().cloned().unwrap_or_default())
        .map(|m| {
            let payload = base64::engine::general_purpose::STANDARD
                .decode(m["payload"].as_str().unwrap())
                .unwrap();
            (
                m["direction"].as_str().unwrap().to_owned(),
                m["opcode"].as_str().unwrap().to_owned(),
                String::from_utf8_lossy(&payload).into_owned(),
                m["fragments"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

/// Every upgraded exchange ends exactly once: one `response` event, made
/// when its relay ended, with the 101 and how the relay ended. Nothing
/// about it comes after.
fn assert_last_word_is_the_end(events: &[serde_json::Value]) {
    let upgraded: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "response" && e["status"] == 101)
        .map(|e| &e["request"])
        .collect();
    assert!(!upgraded.is_empty());
    for request in upgraded {
        let ends: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["kind"] == "response" && &e["request"] == request)
            .collect();
        assert_eq!(ends.len(), 1, "{request}: {events:#?}");
        assert!(ends[0]["websocket"].is_object(), "{request}: {events:#?}");
        let last = events
            .iter()
            .rev()
            .find(|e| &e["request"] == request)
            .unwrap();
        assert_eq!(last, ends[0], "{request}: {events:#?}");
    }
}

#[tokio::test]
async fn a_granted_websocket_works_is_recorded_and_never_shows_the_secret() {
    let mut s = Setup::new().await;
    let port = s.echo.addr.port();
    let tls = s.tls_to("ws.test", port).await;
    let url = format!("wss://ws.test:{port}/ws");
    // tungstenite offers no extensions; add one to check it is stripped.
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
            url.as_str(),
        )
        .unwrap();
    request.headers_mut().insert(
        "sec-websocket-extensions",
        "permessage-deflate; client_max_window_bits"
            .parse()
            .unwrap(),
    );
    let (mut ws, response) = tokio_tungstenite::client_async(request, tls).await.unwrap();
    assert_eq!(response.status(), 101);
    let mut received = Vec::new();
    for _ in 0..4 {
        let message = tokio::time::timeout(STEP, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        received.push(message);
    }
    assert_eq!(received[0], Message::text("extensions offered: none"));
    assert_eq!(received[1], Message::text("token=[secret:ws]"));
    // The secret split across two fragments is still found.
    assert_eq!(received[2], Message::text("[secret:ws]"));
    assert_eq!(received[3], Message::binary(b"[secret:ws]".to_vec()));
    for text in ["hello", "through the airlock"] {
        ws.send(Message::text(text)).await.unwrap();
        let echoed = tokio::time::timeout(STEP, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(echoed, Message::text(text));
    }
    ws.send(Message::binary(vec![0u8, 1, 2, 255]))
        .await
        .unwrap();
    let echoed = ws.next().await.unwrap().unwrap();
    assert_eq!(echoed, Message::binary(vec![0u8, 1, 2, 255]));
    ws.send(Message::text("close please")).await.unwrap();
    let mut close = None;
    while let Some(Ok(message)) = ws.next().await {
        if let Message::Close(frame) = message {
            close = frame;
        }
    }
    let close = close.expect("the server's close frame");
    assert_eq!(u16::from(close.code), 1000);
    assert_eq!(close.reason.as_str(), "[secret:ws]");

    let events = s.events_when(|e| !websocket_ends(e).is_empty()).await;
    let messages = websocket_messages(&events);
    let text = format!("{}{messages:?}", serde_json::to_string(&events).unwrap());
    assert!(!text.contains(SECRET), "the record holds the secret");
    let has = |direction: &str, opcode: &str, payload: &str| {
        messages
            .iter()
            .any(|(d, o, p, _)| d == direction && o == opcode && p == payload)
    };
    assert!(
        has("to_client", "text", "token=[secret:ws]"),
        "{messages:#?}"
    );
    assert!(has("to_client", "text", "[secret:ws]"), "{messages:#?}");
    assert!(has("to_client", "binary", "[secret:ws]"), "{messages:#?}");
    assert!(has("to_upstream", "text", "hello"), "{messages:#?}");
    assert!(has("to_upstream", "text", "close please"), "{messages:#?}");
    assert!(
        has("to_upstream", "binary", "\u{0}\u{1}\u{2}\u{FFFD}"),
        "{messages:#?}"
    );
    let fragmented = messages
        .iter()
        .any(|(_, o, _, fragments)| o == "text" && *fragments == 2);
    assert!(fragmented, "{messages:#?}");
    assert!(
        messages.iter().any(|(_, o, _, _)| o == "close"),
        "{messages:#?}"
    );
    let end = websocket_ends(&events)[0];
    assert_eq!(end["closed_by"], "upstream", "{end}");
    assert_eq!(end["close_code"], 1000, "{end}");
    assert_eq!(end["close_reason"], "[secret:ws]", "{end}");
    assert_eq!(end["error"], serde_json::Value::Null, "{end}");
    assert!(end["messages_to_upstream"].as_u64().unwrap() >= 5, "{end}");
    assert_last_word_is_the_end(&events);

    // The audit store keeps the exchange, its messages and its end; the
    // timeline and the HAR export show them.
    assert_eq!(s.proxy.stop(), Some(0));
    let audit = |args: &[&str]| {
        let out = Command::new(AIRLOCK)
            .arg("audit")
            .args(args)
            .arg("--audit-db")
            .arg(&s.audit_db)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let sessions: serde_json::Value =
        serde_json::from_str(&audit(&["sessions", "--json"])).unwrap();
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    let timeline = audit(&["timeline", &id]);
    assert!(timeline.contains("/ws -> 101"), "{timeline}");
    assert!(timeline.contains("websocket"), "{timeline}");
    assert!(timeline.contains("closed by upstream 1000"), "{timeline}");
    assert!(timeline.contains("<- text"), "{timeline}");
    let har_path = s._audit.path().join("session.har");
    audit(&[
        "export",
        &id,
        "--format",
        "har",
        "--out",
        har_path.to_str().unwrap(),
    ]);
    let har_text = std::fs::read_to_string(&har_path).unwrap();
    assert!(!har_text.contains(SECRET));
    let har: serde_json::Value = serde_json::from_str(&har_text).unwrap();
    let entry = har["log"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["response"]["status"] == 101)
        .unwrap();
    let messages = entry["_webSocketMessages"].as_array().unwrap();
    assert!(
        messages
            .iter()
            .any(|m| m["type"] == "send" && m["opcode"] == 1 && m["data"] == "hello")
    );
    assert!(
        messages.iter().any(|m| m["type"] == "receive"
            && m["opcode"] == 1
            && m["data"] == "token=[secret:ws]")
    );
    assert_eq!(entry["_webSocketEnd"]["closedBy"], "upstream");
    let _ = &s.pki;
}

#[tokio::test]
async fn an_upstream_that_stops_speaking_websocket_gets_the_connection_closed() {
    let s = Setup::new().await;
    let port = s.echo.addr.port();
    let tls = s.tls_to("ws.test", port).await;
    let (mut ws, _) =
        tokio_tungstenite::client_async(format!("wss://ws.test:{port}/ws-broken"), tls)
            .await
            .unwrap();
    let mut got = Vec::new();
    let ended = tokio::time::timeout(STEP, async {
        while let Some(message) = ws.next().await {
            match message {
                Ok(m) => got.push(m),
                Err(_) => break,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the client's connection was closed: {got:?}");
    assert!(got.contains(&Message::text("one good message")), "{got:?}");
    let close = got.iter().find_map(|m| match m {
        Message::Close(Some(frame)) => Some(u16::from(frame.code)),
        _ => None,
    });
    assert_eq!(close, Some(1002), "{got:?}");
    assert!(
        !got.iter().any(|m| m.to_string().contains("hello")),
        "{got:?}"
    );
    let events = s.events_when(|e| !websocket_ends(e).is_empty()).await;
    let end = websocket_ends(&events)[0];
    assert_eq!(end["closed_by"], "airlock", "{end}");
    assert!(
        end["error"]
            .as_str()
            .unwrap()
            .starts_with("the upstream stopped speaking WebSocket: reserved bits set"),
        "{end}"
    );
    assert_last_word_is_the_end(&events);
}
