//! hickory's Tokio runtime with marked sockets, so the proxy's own DNS lookups
//! leave a sidecar's network namespace instead of being redirected back to
//! Airlock's resolver (which would answer with a synthetic address). The mark
//! is the same `SO_MARK` as for upstream connections, see [`super::connect`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use hickory_resolver::net::runtime::iocompat::AsyncIoTokioAsStd;
use hickory_resolver::net::runtime::{RuntimeProvider, TokioHandle, TokioRuntimeProvider};
use nix::sys::socket::{setsockopt, sockopt};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};

use super::connect::CONNECT_TIMEOUT;

/// [`TokioRuntimeProvider`] whose sockets carry `mark` (when set).
#[derive(Clone, Default)]
pub(crate) struct MarkedRuntime {
    inner: TokioRuntimeProvider,
    mark: Option<u32>,
}

impl MarkedRuntime {
    pub(super) fn new(mark: Option<u32>) -> Self {
        Self {
            inner: TokioRuntimeProvider::default(),
            mark,
        }
    }
}

fn apply_mark<F: std::os::fd::AsFd>(fd: &F, mark: Option<u32>) -> io::Result<()> {
    match mark {
        Some(mark) => setsockopt(fd, sockopt::Mark, &mark).map_err(io::Error::from),
        None => Ok(()),
    }
}

impl RuntimeProvider for MarkedRuntime {
    type Handle = TokioHandle;
    type Timer = <TokioRuntimeProvider as RuntimeProvider>::Timer;
    type Udp = UdpSocket;
    type Tcp = AsyncIoTokioAsStd<TcpStream>;

    fn create_handle(&self) -> Self::Handle {
        self.inner.create_handle()
    }

    fn connect_tcp(
        &self,
        server_addr: SocketAddr,
        bind_addr: Option<SocketAddr>,
        timeout: Option<Duration>,
    ) -> Pin<Box<dyn Send + Future<Output = io::Result<Self::Tcp>>>> {
        let mark = self.mark;
        Box::pin(async move {
            let socket = match server_addr {
                SocketAddr::V4(_) => TcpSocket::new_v4(),
                SocketAddr::V6(_) => TcpSocket::new_v6(),
            }?;
            apply_mark(&socket, mark)?;
            if let Some(bind) = bind_addr {
                socket.bind(bind)?;
            }
            socket.set_nodelay(true)?;
            let wait = timeout.unwrap_or(CONNECT_TIMEOUT);
            match tokio::time::timeout(wait, socket.connect(server_addr)).await {
                Ok(stream) => stream.map(AsyncIoTokioAsStd),
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("DNS over TCP to {server_addr}: connect timed out"),
                )),
            }
        })
    }

    fn bind_udp(
        &self,
        local_addr: SocketAddr,
        _server_addr: SocketAddr,
    ) -> Pin<Box<dyn Send + Future<Output = io::Result<Self::Udp>>>> {
        let mark = self.mark;
        Box::pin(async move {
            let socket = UdpSocket::bind(local_addr).await?;
            apply_mark(&socket, mark)?;
            Ok(socket)
        })
    }
}
