//! The bounded body prefix a body constraint is checked against.

use bytes::BytesMut;
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// Why the body prefix could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum PrefixError {
    #[error("{0}")]
    Body(#[source] hyper::Error),
    #[error("timed out waiting for the body")]
    TimedOut,
}

/// Read at most `limit` bytes of a body into `buf`; false when there was
/// more. On an error `buf` keeps what arrived (for the refusal's record).
pub(super) async fn read_prefix(
    body: Incoming,
    limit: usize,
    buf: &mut BytesMut,
) -> Result<bool, PrefixError> {
    let mut body = body;
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(PrefixError::Body)?;
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
                if buf.len() > limit {
                    return Ok::<bool, PrefixError>(false);
                }
            }
        }
        Ok(true)
    };
    tokio::time::timeout(crate::engine::BODY_READ_TIMEOUT, read)
        .await
        .map_err(|_| PrefixError::TimedOut)?
}
