//! Every byte from a credential-bearing upstream is scrubbed (issue 21,
//! class 1). A hostile TLS upstream reflects the injected secret through
//! every part of a response that it controls: the reason phrase, a `103 Early
//! Hints` before the final response, trailers, and the body, in transformed
//! forms (case, base64 in both alphabets with and without padding and inside
//! a larger blob, percent-encoding, JSON escapes), dripped a few bytes per
//! frame. The client (curl over HTTP/1.1 and HTTP/2, through the explicit
//! proxy) must never see the secret in any of those forms, the record must
//! never contain it, and the marker stands where the secret was.
//!
//! The upstream speaks HTTP/1.1 written by hand (so it can send a reason
//! phrase and a 1xx that hyper's server cannot) or HTTP/2 through the `h2`
//! crate (which can send a 103), chosen by ALPN.

use std::time::{Duration, Instant};

use airlock_test_support::client::{ClientOutput, curl};
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::server::TestServer;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// Has `/`, `+` and `=` so that its percent and JSON forms differ from it.
const SECRET: &str = "sk-live/Zq9+XkT3=vW7pL2mN";
const MARKER: &str = "[secret:token]";

/// Every transformed echo the upstream sends, by label.
fn echoes(token: &str) -> Vec<(&'static str, String)> {
    let mixed: String = token
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    let percent: String = token
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let mut out = vec![
        ("literal", token.to_owned()),
        ("upper", token.to_ascii_uppercase()),
        ("lower", token.to_ascii_lowercase()),
        ("mixed", mixed),
        ("b64-std-pad", STANDARD.encode(token)),
        ("b64-std-nopad", STANDARD_NO_PAD.encode(token)),
        ("b64-url-pad", URL_SAFE.encode(token)),
        ("b64-url-nopad", URL_SAFE_NO_PAD.encode(token)),
        ("percent-upper-hex", percent.clone()),
        ("percent-lower-hex", percent.to_ascii_lowercase()),
        ("json-slash", token.replace('/', "\\/")),
        (
            "json-doc",
            format!(
                r#"{{"error":"bad token \"{}\""}}"#,
                token.replace('/', "\\/")
            ),
        ),
    ];
    // The token inside a larger encoded blob, at each offset mod 3.
    for (label, prefix) in [
        ("b64-blob-0", "{\"t\":\""),
        ("b64-blob-1", "{\"tk\":\""),
        ("b64-blob-2", "{\"tok\":\""),
    ] {
        let blob = format!("{prefix}{token}\",\"user\":\"u\"}}");
        out.push((label, STANDARD.encode(&blob)));
        let url_label = match label {
            "b64-blob-0" => "b64url-blob-0",
            "b64-blob-1" => "b64url-blob-1",
            _ => "b64url-blob-2",
        };
        out.push((url_label, URL_SAFE_NO_PAD.encode(&blob)));
    }
    out
}

/// What must never appear: each echo, and the base64 characters that carry
/// only the secret's bits at each alignment (so a part of a blob is caught too).
fn forbidden() -> Vec<String> {
    let mut out: Vec<String> = echoes(SECRET).into_iter().map(|(_, e)| e).collect();
    for k in 0..3 {
        let mut data = vec![0u8; k];
        data.extend_from_slice(SECRET.as_bytes());
        let encoded = STANDARD_NO_PAD.encode(&data);
        let inner = &encoded[(8 * k).div_ceil(6)..(8 * (k + SECRET.len())) / 6];
        out.push(inner.to_owned());
        out.push(inner.replace('+', "-").replace('/', "_"));
    }
    out
}

/// The client (or the record) saw no form of the secret.
fn assert_clean(what: &str, text: &str) {
    assert!(
        !text
            .to_ascii_lowercase()
            .contains(&SECRET.to_ascii_lowercase()),
        "{what}: the secret (in some case) got through:\n{text}"
    );
    for form in forbidden() {
        assert!(
            !text.contains(&form),
            "{what}: the form {form:?} got through:\n{text}"
        );
    }
}

