//! Turns the proxy's events into audit records.
//!
//! An HTTP exchange is recorded twice under one exchange id: when it is
//! decided (before anything is forwarded, so a crash cannot leave traffic
//! unrecorded) and when its response ends. A connection likewise when it is
//! decided and when it closes. The auditor's readers show the latest record.

use airlock_auditor::{ApprovalDecided, ApprovalRequested, DnsQuery, HttpExchange, TcpConnection};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use airlock_auditor::{AuditEvent, ExecId, SessionRecorder, WebSocketMessage, WebSocketRecord};
use airlock_proxy::events::{ConnId, Event, EventSink, RequestId, SinkError, SyncFuture};

/// What is remembered of a request until its response ends.
struct Pending {
    method: String,
    url: String,
    http_version: String,
    headers: Vec<(String, String)>,
    decision: String,
    rule: Option<String>,
    reason: Option<String>,
}

/// Finds the exec that owns a sandbox-side socket (peer address, is UDP).
pub type Attribute = Arc<dyn Fn(SocketAddr, bool) -> Option<ExecId> + Send + Sync>;

struct Connection {
    exec: Option<ExecId>,
    dst: String,
    host: Option<String>,
    port: u16,
    decision: String,
    rule: Option<String>,
    reason: Option<String>,
}

pub struct AuditSink {
    recorder: SessionRecorder,
    attribute: Option<Attribute>,
    requests: Mutex<HashMap<RequestId, Pending>>,
    connections: Mutex<HashMap<ConnId, Connection>>,
    /// Upgraded exchanges (101) until their relay ends: the exchange is
    /// recorded again then, with its messages, as its last record.
    upgraded: Mutex<HashMap<RequestId, (AuditEvent, WebSocketRecord)>>,
}

impl AuditSink {
    pub fn new(recorder: SessionRecorder) -> Arc<Self> {
        Self::attributed(recorder, None)
    }

    /// Records attributed to the exec that opened each connection or sent each query.
    pub fn attributed(recorder: SessionRecorder, attribute: Option<Attribute>) -> Arc<Self> {
        Arc::new(Self {
            recorder,
            attribute,
            requests: Mutex::new(HashMap::new()),
            connections: Mutex::new(HashMap::new()),
            upgraded: Mutex::new(HashMap::new()),
        })
    }

    fn exec_for(&self, peer: SocketAddr, udp: bool) -> Option<ExecId> {
        self.attribute.as_ref().and_then(|f| f(peer, udp))
    }

    fn exec_of_connection(&self, conn: ConnId) -> Option<ExecId> {
        self.connections
            .lock()
            .ok()
            .and_then(|m| m.get(&conn).and_then(|c| c.exec.clone()))
    }

    fn record(&self, event: AuditEvent) -> Result<(), SinkError> {
        self.recorder
            .record(event)
            .map(|_| ())
            .map_err(|e| SinkError(e.to_string()))
    }
}

fn verdict(v: airlock_proxy::events::Verdict) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Split `host:port` (IPv6 in brackets) for the record.
fn split_target(target: &str) -> (String, u16) {
    match target.rsplit_once(':') {
        Some((host, port)) => (
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port.parse().unwrap_or(0),
        ),
        None => (target.to_owned(), 0),
    }
}

