//! Every response the console sends, each with the same security headers.
//!
//! The Content-Security-Policy allows scripts, styles and fetches from the
//! console itself and nothing else: no inline script, no inline style, no
//! frames, no forms, no other origin. Downloads carry `sandbox` on top, so a
//! recorded HTML file opened from the console runs in no origin at all.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{
    CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_SECURITY_POLICY, CONTENT_TYPE, LOCATION,
    REFERRER_POLICY, SET_COOKIE, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use http::{Response, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use http_body_util::Full;
use http_body_util::combinators::BoxBody;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::ConsoleError;

pub(crate) type Body = BoxBody<Bytes, Infallible>;

const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";
const DOWNLOAD_CSP: &str = "default-src 'none'; sandbox";

fn base(status: StatusCode, content_type: &str) -> http::response::Builder {
    with_csp(status, content_type, PAGE_CSP)
}

fn with_csp(status: StatusCode, content_type: &str, csp: &'static str) -> http::response::Builder {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, content_type)
        .header(CONTENT_SECURITY_POLICY, csp)
        .header(X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(X_FRAME_OPTIONS, "DENY")
        // The first URL carries the token: never send it on as a Referer.
        .header(REFERRER_POLICY, "no-referrer")
        .header(CACHE_CONTROL, "no-store")
        .header("cross-origin-opener-policy", "same-origin")
        .header("cross-origin-resource-policy", "same-origin")
}

fn finish(builder: http::response::Builder, body: Body) -> Response<Body> {
    builder.body(body).unwrap_or_else(|_| {
        // Only a header value could fail, and every one above is a
        // constant or sanitised; answer something rather than panic.
        let mut r = Response::new(full(Bytes::from_static(b"internal error")));
        *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

pub(crate) fn json(value: &impl Serialize) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(bytes) => finish(base(StatusCode::OK, "application/json"), full(bytes)),
        Err(e) => error(&ConsoleError::BadRequest(format!(
            "cannot encode the answer: {e}"
        ))),
    }
}

pub(crate) fn error(err: &ConsoleError) -> Response<Body> {
    let status = err.status();
    if status.is_server_error() {
        tracing::warn!(error = %err, "console: request failed");
    }
    let body = serde_json::json!({ "error": err.to_string() }).to_string();
    finish(base(status, "application/json"), full(body))
}

pub(crate) fn text(status: StatusCode, message: &'static str) -> Response<Body> {
    finish(
        base(status, "text/plain; charset=utf-8"),
        full(Bytes::from_static(message.as_bytes())),
    )
}

pub(crate) fn asset(content_type: &'static str, bytes: &'static [u8]) -> Response<Body> {
    finish(
        base(StatusCode::OK, content_type),
        full(Bytes::from_static(bytes)),
    )
}

/// A file to save, never to render: recorded content is hostile.
pub(crate) fn download(bytes: Vec<u8>, filename: &str) -> Response<Body> {
    // The name is built by the console from ids and a kind, but keep only
    // characters that need no quoting in a header, to be sure.
    let safe: String = filename
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    finish(
        base(StatusCode::OK, "application/octet-stream")
            .header(CONTENT_SECURITY_POLICY, DOWNLOAD_CSP)
            .header(
                CONTENT_DISPOSITION,
                format!("attachment; filename=\"{safe}\""),
            ),
        full(bytes),
    )
}

/// The first visit: keep the token in a cookie and take it out of the URL.
pub(crate) fn redirect_with_cookie(location: &'static str, cookie: String) -> Response<Body> {
    finish(
        base(StatusCode::SEE_OTHER, "text/plain; charset=utf-8")
            .header(LOCATION, location)
            .header(SET_COOKIE, cookie),
        full(Bytes::new()),
    )
}

/// A server-sent event stream fed by `rx`; it ends when the sender does.
pub(crate) fn event_stream(rx: mpsc::Receiver<Bytes>) -> Response<Body> {
    finish(
        base(StatusCode::OK, "text/event-stream"),
        ChannelBody(rx).boxed(),
    )
}

struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}
