//! Clients of the proxy: real programs (curl, python3, node, ...) and what
//! they printed, and raw CONNECT tunnels for tests that write the bytes
//! themselves.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::pki::tls_client;
use crate::proxy::AirlockProxy;

/// What a client run printed.
#[derive(Debug)]
pub struct ClientOutput {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<std::process::Output> for ClientOutput {
    fn from(out: std::process::Output) -> Self {
        Self {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Run curl through the proxy, trusting Airlock's CA. Appends `-w '\n%{http_code}'`.
/// Returns the status code, the body and what curl printed.
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
    let out = ClientOutput::from(out);
    let (body, code) = out.stdout.rsplit_once('\n').unwrap_or(("", &out.stdout));
    let code = code.trim().parse().unwrap_or(0);
    let body = body.to_owned();
    (code, body, out)
}

/// Run a program (python3, node, ...) with `args` and extra `env`, to completion.
pub async fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> ClientOutput {
    let out = tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    ClientOutput::from(out)
}

/// `CONNECT authority` through the explicit proxy: the stream once the proxy
/// answered 200, or the response head it gave instead.
pub async fn try_connect_tunnel(
    proxy: &AirlockProxy,
    authority: &str,
) -> Result<TcpStream, String> {
    let mut tcp = TcpStream::connect(proxy.addr).await.unwrap();
    tcp.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let head = read_head(&mut tcp).await;
    if head.starts_with("HTTP/1.1 200") {
        Ok(tcp)
    } else {
        Err(head)
    }
}

/// A CONNECT tunnel through the explicit proxy; the raw stream after the 200.
/// Anything but a 200 fails the test.
pub async fn connect_tunnel(proxy: &AirlockProxy, authority: &str) -> TcpStream {
    try_connect_tunnel(proxy, authority)
        .await
        .unwrap_or_else(|head| panic!("CONNECT {authority}: {head:?}"))
}

/// A TLS session with the proxy (as `sni`, offering `alpn`) inside a CONNECT
/// tunnel to `authority`, trusting the proxy's CA.
pub async fn intercepted(
    proxy: &AirlockProxy,
    authority: &str,
    sni: &str,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = connect_tunnel(proxy, authority).await;
    let name = rustls::pki_types::ServerName::try_from(sni.to_owned()).unwrap();
    tls_client(&proxy.ca_pem, alpn)
        .connect(name, tcp)
        .await
        .unwrap()
}

/// A response head, read byte by byte so that nothing after it is consumed,
/// up to the blank line, the end of the stream, or 10 s without a byte.
pub async fn read_head<S: AsyncRead + Unpin>(io: &mut S) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(10), io.read(&mut byte)).await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}