impl EventSink for AuditSink {
    fn emit(&self, event: Event) -> Result<(), SinkError> {
        match event {
            Event::Dns {
                client,
                name,
                qtype,
                verdict: v,
                answers,
                reason,
                ..
            } => self.record(AuditEvent::Dns(DnsQuery {
                exec_id: self
                    .exec_for(client, true)
                    .or_else(|| self.exec_for(client, false)),
                name,
                qtype,
                answer: answers.iter().map(ToString::to_string).collect(),
                decision: verdict(v),
                rule: reason,
            })),
            Event::Connection {
                conn,
                client,
                target,
                original_dst,
                verdict: v,
                rule,
                reason,
                ..
            } => {
                let (host, port) = split_target(&target);
                let record = Connection {
                    exec: self.exec_for(client, false),
                    dst: original_dst.map_or_else(|| target.clone(), |d| d.to_string()),
                    host: Some(host),
                    port,
                    decision: verdict(v),
                    rule,
                    reason,
                };
                let event = tcp_event(conn, &record, 0, 0, None);
                if let Ok(mut map) = self.connections.lock() {
                    map.insert(conn, record);
                }
                self.record(event)
            }
            Event::ConnectionClosed {
                conn,
                bytes_up,
                bytes_down,
                duration_us,
                ..
            } => {
                let record = self
                    .connections
                    .lock()
                    .ok()
                    .and_then(|mut m| m.remove(&conn));
                match record {
                    Some(record) => self.record(tcp_event(
                        conn,
                        &record,
                        bytes_up,
                        bytes_down,
                        Some(duration_us as f64 / 1000.0),
                    )),
                    None => Ok(()),
                }
            }
            Event::Request {
                ts,
                conn,
                request,
                method,
                url,
                http_version,
                headers,
                verdict: v,
                rule,
                reason,
                refused_status,
                request_body,
                ..
            } => {
                // A refusal's body, read for the record only (never forwarded).
                let refused_body = request_body.unwrap_or_default();
                let pending = Pending {
                    method,
                    url,
                    http_version,
                    headers,
                    decision: verdict(v),
                    rule,
                    reason,
                };
                let event = AuditEvent::Http(HttpExchange {
                    exec_id: self.exec_of_connection(conn),
                    exchange: Some(request.0),
                    method: pending.method.clone(),
                    url: pending.url.clone(),
                    http_version: pending.http_version.clone(),
                    request_headers: pending.headers.clone(),
                    request_body: refused_status.map(|_| refused_body.captured),
                    request_body_truncated: refused_body.truncated,
                    status: refused_status,
                    response_headers: Vec::new(),
                    response_body: None,
                    response_body_truncated: false,
                    bytes_up: refused_body.bytes,
                    bytes_down: 0,
                    started_us: i64::try_from(ts.0).ok(),
                    ms_to_headers: None,
                    ms_total: None,
                    decision: pending.decision.clone(),
                    rule: pending.rule.clone(),
                    reason: pending.reason.clone(),
                    websocket: None,
                });
                if refused_status.is_none()
                    && let Ok(mut map) = self.requests.lock()
                {
                    map.insert(request, pending);
                }
                self.record(event)
            }
            Event::Response {
                ts,
                conn,
                request,
                status,
                headers,
                request_body,
                response_body,
                time_to_headers_us,
                total_us,
                error,
                ..
            } => {
                let Some(p) = self
                    .requests
                    .lock()
                    .ok()
                    .and_then(|mut m| m.remove(&request))
                else {
                    return Ok(());
                };
                let started = i64::try_from(ts.0.saturating_sub(total_us)).ok();
                let event = AuditEvent::Http(HttpExchange {
                    exec_id: self.exec_of_connection(conn),
                    exchange: Some(request.0),
                    method: p.method,
                    url: p.url,
                    http_version: p.http_version,
                    request_headers: p.headers,
                    request_body_truncated: request_body.truncated,
                    bytes_up: request_body.bytes,
                    request_body: Some(request_body.captured),
                    status: Some(status),
                    response_headers: headers,
                    response_body_truncated: response_body.truncated,
                    bytes_down: response_body.bytes,
                    response_body: Some(response_body.captured),
                    started_us: started,
                    ms_to_headers: Some(time_to_headers_us as f64 / 1000.0),
                    ms_total: Some(total_us as f64 / 1000.0),
                    decision: p.decision,
                    rule: p.rule,
                    reason: error.or(p.reason),
                    websocket: None,
                });
                if status == 101
                    && let Ok(mut map) = self.upgraded.lock()
                {
                    map.insert(request, (event.clone(), WebSocketRecord::default()));
                }
                self.record(event)
            }
            Event::WebSocketMessage {
                ts,
                request,
                direction,
                opcode,
                fragments,
                payload,
                ..
            } => {
                if let Ok(mut map) = self.upgraded.lock()
                    && let Some((_, record)) = map.get_mut(&request)
                {
                    record.messages.push(WebSocketMessage {
                        ts_us: i64::try_from(ts.0).unwrap_or(i64::MAX),
                        direction: direction.as_str().to_owned(),
                        opcode: opcode.as_str().to_owned(),
                        fragments,
                        bytes: payload.bytes,
                        payload: payload.captured,
                        truncated: payload.truncated,
                    });
                }
                Ok(())
            }
            Event::ApprovalRequested {
                conn,
                request,
                approval,
                method,
                url,
                headers,
                body_bytes,
                body_sha256,
                rule,
                reason,
                timeout_ms,
                approvers,
                ..
            } => self.record(AuditEvent::ApprovalRequested(ApprovalRequested {
                approval,
                exec_id: self.exec_of_connection(conn),
                exchange: Some(request.0),
                method,
                url,
                request_headers: headers,
                body_bytes,
                body_sha256,
                rule,
                reason,
                timeout_ms,
                approvers,
            })),
            Event::ApprovalDecided {
                conn,
                request,
                approval,
                outcome,
                scope,
                by,
                note,
                waited_ms,
                body_sha256,
                method,
                url,
                ..
            } => self.record(AuditEvent::ApprovalDecided(ApprovalDecided {
                approval,
                exec_id: self.exec_of_connection(conn),
                exchange: Some(request.0),
                outcome,
                scope,
                by,
                note,
                waited_ms,
                body_sha256,
                method,
                url,
            })),
            Event::WebSocketEnd {
                request,
                closed_by,
                close_code,
                close_reason,
                to_upstream,
                to_client,
                duration_us,
                error,
                ..
            } => {
                let Some((mut event, mut record)) = self
                    .upgraded
                    .lock()
                    .ok()
                    .and_then(|mut m| m.remove(&request))
                else {
                    return Ok(());
                };
                record.closed_by = closed_by.as_str().to_owned();
                record.close_code = close_code;
                record.close_reason = close_reason;
                record.messages_to_upstream = to_upstream.messages;
                record.bytes_to_upstream = to_upstream.bytes;
                record.messages_to_client = to_client.messages;
                record.bytes_to_client = to_client.bytes;
                record.ms_total = Some(duration_us as f64 / 1000.0);
                record.error = error;
                if let AuditEvent::Http(HttpExchange { websocket, .. }) = &mut event {
                    *websocket = Some(Box::new(record));
                }
                self.record(event)
            }
        }
    }

