//! The approvals HTTP API (docs/approvals.md), served on the session's
//! approvals socket, where the peer's credentials say who decides, and on
//! the admin listener with `--approval-token-file`, where a bearer token
//! does:
//!
//! - `GET /v1/approvals`: `{"session": .., "pending": [..]}`;
//! - `GET /v1/approvals/ID`: `{"pending": ..}` or `{"decided": ..}`; with
//!   `?view=whole`, the pending request's `shown` lists every header and
//!   its whole body;
//! - `POST /v1/approvals/ID` with `{"decision": "approve" | "deny",
//!   "scope": "once" | "session", "note": ".."}`: `{"decided": ..}`.
//!
//! Errors are `{"error": "one line"}` with 400, 401, 403, 404 or 409.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Deserialize;
use serde_json::json;
use tokio::net::UnixListener;

use super::{ApprovalId, Approvals, Choice, Decider, Scope};

/// How long a client may take to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest decision accepted.
const MAX_DECISION_BYTES: usize = 16 * 1024;
/// The longest note kept.
const MAX_NOTE_CHARS: usize = 1024;
/// The shortest token accepted in a token file.
const MIN_TOKEN_LEN: usize = 16;

/// A decision as posted.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Posted {
    decision: Decision,
    #[serde(default)]
    scope: Option<Scope>,
    #[serde(default)]
    note: Option<String>,
}

#[derive(Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Decision {
    Approve,
    Deny,
}

/// Serve the API on a Unix socket: each peer decides as the user its
/// credentials name (SO_PEERCRED, see unix(7)). Who can connect at all is
/// the socket file's mode, which the caller sets.
pub async fn serve_unix(listener: UnixListener, approvals: Arc<Approvals>) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let Ok(credentials) = stream.peer_cred() else {
            continue;
        };
        let uid = credentials.uid();
        let name = nix::unistd::User::from_uid(uid.into())
            .ok()
            .flatten()
            .map(|user| user.name);
        let decider = Decider::User { uid, name };
        let approvals = approvals.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let approvals = approvals.clone();
                let decider = decider.clone();
                async move { Ok::<_, Infallible>(route(&approvals, Ok(decider), req).await) }
            });
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Whether a path is the API's (the admin listener routes it here).
pub(crate) fn is_api_path(path: &str) -> bool {
    path == "/v1/approvals" || path.starts_with("/v1/approvals/")
}

/// Answer one API request; `decider` is who asks, or why they are not
/// let in (no or a wrong token: 401 with that text).
pub(crate) async fn route(
    approvals: &Approvals,
    decider: Result<Decider, &'static str>,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let decider = match decider {
        Ok(decider) => decider,
        Err(why) => return error(StatusCode::UNAUTHORIZED, why),
    };
    let path = req.uri().path().to_owned();
    let id = match path.strip_prefix("/v1/approvals") {
        Some("" | "/") => None,
        Some(rest) => match rest.strip_prefix('/').and_then(ApprovalId::parse) {
            Some(id) => Some(id),
            None => {
                return error(
                    StatusCode::NOT_FOUND,
                    "no such approval id; list them with GET /v1/approvals",
                );
            }
        },
        None => {
            return error(
                StatusCode::NOT_FOUND,
                "the approvals API is under /v1/approvals",
            );
        }
    };
    match (req.method().clone(), id) {
        (Method::GET, None) => reply(
            StatusCode::OK,
            &json!({ "session": approvals.session(), "pending": approvals.pending() }),
        ),
        (Method::GET, Some(id)) => match lookup(approvals, &id, req.uri().query()) {
            Some(Ok(pending)) => reply(StatusCode::OK, &json!({ "pending": pending })),
            Some(Err(decided)) => reply(StatusCode::OK, &json!({ "decided": decided })),
            None => error(
                StatusCode::NOT_FOUND,
                &format!("no request is waiting for approval {id}"),
            ),
        },
        (Method::POST, Some(id)) => decide(approvals, &decider, &id, req).await,
        _ => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET /v1/approvals[/ID] lists, POST /v1/approvals/ID decides",
        ),
    }
}

