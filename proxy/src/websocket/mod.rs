//! The WebSocket relay (RFC 6455). After a granted upgrade Airlock does not
//! copy bytes: it reads every frame each peer sends, checks that it is
//! WebSocket, records the messages, scrubs injected secrets from what the
//! upstream sends, and writes new frames to the other side (masked towards
//! the upstream, unmasked towards the client, RFC 6455 §5.3). Re-framing is
//! what lets a scrubbed message change length; an intermediary may change
//! the fragmentation of a message when no extension is negotiated (§5.4),
//! and Airlock never lets one be negotiated (see `crate::upgrade`).
//!
//! A peer that stops speaking WebSocket (a bad frame, reserved bits or
//! opcodes, an unmasked client frame, an oversized control frame, ...) ends
//! the connection: both sides get a close frame with 1002 (protocol error)
//! and the record says who broke the protocol and how. The relay always
//! ends with a `WebSocketEnd` event, so a recorded 101 is never the last
//! word about an exchange.

mod frame;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use ring::rand::SecureRandom;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use crate::credentials::{Injected, Scrubber};
use crate::engine::Engine;
use crate::events::{
    BodyCapture, ConnId, Event, RequestId, TimestampUs, WsDirection, WsOpcode, WsPeer, WsTotals,
};
use airlock_record::{HttpExchange, WebSocketMessage, WebSocketRecord};
use frame::{FrameError, Sender};

/// Payload bytes read (and re-framed) at a time, so that a huge frame is
/// relayed as fragments instead of being held in memory.
const PIECE: usize = 64 * 1024;
/// How long the other side gets to answer a close frame (the closing
/// handshake, RFC 6455 §7.1.1) before both are shut.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// Messages recorded one by one per direction; later ones only count.
const MAX_RECORDED_MESSAGES: u64 = 1000;
/// The status code Airlock closes with when a peer breaks the protocol (§7.4.1).
const PROTOCOL_ERROR: u16 = 1002;

/// What the relay needs to know about its exchange.
pub(crate) struct RelayContext {
    pub engine: Arc<Engine>,
    pub conn: ConnId,
    pub request: RequestId,
    /// The exchange's record as the 101 ended its HTTP part: the relay's
    /// end completes it, and records it as the exchange's one end event.
    pub upgraded: HttpExchange,
    /// The messages recorded so far, both directions in the order relayed.
    pub messages: std::sync::Mutex<Vec<WebSocketMessage>>,
    /// Secrets injected into the upgrade request: scrubbed from every
    /// payload the upstream sends (data, close reasons, pings and pongs).
    pub injected: Injected,
}

/// How one direction ended.
enum PumpEnd {
    /// A close frame went through (and was forwarded).
    Closed {
        code: Option<u16>,
        reason: Option<String>,
    },
    /// The peer ended the stream between frames, without a close frame.
    Eof,
}

