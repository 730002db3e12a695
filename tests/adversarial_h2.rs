//! HTTP/2 abuse against the proxy's intercepting server, with frames written
//! by hand (RFC 9113) over a TLS session that negotiated `h2`: rapid reset,
//! CONTINUATION floods, huge header lists, SETTINGS floods and flow-control
//! games. Each case checks that the proxy survives with bounded memory,
//! keeps serving, and that nothing reaches a host the policy denies.

use std::time::Duration;

use airlock_test_support::client::{curl, intercepted};
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::upstream::Upstream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

const RSS_LIMIT_KIB: u64 = 200 * 1024;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

struct Fx {
    _pki: TestPki,
    good: Upstream,
    evil: Upstream,
    proxy: AirlockProxy,
}

impl Fx {
    async fn new() -> Self {
        let pki = TestPki::new();
        let good = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
        let evil = Upstream::start(Some(pki.server_config(&["evil.test"]))).await;
        let policy = format!(
            "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {}\nmethods = [\"GET\"]\npaths = [\"/echo\", \"/bytes/*\"]\n",
            good.port()
        );
        let mut opts = ProxyOptions::new(&policy);
        opts.upstream_ca = Some(&pki.ca_pem);
        opts.resolve = vec!["api.test:127.0.0.1".into(), "evil.test:127.0.0.1".into()];
        let proxy = AirlockProxy::start(AIRLOCK, opts);
        Self {
            _pki: pki,
            good,
            evil,
            proxy,
        }
    }

    fn authority(&self) -> String {
        format!("api.test:{}", self.good.port())
    }

    async fn survives(&self) {
        let rss = rss_kib(self.proxy.pid());
        assert!(rss < RSS_LIMIT_KIB, "proxy RSS {rss} KiB exceeds the bound");
        let url = format!("https://{}/echo", self.authority());
        let (code, _, out) = curl(&self.proxy, &["--http2", &url]).await;
        assert_eq!(code, 200, "the proxy stopped serving: {out:?}");
        assert_eq!(self.evil.hits(), 0, "a request reached the denied host");
    }

    /// An h2 session with the proxy inside a CONNECT tunnel, preface and
    /// empty SETTINGS already sent.
    async fn h2(&self) -> H2 {
        let mut tls = intercepted(&self.proxy, &self.authority(), "api.test", &[b"h2"]).await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        let mut h2 = H2 { tls };
        h2.frame(SETTINGS, 0, 0, &[]).await;
        h2
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("proxy {pid} is gone: {e}"))
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

struct H2 {
    tls: tokio_rustls::client::TlsStream<TcpStream>,
}

impl H2 {
    /// Write one frame; false once the proxy has closed the connection.
    async fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) -> bool {
        let mut f = Vec::with_capacity(9 + payload.len());
        let len = payload.len() as u32;
        f.extend_from_slice(&len.to_be_bytes()[1..]);
        f.push(kind);
        f.push(flags);
        f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        f.extend_from_slice(payload);
        self.tls.write_all(&f).await.is_ok()
    }

    /// Read frames until the peer closes or `wait` passes; returns (type, flags, stream, payload).
    async fn drain(&mut self, wait: Duration) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut frames = Vec::new();
        let mut buf = Vec::new();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut chunk = vec![0u8; 65536];
            match tokio::time::timeout_at(deadline, self.tls.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => break,
            }
            while buf.len() >= 9 {
                let len =
                    (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
                if buf.len() < 9 + len {
                    break;
                }
                let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
                frames.push((buf[3], buf[4], stream, buf[9..9 + len].to_vec()));
                buf.drain(..9 + len);
            }
            if frames.iter().any(|f| f.0 == GOAWAY) {
                break;
            }
        }
        frames
    }
}

/// HPACK integer with an `n`-bit prefix (RFC 7541 §5.1).
fn hpack_int(first: u8, n: u8, mut value: usize, out: &mut Vec<u8>) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128 + 128) as u8);
        value /= 128;
    }
    out.push(value as u8);
}

/// A literal header field without indexing, new name (RFC 7541 §6.2.2).
fn hpack_literal(name: &str, value: &str, out: &mut Vec<u8>) {
    out.push(0x00);
    hpack_int(0, 7, name.len(), out);
    out.extend_from_slice(name.as_bytes());
    hpack_int(0, 7, value.len(), out);
    out.extend_from_slice(value.as_bytes());
}

fn request_block(authority: &str, path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x87]; // :method GET, :scheme https
    hpack_literal(":authority", authority, &mut b);
    hpack_literal(":path", path, &mut b);
    b
}

fn saw_goaway(frames: &[(u8, u8, u32, Vec<u8>)]) -> bool {
    frames.iter().any(|f| f.0 == GOAWAY)
}

