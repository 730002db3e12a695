//! Pieces every long-running proxy front end shares (`airlock proxy`,
//! `airlock sidecar`): binding listeners with a useful error, the JSON-lines
//! event stream, placeholder notices, and policy reload.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use airlock_proxy::{EventSink, JsonLinesSink, Proxy};
use anyhow::Context;
use tokio::net::{TcpListener, UdpSocket};

use crate::{one_line, policy_file, secrets};

/// Clients of a standalone proxy need the dummy values to send; they are not secret.
pub fn announce_placeholders(credentials: &[airlock_proxy::ResolvedCredential]) {
    for cred in credentials {
        if let Some(ph) = &cred.placeholder {
            eprintln!(
                "airlock: placeholder {}={} (credential {}: swapped for the secret only on HTTPS requests to its hosts)",
                ph.variable, ph.dummy, cred.name
            );
        }
    }
}

/// Re-read the policy; on any error keep the one in force and say why.
/// Returns whether the new policy is now in force.
pub fn reload(proxy: &Proxy, path: &Path) -> bool {
    let loaded = policy_file::load(path).and_then(|policy| {
        let credentials = secrets::resolve_all(policy.credentials())?;
        Ok((policy, credentials))
    });
    let ok = match loaded {
        Ok((policy, credentials)) => {
            proxy.reload(policy, credentials);
            eprintln!("airlock: reloaded policy {}", path.display());
            true
        }
        Err(e) => {
            eprintln!(
                "airlock: policy reload failed, keeping the previous policy: {}",
                one_line(&e)
            );
            false
        }
    };
    proxy.metrics().policy_reloaded(ok);
    ok
}

pub async fn bind_tcp(addr: SocketAddr, flag: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("{flag} {addr}: cannot listen (is another process using it?)"))
}

/// A DNS listener: UDP and TCP on the same address. With port 0 the kernel
/// picks a free UDP port that may be taken for TCP, so try a few.
pub async fn bind_dns(addr: SocketAddr, flag: &str) -> anyhow::Result<(UdpSocket, TcpListener)> {
    let mut attempts_left = if addr.port() == 0 { 16 } else { 1 };
    loop {
        let udp = UdpSocket::bind(addr).await.with_context(|| {
            format!("{flag} {addr}: cannot listen on UDP (is another process using it?)")
        })?;
        let bound = udp.local_addr()?;
        attempts_left -= 1;
        match TcpListener::bind(bound).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if attempts_left == 0 => {
                return Err(e).with_context(|| {
                    format!("{flag} {bound}: cannot listen on TCP (is another process using it?)")
                });
            }
            Err(_) => continue,
        }
    }
}

/// The JSON-lines event stream: "-" for stdout, else a file appended to.
pub fn open_events(target: &str) -> anyhow::Result<Arc<dyn EventSink>> {
    if target == "-" {
        return Ok(Arc::new(JsonLinesSink::new(std::io::stdout())));
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(target)
        .with_context(|| format!("--events {target}: cannot open for appending"))?;
    Ok(Arc::new(JsonLinesSink::new(file)))
}