fn client_text(out: &ClientOutput) -> String {
    format!("{}\n{}", out.stdout, out.stderr)
}

/// The body: one line per echo, `label=<echo>;`.
fn forms_body(token: &str) -> String {
    echoes(token)
        .into_iter()
        .map(|(label, echo)| format!("{label}={echo};\n"))
        .collect()
}

/// Pieces of `body` small enough that every form straddles frames.
fn drips(body: &str) -> Vec<Bytes> {
    body.as_bytes()
        .chunks(7)
        .map(Bytes::copy_from_slice)
        .collect()
}

/// Which protocol the hostile upstream offers by ALPN (and so speaks).
#[derive(Clone, Copy, Debug)]
enum Proto {
    H1,
    H2,
}

/// A TLS upstream that reflects the `Authorization` it receives everywhere
/// it can: `/reason`, `/early`, `/trailers`, `/forms`.
struct Reflector {
    port: u16,
    _server: TestServer,
}

impl Reflector {
    async fn start(pki: &TestPki, proto: Proto) -> Self {
        let mut tls = pki.server_config(&["api.test"]);
        tls.alpn_protocols = match proto {
            Proto::H1 => vec![b"http/1.1".to_vec()],
            Proto::H2 => vec![b"h2".to_vec()],
        };
        let server = TestServer::tls(tls, move |tls| async move {
            match proto {
                Proto::H1 => serve_h1(tls).await,
                Proto::H2 => serve_h2(tls).await,
            }
        })
        .await;
        Self {
            port: server.port(),
            _server: server,
        }
    }
}

fn bearer_token(authorization: &str) -> String {
    authorization.trim_start_matches("Bearer ").to_owned()
}

/// HTTP/1.1 by hand (RFC 9112): one request per connection.
async fn serve_h1(mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tls.read_exact(&mut byte).await.is_err() || head.len() > 64 * 1024 {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let token = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("authorization")
                .then(|| bearer_token(value.trim()))
        })
        .unwrap_or_default();
    let chunked = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n";
    let mut pieces: Vec<Vec<u8>> = match path.as_str() {
        "/reason" => vec![
            format!("HTTP/1.1 200 OK {token}\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n")
                .into_bytes(),
        ],
        "/early" => vec![
            format!(
                "HTTP/1.1 103 Early Hints {token}\r\nlink: </t/{token}>; rel=preload\r\nx-leak: {token}\r\n\r\n"
            )
            .into_bytes(),
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n".to_vec(),
        ],
        "/trailers" => vec![
            format!("{chunked}trailer: x-leak, x-leak-b64\r\n\r\n5\r\ndata\n\r\n").into_bytes(),
            format!(
                "0\r\nx-leak: {token}\r\nx-leak-b64: {}\r\n\r\n",
                STANDARD.encode(&token)
            )
            .into_bytes(),
        ],
        _ => {
            let mut pieces = vec![format!("{chunked}\r\n").into_bytes()];
            for drip in drips(&forms_body(&token)) {
                let mut chunk = format!("{:x}\r\n", drip.len()).into_bytes();
                chunk.extend_from_slice(&drip);
                chunk.extend_from_slice(b"\r\n");
                pieces.push(chunk);
            }
            pieces.push(b"0\r\n\r\n".to_vec());
            pieces
        }
    };
    for piece in pieces.drain(..) {
        // One TLS record per piece: the proxy reads them as separate frames.
        if tls.write_all(&piece).await.is_err() || tls.flush().await.is_err() {
            return;
        }
    }
    let _ = tls.shutdown().await;
}

/// HTTP/2 through the `h2` crate, which can send informational responses.
async fn serve_h2(tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>) {
    let Ok(mut conn) = h2::server::handshake(tls).await else {
        return;
    };
    while let Some(Ok((req, respond))) = conn.accept().await {
        tokio::spawn(respond_h2(req, respond));
    }
}