/// 10,000 streams opened and reset at once (CVE-2023-44487): the proxy
/// sheds the connection or absorbs it, with bounded work and memory.
#[tokio::test]
async fn rapid_reset() {
    let fx = Fx::new().await;
    let before = rss_kib(fx.proxy.pid());
    let authority = fx.authority();
    let block = request_block(&authority, "/echo");
    let mut h2 = fx.h2().await;
    let mut sent = 0;
    let mut batch = Vec::new();
    for i in 0..10_000u32 {
        let stream = 2 * i + 1;
        let mut f = Vec::new();
        f.extend_from_slice(&(block.len() as u32).to_be_bytes()[1..]);
        f.extend_from_slice(&[HEADERS, END_STREAM | END_HEADERS]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(&block);
        f.extend_from_slice(&[0, 0, 4, RST_STREAM, 0]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(&8u32.to_be_bytes()); // CANCEL
        batch.extend_from_slice(&f);
        if batch.len() > 32 * 1024 {
            if h2.tls.write_all(&batch).await.is_err() {
                break;
            }
            batch.clear();
        }
        sent = i + 1;
    }
    let _ = h2.tls.write_all(&batch).await;
    let frames = h2.drain(Duration::from_secs(3)).await;
    let hits = fx.good.hits();
    eprintln!(
        "rapid reset: sent {sent} streams, upstream saw {hits}, GOAWAY: {}",
        saw_goaway(&frames)
    );
    // The flood is cut off (GOAWAY after the pending-reset limit) and its
    // streams cost the upstream next to nothing.
    assert!(saw_goaway(&frames), "no GOAWAY after {sent} reset streams");
    assert!(
        (hits as u32) < sent / 10,
        "{hits} of {sent} reset streams were still forwarded"
    );
    let after = rss_kib(fx.proxy.pid());
    assert!(after < before + 100 * 1024, "RSS {before} -> {after} KiB");
    fx.survives().await;
}

/// HEADERS without END_HEADERS followed by endless CONTINUATION frames
/// (the 2024 CONTINUATION flood): the header list limit (64 KiB) ends it.
#[tokio::test]
async fn continuation_flood() {
    let fx = Fx::new().await;
    let before = rss_kib(fx.proxy.pid());
    let mut h2 = fx.h2().await;
    let block = request_block(&fx.authority(), "/echo");
    assert!(h2.frame(HEADERS, END_STREAM, 1, &block).await);
    let mut filler = Vec::new();
    for i in 0..300 {
        hpack_literal(&format!("x-flood-{i}"), &"a".repeat(40), &mut filler);
    }
    let mut written = 0usize;
    for _ in 0..2_000 {
        // 10 MiB of header block if nobody stops us.
        if !h2
            .frame(CONTINUATION, 0, 1, &filler[..filler.len().min(16_000)])
            .await
        {
            break;
        }
        written += filler.len().min(16_000);
    }
    let frames = h2.drain(Duration::from_secs(3)).await;
    eprintln!("CONTINUATION flood: wrote {written} bytes before the proxy stopped reading");
    assert!(
        written < 10 * 1024 * 1024 || saw_goaway(&frames),
        "the proxy swallowed 10 MiB of headers without complaint"
    );
    assert_eq!(fx.good.hits(), 0, "a flooded request was forwarded");
    let after = rss_kib(fx.proxy.pid());
    assert!(after < before + 64 * 1024, "RSS {before} -> {after} KiB");
    fx.survives().await;
}

/// A complete header list far over the limit, made of many small headers:
/// refused (431, RST_STREAM or GOAWAY), never forwarded.
#[tokio::test]
async fn huge_header_list() {
    let fx = Fx::new().await;
    let mut h2 = fx.h2().await;
    let mut block = request_block(&fx.authority(), "/echo");
    for i in 0..20_000 {
        hpack_literal(&format!("x-{i}"), "v", &mut block);
    }
    let chunks: Vec<&[u8]> = block.chunks(16_000).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        let (kind, flags) = match (i, last) {
            (0, true) => (HEADERS, END_STREAM | END_HEADERS),
            (0, false) => (HEADERS, END_STREAM),
            (_, true) => (CONTINUATION, END_HEADERS),
            (_, false) => (CONTINUATION, 0),
        };
        if !h2.frame(kind, flags, 1, chunk).await {
            break;
        }
    }
    let frames = h2.drain(Duration::from_secs(3)).await;
    assert!(
        frames
            .iter()
            .any(|f| f.0 == RST_STREAM || f.0 == GOAWAY || f.0 == HEADERS),
        "no answer to an oversized header list: {:?}",
        frames.iter().map(|f| f.0).collect::<Vec<_>>()
    );
    assert_eq!(fx.good.hits(), 0, "an oversized header list was forwarded");
    fx.survives().await;
}

/// 100,000 SETTINGS frames (and PINGs) without reading a single ACK.
#[tokio::test]
async fn settings_and_ping_flood() {
    let fx = Fx::new().await;
    let before = rss_kib(fx.proxy.pid());
    let mut h2 = fx.h2().await;
    let mut batch = Vec::new();
    let mut frames_sent = 0;
    for i in 0..100_000u32 {
        // SETTINGS_MAX_CONCURRENT_STREAMS = i
        let (kind, payload) = if i % 2 == 0 {
            (SETTINGS, [&[0u8, 3][..], &i.to_be_bytes()[..]].concat())
        } else {
            (PING, i.to_be_bytes().repeat(2))
        };
        batch.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
        batch.extend_from_slice(&[kind, 0, 0, 0, 0, 0]);
        batch.extend_from_slice(&payload);
        if batch.len() > 64 * 1024 {
            match tokio::time::timeout(Duration::from_secs(2), h2.tls.write_all(&batch)).await {
                Ok(Ok(())) => {}
                _ => break, // the proxy stopped reading: it is not buffering our flood
            }
            batch.clear();
        }
        frames_sent = i;
    }
    eprintln!("SETTINGS/PING flood: {frames_sent} frames written");
    drop(h2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(fx.proxy.pid());
    assert!(after < before + 64 * 1024, "RSS {before} -> {after} KiB");
    fx.survives().await;
}

/// Flow-control games: a zero window while asking for a large response (the
/// proxy must not buffer it all), a WINDOW_UPDATE that overflows 2^31-1, and
/// a zero increment. Each ends in an error for this client only.
#[tokio::test]
async fn window_size_games() {
    let fx = Fx::new().await;
    let before = rss_kib(fx.proxy.pid());
    // Zero initial window, 20 streams of 8 MiB each that we never read.
    let mut h2 = fx.h2().await;
    h2.frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]).await;
    for i in 0..20u32 {
        let block = request_block(&fx.authority(), "/bytes/8388608");
        h2.frame(HEADERS, END_STREAM | END_HEADERS, 2 * i + 1, &block)
            .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stalled = rss_kib(fx.proxy.pid());
    eprintln!("zero-window streams: RSS {before} -> {stalled} KiB");
    assert!(
        stalled < before + 100 * 1024,
        "the proxy buffered stalled responses: {before} -> {stalled} KiB"
    );
    drop(h2);

    // Connection window overflow.
    let mut h2 = fx.h2().await;
    h2.frame(WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes())
        .await;
    h2.frame(WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes())
        .await;
    let frames = h2.drain(Duration::from_secs(3)).await;
    assert!(
        saw_goaway(&frames),
        "window overflow not treated as an error"
    );

    // Zero increment on a stream; DATA on a stream that never opened.
    let mut h2 = fx.h2().await;
    h2.frame(WINDOW_UPDATE, 0, 0, &0u32.to_be_bytes()).await;
    h2.frame(DATA, END_STREAM, 7, b"hello").await;
    let frames = h2.drain(Duration::from_secs(3)).await;
    assert!(
        saw_goaway(&frames),
        "protocol errors not answered with GOAWAY"
    );
    fx.survives().await;
}

/// `:authority` naming another host than the tunnel, on the same h2 session
/// as an honest request: the honest one is served, the other refused.
#[tokio::test]
async fn authority_mismatch_on_a_shared_session() {
    let fx = Fx::new().await;
    let mut h2 = fx.h2().await;
    let evil = format!("evil.test:{}", fx.evil.port());
    h2.frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &request_block(&fx.authority(), "/echo"),
    )
    .await;
    h2.frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        3,
        &request_block(&evil, "/echo"),
    )
    .await;
    let mut block = request_block(&fx.authority(), "/echo");
    hpack_literal("host", &evil, &mut block);
    h2.frame(HEADERS, END_STREAM | END_HEADERS, 5, &block).await;
    let frames = h2.drain(Duration::from_secs(3)).await;
    let answered: Vec<u32> = frames
        .iter()
        .filter(|f| f.0 == HEADERS)
        .map(|f| f.2)
        .collect();
    assert!(
        answered.contains(&1) && answered.contains(&3),
        "{answered:?}"
    );
    assert_eq!(fx.good.hits(), 1, "only the honest request is forwarded");
    let events = fx.proxy.events();
    let refused = events
        .iter()
        .filter(|e| {
            e["kind"] == "request"
                && e["decision"] == "deny"
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("evil.test"))
        })
        .count();
    assert!(refused >= 1, "the mismatch was not recorded: {events:#?}");
    fx.survives().await;
}
