//! Issue 21, classes 3 and 4, end to end: a request the policy checked must
//! not mean something else to the upstream. A hostile TLS upstream binds
//! parameters the way lax mainstream servers do (the query string over the
//! body, keys case-insensitively with the last match winning, JSON decoded
//! whatever the Content-Type, then the body as a form) and routes paths the
//! way Tomcat does (`;params` stripped). Through the real proxy and a real
//! policy file, every ambiguous request is refused with a 403 that says
//! why, never reaches the upstream, and is in the record; compliant ones
//! still get through and the upstream acts on the amount the policy saw.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use airlock_test_support::client::{curl, run};
use airlock_test_support::pki::TestPki;
use airlock_test_support::proxy::{AirlockProxy, ProxyOptions};
use airlock_test_support::server::{TestServer, read_body, serve_http};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// What reached the hostile upstream: (routed path, the amount it acted on).
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A TLS server that reads requests as the laxest common frameworks do.
struct LaxUpstream {
    port: u16,
    seen: Seen,
    _server: TestServer,
}

impl LaxUpstream {
    async fn start(pki: &TestPki) -> Self {
        let seen: Seen = Arc::default();
        let log = seen.clone();
        let server = TestServer::tls(pki.server_config(&["api.test"]), move |tls| {
            let log = log.clone();
            serve_http(tls, move |req: Request<Incoming>| handle(req, log.clone()))
        })
        .await;
        Self {
            port: server.port(),
            seen,
            _server: server,
        }
    }

