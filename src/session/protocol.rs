//! The control protocol of a live session, spoken over its Unix socket
//! (docs/sessions.md documents it for other clients, such as the SDK).
//!
//! A client sends one request: a JSON object on one line. `info` and `stop`
//! get one JSON line back. `exec` gets one JSON line (the step number, or
//! why not), then both sides exchange frames until the step ends: a type
//! byte, a big-endian u32 length, and that many bytes.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Longest request line: an exec's argv and environment fit with room.
pub(crate) const MAX_REQUEST: usize = 8 << 20;
/// Longest frame payload either side sends.
pub(crate) const MAX_FRAME: usize = 1 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub(crate) enum Request {
    Exec(ExecRequest),
    Info,
    Stop,
    /// Every refusal so far in the session.
    Denials,
    /// Kill a running step and everything it started, from another
    /// connection: its own then gets the exit report.
    Kill {
        step: u64,
    },
    /// Change the idle timeout from now on.
    #[serde(rename = "set_idle_timeout")]
    SetIdleTimeout(SetIdleTimeout),
}

/// `{"op":"set_idle_timeout","idle_timeout_ms":N}`: stop the session after
/// N ms without a step running; `null` or 0: never.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SetIdleTimeout {
    #[serde(default)]
    pub idle_timeout_ms: Option<u64>,
}

impl SetIdleTimeout {
    pub(crate) fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout_ms
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ExecRequest {
    pub argv: Vec<String>,
    /// Set on top of the session's environment.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Run on a pseudo-terminal of this size.
    #[serde(default)]
    pub tty: Option<TtySize>,
}

impl ExecRequest {
    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout_ms.map(Duration::from_millis)
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct TtySize {
    pub cols: u16,
    pub rows: u16,
}

/// A session's state when it took a step's kill without confirming the
/// step's end, or did not answer `ls` at all.
pub(crate) const NOT_ANSWERING: &str = "not answering";

/// The answer to `info`, and one row of `airlock session ls`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SessionInfo {
    pub id: String,
    pub name: Option<String>,
    /// "starting", "ready", "stopping" or [`NOT_ANSWERING`].
    pub state: String,
    /// Seconds since the epoch.
    pub started: f64,
    /// Steps run so far, and of those still running.
    pub commands: u64,
    pub running: u64,
    pub policy: String,
    /// The serving process and the sandbox's init (host pids).
    pub pids: Pids,
    /// The record's session id (`airlock audit timeline ID`), unless `--no-audit`.
    pub audit_session: Option<String>,
    /// The workspace's path (the same inside the sandbox); None when not known.
    #[serde(default)]
    pub workspace: Option<String>,
    /// The idle timeout; None: never (or not known).
    #[serde(default)]
    pub idle_timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Pids {
    pub server: i32,
    pub init: Option<i32>,
}

/// Every answer line: `{"ok": true, ...}` or `{"ok": false, "error": "..."}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionInfo>,
    /// The answer to `denials`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denials: Option<Vec<Denial>>,
    /// With `denials`: refusals past the number kept, counted only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
}

impl Reply {
    pub(crate) fn ok() -> Self {
        Self {
            ok: true,
            error: None,
            step: None,
            session: None,
            denials: None,
            dropped: None,
        }
    }

    pub(crate) fn error(text: impl Into<String>) -> Self {
        Self {
            ok: false,
            error: Some(text.into()),
            ..Self::ok()
        }
    }
}

/// How a step ended (the payload of an [`FrameType::Exit`] frame).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ExitReport {
    /// What `airlock session exec` exits with: the command's status, 124 on
    /// its timeout, 128+N on a signal.
    pub exit_code: i32,
    #[serde(default)]
    pub status: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    #[serde(default)]
    pub timed_out: bool,
    pub duration_ms: f64,
    /// Why airlock ended it, when it did (e.g. the session stopped).
    #[serde(default)]
    pub reason: Option<String>,
    /// What the policy refused this step's processes while it ran.
    #[serde(default)]
    pub denials: Vec<Denial>,
    /// Each request of this step an `[[ask]]` rule held for a person, once
    /// decided (or expired): what it was, how it ended, how long it waited.
    #[serde(default)]
    pub held: Vec<Held>,
}

/// A request an `[[ask]]` rule held, as a step's caller learns of it once
/// its wait is over (the record has the rest: headers, body hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Held {
    /// The approval's id, as `airlock approve`/`deny` took it.
    pub approval: String,
    pub method: String,
    /// Its URL without the query.
    pub url: String,
    /// The `[[ask]]` rule that held it.
    pub rule: Option<String>,
    /// "approved", "denied", "expired" or "abandoned".
    pub outcome: String,
    /// "once" or "session" when approved.
    pub scope: Option<String>,
    /// Who decided; None when nobody did.
    pub by: Option<String>,
    /// The decider's note (a denial's reason).
    pub note: Option<String>,
    /// How long it waited for the decision.
    pub waited_ms: u64,
    /// The step whose process sent it, when known.
    pub step: Option<u64>,
}