async fn respond_h2(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) -> Result<(), h2::Error> {
    let token = req
        .headers()
        .get("authorization")
        .map(|v| bearer_token(&String::from_utf8_lossy(v.as_bytes())))
        .unwrap_or_default();
    let ok = || http::Response::builder().status(200).body(()).unwrap();
    match req.uri().path() {
        "/early" => {
            let early = http::Response::builder()
                .status(103)
                .header("link", format!("</t/{token}>; rel=preload"))
                .header("x-leak", &token)
                .body(())
                .unwrap();
            respond.send_informational(early)?;
            let mut send = respond.send_response(ok(), false)?;
            send.send_data(Bytes::from_static(b"ok\n"), true)?;
        }
        "/trailers" => {
            let mut send = respond.send_response(ok(), false)?;
            send.send_data(Bytes::from_static(b"data\n"), false)?;
            let mut trailers = http::HeaderMap::new();
            trailers.insert("x-leak", token.parse().unwrap());
            trailers.insert("x-leak-b64", STANDARD.encode(&token).parse().unwrap());
            send.send_trailers(trailers)?;
        }
        _ => {
            let mut send = respond.send_response(ok(), false)?;
            for drip in drips(&forms_body(&token)) {
                send.send_data(drip, false)?;
                tokio::task::yield_now().await;
            }
            send.send_data(Bytes::new(), true)?;
        }
    }
    Ok(())
}

struct Fx {
    _pki: TestPki,
    upstream: Reflector,
    proxy: AirlockProxy,
}

impl Fx {
    async fn new(proto: Proto) -> Self {
        let pki = TestPki::new();
        let upstream = Reflector::start(&pki, proto).await;
        let policy = format!(
            r#"
version = 1
default = "deny"

[[allow]]
host = "api.test"
port = {port}
methods = ["GET"]
paths = ["/reason", "/early", "/trailers", "/forms"]

[[credential]]
name = "token"
hosts = ["api.test"]
header = "Authorization"
value = "Bearer ${{env:TEST_TOKEN}}"
placeholder = "TEST_TOKEN"
"#,
            port = upstream.port
        );
        let mut opts = ProxyOptions::new(&policy);
        opts.upstream_ca = Some(&pki.ca_pem);
        opts.resolve = vec!["api.test:127.0.0.1".into()];
        opts.env = vec![("TEST_TOKEN", SECRET)];
        let proxy = AirlockProxy::start(AIRLOCK, opts);
        Self {
            _pki: pki,
            upstream,
            proxy,
        }
    }

    async fn get(&self, client: &str, path: &str, extra: &[&str]) -> (u16, ClientOutput) {
        let url = format!("https://api.test:{}{path}", self.upstream.port);
        let mut args = vec![client, "-i"];
        args.extend_from_slice(extra);
        args.push(&url);
        let (code, _, out) = curl(&self.proxy, &args).await;
        (code, out)
    }

