//! Accepting connections without letting one failure stop the listener.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// Accept forever, spawning `handle` per connection. Transient failures
/// (EMFILE, ECONNABORTED, ...) are logged and retried after a short pause, so
/// running out of file descriptors slows the proxy down instead of killing it.
pub async fn accept_loop<F, Fut>(listener: TcpListener, handle: F) -> std::io::Result<()>
where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, client)) => {
                tokio::spawn(handle(stream, client));
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
