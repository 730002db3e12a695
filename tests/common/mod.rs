//! Shared fixtures for end-to-end tests: a test PKI, a real TLS upstream server
//! and the real `airlock` binary. Everything listens on loopback only and is
//! torn down when dropped.

#![allow(dead_code)]

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::Notify;

pub const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock");

/// A test whose prerequisite is missing (root, a tool, a kernel feature) calls
/// this and returns. In CI (`CI=true`) the test fails here instead: a green CI
/// run must mean that every test ran. Elsewhere it skips loudly, on stderr,
/// naming the test (the test harness names each test's thread after it).
#[track_caller]
pub fn skip_or_fail(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{test}: prerequisite missing in CI (CI=true), failing instead of skipping: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
}

/// A CA for test upstream servers, written to `ca.pem` for `--upstream-ca`.
pub struct TestPki {
    pub dir: TempDir,
    issuer: Issuer<'static, KeyPair>,
    pub ca_pem: PathBuf,
}

impl TestPki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Airlock test upstream CA");
        let cert = params.self_signed(&key).unwrap();
        let ca_pem = dir.path().join("upstream-ca.pem");
        std::fs::write(&ca_pem, cert.pem()).unwrap();
        Self {
            dir,
            issuer: Issuer::new(params, key),
            ca_pem,
        }
    }

    /// A TLS server config for `names`, signed by this CA, offering h2 and http/1.1.
    pub fn server_config(&self, names: &[&str]) -> ServerConfig {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        tls_config(cert.der().clone(), key)
    }
}

/// A server config with a self-signed certificate no one trusts.
pub fn untrusted_server_config(names: &[&str]) -> ServerConfig {
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let cert = params.self_signed(&key).unwrap();
    tls_config(cert.der().clone(), key)
}

