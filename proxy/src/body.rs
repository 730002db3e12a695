//! Bodies as they stream through the proxy.
//!
//! Bodies are never buffered whole (except the bounded prefix a body
//! constraint needs): each frame is passed on as soon as it arrives, counted,
//! the first bytes kept for the record, and — on responses to requests that
//! carried a credential — scrubbed of secrets, trailers included. When the stream ends (or is
//! abandoned) the tap runs its completion callback exactly once.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;

use crate::credentials::Scrubber;
use crate::events::BodyCapture;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The one body type the proxy sends in either direction.
pub(crate) type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

pub(crate) fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub(crate) fn empty() -> ProxyBody {
    full(Bytes::new())
}

/// Shared record of what crossed, readable while the body still streams.
#[derive(Debug, Default, Clone)]
pub(crate) struct CaptureHandle(Arc<Mutex<BodyCapture>>);

impl CaptureHandle {
    pub(crate) fn snapshot(&self) -> BodyCapture {
        self.0.lock().map(|c| c.clone()).unwrap_or_default()
    }

    fn record(&self, data: &[u8], cap: usize) {
        if let Ok(mut c) = self.0.lock() {
            c.bytes += data.len() as u64;
            let room = cap.saturating_sub(c.captured.len());
            c.captured.extend_from_slice(&data[..room.min(data.len())]);
            if data.len() > room {
                c.truncated = true;
            }
        }
    }
}

type OnEnd = Box<dyn FnOnce(Option<String>) + Send>;

pub(crate) struct Tap<B> {
    inner: B,
    capture: CaptureHandle,
    cap: usize,
    scrubber: Option<Scrubber>,
    /// Trailers that wait while the scrubber's held-back tail goes out first
    /// (no data may follow trailers).
    trailers: Option<Frame<Bytes>>,
    on_end: Option<OnEnd>,
    done: bool,
}

impl<B> Tap<B> {
    pub(crate) fn new(inner: B, capture: CaptureHandle, cap: usize) -> Self {
        Self {
            inner,
            capture,
            cap,
            scrubber: None,
            trailers: None,
            on_end: None,
            done: false,
        }
    }

    pub(crate) fn scrub(mut self, scrubber: Scrubber) -> Self {
        self.scrubber = Some(scrubber);
        self
    }

    /// Called once with `None` at a clean end, or the error / "aborted".
    pub(crate) fn on_end(mut self, f: impl FnOnce(Option<String>) + Send + 'static) -> Self {
        self.on_end = Some(Box::new(f));
        self
    }

    fn end(&mut self, error: Option<String>) {
        self.done = true;
        if let Some(f) = self.on_end.take() {
            f(error);
        }
    }

    fn pass(&mut self, data: Bytes) -> Bytes {
        let data = match &mut self.scrubber {
            Some(s) => s.push_bytes(data),
            None => data,
        };
        self.capture.record(&data, self.cap);
        data
    }

    /// Trailers pass the scrubber like headers. Whatever it held back goes
    /// out first, as data: returns that data frame, the trailers wait.
    fn pass_trailers(&mut self, frame: Frame<Bytes>) -> Frame<Bytes> {
        let Some(scrubber) = &mut self.scrubber else {
            return frame;
        };
        let frame = match frame.into_trailers() {
            Ok(mut trailers) => {
                scrubber.trailers(&mut trailers);
                Frame::trailers(trailers)
            }
            Err(other) => other,
        };
        let tail = scrubber.finish();
        if tail.is_empty() {
            return frame;
        }
        self.capture.record(&tail, self.cap);
        self.trailers = Some(frame);
        Frame::data(Bytes::from(tail))
    }
}

