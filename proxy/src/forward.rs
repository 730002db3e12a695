//! The explicit forward proxy front door (`HTTP_PROXY`/`HTTPS_PROXY` clients):
//! absolute-form plain HTTP requests, and CONNECT tunnels that are then
//! handled like any captured connection.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};

use crate::accept::accept_loop;
use crate::body::{ProxyBody, empty};
use crate::connection::{self, Origin};
use crate::engine::{ConnInfo, Engine, HEADER_READ_TIMEOUT, MAX_HEADER_BYTES};
use crate::events::FrontDoor;
use crate::exchange;
use crate::refusal::Refusal;
use crate::target::parse_authority;

pub(crate) async fn serve(engine: Arc<Engine>, listener: TcpListener) -> std::io::Result<()> {
    let workers = engine.workers.clone();
    accept_loop(listener, Some(workers), move |stream, client| {
        handle_client(engine.clone(), stream, client)
    })
    .await
}

async fn handle_client(engine: Arc<Engine>, stream: TcpStream, client: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |req| front(engine.clone(), client, req));
    let result = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES)
        // A client may send its request and shut down its write side
        // (shutdown(2) SHUT_WR); it still gets its answer.
        .half_close(true)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(e) = result {
        tracing::debug!(%client, "client connection ended: {e}");
    }
}

async fn front(
    engine: Arc<Engine>,
    client: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    if req.method() != Method::CONNECT {
        let conn = Arc::new(ConnInfo {
            id: engine.next_conn_id(),
            exec: engine.events.attribute(client, false),
            client,
            front: FrontDoor::Explicit,
            scheme: airlock_policy::Scheme::Http,
            bound: None,
            refusal: None,
        });
        return exchange::handle(engine, conn, req).await;
    }
    // CONNECT's target is in authority-form and must carry a port (RFC 9110 §9.3.6).
    let authority = req.uri().authority().map(|a| a.as_str().to_owned());
    let target = match authority.as_deref().map(|a| (a, parse_authority(a, 0))) {
        Some((_, Ok(t)))
            if t.port != 0 && authority.as_deref().is_some_and(|a| a.contains(':')) =>
        {
            t
        }
        _ => {
            let shown = authority.unwrap_or_default();
            let refusal = Refusal::BadRequest(format!("CONNECT needs host:port, got {shown:?}"));
            let rules = engine.rules.load();
            return Ok(refusal.response("CONNECT", &shown, &rules.policy, None));
        }
    };
    let origin = Origin::new(&engine, FrontDoor::Explicit, client, None);
    let plan = connection::decide(&engine, &origin, &target).await;
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => {
                connection::serve(engine, origin, target, plan, TokioIo::new(upgraded)).await;
            }
            Err(e) => tracing::debug!("CONNECT upgrade failed: {e}"),
        }
    });
    let mut ok = Response::new(empty());
    *ok.status_mut() = StatusCode::OK;
    Ok(ok)
}