/// One request, whole when the query asks for it.
fn lookup(
    approvals: &Approvals,
    id: &ApprovalId,
    query: Option<&str>,
) -> Option<Result<super::PendingView, super::DecidedView>> {
    let whole = query.is_some_and(|q| q.split('&').any(|p| p == "view=whole"));
    match whole {
        true => approvals.lookup_whole(id),
        false => approvals.lookup(id),
    }
}

async fn decide(
    approvals: &Approvals,
    decider: &Decider,
    id: &ApprovalId,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let body = match Limited::new(req.into_body(), MAX_DECISION_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "the decision could not be read (at most 16 KiB of JSON)",
            );
        }
    };
    let posted: Posted = match serde_json::from_slice(&body) {
        Ok(posted) => posted,
        Err(e) => {
            let why = format!(
                "bad decision ({e}); send {{\"decision\": \"approve\" or \"deny\", \"scope\": \"once\" or \"session\", \"note\": \"..\"}}"
            );
            return error(StatusCode::BAD_REQUEST, &why);
        }
    };
    let choice = match (posted.decision, posted.scope) {
        (Decision::Approve, scope) => Choice::Approve(scope.unwrap_or(Scope::Once)),
        (Decision::Deny, None) => Choice::Deny,
        (Decision::Deny, Some(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "a denial has no scope; leave `scope` out",
            );
        }
    };
    let note = posted
        .note
        .filter(|n| !n.trim().is_empty())
        .map(|n| n.chars().take(MAX_NOTE_CHARS).collect());
    match approvals.decide(id, choice, decider, note) {
        Ok(decided) => reply(StatusCode::OK, &json!({ "decided": decided })),
        Err(e) => error(
            StatusCode::from_u16(e.status()).unwrap_or(StatusCode::CONFLICT),
            &e.to_string(),
        ),
    }
}

fn reply(status: StatusCode, value: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string() + "\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn error(status: StatusCode, why: &str) -> Response<Full<Bytes>> {
    reply(status, &json!({ "error": why }))
}

/// The bearer tokens of `--approval-token-file`, each with its name.
#[derive(Clone)]
pub struct ApprovalTokens(Vec<(String, Vec<u8>)>);

impl std::fmt::Debug for ApprovalTokens {
    /// Names only: the tokens are secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_tuple("ApprovalTokens").field(&names).finish()
    }
}

/// Why a token file was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenFileError {
    #[error(
        "line {0}: expected NAME:TOKEN (a name of letters, digits, `.`, `_` or `-`, and a token of at least 16 characters)"
    )]
    BadLine(usize),
    #[error("line {0}: the name {1:?} is used twice; names must be unique")]
    DuplicateName(usize, String),
    #[error("no token in the file; write one NAME:TOKEN per line")]
    Empty,
}

impl ApprovalTokens {
    /// One `NAME:TOKEN` per line; blank lines and `#` comments are skipped.
    pub fn parse(text: &str) -> Result<Self, TokenFileError> {
        let mut tokens: Vec<(String, Vec<u8>)> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let number = index + 1;
            let (name, token) = line
                .split_once(':')
                .filter(|(name, token)| valid_name(name) && valid_token(token))
                .ok_or(TokenFileError::BadLine(number))?;
            if tokens.iter().any(|(n, _)| n == name) {
                return Err(TokenFileError::DuplicateName(number, name.to_owned()));
            }
            tokens.push((name.to_owned(), token.as_bytes().to_vec()));
        }
        if tokens.is_empty() {
            return Err(TokenFileError::Empty);
        }
        Ok(Self(tokens))
    }

    /// Who an `Authorization: Bearer TOKEN` header names.
    pub(crate) fn authenticate(
        &self,
        authorization: Option<&HeaderValue>,
    ) -> Result<Decider, &'static str> {
        let presented = authorization
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .ok_or("send `Authorization: Bearer TOKEN` with a token from --approval-token-file")?;
        // Every token is compared, in constant time, so the answer's timing
        // says nothing about which one came close.
        let mut found = None;
        for (name, token) in &self.0 {
            if constant_time_eq(token, presented) {
                found = Some(name.clone());
            }
        }
        found
            .map(|name| Decider::Token { name })
            .ok_or("the bearer token is not in --approval-token-file")
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn valid_token(token: &str) -> bool {
    token.len() >= MIN_TOKEN_LEN && token.bytes().all(|b| b.is_ascii_graphic())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
