//! The transparent front door: connections redirected here by nftables from a
//! sandbox or a sidecar's network namespace. The destination the client
//! dialled comes from conntrack (SO_ORIGINAL_DST, see netfilter's
//! `nf_conntrack` and ip(7)); a synthetic address from Airlock's DNS names
//! the host, any other address stands for itself.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;

use airlock_policy::Host;
use nix::sys::socket::{getsockopt, sockopt};
use tokio::net::{TcpListener, TcpStream};

use airlock_record::TcpConnection;

use crate::accept::accept_loop;
use crate::connection::{self, Origin};
use crate::engine::Engine;
use crate::events::{Event, FrontDoor, Handling, TimestampUs, Verdict};
use crate::synthetic::{self, SyntheticAddresses};
use crate::target::Target;

pub(crate) async fn serve(engine: Arc<Engine>, listener: TcpListener) -> std::io::Result<()> {
    let own = listener.local_addr()?;
    let workers = engine.workers.clone();
    accept_loop(listener, Some(workers), move |stream, client| {
        handle(engine.clone(), stream, client, own)
    })
    .await
}

async fn handle(engine: Arc<Engine>, stream: TcpStream, client: SocketAddr, own: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let Some(dst) = original_destination(&stream) else {
        tracing::warn!(%client, "connection reached the transparent listener without a redirect; closed");
        return;
    };
    // Dialling the listener itself would loop through the proxy forever.
    if dst == own {
        tracing::warn!(%client, "connection to the proxy's own listener; closed");
        return;
    }
    let host = if SyntheticAddresses::in_range(dst.ip()) {
        match engine.synthetic.name_for(dst.ip()) {
            Some(name) => name,
            None => {
                refuse_unmapped(&engine, client, dst);
                return;
            }
        }
    } else {
        match Host::parse(&dst.ip().to_string()) {
            Ok(h) => h,
            Err(_) => return,
        }
    };
    let target = Target {
        host,
        port: dst.port(),
    };
    let origin = Origin::new(&engine, FrontDoor::Transparent, client, Some(dst));
    let plan = connection::decide(&engine, &origin, &target).await;
    connection::serve(engine, origin, target, plan, stream).await;
}

/// A synthetic address that names no host (never handed out, or evicted from
/// the bounded map) has nothing a policy could decide on: recorded and closed.
fn refuse_unmapped(engine: &Engine, client: SocketAddr, dst: SocketAddr) {
    let reason = format!(
        "{} was never handed out by Airlock's DNS, or was evicted from its map of the {} most recently used names; resolve the name again",
        dst.ip(),
        synthetic::CAPACITY
    );
    tracing::debug!(%client, %dst, "{reason}; closed");
    let origin = Origin::new(engine, FrontDoor::Transparent, client, Some(dst));
    engine.record_lossy(Event::Connection {
        ts: TimestampUs::now(),
        conn: origin.id,
        front: origin.front,
        client,
        target: dst.to_string(),
        handling: Handling::Refused,
        connection: Box::new(TcpConnection {
            exec_id: origin.exec,
            connection: Some(origin.id),
            dst: dst.to_string(),
            host: Some(dst.ip().to_string()),
            port: dst.port(),
            decision: Verdict::Deny,
            rule: None,
            reason: Some(reason),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: None,
        }),
    });
}

/// The pre-NAT destination of a redirected connection.
fn original_destination(stream: &TcpStream) -> Option<SocketAddr> {
    if let Ok(v4) = getsockopt(stream, sockopt::OriginalDst) {
        let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
        return Some(SocketAddr::V4(SocketAddrV4::new(
            ip,
            u16::from_be(v4.sin_port),
        )));
    }
    if let Ok(v6) = getsockopt(stream, sockopt::Ip6tOriginalDst) {
        let ip = Ipv6Addr::from(v6.sin6_addr.s6_addr);
        return Some(SocketAddr::V6(SocketAddrV6::new(
            ip,
            u16::from_be(v6.sin6_port),
            0,
            0,
        )));
    }
    None
}
