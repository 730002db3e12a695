//! A server on the host's loopback for the upstreams tests write, honest or
//! hostile: the accept loop (plain TCP or TLS) runs on a task of its own,
//! hands every connection to the test's code on a task of its own, counts
//! the connections, and stops when the server is dropped. What a server
//! says on a connection is the test's business.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Request;
use hyper::body::{Body, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;

/// A listener on `127.0.0.1`, port chosen by the kernel, serving until dropped.
#[derive(Debug)]
pub struct TestServer {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// Plain TCP: `serve` gets each accepted connection, on a task of its own.
    pub async fn tcp<F, Fut>(serve: F) -> Self
    where
        F: Fn(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted: Arc<AtomicUsize> = Arc::default();
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream));
            }
        });
        Self {
            addr,
            accepted,
            task,
        }
    }

    /// TLS with `config`: each connection's handshake, then `serve` with the
    /// TLS stream. A connection whose handshake fails is dropped.
    pub async fn tls<F, Fut>(config: ServerConfig, serve: F) -> Self
    where
        F: Fn(TlsStream<TcpStream>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let serve = Arc::new(serve);
        Self::tcp(move |tcp| {
            let (acceptor, serve) = (acceptor.clone(), serve.clone());
            async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    serve(tls).await;
                }
            }
        })
        .await
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// How many TCP connections reached this server.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Serves HTTP/1.1 or HTTP/2 (whichever the client speaks, with upgrades)
/// on `io` until the connection ends, answering each request with `handle`.
pub async fn serve_http<I, F, Fut, B>(io: I, handle: F)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<hyper::Response<B>, Infallible>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = hyper::service::service_fn(handle);
    let _ = auto::Builder::new(TokioExecutor::new())
        .serve_connection_with_upgrades(TokioIo::new(io), service)
        .await;
}

/// The whole body of a request (empty if it broke off).
pub async fn read_body(body: Incoming) -> Bytes {
    body.collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default()
}

/// A UDP bait on `socket`: it counts the datagrams that reach it and
/// answers each with "bypassed", so a datagram that got past a guard is
/// seen by both ends.
pub fn udp_bait(socket: std::net::UdpSocket) -> Arc<AtomicUsize> {
    socket.set_nonblocking(true).expect("a non-blocking socket");
    let socket = tokio::net::UdpSocket::from_std(socket).expect("a tokio socket");
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((_, from)) = socket.recv_from(&mut buf).await {
            c.fetch_add(1, Ordering::SeqCst);
            let _ = socket.send_to(b"bypassed", from).await;
        }
    });
    count
}

/// A bait on `listener`: it counts the connections that reach it and
/// answers each with a 200 saying "bypassed the sidecar", so a connection
/// that got past a guard would succeed, and show it.
pub fn bait(listener: TcpListener) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let _ = tokio::io::AsyncWriteExt::write_all(
                &mut s,
                b"HTTP/1.0 200 OK\r\n\r\nbypassed the sidecar\n",
            )
            .await;
        }
    });
    count
}
