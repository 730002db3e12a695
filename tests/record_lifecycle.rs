//! An exchange is one lifecycle in the proxy's events and in the record: it
//! is decided once (before anything goes upstream), and it ends exactly
//! once, with its whole outcome, however it ends: answered, refused, cut by
//! the upstream, abandoned by the client, streamed on an HTTP/2 connection
//! beside others. A hostile client picks the ending; none may leave an
//! exchange without an end, or with two.

use std::collections::HashMap;
use std::time::Duration;

use airlock_test_support::audit_cli::{export_jsonl, first_session_id};
use airlock_test_support::client::curl;
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::server::TestServer;
use airlock_test_support::upstream::Upstream;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// How many requests the test makes.
const EXCHANGES: usize = 10;

/// A plain-HTTP upstream that promises a large body, sends part of it and
/// resets the connection.
async fn resetting_upstream() -> TestServer {
    TestServer::tcp(|mut s| async move {
        let mut buf = vec![0u8; 8192];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf).await {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => return,
            }
        }
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            .await;
        let _ = s.write_all(&[b'x'; 4096]).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        #[allow(deprecated)]
        let _ = s.set_linger(Some(Duration::ZERO));
    })
    .await
}

/// Send `request` to the explicit proxy as it is, and go away soon after.
async fn send_and_leave(proxy: &AirlockProxy, request: &str) {
    let mut raw = TcpStream::connect(proxy.addr).await.unwrap();
    raw.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// The events of each kind, by the id that links them.
fn by_id<'a>(events: &'a [Value], kind: &str, id: &str) -> HashMap<u64, Vec<&'a Value>> {
    let mut map: HashMap<u64, Vec<&Value>> = HashMap::new();
    for e in events.iter().filter(|e| e["kind"] == kind) {
        map.entry(e[id].as_u64().expect("an id"))
            .or_default()
            .push(e);
    }
    map
}

