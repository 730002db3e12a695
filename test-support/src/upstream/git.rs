//! A git smart-HTTP server: `git http-backend` run as a CGI program
//! (git-http-backend(1)).

use std::path::Path;
use std::process::Stdio;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};

use super::routes::TestBody;
use crate::server::read_body;

/// Runs `git http-backend` for `path_info` in the project root `root`.
pub(super) async fn http_backend(
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
    let body = read_body(req.into_body()).await;
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
    // The CGI response: a head, a blank line (CRLF or LF), the body.
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
