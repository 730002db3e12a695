//! Accepting connections without letting one failure stop the listener.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use crate::workers::Workers;

/// Accept forever, running `handle` per connection: on the next of `workers`
/// when given, else on the caller's runtime. Transient failures (EMFILE,
/// ECONNABORTED, ...) are logged and retried after a short pause, so running
/// out of file descriptors slows the proxy down instead of killing it.
pub(crate) async fn accept_loop<F, Fut>(
    listener: TcpListener,
    workers: Option<Arc<Workers>>,
    handle: F,
) -> std::io::Result<()>
where
    F: Fn(TcpStream, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, client)) => match &workers {
                Some(workers) => hand_over(workers, stream, client, handle.clone()),
                None => drop(tokio::spawn(handle(stream, client))),
            },
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Move the connection to a worker: its socket is registered with that
/// worker's reactor, so its readiness never wakes this thread.
fn hand_over<F, Fut>(workers: &Workers, stream: TcpStream, client: SocketAddr, handle: F)
where
    F: Fn(TcpStream, SocketAddr) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let stream = match stream.into_std() {
        Ok(stream) => stream,
        Err(e) => {
            tracing::warn!(%client, "cannot hand the connection to a worker: {e}");
            return;
        }
    };
    workers.spawn(async move {
        match TcpStream::from_std(stream) {
            Ok(stream) => handle(stream, client).await,
            Err(e) => {
                tracing::warn!(%client, "cannot register the connection with its worker: {e}")
            }
        }
    });
}