fn tls_config(cert: CertificateDer<'static>, key: KeyPair) -> ServerConfig {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

/// A rustls client that trusts only the CA in `ca_pem` and offers `alpn`.
pub fn tls_client(ca_pem: &Path, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca_pem).unwrap();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A real HTTPS (or plain HTTP) server with the endpoints the tests need:
/// `/echo` (request as JSON), `/sse` (two events, the second only after
/// `release_sse`), `/ws` (WebSocket echo), `/bytes/N` (N bytes), `/upload`
/// (counts a streamed request body).
pub struct Upstream {
    pub addr: SocketAddr,
    pub sse_gate: Arc<Notify>,
    /// (method, path, headers) of every request that reached this server.
    pub seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    pub async fn start(tls: Option<ServerConfig>) -> Self {
        Self::start_with(tls, Extra::default()).await
    }

    pub async fn start_with(tls: Option<ServerConfig>, extra: Extra) -> Self {
        let extra = Arc::new(extra);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sse_gate = Arc::new(Notify::new());
        let gate = sse_gate.clone();
        let seen: Seen = Arc::default();
        let log = seen.clone();
        let acceptor = tls.map(|c| tokio_rustls::TlsAcceptor::from(Arc::new(c)));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let gate = gate.clone();
                let log = log.clone();
                let acceptor = acceptor.clone();
                let extra = extra.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        log.lock().unwrap().push((
                            req.method().to_string(),
                            req.uri().path().to_owned(),
                            req.headers().clone(),
                        ));
                        route(req, gate.clone(), extra.clone())
                    });
                    let builder = auto::Builder::new(TokioExecutor::new());
                    match acceptor {
                        Some(acceptor) => {
                            if let Ok(tls) = acceptor.accept(stream).await {
                                let _ = builder
                                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                                    .await;
                            }
                        }
                        None => {
                            let _ = builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                                .await;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            sse_gate,
            seen,
            task,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// How many requests reached this server.
    pub fn hits(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The value of `header` on the last request that reached this server.
    pub fn last_header(&self, header: &str) -> Option<String> {
        self.seen.lock().unwrap().last().and_then(|(_, _, h)| {
            h.get(header)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        })
    }

    /// Let `/sse` send its second event.
    pub fn release_sse(&self) {
        self.sse_gate.notify_one();
    }
}

pub type Seen = Arc<std::sync::Mutex<Vec<(String, String, http::HeaderMap)>>>;

/// Routes beyond the built-in ones: static files and a git smart-HTTP server.
#[derive(Default, Clone)]
pub struct Extra {
    /// path -> (content type, bytes)
    pub files: std::collections::HashMap<String, (String, Vec<u8>)>,
    /// Serve `/git/...` with `git http-backend` from this project root.
    pub git_root: Option<PathBuf>,
    /// Notified when the first bytes of an `/upload` body arrive.
    pub upload_started: Arc<Notify>,
}

type TestBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn route(
    mut req: Request<Incoming>,
    gate: Arc<Notify>,
    extra: Arc<Extra>,
) -> Result<Response<TestBody>, Infallible> {
    let path = req.uri().path().to_owned();
    if let Some((content_type, bytes)) = extra.files.get(&path) {
        return Ok(Response::builder()
            .header("content-type", content_type.as_str())
            .body(Full::new(Bytes::from(bytes.clone())).boxed())
            .unwrap());
    }
    if let (Some(root), Some(path_info)) = (&extra.git_root, path.strip_prefix("/git")) {
        return Ok(git_http_backend(root, path_info, req).await);
    }
    if path == "/ws" {
        return Ok(websocket_echo(&mut req));
    }
    if path == "/sse" {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
        tokio::spawn(async move {
            let _ = tx
                .send(Ok(Frame::data(Bytes::from("data: first\n\n"))))
                .await;
            gate.notified().await;
            let _ = tx
                .send(Ok(Frame::data(Bytes::from("data: second\n\n"))))
                .await;
        });
        let stream = tokio_stream_from(rx);
        return Ok(Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(BodyExt::boxed(StreamBody::new(stream)))
            .unwrap());
    }
    if path == "/grpc" {
        // A gRPC-shaped response: a data frame, then trailers with the status.
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        trailers.insert("grpc-message", "ok".parse().unwrap());
        let te = req.headers().get("te").cloned();
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
            Ok(Frame::data(Bytes::from_static(b"\0\0\0\0\x02hi"))),
            Ok(Frame::trailers(trailers)),
        ];
        let mut response = Response::builder()
            .header("content-type", "application/grpc")
            .body(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
                frames,
            ))))
            .unwrap();
        if let Some(te) = te {
            response.headers_mut().insert("x-saw-te", te);
        }
        return Ok(response);
    }
    if path == "/upload" {
        // Count the body as it streams in; say when its first bytes arrive.
        let mut body = req.into_body();
        let mut received = 0usize;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            if let Some(data) = frame.data_ref() {
                if received == 0 && !data.is_empty() {
                    extra.upload_started.notify_one();
                }
                received += data.len();
            }
        }
        return Ok(Response::new(
            Full::new(Bytes::from(format!("received {received} bytes"))).boxed(),
        ));
    }
    if let Some(n) = path.strip_prefix("/bytes/") {
        let n: usize = n.parse().unwrap_or(0);
        return Ok(Response::builder()
            .header("content-type", "application/octet-stream")
            .body(Full::new(Bytes::from(vec![b'x'; n])).boxed())
            .unwrap());
    }
    // /echo and everything else: the request as the upstream saw it.
    let method = req.method().to_string();
    let uri = req.uri().to_string();
    let version = format!("{:?}", req.version());
    let headers: serde_json::Map<String, serde_json::Value> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                serde_json::Value::String(String::from_utf8_lossy(v.as_bytes()).into()),
            )
        })
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let echo = serde_json::json!({
        "method": method,
        "uri": uri,
        "version": version,
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    Ok(Response::builder()
        .header("content-type", "application/json")
        .header(
            "x-echo-authorization",
            echo["headers"]["authorization"].as_str().unwrap_or(""),
        )
        .body(Full::new(Bytes::from(echo.to_string())).boxed())
        .unwrap())
}

/// Run `git http-backend` as a CGI program (git-http-backend(1)).
async fn git_http_backend(
    root: &Path,
    path_info: &str,
    req: Request<Incoming>,
) -> Response<TestBody> {
    let method = req.method().to_string();
    let query = req.uri().query().unwrap_or("").to_owned();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default()
    };
    let content_type = header("content-type");
    let protocol = header("git-protocol");
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut child = tokio::process::Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", path_info)
        .env("QUERY_STRING", query)
        .env("REQUEST_METHOD", method)
        .env("CONTENT_TYPE", content_type)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("GIT_PROTOCOL", protocol)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let _ = stdin.write_all(&body).await;
    });
    let out = child.wait_with_output().await.unwrap();
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| {
            out.stdout
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, 2))
        })
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout[..split.0]).into_owned();
    let mut builder = Response::builder();
    for line in head.lines() {
        if let Some((name, value)) = line.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("status") {
                builder = builder.status(value[..3].parse::<u16>().unwrap());
            } else {
                builder = builder.header(name.trim(), value);
            }
        }
    }
    builder
        .body(Full::new(Bytes::from(out.stdout[split.0 + split.1..].to_vec())).boxed())
        .unwrap()
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn websocket_echo(req: &mut Request<Incoming>) -> Response<TestBody> {
    use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
    let key = req
        .headers()
        .get("sec-websocket-key")
        .map(|k| derive_accept_key(k.as_bytes()))
        .unwrap_or_default();
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        use futures_util::{SinkExt, StreamExt};
        let Ok(upgraded) = upgrade.await else { return };
        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            tokio_tungstenite::tungstenite::protocol::Role::Server,
            None,
        )
        .await;
        while let Some(Ok(msg)) = ws.next().await {
            if msg.is_text() || msg.is_binary() {
                if ws.send(msg).await.is_err() {
                    return;
                }
            } else if msg.is_close() {
                return;
            }
        }
    });
    Response::builder()
        .status(101)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", key)
        .body(Full::new(Bytes::new()).boxed())
        .unwrap()
}