impl<B> Body for Tap<B>
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
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(trailers) = this.trailers.take() {
            this.end(None);
            return Poll::Ready(Some(Ok(trailers)));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(frame))) => {
                let frame = match frame.into_data() {
                    Ok(data) => Frame::data(this.pass(data)),
                    Err(frame) => this.pass_trailers(frame),
                };
                // hyper stops polling once the body says it has ended (e.g. a
                // Content-Length reached), so the end is recorded here too.
                // Trailers are always the last frame (RFC 9110 section 6.5),
                // and hyper does not poll after sending them.
                if frame.is_trailers() || (this.scrubber.is_none() && this.inner.is_end_stream()) {
                    this.end(None);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                let e: BoxError = e.into();
                this.end(Some(e.to_string()));
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                let tail = this.scrubber.as_mut().map(Scrubber::finish);
                if let Some(tail) = &tail {
                    this.capture.record(tail, this.cap);
                }
                this.end(None);
                match tail {
                    Some(tail) if !tail.is_empty() => {
                        Poll::Ready(Some(Ok(Frame::data(Bytes::from(tail)))))
                    }
                    _ => Poll::Ready(None),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || (self.scrubber.is_none() && self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        // Scrubbing may change the length.
        if self.scrubber.is_some() {
            SizeHint::default()
        } else {
            self.inner.size_hint()
        }
    }
}

impl<B> Drop for Tap<B> {
    fn drop(&mut self) {
        if self.on_end.is_some() {
            self.end(Some("aborted before the end of the body".into()));
        }
    }
}

/// Why [`IdleLimit`] ended a body; typed so the 502 can say it plainly.
#[derive(Debug, thiserror::Error)]
#[error("the client sent no request body data for {} s", .0.as_secs())]
pub(crate) struct BodyStalled(pub Duration);

/// A body that fails when its sender goes quiet for `limit`: a client that
/// starts a request body and then stalls would otherwise hold its upstream
/// request (and a stream of the shared upstream connection) open forever.
/// The error aborts the upstream request; the client gets a 502 saying why.
pub(crate) struct IdleLimit<B> {
    inner: B,
    limit: Duration,
    /// Made the first time the body waits: most bodies (every GET's) never do,
    /// and a timer per request is an allocation and a clock read.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// True while we wait on the client. The clock starts when waiting
    /// starts, so time the upstream spent not asking for more (flow
    /// control) never counts against the client.
    waiting: bool,
    stalled: Arc<AtomicBool>,
}

impl<B> IdleLimit<B> {
    /// `stalled` is set when the limit ends the body: the upstream client
    /// reports that only as a failed request, so the caller checks it to say why.
    pub(crate) fn new(inner: B, limit: Duration, stalled: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            limit,
            deadline: None,
            waiting: false,
            stalled,
        }
    }
}

impl<B> Body for IdleLimit<B>
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
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.waiting = false;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let started_waiting = !std::mem::replace(&mut this.waiting, true);
                let limit = this.limit;
                let deadline = this
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if started_waiting {
                    deadline.as_mut().reset(tokio::time::Instant::now() + limit);
                }
                match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.stalled.store(true, Ordering::Release);
                        Poll::Ready(Some(Err(Box::new(BodyStalled(limit)))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request body fed by the test, like a client sending at its own pace.
    struct ClientBody(tokio::sync::mpsc::Receiver<Bytes>);

    impl Body for ClientBody {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_limit_counts_only_time_spent_waiting_on_the_client() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let stalled = Arc::new(AtomicBool::new(false));
        let mut body = IdleLimit::new(ClientBody(rx), Duration::from_secs(30), stalled.clone());
        tx.send(Bytes::from_static(b"first")).await.unwrap();
        assert!(body.frame().await.unwrap().is_ok());

        // The upstream asks for nothing for a minute (flow control), then the
        // client needs 20 s for its next bytes: not idle for 30 s of waiting.
        tokio::time::sleep(Duration::from_secs(60)).await;
        let sender = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(20)).await;
            sender.send(Bytes::from_static(b"second")).await.unwrap();
        });
        assert!(body.frame().await.unwrap().is_ok());
        assert!(!stalled.load(Ordering::Acquire));

        // Then it goes quiet (still connected): 30 s later the body fails.
        let started = tokio::time::Instant::now();
        let error = body.frame().await.unwrap().unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert!(error.to_string().contains("no request body data for 30 s"));
        assert!(stalled.load(Ordering::Acquire));
        drop(tx);
    }
}
