//! `airlock sidecar --wait-ready ADDR`: block until a sidecar's `/readyz`
//! answers 200, for init ordering where the orchestrator cannot (an app
//! container's entrypoint, docker compose `depends_on` healthchecks).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::bail;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const POLL: Duration = Duration::from_millis(200);
const ONE_TRY: Duration = Duration::from_secs(2);

/// The status line's code of `GET /readyz`, or None if nothing answered.
async fn probe(addr: SocketAddr) -> Option<u16> {
    let attempt = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let request = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut head = [0u8; 32];
        let n = stream.read(&mut head).await.ok()?;
        let line = std::str::from_utf8(head.get(..n)?).ok()?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(ONE_TRY, attempt).await.ok().flatten()
}

/// Poll until ready or `timeout` passes.
pub(crate) async fn wait(addr: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if probe(addr).await == Some(200) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "the sidecar at {addr} was not ready within {}s; check its log, or raise --wait-timeout",
                timeout.as_secs_f64()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}
