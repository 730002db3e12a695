//! The MCP transport: stdin and stdout, the client's going away told at
//! once. The end of stdin is the client going away (how a stdio client
//! shuts a server down), and so is a stdout nobody reads any more (a broken
//! pipe): rmcp would log an error for every answer it could not write, and
//! would first give the tool calls in flight up to five seconds to answer,
//! but nobody will read their answers, and the session they run in is to be
//! stopped now.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

/// Tells the receiver, once, that the client has gone.
#[derive(Clone)]
struct Gone(Arc<Mutex<Option<oneshot::Sender<()>>>>);

impl Gone {
    fn tell(&self) {
        let sender = self.0.lock().map(|mut s| s.take()).unwrap_or_default();
        if let Some(sender) = sender {
            let _ = sender.send(());
        }
    }
}

/// stdin, with whoever holds the receiver told when it ends (or fails).
pub(super) struct Stdin {
    inner: tokio::io::Stdin,
    gone: Gone,
}

/// stdout, with whoever holds the receiver told when nobody reads it.
pub(super) struct Stdout {
    inner: tokio::io::Stdout,
    gone: Gone,
}

pub(super) fn stdio() -> ((Stdin, Stdout), oneshot::Receiver<()>) {
    let (ended, ended_rx) = oneshot::channel();
    let gone = Gone(Arc::new(Mutex::new(Some(ended))));
    let stdin = Stdin {
        inner: tokio::io::stdin(),
        gone: gone.clone(),
    };
    let stdout = Stdout {
        inner: tokio::io::stdout(),
        gone,
    };
    ((stdin, stdout), ended_rx)
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
        if ended {
            self.gone.tell();
        }
        polled
    }
}

impl Stdout {
    /// A broken pipe is the client gone: told, and what was to be written
    /// dropped as written, so that nothing reports it as a failure.
    fn gone_if_broken<T>(
        &self,
        polled: Poll<std::io::Result<T>>,
        written: T,
    ) -> Poll<std::io::Result<T>> {
        match polled {
            Poll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.gone.tell();
                Poll::Ready(Ok(written))
            }
            other => other,
        }
    }
}

impl AsyncWrite for Stdout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.gone_if_broken(polled, buf.len())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.gone_if_broken(polled, ())
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.gone_if_broken(polled, ())
    }
}