    /// The record, once it holds `responses` responses (the writer is async).
    async fn record(&self, responses: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let done = self
                .proxy
                .events()
                .iter()
                .filter(|e| e["kind"] == "response")
                .count();
            if done >= responses || Instant::now() > deadline {
                return std::fs::read_to_string(&self.proxy.events).unwrap_or_default();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

const CLIENTS: [&str; 2] = ["--http1.1", "--http2"];

async fn every_form_in_the_body_becomes_the_marker(proto: Proto) {
    let fx = Fx::new(proto).await;
    for client in CLIENTS {
        let (code, out) = fx.get(client, "/forms", &[]).await;
        assert_eq!(code, 200, "{proto:?} {client}: {out:?}");
        let text = client_text(&out);
        assert_clean(&format!("{proto:?} {client} /forms"), &text);
        for (label, _) in echoes(SECRET) {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{label}=")))
                .unwrap_or_else(|| panic!("{client}: no {label} line in {text}"));
            assert!(line.contains(MARKER), "{proto:?} {client} {label}: {line}");
        }
    }
    let record = fx.record(CLIENTS.len()).await;
    assert_clean(&format!("{proto:?} record"), &record);
    assert!(record.contains(MARKER), "{record}");
}

#[tokio::test]
async fn transformed_echoes_from_an_h1_upstream_never_reach_the_client() {
    every_form_in_the_body_becomes_the_marker(Proto::H1).await;
}

#[tokio::test]
async fn transformed_echoes_from_an_h2_upstream_never_reach_the_client() {
    every_form_in_the_body_becomes_the_marker(Proto::H2).await;
}

async fn trailers_are_scrubbed(proto: Proto) {
    let fx = Fx::new(proto).await;
    for client in CLIENTS {
        let (code, out) = fx.get(client, "/trailers", &["-H", "TE: trailers"]).await;
        assert_eq!(code, 200, "{proto:?} {client}: {out:?}");
        let text = client_text(&out);
        assert_clean(&format!("{proto:?} {client} /trailers"), &text);
        assert!(text.contains("data"), "{text}");
        if client == "--http2" {
            // HTTP/2 clients get trailers (gRPC needs them), scrubbed.
            let leak = text
                .lines()
                .find(|l| l.starts_with("x-leak:"))
                .unwrap_or_else(|| panic!("{proto:?}: no trailer in {text}"));
            assert!(leak.contains(MARKER), "{leak}");
        }
    }
    let record = fx.record(CLIENTS.len()).await;
    assert_clean(&format!("{proto:?} record"), &record);
    // A body that ends in trailers is recorded as complete.
    for response in fx.proxy.events().iter().filter(|e| e["kind"] == "response") {
        assert!(response["error"].is_null(), "{proto:?}: {response}");
    }
}

#[tokio::test]
async fn trailers_from_an_h1_upstream_are_scrubbed() {
    trailers_are_scrubbed(Proto::H1).await;
}

#[tokio::test]
async fn trailers_from_an_h2_upstream_are_scrubbed() {
    trailers_are_scrubbed(Proto::H2).await;
}

async fn an_early_hints_response_never_reaches_the_client(proto: Proto) {
    let fx = Fx::new(proto).await;
    for client in CLIENTS {
        let (code, out) = fx.get(client, "/early", &[]).await;
        assert_eq!(code, 200, "{proto:?} {client}: {out:?}");
        let text = client_text(&out);
        assert_clean(&format!("{proto:?} {client} /early"), &text);
        // hyper's client consumes 1xx responses (the proxy registers no
        // informational callback), so none is forwarded at all.
        assert!(!text.contains(" 103"), "{proto:?} {client}: {text}");
        assert!(text.contains("ok"), "{text}");
    }
    let record = fx.record(CLIENTS.len()).await;
    assert_clean(&format!("{proto:?} record"), &record);
}

#[tokio::test]
async fn a_103_from_an_h1_upstream_never_reaches_the_client() {
    an_early_hints_response_never_reaches_the_client(Proto::H1).await;
}

#[tokio::test]
async fn a_103_from_an_h2_upstream_never_reaches_the_client() {
    an_early_hints_response_never_reaches_the_client(Proto::H2).await;
}

#[tokio::test]
async fn the_reason_phrase_is_scrubbed() {
    let fx = Fx::new(Proto::H1).await;
    for client in CLIENTS {
        let (code, out) = fx.get(client, "/reason", &[]).await;
        assert_eq!(code, 200, "{client}: {out:?}");
        let text = client_text(&out);
        assert_clean(&format!("{client} /reason"), &text);
        if client == "--http1.1" {
            // HTTP/2 has no reason phrase; over HTTP/1.1 it goes out scrubbed.
            assert!(
                text.contains(&format!("HTTP/1.1 200 OK {MARKER}")),
                "{text}"
            );
        }
    }
    let record = fx.record(CLIENTS.len()).await;
    assert_clean("record", &record);
}