#[tokio::test]
async fn every_exchange_is_decided_once_and_ends_exactly_once_however_it_ends() {
    let pki = TestPki::new();
    let tls = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
    let plain = Upstream::start(None).await;
    let reset = resetting_upstream().await;
    let policy = format!(
        "version = 1\n[[allow]]\nhost = \"api.test\"\nports = [{}, {}, {}]\nmethods = [\"GET\", \"POST\"]\n",
        tls.port(),
        plain.port(),
        reset.port()
    );
    let dir = tempfile::tempdir().unwrap();
    let (db, key) = (dir.path().join("audit.db"), dir.path().join("audit.key"));
    let mut opts = ProxyOptions::new(&policy);
    opts.extra = vec![
        "--audit-db".into(),
        db.to_str().unwrap().into(),
        "--audit-key".into(),
        key.to_str().unwrap().into(),
    ];
    opts.upstream_ca = Some(&pki.ca_pem);
    opts.resolve = vec!["api.test:127.0.0.1".into()];
    let mut proxy = AirlockProxy::start(AIRLOCK, opts);
    let https = |path: &str| format!("https://api.test:{}{path}", tls.port());

    // Answered.
    let (code, _, out) = curl(&proxy, &[&https("/echo")]).await;
    assert_eq!(code, 200, "{out:?}");
    // Refused: decided and ended at once.
    let (code, _, out) = curl(&proxy, &["-X", "DELETE", &https("/echo")]).await;
    assert_eq!(code, 403, "{out:?}");
    // Three exchanges on one HTTP/2 connection.
    let (_, _, out) = curl(
        &proxy,
        &[
            "--http2",
            &https("/echo?a"),
            &https("/bytes/70000"),
            &https("/echo?c"),
        ],
    )
    .await;
    assert_eq!(out.status, 0, "{out:?}");
    // The upstream resets mid-body.
    let (_, _, out) = curl(&proxy, &[&format!("http://api.test:{}/big", reset.port())]).await;
    assert_ne!(out.status, 0, "a truncated body looked complete: {out:?}");
    // The client gives up on a stream that never ends.
    let (_, _, out) = curl(&proxy, &["--max-time", "1", &https("/sse")]).await;
    assert_ne!(out.status, 0, "{out:?}");
    // The client goes away right after its request's head, before any
    // answer: plain HTTP through the explicit proxy, the socket dropped.
    let port = plain.port();
    send_and_leave(
        &proxy,
        &format!("GET http://api.test:{port}/sse HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n"),
    )
    .await;
    // A request body the client never finishes.
    send_and_leave(
        &proxy,
        &format!(
            "POST http://api.test:{port}/upload HTTP/1.1\r\nHost: api.test:{port}\r\nContent-Length: 100000\r\n\r\npartial"
        ),
    )
    .await;

    // An HTTP/2 client resets its stream while its upload is in flight:
    // the proxy drops the exchange mid-way, before any answer.
    let mut upload = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--http2",
            "--max-time",
            "1",
            "-X",
            "POST",
            "-T",
            "-",
            "--proxy",
        ])
        .arg(proxy.proxy_url())
        .arg("--cacert")
        .arg(&proxy.ca_pem)
        .arg(https("/upload"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = upload.stdin.take().unwrap();
    stdin.write_all(b"the start of an upload").await.unwrap();
    assert!(!upload.wait().await.unwrap().success());
    drop(stdin);

    // Every exchange that was forwarded has ended by now but one: the raw
    // client's stream, which no one writes to since its client left, is
    // still open upstream. Stopping the proxy ends it too.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let events = proxy.events();
        let ended = by_id(&events, "response", "request");
        if ended.len() >= EXCHANGES - 2 || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(proxy.stop(), Some(0));
    let events = proxy.events();
    let decided = by_id(&events, "request", "request");
    let ended = by_id(&events, "response", "request");
    let urls: Vec<&Value> = decided.values().map(|d| &d[0]["url"]).collect();
    assert_eq!(decided.len(), EXCHANGES, "{urls:#?}");
    for (id, d) in &decided {
        assert_eq!(d.len(), 1, "exchange {id} was decided twice: {d:#?}");
        let d = d[0];
        let ends = ended.get(id).map(Vec::as_slice).unwrap_or_default();
        if d["decision"] == "deny" {
            assert_eq!(d["method"], "DELETE", "only the DELETE is refused: {d}");
            assert_eq!(d["status"], 403, "{d}");
            assert!(ends.is_empty(), "a refusal ended twice: {ends:#?}");
            continue;
        }
        assert!(
            d["status"].is_null(),
            "a forwarded request has no status yet: {d}"
        );
        assert_eq!(
            ends.len(),
            1,
            "exchange {id} ({}) ended {} times: {ends:#?}",
            d["url"],
            ends.len()
        );
        // The end's line says how it ended: a status, or (the client went
        // away first) why there is none.
        let end = ends[0];
        assert!(end["status"].is_u64() || end["reason"].is_string(), "{end}");
        assert!(end["ms_total"].is_f64(), "{end}");
    }
    for id in ended.keys() {
        assert!(
            decided.contains_key(id),
            "exchange {id} ended without being decided"
        );
    }
    // The ways it ended are all there: a reset, an abandoned stream and an
    // abandoned body each say why.
    let ends: Vec<(String, Value, Value)> = ended
        .values()
        .map(|e| {
            (
                e[0]["url"].to_string(),
                e[0]["status"].clone(),
                e[0]["reason"].clone(),
            )
        })
        .collect();
    let reasons = ends.iter().filter(|(_, _, r)| r.is_string()).count();
    assert!(reasons >= 3, "{ends:#?}");

    // Connections too: decided once, closed once.
    let opened = by_id(&events, "connection", "conn");
    let closed = by_id(&events, "connection_closed", "conn");
    for (id, c) in &opened {
        assert_eq!(c.len(), 1, "{c:#?}");
        let ends = closed.get(id).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(ends.len(), 1, "connection {id} closed {} times", ends.len());
        assert_eq!(ends[0]["dst"], c[0]["dst"], "{}", ends[0]);
    }

    // The record: each exchange at most twice (decided, ended), the last of
    // them the whole exchange, what was decided and how it ended.
    let id = first_session_id(AIRLOCK, &db, &events);
    let record = export_jsonl(AIRLOCK, &db, &id);
    let mut by_exchange: HashMap<u64, Vec<&Value>> = HashMap::new();
    for e in record.iter().filter(|e| e["kind"] == "http") {
        by_exchange
            .entry(e["exchange"].as_u64().expect("an exchange id"))
            .or_default()
            .push(e);
    }
    assert_eq!(by_exchange.len(), EXCHANGES, "{record:#?}");
    for (id, records) in &by_exchange {
        let (first, last) = (records[0], records[records.len() - 1]);
        let refused = first["decision"] == "deny";
        assert_eq!(records.len(), if refused { 1 } else { 2 }, "{records:#?}");
        for field in ["method", "url", "decision", "rule", "request_headers"] {
            assert_eq!(last[field], first[field], "{field} of exchange {id}");
        }
        assert!(
            last["status"].is_u64() || last["reason"].is_string(),
            "{last}"
        );
    }
}
