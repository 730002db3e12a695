//! The resolver sandboxed clients talk to.
//!
//! A name the policy allows gets a synthetic IPv4 address from 198.18.0.0/15
//! (RFC 2544's benchmarking range, never routed) that maps back to the name, so
//! every captured connection names its host and a connection to an address
//! that never came from here is just a literal address to the policy. Every
//! other name gets NXDOMAIN and is forwarded nowhere: nothing leaves through
//! query names. Only A queries get addresses; AAAA and other types of allowed
//! names get an empty answer, since the sandbox has no IPv6 and no other use.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_policy::Host;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::engine::Engine;
use crate::events::{Event, TimestampUs, Verdict};

const SYNTHETIC_BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);
const SYNTHETIC_SIZE: u32 = 1 << 17; // a /15
/// Answers are stable for the session; a short TTL just keeps clients honest.
const TTL: u32 = 60;
const TCP_IDLE: Duration = Duration::from_secs(10);

/// The two-way map between allowed names and their synthetic addresses.
#[derive(Debug, Default)]
pub struct SyntheticAddresses {
    inner: Mutex<Maps>,
}

#[derive(Debug, Default)]
struct Maps {
    by_name: HashMap<Host, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, Host>,
    next: u32,
}

impl SyntheticAddresses {
    /// The address for `name`, allocated on first use; None when the range is exhausted.
    pub fn address_for(&self, name: &Host) -> Option<Ipv4Addr> {
        let mut maps = self.inner.lock().ok()?;
        if let Some(ip) = maps.by_name.get(name) {
            return Some(*ip);
        }
        // Skip .0 so no answer looks like a network address.
        let offset = maps.next + 1;
        if offset >= SYNTHETIC_SIZE - 1 {
            return None;
        }
        maps.next = offset;
        let ip = Ipv4Addr::from(SYNTHETIC_BASE + offset);
        maps.by_name.insert(name.clone(), ip);
        maps.by_addr.insert(ip, name.clone());
        Some(ip)
    }

    /// The name behind a synthetic address.
    pub fn name_for(&self, ip: IpAddr) -> Option<Host> {
        let IpAddr::V4(v4) = ip else { return None };
        self.inner.lock().ok()?.by_addr.get(&v4).cloned()
    }

    /// Whether `ip` lies in the synthetic range at all.
    pub fn in_range(ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => u32::from(v4).wrapping_sub(SYNTHETIC_BASE) < SYNTHETIC_SIZE,
            IpAddr::V6(_) => false,
        }
    }
}

/// Answer one DNS message; None when it is not worth an answer (not a query).
pub fn answer(engine: &Engine, packet: &[u8], client: SocketAddr) -> Option<Vec<u8>> {
    let rules = engine.rules.load();
    let answered = answer_packet(&rules.policy, &engine.synthetic, packet)?;
    if let Some(query) = answered.query {
        engine.record_lossy(Event::Dns {
            ts: TimestampUs::now(),
            client,
            name: query.name,
            qtype: query.qtype,
            verdict: if query.allowed {
                Verdict::Allow
            } else {
                Verdict::Deny
            },
            answers: query.answers,
            reason: query.reason,
        });
    }
    answered.reply
}

/// The reply to one DNS message and, when it was a well-formed query, what to record.
#[derive(Debug)]
pub struct Answered {
    /// None when the reply could not be encoded (nothing is sent).
    pub reply: Option<Vec<u8>>,
    pub query: Option<AnsweredQuery>,
}

/// One answered question, for the record.
#[derive(Debug)]
pub struct AnsweredQuery {
    pub name: String,
    pub qtype: String,
    pub allowed: bool,
    pub answers: Vec<IpAddr>,
    pub reason: Option<String>,
}

