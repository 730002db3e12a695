//! The admin endpoint orchestrators and monitoring talk to:
//!
//! - `GET /healthz`: 200 while the process serves and the audit store works
//!   (a liveness probe: restart on failure);
//! - `GET /readyz`: 200 only once the capture listeners are bound, the policy
//!   is loaded and the audit store is open (a startup/readiness probe: hold
//!   the app until then);
//! - `GET /metrics`: Prometheus text exposition, see [`crate::metrics`].
//!
//! Read-only, with one exception that must be switched on: with
//! `--approval-token-file`, `/v1/approvals` serves the approvals API
//! (`approvals::api`) to bearers of those tokens. The listener may be on the
//! pod's address, which the app shares, so without a token nothing here
//! changes what the proxy allows; and the app cannot read the token file.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::Proxy;
use crate::accept::accept_loop;
use crate::approvals::api::{self, ApprovalTokens};

/// How long an admin client may take to send its request head.
const ADMIN_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Prometheus text format's content type.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the admin endpoint reports on.
pub struct AdminState {
    proxy: Proxy,
    ready: AtomicBool,
    /// Set with `--approval-token-file`: the approvals API, for these tokens.
    approval_tokens: Option<ApprovalTokens>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("ready", &self.ready)
            .finish_non_exhaustive()
    }
}

impl AdminState {
    /// Starts not ready; call [`AdminState::set_ready`] once everything serves.
    pub fn new(proxy: Proxy) -> Arc<Self> {
        Self::with_approvals(proxy, None)
    }

    /// As [`AdminState::new`], serving the approvals API to `tokens`' bearers.
    pub fn with_approvals(proxy: Proxy, tokens: Option<ApprovalTokens>) -> Arc<Self> {
        Arc::new(Self {
            proxy,
            ready: AtomicBool::new(false),
            approval_tokens: tokens,
        })
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Serving, and every decision can still be recorded.
    pub fn healthy(&self) -> bool {
        !self.proxy.audit_failed()
    }

    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && self.healthy()
    }
}

/// Serve the admin endpoint until the listener fails.
pub async fn serve(listener: TcpListener, state: Arc<AdminState>) -> std::io::Result<()> {
    accept_loop(listener, None, move |stream, _client| {
        let state = state.clone();
        async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move {
                    let response = match api::is_api_path(req.uri().path()) {
                        true => approvals(&state, req).await,
                        false => route(&state, &req),
                    };
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(ADMIN_HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    })
    .await
}

/// The approvals API, to bearers of a token only.
async fn approvals(state: &AdminState, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let Some(tokens) = &state.approval_tokens else {
        return text(
            StatusCode::NOT_FOUND,
            "approvals are served here only with --approval-token-file\n",
        );
    };
    let decider = tokens.authenticate(req.headers().get(header::AUTHORIZATION));
    api::route(&state.proxy.approvals(), decider, req).await
}

fn route(state: &AdminState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD are served here\n",
        );
    }
    match req.uri().path() {
        "/healthz" if state.healthy() => text(StatusCode::OK, "ok\n"),
        "/healthz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the audit store failed; all traffic is refused\n",
        ),
        "/readyz" if state.ready() => text(StatusCode::OK, "ready\n"),
        "/readyz" if !state.healthy() => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the audit store failed\n",
        ),
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: still starting (capture listeners, policy, audit store)\n",
        ),
        "/metrics" => {
            let mut response = text(StatusCode::OK, "");
            *response.body_mut() = Full::new(Bytes::from(state.proxy.metrics().render()));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(PROMETHEUS_TEXT),
            );
            response
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /healthz, /readyz or /metrics\n",
        ),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
