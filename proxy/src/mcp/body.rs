//! The body of an MCP server's answer, read message by message on its way
//! to the client: a JSON body whole (bounded), an SSE stream event by
//! event. What the filter changes is what the client gets.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::AnswerContext;
use super::sse::{SseSplitter, rebuild};
use crate::body::BoxError;

/// Largest JSON answer, or SSE event, the filter reads: beyond it the
/// answer is cut off (it could hide a tool list), never passed unread.
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// How the answer is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnswerMode {
    /// `application/json`: one message or a batch.
    Json,
    /// `text/event-stream`: one message per event.
    Sse,
}

#[derive(Debug, thiserror::Error)]
#[error("an MCP answer over {MAX_MESSAGE_BYTES} bytes cannot be read, so it is cut off")]
struct TooLarge;

pub(crate) struct McpAnswerBody<B> {
    inner: B,
    mode: AnswerMode,
    cx: Arc<AnswerContext>,
    json: Vec<u8>,
    sse: SseSplitter,
    out: VecDeque<Frame<Bytes>>,
    trailers: Option<Frame<Bytes>>,
    done: bool,
    /// Airlock's own answers to refused POSTs (the older transport reads
    /// answers on this stream); open once the stream named its endpoint.
    injected: Option<UnboundedReceiver<Vec<u8>>>,
}

impl<B> McpAnswerBody<B> {
    pub(crate) fn new(inner: B, mode: AnswerMode, cx: Arc<AnswerContext>) -> Self {
        Self {
            inner,
            mode,
            cx,
            json: Vec::new(),
            sse: SseSplitter::default(),
            out: VecDeque::new(),
            trailers: None,
            done: false,
            injected: None,
        }
    }

    fn data(&mut self, bytes: &[u8]) -> Result<(), BoxError> {
        match self.mode {
            AnswerMode::Json => {
                self.json.extend_from_slice(bytes);
                if self.json.len() > MAX_MESSAGE_BYTES {
                    return Err(TooLarge.into());
                }
            }
            AnswerMode::Sse => {
                self.sse.push(bytes);
                while let Some((raw, event)) = self.sse.next_event() {
                    if self.injected.is_none()
                        && event.other_lines.iter().any(|l| l == b"event: endpoint")
                        && let Some(endpoint) = event.data.as_deref().and_then(endpoint_of)
                    {
                        let (to, from) = unbounded_channel();
                        self.cx
                            .engine
                            .mcp_lists
                            .stream_opened(&self.cx.server_key(), endpoint, to);
                        self.injected = Some(from);
                    }
                    let replaced = event
                        .data
                        .as_deref()
                        .and_then(|data| self.cx.message(data))
                        .map(|data| rebuild(&event, &data));
                    self.out
                        .push_back(Frame::data(Bytes::from(replaced.unwrap_or(raw))));
                }
                if self.sse.buffered() > MAX_MESSAGE_BYTES {
                    return Err(TooLarge.into());
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self) {
        match self.mode {
            AnswerMode::Json => {
                let json = std::mem::take(&mut self.json);
                if !json.is_empty() {
                    let body = self.cx.message(&json).unwrap_or(json);
                    self.out.push_back(Frame::data(Bytes::from(body)));
                }
            }
            // An event the stream did not finish is never dispatched by a
            // client (WHATWG HTML §9.2.6), so it is dropped unread.
            AnswerMode::Sse => drop(self.sse.rest()),
        }
        if let Some(trailers) = self.trailers.take() {
            self.out.push_back(trailers);
        }
    }
}

impl<B> Body for McpAnswerBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(frame) = this.out.pop_front() {
                return Poll::Ready(Some(Ok(frame)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(injected) = &mut this.injected
                && let Poll::Ready(Some(message)) = injected.poll_recv(cx)
            {
                let mut event = b"event: message\ndata: ".to_vec();
                event.extend_from_slice(&message);
                event.extend_from_slice(b"\n\n");
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(event)))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.done = true;
                    this.finish();
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e.into())));
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        if let Err(e) = this.data(&data) {
                            this.done = true;
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                    Err(frame) => this.trailers = Some(frame),
                },
            }
        }
    }
}

/// The path and query an `endpoint` event names (relative, or absolute on
/// the same server).
fn endpoint_of(data: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(data).ok()?.trim();
    let path = match text.find("://") {
        Some(at) => {
            let rest = &text[at + 3..];
            &rest[rest.find('/')?..]
        }
        None => text,
    };
    path.starts_with('/').then(|| path.to_owned())
}
