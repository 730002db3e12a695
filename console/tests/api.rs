//! The console's guarantees, checked over real HTTP against real audit
//! databases: nothing without the token, nothing for a foreign Host, no
//! writes, badges recomputed after tampering, inert downloads, and a live
//! stream that shows new records within a second.

use airlock_auditor::HttpExchange;
use airlock_auditor::Verdict;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use airlock_auditor::{AuditStore, FileOp, OutputStream, SessionEnd, SessionId, TrustAnchor};
use airlock_console::{Console, ConsoleConfig};
use airlock_test_support::audit_store::{self, Env};
use sha2::{Digest, Sha256};

/// A console serving `env`'s database on a runtime of its own; it stops
/// when dropped.
struct Served {
    addr: SocketAddr,
    token: String,
    _runtime: tokio::runtime::Runtime,
}

fn serve(env: &Env) -> Served {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = AuditStore::open_readonly(&env.db).unwrap();
    let console = runtime
        .block_on(Console::bind(ConsoleConfig {
            store: Box::new(store),
            trust: TrustAnchor::KeyFile(env.key.clone()),
            listen: "127.0.0.1:0".parse().unwrap(),
            rule_to_add: Box::new(|method, url| Some(format!("# allow {method} {url}"))),
        }))
        .unwrap();
    let addr = console.local_addr();
    let url = console.url();
    let token = url.split("token=").nth(1).unwrap().to_owned();
    runtime.spawn(console.serve(std::future::pending()));
    Served {
        addr,
        token,
        _runtime: runtime,
    }
}

struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Vec<String> {
        self.head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
            .collect()
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// One HTTP/1.1 request, as a browser or curl would send it.
fn request(addr: SocketAddr, method: &str, path: &str, headers: &[String]) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("host:"))
    {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Answer { status, head, body }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..line_end]).unwrap().trim(), 16)
                .unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[line_end + 2..line_end + 2 + size]);
        data = &data[line_end + 2 + size + 2..];
    }
}

impl Served {
    fn get(&self, path: &str) -> Answer {
        request(
            self.addr,
            "GET",
            path,
            &[format!("Authorization: Bearer {}", self.token)],
        )
    }
}

/// A finished session with an exec, a refused request, two versions of a
/// file and some output.
fn recorded_session(store: &AuditStore) -> SessionId {
    let rec = store
        .begin_session(audit_store::info(&["sh", "-c", "work"]))
        .unwrap();
    rec.record(audit_store::exec("e1", None, &["sh", "-c", "work"]))
        .unwrap();
    rec.record(audit_store::dns("example.com")).unwrap();
    rec.record(audit_store::file(
        "/work/notes.txt",
        FileOp::Create,
        Some(b"one\n"),
    ))
    .unwrap();
    rec.record(audit_store::file(
        "/work/notes.txt",
        FileOp::Modify,
        Some(b"one\ntwo\n"),
    ))
    .unwrap();
    rec.record(audit_store::output(
        OutputStream::Stdout,
        b"\x1b[31mhello\x1b[0m\n",
    ))
    .unwrap();
    rec.record(refused_request()).unwrap();
    let id = rec.session_id().clone();
    rec.finish(SessionEnd {
        exit_status: Some(0),
        ..SessionEnd::default()
    })
    .unwrap();
    id
}

