//! The resolver sandboxed clients talk to.
//!
//! Every well-formed name gets a synthetic IPv4 address (`synthetic.rs`) that
//! maps back to the name, so every captured connection names its host, and a
//! connection to an address that never came from here is just a literal
//! address to the policy. A name no rule allows gets an address too: the
//! decision is made where it can be explained, on the connection, where an
//! HTTP or TLS client gets the same 403 with the rule to add as for a path no
//! rule allows (a client given NXDOMAIN can only say "could not resolve
//! host", which an agent can't tell from a typo). The query is recorded with
//! the policy's verdict either way. Nothing is ever forwarded: no name leaves
//! the machine. Only A queries get addresses; AAAA and other types get an
//! empty answer, since the sandbox has no IPv6 and no other use. A name that
//! is not a well-formed host name gets NXDOMAIN.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use airlock_policy::Host;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use airlock_record::DnsQuery;

use crate::engine::Engine;
use crate::events::{Event, TimestampUs, Verdict};
use crate::synthetic::SyntheticAddresses;

/// Answers are stable while the name stays mapped; a short TTL keeps
/// clients asking again rather than holding an address that may be evicted.
const TTL: u32 = 60;
const TCP_IDLE: Duration = Duration::from_secs(10);

/// Answer one DNS message; None when it is not worth an answer (not a query).
pub fn answer(engine: &Engine, packet: &[u8], client: SocketAddr) -> Option<Vec<u8>> {
    let rules = engine.rules.load();
    let answered = answer_packet(&rules.policy, &engine.synthetic, packet)?;
    if let Some(query) = answered.query {
        // A name is looked up over UDP, or over TCP when the answer is long.
        let exec_id = engine
            .events
            .attribute(client, true)
            .or_else(|| engine.events.attribute(client, false));
        let record = DnsQuery {
            exec_id,
            name: query.name,
            qtype: query.qtype,
            answer: query.answers.iter().map(ToString::to_string).collect(),
            decision: if query.allowed {
                Verdict::Allow
            } else {
                Verdict::Deny
            },
            rule: query.reason,
        };
        engine.record_lossy(Event::Dns {
            ts: TimestampUs::now(),
            client,
            query: Box::new(record),
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
    let Ok(request) = Message::from_vec(packet) else {
        // Echo the id if there is one so the client stops waiting.
        let id = packet.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]))?;
        return Some(reply_only(
            Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
                .to_vec()
                .ok(),
        ));
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
    let mut reason = (!allowed).then(|| "no rule allows this name".to_owned());
    match &host {
        Some(host) if qtype == RecordType::A => match synthetic.address_for(host) {
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
        Some(_) => {} // NOERROR, no records of that type
        None => {
            response.metadata.response_code = ResponseCode::NXDomain;
            reason = Some("not a well-formed host name".to_owned());
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
