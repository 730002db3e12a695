//! The bounded body prefix a body constraint is checked against.

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// Read at most `limit` bytes of a body; `complete` is false when there was more.
pub(super) async fn read_prefix(body: Incoming, limit: usize) -> Result<(Bytes, bool), String> {
    let mut body = body;
    let mut buf = BytesMut::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| e.to_string())?;
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
                if buf.len() > limit {
                    return Ok::<bool, String>(false);
                }
            }
        }
        Ok(true)
    };
    let complete = tokio::time::timeout(crate::engine::BODY_READ_TIMEOUT, read)
        .await
        .map_err(|_| "timed out waiting for the body".to_owned())??;
    Ok((buf.freeze(), complete))
}