    fn hits(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn routed_paths(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn last_amount(&self) -> Option<String> {
        self.seen
            .lock()
            .unwrap()
            .last()
            .and_then(|(_, a)| a.clone())
    }
}

async fn handle(req: Request<Incoming>, seen: Seen) -> Result<Response<Full<Bytes>>, Infallible> {
    let routed = tomcat_route(req.uri().path());
    let query = req.uri().query().unwrap_or("").to_owned();
    let body = read_body(req.into_body()).await;
    let body = String::from_utf8_lossy(&body).into_owned();
    let amount = if routed == "/charges" {
        lax_amount(&query, &body)
    } else {
        None
    };
    seen.lock().unwrap().push((routed.clone(), amount.clone()));
    let text = match routed.as_str() {
        "/files/internal-admin" => "ADMIN CONSOLE".to_owned(),
        "/charges" => format!("charged {}", amount.as_deref().unwrap_or("nothing")),
        other => format!("served {other}"),
    };
    Ok(Response::new(Full::new(Bytes::from(text))))
}

/// Servlet containers drop `;params` from every segment before routing.
fn tomcat_route(path: &str) -> String {
    path.split('/')
        .map(|segment| segment.split(';').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("/")
}

/// The amount a lax handler acts on: a query parameter wins (Servlet
/// `getParameter`, Flask `request.values`); otherwise the body is decoded
/// as JSON whatever the Content-Type (a Go handler with `json.Decoder`),
/// keys matched case-insensitively with the last match winning
/// (`encoding/json`); otherwise the body read as a form.
fn lax_amount(query: &str, body: &str) -> Option<String> {
    let is_amount = |key: &str| {
        let key = key.to_lowercase();
        key == "amount" || key == "amount[]" || key == "amount[0]"
    };
    let last_pair = |text: &str| {
        text.split(['&', ';'])
            .filter_map(|pair| pair.split_once('='))
            .filter(|(k, _)| is_amount(&decode(k)))
            .map(|(_, v)| decode(v))
            .next_back()
    };
    if let Some(amount) = last_pair(query) {
        return Some(amount);
    }
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(body) {
        // The last match in document order (the map itself is sorted).
        return map
            .iter()
            .filter(|(k, _)| is_amount(k))
            .max_by_key(|(k, _)| body.rfind(&format!("\"{k}\"")))
            .map(|(_, v)| v.to_string());
    }
    last_pair(body)
}

fn decode(text: &str) -> String {
    let bytes = text.replace('+', " ").into_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = std::str::from_utf8(bytes.get(i + 1..i + 3).unwrap_or(b"zz"))
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Fixture {
    _pki: TestPki,
    upstream: LaxUpstream,
    proxy: AirlockProxy,
}

impl Fixture {
    async fn new() -> Self {
        let pki = TestPki::new();
        let upstream = LaxUpstream::start(&pki).await;
        let port = upstream.port;
        let policy = format!(
            r#"
version = 1
default = "deny"

[[allow]]
host = "api.test"
port = {port}
methods = ["GET"]
paths = ["/files/*.whl", "/public/**"]

[[allow]]
host = "api.test"
port = {port}
methods = ["POST"]
paths = ["/charges"]
[allow.body]
amount = {{ max = 1000 }}
"#
        );
        let mut opts = ProxyOptions::new(&policy);
        opts.upstream_ca = Some(&pki.ca_pem);
        opts.resolve = vec!["api.test:127.0.0.1".into()];
        let proxy = AirlockProxy::start(AIRLOCK, opts);
        Self {
            _pki: pki,
            upstream,
            proxy,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://api.test:{}{path}", self.upstream.port)
    }

    /// Waits (the recorder writes after the 403 is sent) until the record
    /// holds at least `want` refusals whose reason contains `needle`, and
    /// returns how many it holds.
    async fn refusals_reaching(&self, needle: &str, want: usize) -> usize {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let n = self.recorded_refusals(needle);
            if n >= want || std::time::Instant::now() > deadline {
                return n;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Refused requests in the record whose reason contains `needle`.
    fn recorded_refusals(&self, needle: &str) -> usize {
        self.proxy
            .events()
            .iter()
            .filter(|e| {
                e["kind"] == "request"
                    && e["decision"] == "deny"
                    && e["reason"].as_str().is_some_and(|r| r.contains(needle))
            })
            .count()
    }
}

/// One POST to /charges with curl: extra curl arguments, then the path.
async fn post(fx: &Fixture, path: &str, args: &[&str]) -> (u16, String) {
    let url = fx.url(path);
    let mut all: Vec<&str> = vec!["-X", "POST"];
    all.extend_from_slice(args);
    all.push(&url);
    let (code, body, out) = curl(&fx.proxy, &all).await;
    assert!(code != 0, "curl failed: {out:?}");
    (code, body)
}

const JSON: &str = "Content-Type: application/json";
const FORM: &str = "Content-Type: application/x-www-form-urlencoded";

#[tokio::test]
async fn every_ambiguous_reading_of_a_constrained_field_is_refused_before_the_upstream() {
    let fx = Fixture::new().await;
    // (what, path, curl arguments, what the 403 must say)
    let cases: [(&str, &str, Vec<&str>, &str); 9] = [
        (
            "case-variant JSON key",
            "/charges",
            vec!["-H", JSON, "--data", r#"{"amount":5,"AMOUNT":50000}"#],
            "body field `amount` appears 2 times",
        ),
        (
            "case-variant JSON key alone",
            "/charges",
            vec!["-H", JSON, "--data", r#"{"Amount":50000}"#],
            "body field `amount` = 50000 exceeds max 1000",
        ),
        (
            "form-declared body that is JSON",
            "/charges",
            vec!["-H", FORM, "--data", r#"{"amount":50000,"x":"&amount=5&"}"#],
            "but the body is JSON",
        ),
        (
            "query parameter next to a compliant JSON body",
            "/charges?amount=50000",
            vec!["-H", JSON, "--data", r#"{"amount":5}"#],
            "`amount` in the query string = \"50000\" exceeds max 1000",
        ),
        (
            "case-variant query parameter next to a compliant form body",
            "/charges?AMOUNT=50000",
            vec!["-H", FORM, "--data", "amount=5"],
            "in the query string",
        ),
        (
            "case-variant form key",
            "/charges",
            vec!["-H", FORM, "--data", "amount=5&AMOUNT=50000"],
            "body field `amount` appears 2 times",
        ),
        (
            "PHP/Rails list key",
            "/charges",
            vec!["-H", FORM, "--data", "amount=5&amount[]=50000"],
            "`amount[]` in the form body = \"50000\" exceeds max 1000",
        ),
        (
            "JSON body that reads as a form too",
            "/charges",
            vec![
                "-H",
                JSON,
                "--data",
                r#"{"amount":5,"note":"&amount=50000&"}"#,
            ],
            "in the JSON body read as a form",
        ),
        (
            "two Content-Type headers",
            "/charges",
            vec!["-H", JSON, "-H", FORM, "--data", r#"{"amount":5}"#],
            "2 Content-Type values",
        ),
    ];
    for (what, path, args, says) in &cases {
        let before = fx.upstream.hits();
        let recorded = fx.recorded_refusals(says);
        let (code, body) = post(&fx, path, args).await;
        assert_eq!(code, 403, "{what}: {body}");
        assert!(
            body.contains(says),
            "{what}: the 403 should say {says:?}:\n{body}"
        );
        assert_eq!(fx.upstream.hits(), before, "{what} reached the upstream");
        assert_eq!(
            fx.refusals_reaching(says, recorded + 1).await,
            recorded + 1,
            "{what} is not in the record"
        );
    }
    let (_, body) = post(
        &fx,
        "/charges",
        &["-H", JSON, "--data", r#"{"amount":5,"AMOUNT":50000}"#],
    )
    .await;
    assert!(
        body.contains("Send each constrained field once, in the body"),
        "the 403 says what to do: {body}"
    );
    // The same over HTTP/2, where curl sends the headers as HPACK fields.
    let (code, body) = post(
        &fx,
        "/charges?amount=50000",
        &["--http2", "-H", JSON, "--data", r#"{"amount":5}"#],
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(fx.upstream.hits(), 0, "nothing ambiguous was forwarded");
}

#[tokio::test]
async fn compliant_requests_get_through_and_the_upstream_acts_on_the_checked_amount() {
    let fx = Fixture::new().await;
    for (path, args, amount) in [
        (
            "/charges",
            vec!["-H", JSON, "--data", r#"{"amount":500}"#],
            "500",
        ),
        ("/charges", vec!["-H", FORM, "--data", "amount=700"], "700"),
        (
            "/charges?page=2",
            vec!["-H", JSON, "--data", r#"{"amount":5}"#],
            "5",
        ),
        (
            "/charges",
            vec![
                "-H",
                "Content-Type: application/json; charset=utf-8",
                "--data",
                r#"{"amount":999,"note":"a&b"}"#,
            ],
            "999",
        ),
        (
            "/charges",
            vec!["--http2", "-H", JSON, "--data", r#"{"amount":1000}"#],
            "1000",
        ),
    ] {
        let (code, body) = post(&fx, path, &args).await;
        assert_eq!(code, 200, "{path} {args:?}: {body}");
        assert_eq!(body, format!("charged {amount}"));
        assert_eq!(fx.upstream.last_amount().as_deref(), Some(amount));
    }
    assert_eq!(fx.upstream.hits(), 5);
}

const PYTHON_REQUESTS: &str = r#"
import sys, requests
proxy, ca, url, amount_in_query, amount_in_body = sys.argv[1:6]
params = {"amount": amount_in_query} if amount_in_query else None
r = requests.post(url, params=params, json={"amount": int(amount_in_body)},
                  proxies={"https": proxy}, verify=ca, timeout=20)
print(r.status_code)
print(r.text)
"#;

#[tokio::test]
async fn python_requests_with_the_amount_in_query_and_json_is_refused() {
    let fx = Fixture::new().await;
    let ca = fx.proxy.ca_pem.to_string_lossy().into_owned();
    let proxy = fx.proxy.proxy_url();
    let url = fx.url("/charges");
    let python = |query: &'static str, body: &'static str| {
        let (proxy, ca, url) = (proxy.clone(), ca.clone(), url.clone());
        async move {
            run(
                "python3",
                &["-c", PYTHON_REQUESTS, &proxy, &ca, &url, query, body],
                &[],
            )
            .await
        }
    };
    let out = python("50000", "5").await;
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("403\n"), "{out:?}");
    assert!(out.stdout.contains("in the query string"), "{out:?}");
    assert_eq!(fx.upstream.hits(), 0);
    assert_eq!(fx.refusals_reaching("in the query string", 1).await, 1);
    let out = python("", "800").await;
    assert!(out.stdout.starts_with("200\ncharged 800"), "{out:?}");
    assert_eq!(fx.upstream.last_amount().as_deref(), Some("800"));
}

#[tokio::test]
async fn a_glob_never_allows_a_path_that_a_tomcat_style_server_routes_elsewhere() {
    let fx = Fixture::new().await;
    for path in [
        "/files/internal-admin;.whl",
        "/files/internal-admin;x=1.whl",
        "/files/internal-admin%3B.whl",
        "/files/;/internal-admin;.whl",
        "/files/internal-admin.whl;",
        "//files/internal-admin.whl",
    ] {
        for version in ["--http1.1", "--http2"] {
            let (code, body, out) =
                curl(&fx.proxy, &[version, "--path-as-is", &fx.url(path)]).await;
            assert_eq!(code, 403, "{path} {version}: {body} {out:?}");
            assert!(!body.contains("ADMIN CONSOLE"), "{path}: {body}");
        }
    }
    assert_eq!(
        fx.upstream.hits(),
        0,
        "a path the policy does not allow was routed: {:?}",
        fx.upstream.routed_paths()
    );
    assert!(fx.refusals_reaching("no rule allows this path", 10).await >= 10);
    // Paths whose every reading is allowed still get through, parameters
    // and all: the proxy forwards the bytes it was sent.
    for (path, routed) in [
        ("/files/pkg-1.0.whl", "/files/pkg-1.0.whl"),
        ("/public/a;jsessionid=1", "/public/a"),
    ] {
        let (code, body, out) = curl(&fx.proxy, &["--path-as-is", &fx.url(path)]).await;
        assert_eq!(code, 200, "{path}: {out:?}");
        assert_eq!(body, format!("served {routed}"));
    }
    assert_eq!(
        fx.upstream.routed_paths(),
        ["/files/pkg-1.0.whl", "/public/a"]
    );
}
