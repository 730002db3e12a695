//! What the standard upstream answers, path by path.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use tokio::sync::Notify;

use super::Extra;
use super::{git, websocket};
use crate::server::read_body;

pub(super) type TestBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

pub(super) async fn route(
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
    if extra.say_target {
        let target = req
            .uri()
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default();
        return Ok(Response::new(
            Full::new(Bytes::from(format!("upstream saw {target}\n"))).boxed(),
        ));
    }
    if let (Some(root), Some(path_info)) = (&extra.git_root, path.strip_prefix("/git")) {
        return Ok(git::http_backend(root, path_info, req).await);
    }
    Ok(match path.as_str() {
        "/ws" => websocket::echo(&mut req),
        "/sse" => sse(gate),
        "/grpc" => grpc(&req),
        "/upload" => upload(req, &extra.upload_started).await,
        _ => match path.strip_prefix("/bytes/") {
            Some(n) => bytes(n.parse().unwrap_or(0)),
            // /echo and everything else: the request as the upstream saw it.
            None => echo(req).await,
        },
    })
}

/// Two events, the second only once the test releases the gate.
fn sse(gate: Arc<Notify>) -> Response<TestBody> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    tokio::spawn(async move {
        let _ = tx
            .send(Ok(Frame::data(Bytes::from("data: first\n\n"))))
            .await;
        gate.notified().await;
        let _ = tx
            .send(Ok(Frame::data(Bytes::from("data: second\n\n"))))
            .await;
    });
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap()
}

/// A gRPC-shaped response: a data frame, then trailers with the status.
fn grpc(req: &Request<Incoming>) -> Response<TestBody> {
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
    response
}

/// Counts the body as it streams in; says when its first bytes arrive.
async fn upload(req: Request<Incoming>, started: &Notify) -> Response<TestBody> {
    let mut body = req.into_body();
    let mut received = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Some(data) = frame.data_ref() {
            if received == 0 && !data.is_empty() {
                started.notify_one();
            }
            received += data.len();
        }
    }
    Response::new(Full::new(Bytes::from(format!("received {received} bytes"))).boxed())
}

/// `n` bytes of `x`.
fn bytes(n: usize) -> Response<TestBody> {
    Response::builder()
        .header("content-type", "application/octet-stream")
        .body(Full::new(Bytes::from(vec![b'x'; n])).boxed())
        .unwrap()
}

/// The request as the upstream saw it, as JSON; the Authorization header
/// also comes back as `x-echo-authorization`.
async fn echo(req: Request<Incoming>) -> Response<TestBody> {
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
    let body = read_body(req.into_body()).await;
    let echo = serde_json::json!({
        "method": method,
        "uri": uri,
        "version": version,
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    Response::builder()
        .header("content-type", "application/json")
        .header(
            "x-echo-authorization",
            echo["headers"]["authorization"].as_str().unwrap_or(""),
        )
        .body(Full::new(Bytes::from(echo.to_string())).boxed())
        .unwrap()
}