/// The real `airlock proxy`, on an ephemeral port, killed on drop.
pub struct AirlockProxy {
    child: Child,
    pub addr: SocketAddr,
    pub dns: Option<SocketAddr>,
    pub dir: TempDir,
    pub ca_pem: PathBuf,
    pub events: PathBuf,
    pub policy: PathBuf,
    pub stderr: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for AirlockProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct ProxyOptions<'a> {
    pub policy: &'a str,
    pub upstream_ca: Option<&'a Path>,
    pub resolve: Vec<String>,
    pub env: Vec<(&'a str, &'a str)>,
    pub dns: bool,
    pub extra: Vec<String>,
    /// A program (and its arguments) that runs `airlock` for the test, e.g.
    /// `unshare -m ...` to give the proxy a private view of some file.
    pub wrapper: Vec<&'a str>,
}

impl<'a> ProxyOptions<'a> {
    pub fn new(policy: &'a str) -> Self {
        Self {
            policy,
            upstream_ca: None,
            resolve: Vec::new(),
            env: Vec::new(),
            dns: false,
            extra: Vec::new(),
            wrapper: Vec::new(),
        }
    }
}

impl AirlockProxy {
    pub fn start(opts: ProxyOptions<'_>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().join("ca");
        let out = Command::new(AIRLOCK)
            .args(["ca", "init", "--dir"])
            .arg(&ca_dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "ca init: {out:?}");
        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, opts.policy).unwrap();
        let events = dir.path().join("events.jsonl");
        let mut cmd = match opts.wrapper.split_first() {
            None => Command::new(AIRLOCK),
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(AIRLOCK);
                cmd
            }
        };
        cmd.args(["proxy", "--listen", "127.0.0.1:0", "--policy"])
            .arg(&policy)
            .arg("--ca-dir")
            .arg(&ca_dir)
            .arg("--events")
            .arg(&events)
            .env("AIRLOCK_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(ca) = opts.upstream_ca {
            cmd.arg("--upstream-ca").arg(ca);
        }
        for r in &opts.resolve {
            cmd.arg("--resolve").arg(r);
        }
        if opts.dns {
            cmd.args(["--dns-listen", "127.0.0.1:0"]);
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        cmd.args(&opts.extra);
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line.clone());
                keep.lock().unwrap().push(line);
            }
        });
        let mut addr = None;
        let mut dns = None;
        let deadline = Instant::now() + Duration::from_secs(20);
        while addr.is_none() || (opts.dns && dns.is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("airlock proxy did not start: {:?}", lines.lock()));
            if let Some(rest) = line.strip_prefix("airlock: proxy listening on ") {
                addr = rest.split_whitespace().next().and_then(|a| a.parse().ok());
            }
            if let Some(rest) = line.strip_prefix("airlock: DNS on ") {
                dns = rest.split_whitespace().next().and_then(|a| a.parse().ok());
            }
        }
        Self {
            child,
            addr: addr.unwrap(),
            dns,
            ca_pem: ca_dir.join("ca.pem"),
            dir,
            events,
            policy,
            stderr: lines,
        }
    }

    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every event recorded so far.
    pub fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The events once `done` holds for them (a response is recorded when
    /// its body ends, after the client already has it), or after 10 s.
    pub async fn events_when(
        &self,
        done: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let events = self.events();
            if done(&events) || std::time::Instant::now() > deadline {
                return events;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop with SIGTERM and wait for a clean exit; returns the exit status.
    pub fn stop(&mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        self.child.wait().ok().and_then(|s| s.code())
    }
}

/// What a client run printed.
#[derive(Debug)]
pub struct ClientOutput {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<std::process::Output> for ClientOutput {
    fn from(out: std::process::Output) -> Self {
        ClientOutput {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Run curl through the proxy, trusting Airlock's CA. Appends `-w '\n%{http_code}'`.
pub async fn curl(proxy: &AirlockProxy, args: &[&str]) -> (u16, String, ClientOutput) {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "--proxy"])
        .arg(proxy.proxy_url())
        .arg("--cacert")
        .arg(&proxy.ca_pem)
        .args(args)
        .args(["-w", "\n%{http_code}"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    let code = code.trim().parse().unwrap_or(0);
    (
        code,
        body.to_owned(),
        ClientOutput {
            status: out.status.code().unwrap_or(-1),
            stdout: stdout.clone(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
    )
}

/// Run a program (python3, node, ...) with a script on stdin-less argv.
pub async fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> ClientOutput {
    let out = tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    ClientOutput::from(out)
}

// ------------------------------------------------------------ the record

/// `airlock audit ARGS --audit-db DB`, run to completion.
pub fn audit_cli(db: &Path, args: &[&str]) -> std::process::Output {
    Command::new(AIRLOCK)
        .arg("audit")
        .args(args)
        .arg("--audit-db")
        .arg(db)
        .output()
        .unwrap()
}

/// Every session in `db`, as `audit sessions --json` lists them.
pub fn sessions(db: &Path) -> serde_json::Value {
    let out = audit_cli(db, &["sessions", "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("audit sessions: {e}: {out:?}"))
}

/// The id of the first session in `db`; `context` (say, the run's output)
/// is printed when there is none.
pub fn first_session_id(db: &Path, context: &dyn std::fmt::Debug) -> String {
    let out = audit_cli(db, &["sessions", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("no session recorded: {context:?}"));
    list[0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session recorded: {context:?}"))
        .to_owned()
}

pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Regular files under `root` (relative path -> bytes). Symlinks are not
/// followed (tests plant `link -> .`-style loops on purpose) and are left
/// out: only regular files have content to restore.
pub fn tree(root: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                out.insert(
                    path.strip_prefix(root).unwrap().to_owned(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    out
}