fn refused_request() -> airlock_auditor::AuditEvent {
    airlock_auditor::AuditEvent::Http(HttpExchange {
        exec_id: Some(airlock_auditor::ExecId::new("e1")),
        exchange: Some(airlock_auditor::ExchangeId(1)),
        request_headers: vec![("authorization".into(), "[secret:PASTE_TOKEN]".into())],
        request_body: Some(br#"{"text":"hi"}"#.to_vec()),
        status: Some(403),
        reason: Some("no rule allows this host".into()),
        ..HttpExchange::decided(
            "POST".into(),
            "https://paste.example/upload".into(),
            "HTTP/1.1".into(),
            Verdict::Deny,
        )
    })
}

/// Every path the page and the API serve for `id`.
fn every_path(served: &Served, id: &SessionId) -> Vec<String> {
    let mut paths: Vec<String> = [
        "/".to_owned(),
        "/assets/app.js".to_owned(),
        "/api/sessions".to_owned(),
        "/api/search?host=example.com".to_owned(),
        format!("/api/sessions/{id}"),
        format!("/api/sessions/{id}/events"),
        format!("/api/sessions/{id}/events?after=2"),
        format!("/api/sessions/{id}/tree"),
        format!("/api/sessions/{id}/files"),
        format!("/api/sessions/{id}/export/har"),
        format!("/api/sessions/{id}/export/jsonl"),
        format!("/api/sessions/{id}/export/cast"),
    ]
    .into();
    for seq in 1..=6 {
        paths.push(format!("/api/sessions/{id}/events/{seq}"));
    }
    let files = served.get(&format!("/api/sessions/{id}/files")).json();
    let versions = files["files"][0]["versions"].as_array().unwrap().clone();
    for v in &versions {
        let sha = v["content"].as_str().unwrap();
        paths.push(format!("/api/sessions/{id}/content/{sha}"));
        paths.push(format!("/api/sessions/{id}/content/{sha}?view=1"));
    }
    paths.push(format!(
        "/api/sessions/{id}/diff?from={}&to={}",
        versions[0]["content"].as_str().unwrap(),
        versions[1]["content"].as_str().unwrap()
    ));
    paths
}

#[test]
fn nothing_is_served_without_the_token_or_to_a_foreign_host() {
    let env = audit_store::env();
    let id = recorded_session(&env.store());
    let served = serve(&env);
    for path in every_path(&served, &id) {
        assert_eq!(served.get(&path).status, 200, "{path} with the token");
        let none = request(served.addr, "GET", &path, &[]);
        assert_eq!(none.status, 401, "{path} without a token");
        assert!(
            !String::from_utf8_lossy(&none.body).contains("example"),
            "{path}"
        );
        let wrong = request(
            served.addr,
            "GET",
            &path,
            &["Authorization: Bearer 00".into()],
        );
        assert_eq!(wrong.status, 401, "{path} with a wrong token");
        // A DNS-rebinding page sends its own name as the Host.
        let rebound = request(
            served.addr,
            "GET",
            &path,
            &[
                format!("Host: attacker.example:{}", served.addr.port()),
                format!("Authorization: Bearer {}", served.token),
            ],
        );
        assert_eq!(rebound.status, 403, "{path} for a foreign Host");
    }
    let post = request(
        served.addr,
        "POST",
        "/api/sessions",
        &[format!("Authorization: Bearer {}", served.token)],
    );
    assert_eq!(post.status, 405, "the console is read-only");
}

#[test]
fn the_first_visit_trades_the_token_for_a_cookie_and_the_page_is_locked_down() {
    let env = audit_store::env();
    recorded_session(&env.store());
    let served = serve(&env);
    let first = request(
        served.addr,
        "GET",
        &format!("/?token={}", served.token),
        &[],
    );
    assert_eq!(first.status, 303);
    assert_eq!(
        first.header("location"),
        ["/"],
        "the token leaves the address bar"
    );
    let cookie = first.header("set-cookie").pop().unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let page = request(served.addr, "GET", "/", &[format!("Cookie: {pair}")]);
    assert_eq!(page.status, 200);
    let csp = page.header("content-security-policy").join(" ");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} missing from {csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(page.header("referrer-policy"), ["no-referrer"]);
    assert_eq!(page.header("x-content-type-options"), ["nosniff"]);
}

#[test]
fn downloads_are_attachments_that_cannot_run_in_the_console() {
    let env = audit_store::env();
    let store = env.store();
    let rec = store.begin_session(audit_store::info(&["sh"])).unwrap();
    let html = b"<script>fetch('/api/sessions')</script>";
    rec.record(audit_store::file(
        "/work/x.html",
        FileOp::Create,
        Some(html),
    ))
    .unwrap();
    let id = rec.session_id().clone();
    rec.finish(SessionEnd::default()).unwrap();
    let served = serve(&env);
    let files = served.get(&format!("/api/sessions/{id}/files")).json();
    let sha = files["files"][0]["versions"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    for path in [
        format!("/api/sessions/{id}/content/{sha}"),
        format!("/api/sessions/{id}/export/har"),
    ] {
        let a = served.get(&path);
        assert_eq!(a.status, 200, "{path}");
        assert_eq!(
            a.header("content-type"),
            ["application/octet-stream"],
            "{path}"
        );
        assert!(
            a.header("content-disposition")[0].starts_with("attachment;"),
            "{path}"
        );
        assert!(
            a.header("content-security-policy")
                .iter()
                .any(|c| c.contains("sandbox")),
            "{path}"
        );
    }
    // A blob is served only under the session that recorded it.
    let other = recorded_session(&store);
    assert_eq!(
        served
            .get(&format!("/api/sessions/{other}/content/{sha}"))
            .status,
        404
    );
}

fn db_digest(env: &Env) -> Vec<u8> {
    Sha256::digest(std::fs::read(&env.db).unwrap()).to_vec()
}

#[test]
fn browsing_every_page_never_writes_to_the_database() {
    let env = audit_store::env();
    let id = recorded_session(&env.store());
    let before = db_digest(&env);
    let served = serve(&env);
    for path in every_path(&served, &id) {
        assert_eq!(served.get(&path).status, 200, "{path}");
    }
    drop(served);
    assert_eq!(db_digest(&env), before, "the console changed the database");
    // A WAL reader may create the -wal and -shm files SQLite coordinates
    // readers with (sqlite.org/wal.html), but it never puts a page in the log.
    let wal = env.db.with_extension("db-wal");
    let logged = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert_eq!(logged, 0, "{} holds written pages", wal.display());
}

#[test]
fn a_tampered_session_gets_a_failed_badge_naming_the_first_bad_event() {
    let env = audit_store::env();
    let store = env.store();
    let good = recorded_session(&store);
    let victim = recorded_session(&store);
    drop(store);
    let served = serve(&env);
    let outcome = |id: &SessionId| {
        let rows = served.get("/api/sessions").json();
        rows["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id.as_str())
            .unwrap()["verification"]
            .clone()
    };
    assert_eq!(outcome(&victim)["outcome"], "intact");
    // While the console runs (and has shown the session as intact), someone
    // rewrites what the refused request was.
    let changed = env
        .raw()
        .execute(
            "UPDATE events SET payload = replace(payload, 'paste.example', 'docs.example')
             WHERE sid = (SELECT sid FROM sessions WHERE id = ?1) AND kind = 'http'",
            [victim.as_str()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let badge = outcome(&victim);
    assert_eq!(badge["outcome"], "tampered", "{badge}");
    assert_eq!(badge["first_bad_seq"], 6, "{badge}");
    assert!(
        badge["summary"]
            .as_str()
            .unwrap()
            .contains("first bad seq 6"),
        "{badge}"
    );
    let detail = served.get(&format!("/api/sessions/{victim}")).json();
    assert_eq!(detail["verification"]["outcome"], "tampered");
    assert_eq!(
        outcome(&good)["outcome"],
        "intact",
        "the other session is untouched"
    );
    let only_tampered = served.get("/api/sessions?verification=tampered").json();
    let ids: Vec<&str> = only_tampered["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [victim.as_str()]);
}

#[test]
fn a_refused_request_shows_the_rule_to_add_and_its_body_pretty() {
    let env = audit_store::env();
    let id = recorded_session(&env.store());
    let served = serve(&env);
    let ev = served.get(&format!("/api/sessions/{id}/events/6")).json();
    assert_eq!(
        ev["rule_to_add"],
        "# allow POST https://paste.example/upload"
    );
    assert_eq!(ev["bodies"]["request"]["encoding"], "json");
    assert_eq!(ev["bodies"]["request"]["text"], "{\n  \"text\": \"hi\"\n}");
    assert_eq!(ev["exec"]["argv"][0], "sh");
    assert_eq!(ev["event"]["request_headers"][0][1], "[secret:PASTE_TOKEN]");
    let diff = served.get(&format!(
                "/api/sessions/{id}/diff?from={}&to={}",
                "empty",
                served.get(&format!("/api/sessions/{id}/files")).json()["files"][0]["versions"][1]
                    ["content"]
                    .as_str()
                    .unwrap()
            ));
    assert_eq!(
        diff.json()["lines"],
        serde_json::json!([{"op": "+", "text": "one"}, {"op": "+", "text": "two"}])
    );
    let bad = served.get("/api/sessions?since=yesterday-ish");
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].as_str().unwrap().contains("RFC 3339"));
    assert_eq!(served.get("/api/sessions/ffffffff").status, 404);
}

#[test]
fn a_running_session_streams_new_records_within_a_second() {
    let env = audit_store::env();
    let store = env.store();
    let rec = store.begin_session(audit_store::info(&["sh"])).unwrap();
    rec.record(audit_store::exec("e1", None, &["sh"])).unwrap();
    rec.sync().unwrap();
    let id = rec.session_id().clone();
    let served = serve(&env);
    let mut s = TcpStream::connect(served.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /api/sessions/{id}/live?after=1 HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
        served.addr, served.token
    )
    .unwrap();
    let mut lines = BufReader::new(s);
    let mut wait_for = |needle: &str| -> Duration {
        let start = Instant::now();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                lines.read_line(&mut line).unwrap() > 0,
                "stream ended before {needle}"
            );
            if line.contains(needle) {
                return start.elapsed();
            }
        }
    };
    wait_for("text/event-stream");
    rec.record(refused_request()).unwrap();
    rec.sync().unwrap();
    let took = wait_for("paste.example");
    assert!(
        took < Duration::from_secs(1),
        "the new record took {took:?}"
    );
    rec.finish(SessionEnd::default()).unwrap();
    wait_for("event: end");
}
