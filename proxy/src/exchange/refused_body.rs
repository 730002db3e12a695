//! The body of a refused request, read for the record only. After an
//! incident, what an agent tried to send out is the first thing a responder
//! asks for; it is never forwarded.
//!
//! The read is bounded in bytes and in time, so that a huge or a stalled
//! body neither grows the proxy's memory nor holds the refusal: at most the
//! capture cap is kept (plus the longest secret form, read so that a form
//! at the cut is still scrubbed whole), and a client that stops sending gets
//! its refusal after [`REFUSED_BODY_WAIT`] with what it sent so far on
//! record, marked truncated. Every form of every credential's secret becomes
//! its `[secret:NAME]`, as in the responses the proxy scrubs.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::credentials::ScrubSet;
use crate::events::BodyCapture;

use super::RequestBody;

/// How long a refusal waits for the rest of a body it keeps for the record.
/// A client sends a body it has at once (hyper answers `Expect:
/// 100-continue` when the body is first read), so only one that stalls ever
/// waits this long.
pub(super) const REFUSED_BODY_WAIT: Duration = Duration::from_secs(2);

/// What the record of a refused body is made with.
pub(super) struct ForRecord<'a> {
    /// Bytes kept for the record.
    pub(super) cap: usize,
    /// Every form of every credential's secret; None when there are none.
    pub(super) scrub: Option<&'a ScrubSet>,
    /// The body's declared length (Content-Length), when it had one.
    pub(super) declared: Option<u64>,
}

/// The bytes read, whether they are the whole body, and how many arrived.
struct Read {
    bytes: Bytes,
    complete: bool,
    seen: u64,
}

/// Read what is left of a refused body and throw it away, for at most
/// [`REFUSED_BODY_WAIT`], while the 403 goes out. A client still sending
/// (it was told to go on by `100 Continue`) then reads its 403 and stops:
/// closing a connection with unread data makes the kernel reset it, and the
/// 403 could be lost on the way.
fn drain(mut body: Incoming) {
    tokio::spawn(async move {
        let discard = async { while let Some(Ok(_)) = body.frame().await {} };
        let _ = tokio::time::timeout(REFUSED_BODY_WAIT, discard).await;
    });
}

impl ForRecord<'_> {
    /// The body as the record keeps it; None when it went upstream (then
    /// the response's record has it).
    pub(super) async fn capture(&self, body: RequestBody) -> Option<BodyCapture> {
        let read = match body {
            RequestBody::Forwarded => return None,
            RequestBody::Buffered { bytes, complete } => Read {
                seen: bytes.len() as u64,
                bytes,
                complete,
            },
            RequestBody::Streamed(body) => self.read(body).await,
        };
        Some(self.keep(read))
    }

    /// Bytes past the cap that are still read: a form that starts before
    /// the cut ends within them, so it is replaced whole.
    fn limit(&self) -> usize {
        self.cap
            .saturating_add(self.scrub.map_or(0, ScrubSet::longest))
    }

    async fn read(&self, mut body: Incoming) -> Read {
        let limit = self.limit();
        let mut buf = BytesMut::new();
        let mut seen = 0u64;
        let read = async {
            while buf.len() < limit {
                match body.frame().await {
                    None => return true,
                    // The client went away or broke the framing: what came is kept.
                    Some(Err(_)) => return false,
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            seen += data.len() as u64;
                            let room = limit - buf.len();
                            buf.extend_from_slice(&data[..room.min(data.len())]);
                        }
                    }
                }
            }
            body.is_end_stream() && seen == buf.len() as u64
        };
        let complete = tokio::time::timeout(REFUSED_BODY_WAIT, read)
            .await
            .unwrap_or(false);
        if !body.is_end_stream() {
            drain(body);
        }
        Read {
            bytes: buf.freeze(),
            complete,
            seen,
        }
    }

    fn keep(&self, read: Read) -> BodyCapture {
        let raw = &read.bytes[..read.bytes.len().min(self.limit())];
        let mut captured = match self.scrub {
            Some(set) => set.scrub(raw).into_owned(),
            None => raw.to_vec(),
        };
        let mut truncated = !read.complete || read.bytes.len() > raw.len();
        if captured.len() > self.cap {
            captured.truncate(self.cap);
            truncated = true;
        }
        BodyCapture {
            bytes: self.declared.unwrap_or(0).max(read.seen),
            captured,
            truncated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "sk-cut-by-the-cap-91c2";

    fn set() -> ScrubSet {
        ScrubSet::new([(SECRET, "[secret:api]")]).unwrap().unwrap()
    }

    fn read(bytes: &[u8], complete: bool) -> Read {
        Read {
            bytes: Bytes::copy_from_slice(bytes),
            complete,
            seen: bytes.len() as u64,
        }
    }

    #[test]
    fn a_secret_cut_by_the_cap_is_scrubbed_whole_not_half_kept() {
        let set = set();
        let for_record = ForRecord {
            cap: 16,
            scrub: Some(&set),
            declared: None,
        };
        // The secret starts 6 bytes before the cap: none of it may be kept.
        let body = format!("0123456789{SECRET}{}", "x".repeat(200));
        let kept = for_record.keep(read(body.as_bytes(), true));
        assert_eq!(kept.captured, b"0123456789[secre");
        assert!(kept.truncated);
        assert_eq!(kept.bytes, body.len() as u64);
        // Read only as far as the cap plus the longest form, it is still whole.
        let limit = for_record.limit();
        let kept = for_record.keep(read(&body.as_bytes()[..limit], false));
        assert_eq!(kept.captured, b"0123456789[secre");
    }

    #[test]
    fn a_body_past_the_cap_is_marked_truncated_with_its_declared_length() {
        let for_record = ForRecord {
            cap: 4,
            scrub: None,
            declared: Some(1_000_000),
        };
        let kept = for_record.keep(read(b"abcdefgh", false));
        assert_eq!(kept.captured, b"abcd");
        assert!(kept.truncated);
        assert_eq!(kept.bytes, 1_000_000);
        // A whole body under the cap is kept as it is.
        let for_record = ForRecord {
            cap: 64,
            scrub: None,
            declared: Some(3),
        };
        let kept = for_record.keep(read(b"abc", true));
        assert_eq!(
            (kept.captured.as_slice(), kept.truncated, kept.bytes),
            (&b"abc"[..], false, 3)
        );
    }
}
