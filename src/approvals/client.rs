//! The approvals API's client, over every approvals socket of this user:
//! what `airlock approvals`, `approve` and `deny` (and tests) use.

use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_proxy::approvals::ApprovalId;
use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::UnixStream;

/// How long one socket may take to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the approvals sockets are (inside the session directory, which
/// every sandbox hides).
pub(crate) fn socket_dir() -> anyhow::Result<PathBuf> {
    Ok(crate::paths::session_dir()?.join("approvals"))
}

/// One running session's pending requests.
#[derive(Debug)]
pub(crate) struct Listed {
    pub session: String,
    pub pending: Vec<Value>,
}

/// Every live socket's pending requests. A socket nobody serves any more
/// (its airlock was killed) is removed.
pub(crate) async fn list() -> anyhow::Result<Vec<Listed>> {
    let mut listed = Vec::new();
    let sockets = sockets()?;
    for (socket, answer) in sockets.iter().zip(ask_all(&sockets, "/v1/approvals").await) {
        match answer {
            Ok((StatusCode::OK, body)) => listed.push(Listed {
                session: body["session"].as_str().unwrap_or_default().to_owned(),
                pending: body["pending"].as_array().cloned().unwrap_or_default(),
            }),
            Ok(_) => {}
            Err(e) if refused(&e) => {
                let _ = std::fs::remove_file(socket);
            }
            Err(_) => {}
        }
    }
    Ok(listed)
}

/// Post a decision to the session that holds `id`: the decided request's
/// JSON, or the API's own one-line error.
pub(crate) async fn decide(id: &str, decision: &Value) -> anyhow::Result<Value> {
    let path = format!("/v1/approvals/{id}");
    let sockets = sockets()?;
    for (socket, answer) in sockets.iter().zip(ask_all(&sockets, &path).await) {
        if !matches!(answer, Ok((StatusCode::OK, _))) {
            continue;
        }
        let (status, body) = call(socket, Method::POST, &path, Some(decision)).await?;
        return match status {
            StatusCode::OK => Ok(body["decided"].clone()),
            _ => bail!("{}", error_text(&body, status)),
        };
    }
    bail!(
        "no running session holds approval {id:?}; list the waiting requests with `airlock approvals`"
    )
}

/// One request with every header and its whole body (`{"pending": ..}`),
/// or its decision (`{"decided": ..}`), from the session that knows it.
pub(crate) async fn show(id: &ApprovalId) -> anyhow::Result<Value> {
    let path = format!("/v1/approvals/{id}?view=whole");
    for answer in ask_all(&sockets()?, &path).await {
        if let Ok((StatusCode::OK, body)) = answer {
            return Ok(body);
        }
    }
    bail!(
        "no running session knows approval {id}; list the waiting requests with `airlock approvals`"
    )
}

/// GET `path` from every socket at once: a session that does not answer
/// costs the caller one timeout, not one for each session listed after it.
async fn ask_all(sockets: &[PathBuf], path: &str) -> Vec<anyhow::Result<(StatusCode, Value)>> {
    let mut asked = tokio::task::JoinSet::new();
    for (i, socket) in sockets.iter().enumerate() {
        let (socket, path) = (socket.clone(), path.to_owned());
        asked.spawn(async move { (i, call(&socket, Method::GET, &path, None).await) });
    }
    let mut answers: Vec<_> = sockets.iter().map(|_| None).collect();
    while let Some(Ok((i, answer))) = asked.join_next().await {
        answers[i] = Some(answer);
    }
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(anyhow::anyhow!("the question was lost"))))
        .collect()
}

fn sockets() -> anyhow::Result<Vec<PathBuf>> {
    let dir = socket_dir()?;
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut sockets: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .collect();
    sockets.sort();
    Ok(sockets)
}

fn refused(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
}

fn error_text(body: &Value, status: StatusCode) -> String {
    body["error"]
        .as_str()
        .map_or_else(|| format!("the session answered {status}"), str::to_owned)
}

/// One request on a fresh connection.
pub(crate) async fn call(
    socket: &Path,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> anyhow::Result<(StatusCode, Value)> {
    tokio::time::timeout(ANSWER_TIMEOUT, call_once(socket, method, path, body))
        .await
        .with_context(|| format!("{} did not answer in time", socket.display()))?
}

async fn call_once(
    socket: &Path,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> anyhow::Result<(StatusCode, Value)> {
    let stream = UnixStream::connect(socket).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "airlock")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let bytes = response.into_body().collect().await?.to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok((status, value))
}