    fn sync(&self) -> SyncFuture<'_> {
        let recorder = self.recorder.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || recorder.sync())
                .await
                .map_err(|e| SinkError(e.to_string()))?
                .map_err(|e| SinkError(e.to_string()))
        })
    }
}

fn tcp_event(
    conn: ConnId,
    record: &Connection,
    bytes_up: u64,
    bytes_down: u64,
    duration_ms: Option<f64>,
) -> AuditEvent {
    AuditEvent::Tcp(TcpConnection {
        exec_id: record.exec.clone(),
        connection: Some(conn.0),
        dst: record.dst.clone(),
        host: record.host.clone(),
        port: record.port,
        decision: record.decision.clone(),
        rule: record.rule.clone(),
        reason: record.reason.clone(),
        bytes_up,
        bytes_down,
        duration_ms,
    })
}

/// Sends every event to several sinks; fails if any of them fails.
pub struct Tee(pub Vec<Arc<dyn EventSink>>);

impl EventSink for Tee {
    fn emit(&self, event: Event) -> Result<(), SinkError> {
        let mut result = Ok(());
        for sink in &self.0 {
            if let Err(e) = sink.emit(event.clone()) {
                result = Err(e);
            }
        }
        result
    }

    fn emit_all(&self, events: Vec<Event>) -> Result<(), SinkError> {
        let mut result = Ok(());
        for sink in &self.0 {
            if let Err(e) = sink.emit_all(events.clone()) {
                result = Err(e);
            }
        }
        result
    }

    fn sync(&self) -> SyncFuture<'_> {
        Box::pin(async move {
            for sink in &self.0 {
                sink.sync().await?;
            }
            Ok(())
        })
    }
}