/// Relays frames both ways until the connection ends, then records the end.
pub(crate) async fn relay(ctx: RelayContext, client: OnUpgrade, upstream: OnUpgrade) {
    let started = Instant::now();
    let (client, upstream) = match tokio::join!(client, upstream) {
        (Ok(client), Ok(upstream)) => (client, upstream),
        (client, upstream) => {
            let why = client
                .err()
                .or(upstream.err())
                .map_or_else(String::new, |e| e.to_string());
            ctx.record_end(Ending {
                closed_by: WsPeer::Airlock,
                close: (None, None),
                totals: [WsTotals::default(); 2],
                started,
                error: Some(format!("the upgrade did not complete: {why}")),
            });
            return;
        }
    };
    let (client_read, client_write) = tokio::io::split(TokioIo::new(client));
    let (upstream_read, upstream_write) = tokio::io::split(TokioIo::new(upstream));
    let client_write = Mutex::new(client_write);
    let upstream_write = Mutex::new(upstream_write);
    let counters = [Counters::default(), Counters::default()];
    let mut to_upstream = Box::pin(
        Pump::new(&ctx, WsDirection::ToUpstream, &counters[0])
            .run(BufReader::new(client_read), &upstream_write),
    );
    let mut to_client = Box::pin(
        Pump::new(&ctx, WsDirection::ToClient, &counters[1])
            .run(BufReader::new(upstream_read), &client_write),
    );
    let (first_direction, first) = tokio::select! {
        end = &mut to_upstream => (WsDirection::ToUpstream, end),
        end = &mut to_client => (WsDirection::ToClient, end),
    };
    // After a close frame the other side answers with its own (§5.5.1).
    let second = match (&first, first_direction) {
        (Ok(PumpEnd::Closed { .. }), WsDirection::ToUpstream) => {
            tokio::time::timeout(CLOSE_WAIT, &mut to_client).await.ok()
        }
        (Ok(PumpEnd::Closed { .. }), WsDirection::ToClient) => {
            tokio::time::timeout(CLOSE_WAIT, &mut to_upstream)
                .await
                .ok()
        }
        _ => None,
    };
    drop(to_upstream);
    drop(to_client);

    let reader = |direction| match direction {
        WsDirection::ToUpstream => WsPeer::Client,
        WsDirection::ToClient => WsPeer::Upstream,
    };
    let mut violation = None;
    let (closed_by, close, mut error) = match first {
        Ok(PumpEnd::Closed { code, reason }) => (reader(first_direction), (code, reason), None),
        Ok(PumpEnd::Eof) => (
            reader(first_direction),
            (None, None),
            Some(format!(
                "the {} ended the connection without a close frame",
                reader(first_direction).as_str()
            )),
        ),
        Err(e) if e.is_protocol() => {
            violation = Some(first_direction);
            (
                WsPeer::Airlock,
                (Some(PROTOCOL_ERROR), None),
                Some(format!(
                    "the {} stopped speaking WebSocket: {e}",
                    reader(first_direction).as_str()
                )),
            )
        }
        Err(e) => (
            reader(first_direction),
            (None, None),
            Some(format!(
                "reading from the {}: {e}",
                reader(first_direction).as_str()
            )),
        ),
    };
    if let Some(Err(e)) = second {
        let other = match first_direction {
            WsDirection::ToUpstream => WsDirection::ToClient,
            WsDirection::ToClient => WsDirection::ToUpstream,
        };
        error = Some(format!(
            "during the closing handshake, the {}: {e}",
            reader(other).as_str()
        ));
    }
    let mut client_write = client_write.into_inner();
    let mut upstream_write = upstream_write.into_inner();
    if violation.is_some() {
        // Tell both peers why, then close (RFC 6455 §7.1.7).
        let payload = close_payload(PROTOCOL_ERROR, "protocol error");
        let to_client = frame::encode(true, WsOpcode::Close, &payload, None);
        let to_upstream = frame::encode(true, WsOpcode::Close, &payload, mask_key().ok());
        let _ = client_write.write_all(&to_client).await;
        let _ = upstream_write.write_all(&to_upstream).await;
    }
    let _ = client_write.shutdown().await;
    let _ = upstream_write.shutdown().await;
    ctx.record_end(Ending {
        closed_by,
        close,
        totals: [counters[0].totals(), counters[1].totals()],
        started,
        error,
    });
}

fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(reason.as_bytes());
    payload
}

/// A fresh masking key from a strong source, as RFC 6455 §5.3 requires, so
/// that a client cannot choose the bytes the upstream's network sees.
fn mask_key() -> std::io::Result<[u8; 4]> {
    let mut key = [0u8; 4];
    ring::rand::SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| std::io::Error::other("no randomness for a WebSocket masking key"))?;
    Ok(key)
}

/// How the relay ended, for the record.
struct Ending {
    closed_by: WsPeer,
    close: (Option<u16>, Option<String>),
    /// [to upstream, to client]
    totals: [WsTotals; 2],
    started: Instant,
    error: Option<String>,
}

