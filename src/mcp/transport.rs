//! The MCP transport: stdin and stdout, the end of stdin told at once.
//! The end of stdin is the client going away (how a stdio client shuts a
//! server down). rmcp would first give the tool calls in flight up to five
//! seconds to answer, but nobody will read their answers, and the session
//! they run in is to be stopped now.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::oneshot;

/// stdin, with whoever holds the receiver told when it ends (or fails).
pub struct Stdin {
    inner: tokio::io::Stdin,
    ended: Option<oneshot::Sender<()>>,
}

pub fn stdio() -> ((Stdin, tokio::io::Stdout), oneshot::Receiver<()>) {
    let (ended, ended_rx) = oneshot::channel();
    let stdin = Stdin {
        inner: tokio::io::stdin(),
        ended: Some(ended),
    };
    ((stdin, tokio::io::stdout()), ended_rx)
}

impl AsyncRead for Stdin {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        // A read into no room reads nothing without meaning the end.
        let room = buf.remaining() > 0;
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let ended = match &polled {
            Poll::Ready(Ok(())) => room && buf.filled().len() == before,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended && let Some(ended) = self.ended.take() {
            let _ = ended.send(());
        }
        polled
    }
}