/// Answer one DNS message against `policy` without any I/O (split out of
/// [`answer`] so the fuzzer can drive it); None when it is not a query.
pub fn answer_packet(
    policy: &airlock_policy::Policy,
    synthetic: &SyntheticAddresses,
    packet: &[u8],
) -> Option<Answered> {
    let reply_only = |reply: Option<Vec<u8>>| Answered { reply, query: None };
    let request = match Message::from_vec(packet) {
        Ok(m) => m,
        Err(_) => {
            // Echo the id if there is one so the client stops waiting.
            let id = packet.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]))?;
            return Some(reply_only(
                Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
                    .to_vec()
                    .ok(),
            ));
        }
    };
    if request.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut response = Message::response(request.metadata.id, request.metadata.op_code);
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.metadata.recursion_available = true;
    if request.metadata.op_code != OpCode::Query {
        response.metadata.response_code = ResponseCode::NotImp;
        return Some(reply_only(response.to_vec().ok()));
    }
    let [query] = request.queries.as_slice() else {
        response.metadata.response_code = ResponseCode::FormErr;
        return Some(reply_only(response.to_vec().ok()));
    };
    response.add_query(query.clone());
    let raw_name = query.name().to_ascii();
    let qtype = query.query_type();
    let host = Host::parse(raw_name.trim_end_matches('.')).ok();
    let allowed = host.as_ref().is_some_and(|h| policy.resolvable(h));
    let mut answers = Vec::new();
    let mut reason = None;
    match (&host, allowed) {
        (Some(host), true) if qtype == RecordType::A => match synthetic.address_for(host) {
            Some(ip) => {
                response.add_answer(Record::from_rdata(
                    query.name().clone(),
                    TTL,
                    RData::A(A(ip)),
                ));
                answers.push(IpAddr::V4(ip));
            }
            None => {
                response.metadata.response_code = ResponseCode::ServFail;
                reason = Some("synthetic address range exhausted".to_owned());
            }
        },
        (Some(_), true) => {} // NOERROR, no records of that type
        _ => {
            response.metadata.response_code = ResponseCode::NXDomain;
            reason = Some("no rule allows this name".to_owned());
        }
    }
    Some(Answered {
        reply: response.to_vec().ok(),
        query: Some(AnsweredQuery {
            name: raw_name.trim_end_matches('.').to_owned(),
            qtype: qtype.to_string(),
            allowed,
            answers,
            reason,
        }),
    })
}

/// Serve DNS over UDP until the socket fails.
pub async fn serve_udp(engine: Arc<Engine>, socket: UdpSocket) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, client) = socket.recv_from(&mut buf).await?;
        if let Some(reply) = answer(&engine, &buf[..n], client) {
            // A lost reply is the client's to retry; never let it stop the server.
            let _ = socket.send_to(&reply, client).await;
        }
    }
}

/// Serve DNS over TCP (RFC 7766: two-byte length prefix, several queries per connection).
pub async fn serve_tcp(engine: Arc<Engine>, listener: TcpListener) -> std::io::Result<()> {
    loop {
        let (stream, client) = listener.accept().await?;
        let engine = engine.clone();
        tokio::spawn(async move {
            let _ = serve_tcp_connection(&engine, stream, client).await;
        });
    }
}

async fn serve_tcp_connection(
    engine: &Engine,
    mut stream: TcpStream,
    client: SocketAddr,
) -> std::io::Result<()> {
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            _ => return Ok(()),
        }
        let mut packet = vec![0u8; usize::from(u16::from_be_bytes(len))];
        tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut packet))
            .await
            .map_err(|_| std::io::ErrorKind::TimedOut)??;
        let Some(reply) = answer(engine, &packet, client) else {
            return Ok(());
        };
        let Ok(reply_len) = u16::try_from(reply.len()) else {
            return Ok(());
        };
        stream.write_all(&reply_len.to_be_bytes()).await?;
        stream.write_all(&reply).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_addresses_map_both_ways_and_stay_in_range() {
        let map = SyntheticAddresses::default();
        let a = Host::parse("a.example").unwrap();
        let b = Host::parse("b.example").unwrap();
        let ia = map.address_for(&a).unwrap();
        let ib = map.address_for(&b).unwrap();
        assert_ne!(ia, ib);
        assert_eq!(map.address_for(&a), Some(ia));
        assert_eq!(map.name_for(IpAddr::V4(ib)), Some(b));
        assert!(SyntheticAddresses::in_range(IpAddr::V4(ia)));
        assert!(!SyntheticAddresses::in_range("8.8.8.8".parse().unwrap()));
        assert_eq!(map.name_for("198.18.200.1".parse().unwrap()), None);
    }
}