impl RelayContext {
    /// Record the exchange's end, with everything the relay saw.
    fn record_end(self, ending: Ending) {
        let [to_upstream, to_client] = ending.totals;
        let messages = self
            .messages
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut exchange = self.upgraded;
        exchange.websocket = Some(Box::new(WebSocketRecord {
            messages,
            closed_by: ending.closed_by.as_str().to_owned(),
            close_code: ending.close.0,
            close_reason: ending.close.1,
            messages_to_upstream: to_upstream.messages,
            bytes_to_upstream: to_upstream.bytes,
            messages_to_client: to_client.messages,
            bytes_to_client: to_client.bytes,
            ms_total: Some(ending.started.elapsed().as_secs_f64() * 1000.0),
            error: ending.error,
        }));
        self.engine.record_lossy(Event::Response {
            ts: TimestampUs::now(),
            conn: self.conn,
            request: self.request,
            exchange: Box::new(exchange),
        });
    }

    /// Keep one message for the record.
    fn keep(&self, message: WebSocketMessage) {
        self.messages
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(message);
    }
}

/// Message and byte counts of one direction, readable after its pump stopped.
#[derive(Default)]
struct Counters {
    messages: AtomicU64,
    bytes: AtomicU64,
}

impl Counters {
    fn totals(&self) -> WsTotals {
        WsTotals {
            messages: self.messages.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// The message being relayed in one direction.
struct Message {
    opcode: WsOpcode,
    fragments: u32,
    /// A scrubber per message, so a secret split across fragments is found.
    scrubber: Option<Scrubber>,
    /// Whether its first frame went out (later ones are continuations).
    started_out: bool,
    capture: BodyCapture,
}

/// One direction of the relay: reads the peer's frames, writes the other's.
struct Pump<'a> {
    ctx: &'a RelayContext,
    direction: WsDirection,
    counters: &'a Counters,
    /// Capture bytes left for this direction.
    budget: usize,
    recorded: u64,
    message: Option<Message>,
}

impl<'a> Pump<'a> {
    fn new(ctx: &'a RelayContext, direction: WsDirection, counters: &'a Counters) -> Self {
        Self {
            ctx,
            direction,
            counters,
            budget: ctx.engine.capture_cap,
            recorded: 0,
            message: None,
        }
    }

    fn sender(&self) -> Sender {
        match self.direction {
            WsDirection::ToUpstream => Sender::Client,
            WsDirection::ToClient => Sender::Server,
        }
    }

    /// Only what comes back from the upstream is scrubbed.
    fn scrubber(&self) -> Option<Scrubber> {
        (self.direction == WsDirection::ToClient && !self.ctx.injected.is_empty())
            .then(|| Scrubber::new(&self.ctx.injected))
    }

    async fn run<R, W>(mut self, mut reader: R, writer: &Mutex<W>) -> Result<PumpEnd, FrameError>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        loop {
            let Some(head) = frame::read_head(&mut reader, self.sender()).await? else {
                return Ok(PumpEnd::Eof);
            };
            if frame::is_control(head.opcode) {
                // At most 125 bytes (checked with the header).
                let mut payload = vec![0u8; head.len as usize];
                reader.read_exact(&mut payload).await?;
                if let Some(mask) = head.mask {
                    frame::apply_mask(&mut payload, mask, 0);
                }
                let close = if head.opcode == WsOpcode::Close {
                    Some(frame::parse_close(&payload)?)
                } else {
                    None
                };
                let payload = self.scrub_control(head.opcode, payload);
                self.send(writer, true, head.opcode, &payload).await?;
                self.counters.messages.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .bytes
                    .fetch_add(payload.len() as u64, Ordering::Relaxed);
                let mut capture = BodyCapture::default();
                self.capture(&mut capture, &payload);
                self.record(head.opcode, 1, capture);
                if let Some((code, _)) = close {
                    // The record keeps the reason the other side got (scrubbed).
                    let reason = frame::parse_close(&payload).ok().and_then(|(_, r)| r);
                    return Ok(PumpEnd::Closed { code, reason });
                }
                continue;
            }
            let mut message = match (head.opcode, self.message.take()) {
                (WsOpcode::Continuation, None) => return Err(FrameError::StrayContinuation),
                (WsOpcode::Continuation, Some(message)) => message,
                (_, Some(_)) => return Err(FrameError::InterleavedMessage),
                (opcode, None) => Message {
                    opcode,
                    fragments: 0,
                    scrubber: self.scrubber(),
                    started_out: false,
                    capture: BodyCapture::default(),
                },
            };
            message.fragments = message.fragments.saturating_add(1);
            let mut remaining = head.len;
            let mut offset = 0u64;
            loop {
                let size = usize::try_from(remaining.min(PIECE as u64)).unwrap_or(PIECE);
                let mut piece = vec![0u8; size];
                reader.read_exact(&mut piece).await?;
                if let Some(mask) = head.mask {
                    frame::apply_mask(&mut piece, mask, offset);
                }
                offset += size as u64;
                remaining -= size as u64;
                let last = head.fin && remaining == 0;
                let mut out = match &mut message.scrubber {
                    Some(scrubber) => scrubber.push(&piece),
                    None => piece,
                };
                if last && let Some(scrubber) = &mut message.scrubber {
                    out.extend(scrubber.finish());
                }
                self.capture(&mut message.capture, &out);
                self.counters
                    .bytes
                    .fetch_add(out.len() as u64, Ordering::Relaxed);
                // An empty middle piece (all held back by the scrubber) need not go out.
                if !out.is_empty() || last {
                    let opcode = if message.started_out {
                        WsOpcode::Continuation
                    } else {
                        message.opcode
                    };
                    message.started_out = true;
                    self.send(writer, last, opcode, &out).await?;
                }
                if remaining == 0 {
                    break;
                }
            }
            if head.fin {
                self.counters.messages.fetch_add(1, Ordering::Relaxed);
                self.record(message.opcode, message.fragments, message.capture);
            } else {
                self.message = Some(message);
            }
        }
    }

    /// A control payload from the upstream, scrubbed; kept within the 125
    /// bytes a control frame may carry (a close keeps its code).
    fn scrub_control(&self, opcode: WsOpcode, payload: Vec<u8>) -> Vec<u8> {
        let Some(mut scrubber) = self.scrubber() else {
            return payload;
        };
        let mut out = scrubber.push(&payload);
        out.extend(scrubber.finish());
        if out.len() > frame::MAX_CONTROL_PAYLOAD {
            out.truncate(if opcode == WsOpcode::Close {
                2
            } else {
                frame::MAX_CONTROL_PAYLOAD
            });
        }
        out
    }

    async fn send<W: AsyncWrite + Unpin>(
        &self,
        writer: &Mutex<W>,
        fin: bool,
        opcode: WsOpcode,
        payload: &[u8],
    ) -> Result<(), FrameError> {
        let mask = match self.direction {
            WsDirection::ToUpstream => Some(mask_key()?),
            WsDirection::ToClient => None,
        };
        let bytes = frame::encode(fin, opcode, payload, mask);
        let mut writer = writer.lock().await;
        writer.write_all(&bytes).await.map_err(FrameError::Io)?;
        writer.flush().await.map_err(FrameError::Io)
    }

    /// Adds what was forwarded to the capture, within this direction's budget.
    fn capture(&mut self, capture: &mut BodyCapture, bytes: &[u8]) {
        let take = bytes.len().min(self.budget);
        capture.captured.extend_from_slice(&bytes[..take]);
        capture.bytes += bytes.len() as u64;
        capture.truncated |= take < bytes.len();
        self.budget -= take;
    }

    fn record(&mut self, opcode: WsOpcode, fragments: u32, payload: BodyCapture) {
        if self.recorded >= MAX_RECORDED_MESSAGES {
            return;
        }
        self.recorded += 1;
        self.ctx.keep(WebSocketMessage {
            ts_us: i64::try_from(TimestampUs::now().0).unwrap_or(i64::MAX),
            direction: self.direction.as_str().to_owned(),
            opcode: opcode.as_str().to_owned(),
            fragments,
            bytes: payload.bytes,
            payload: payload.captured,
            truncated: payload.truncated,
        });
    }
}
