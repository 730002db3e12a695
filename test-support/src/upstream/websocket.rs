//! A WebSocket echo server (RFC 6455) behind the upstream's `/ws`.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use super::routes::TestBody;

/// Answers the handshake with `101`, then echoes every text and binary
/// message until the client closes.
pub(super) fn echo(req: &mut Request<Incoming>) -> Response<TestBody> {
    use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
    let key = req
        .headers()
        .get("sec-websocket-key")
        .map(|k| derive_accept_key(k.as_bytes()))
        .unwrap_or_default();
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        use futures_util::{SinkExt, StreamExt};
        let Ok(upgraded) = upgrade.await else { return };
        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            tokio_tungstenite::tungstenite::protocol::Role::Server,
            None,
        )
        .await;
        while let Some(Ok(msg)) = ws.next().await {
            if msg.is_text() || msg.is_binary() {
                if ws.send(msg).await.is_err() {
                    return;
                }
            } else if msg.is_close() {
                return;
            }
        }
    });
    Response::builder()
        .status(101)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", key)
        .body(Full::new(Bytes::new()).boxed())
        .unwrap()
}