/// One refusal, as a step's caller learns of it: what was refused, why,
/// and the rule that would allow it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Denial {
    pub kind: DenialKind,
    /// For a request.
    pub method: Option<String>,
    /// For a request: its URL without the query.
    pub url: Option<String>,
    /// The host (a request's or a name's), or `host:port` for a connection.
    pub host: String,
    pub reason: String,
    /// The rule that decided, or "POLICY (default: deny)".
    pub decided_by: String,
    /// The TOML to add to the policy to allow it; None when a rule would
    /// not help (a `[[deny]]` rule matched, a body constraint failed) or
    /// depends on the protocol (a connection: the reason says what).
    pub rule: Option<String>,
    /// The step whose process it came from, when known.
    pub step: Option<u64>,
    /// How many times the same thing was refused (in the same step).
    pub count: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DenialKind {
    /// An HTTP request.
    Request,
    /// A DNS name that may not resolve.
    Dns,
    /// A connection refused before any request (a port or protocol no rule allows).
    Connection,
}

/// Frame types. Client to server: 0x00..0x0f; server to client: 0x10..
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum FrameType {
    /// Bytes for the command's stdin (its terminal's input with a tty).
    Stdin = 0x00,
    /// The client's stdin ended (empty payload).
    StdinEof = 0x01,
    /// New window size: cols and rows, big-endian u16 each.
    Resize = 0x02,
    /// Deliver a signal (one byte, its number) to the step's process group.
    Signal = 0x03,
    /// Kill the step and everything it started, as its timeout would (empty
    /// payload); the exit frame still follows, with the reason.
    Kill = 0x04,
    Stdout = 0x11,
    Stderr = 0x12,
    /// The step ended: an [`ExitReport`] as JSON. The last frame.
    Exit = 0x13,
    /// Airlock failed the step: `{"error": "..."}`. The last frame.
    Error = 0x14,
}

impl FrameType {
    fn from_byte(b: u8) -> Option<Self> {
        use FrameType::*;
        [
            Stdin, StdinEof, Resize, Signal, Kill, Stdout, Stderr, Exit, Error,
        ]
        .into_iter()
        .find(|t| *t as u8 == b)
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ProtocolError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("unknown frame type {0:#04x}")]
    UnknownFrame(u8),
    #[error("frame of {0} bytes is over the {MAX_FRAME}-byte limit")]
    FrameTooLong(usize),
    #[error("request longer than {MAX_REQUEST} bytes")]
    RequestTooLong,
    #[error("malformed message: {0}")]
    Json(#[from] serde_json::Error),
}

pub(crate) async fn write_frame(
    w: &mut (impl AsyncWrite + Unpin),
    kind: FrameType,
    payload: &[u8],
) -> Result<(), ProtocolError> {
    if payload.len() > MAX_FRAME {
        return Err(ProtocolError::FrameTooLong(payload.len()));
    }
    let mut head = [0u8; 5];
    head[0] = kind as u8;
    head[1..].copy_from_slice(&(payload.len() as u32).to_be_bytes());
    w.write_all(&head).await?;
    w.write_all(payload).await?;
    Ok(())
}

/// The next frame; None at a clean end of the stream.
pub(crate) async fn read_frame(
    r: &mut (impl AsyncRead + Unpin),
) -> Result<Option<(FrameType, Vec<u8>)>, ProtocolError> {
    let mut head = [0u8; 5];
    match r.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let kind = FrameType::from_byte(head[0]).ok_or(ProtocolError::UnknownFrame(head[0]))?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME {
        return Err(ProtocolError::FrameTooLong(len));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok(Some((kind, payload)))
}

/// One JSON line (requests and replies).
pub(crate) async fn write_line(
    w: &mut (impl AsyncWrite + Unpin),
    value: &impl Serialize,
) -> Result<(), ProtocolError> {
    let mut line = serde_json::to_vec(value)?;
    line.push(b'\n');
    w.write_all(&line).await?;
    w.flush().await?;
    Ok(())
}

/// One JSON line, at most [`MAX_REQUEST`] bytes, read byte by byte up to
/// its newline so that nothing after it (the frames) is consumed.
pub(crate) async fn read_line<T: serde::de::DeserializeOwned>(
    r: &mut (impl AsyncRead + Unpin),
) -> Result<Option<T>, ProtocolError> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match r.read(&mut byte).await? {
            0 if line.is_empty() => return Ok(None),
            0 => break,
            _ if byte[0] == b'\n' => break,
            _ => line.push(byte[0]),
        }
        if line.len() > MAX_REQUEST {
            return Err(ProtocolError::RequestTooLong);
        }
    }
    Ok(Some(serde_json::from_slice(&line)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_and_lines_round_trip() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_line(&mut a, &Request::Info).await.unwrap();
        write_frame(&mut a, FrameType::Stdout, b"hello")
            .await
            .unwrap();
        drop(a);
        let request: Request = read_line(&mut b).await.unwrap().unwrap();
        assert!(matches!(request, Request::Info));
        let (kind, data) = read_frame(&mut b).await.unwrap().unwrap();
        assert_eq!((kind, data.as_slice()), (FrameType::Stdout, &b"hello"[..]));
        assert!(read_frame(&mut b).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn bad_frames_are_errors_not_panics() {
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&[0x7f, 0, 0, 0, 0]).await.unwrap();
        assert!(matches!(
            read_frame(&mut b).await,
            Err(ProtocolError::UnknownFrame(0x7f))
        ));
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&[0x11, 0xff, 0xff, 0xff, 0xff]).await.unwrap();
        assert!(matches!(
            read_frame(&mut b).await,
            Err(ProtocolError::FrameTooLong(_))
        ));
        let exec: Request =
            serde_json::from_str(r#"{"op":"exec","argv":["true"],"label":"turn 3"}"#).unwrap();
        assert!(
            matches!(exec, Request::Exec(ExecRequest { ref label, .. }) if label.as_deref() == Some("turn 3"))
        );
    }
}
