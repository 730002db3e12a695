//! Step 2b: a request to an MCP server (a host and port an `mcp` rule
//! names). A POST is read whole as JSON-RPC and each message decided by
//! the `mcp` rules — tool, arguments, quota, a person's approval — and on
//! record before anything is forwarded. A refused POST is answered as
//! JSON-RPC errors with the requests' ids, so the client's MCP library
//! reads failed calls and its session goes on. Any other request (the GET
//! SSE stream, DELETE) is forwarded as the HTTP rules decided, and its
//! answer read by the MCP filter too.

use std::sync::Arc;

use airlock_policy::{
    Ask, MAX_BODY_BYTES, McpBody, McpMessage, McpParseError, McpVerdict, RuleRef as PolicyRule,
    ToolQuota, parse_mcp_body,
};
use airlock_record::{McpCall, McpServer, RuleRef, Verdict};
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode};

use crate::body::{ProxyBody, full};
use crate::events::{Event, TimestampUs};
use crate::mcp::{AnswerContext, Forwarded, error_body, error_message};
use crate::refusal::Refusal;

use super::body_prefix::{PrefixError, read_prefix};
use super::context::{Early, Exchange};
use super::{Destination, RequestBody};

/// Why an MCP POST's body was refused before any of it was decided: each
/// says what to send instead.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error("the body has a Content-Encoding; send MCP requests uncompressed")]
    Compressed,
    #[error("an MCP POST needs exactly one Content-Type: application/json")]
    NotJson,
    #[error("reading the request body: {0}")]
    Read(#[source] PrefixError),
    #[error("the body is over {} KiB; send smaller messages", MAX_BODY_BYTES / 1024)]
    TooLarge,
    #[error("the body was already forwarded")]
    AlreadyForwarded,
    #[error("{0}")]
    NotMcp(#[from] McpParseError),
}

/// Arguments larger than this are kept in the record by size only.
const MAX_RECORDED_ARGUMENTS: usize = 64 * 1024;

/// What the rest of the exchange needs of an MCP request: how to read its
/// answer.
pub(super) struct McpForward {
    pub(super) answer: Arc<AnswerContext>,
}

/// One message's decision, as recorded and answered.
struct Decided<'m> {
    message: &'m McpMessage,
    verdict: Verdict,
    rule: Option<PolicyRule>,
    /// Why it is refused (or, in report mode, would be).
    reason: Option<String>,
    quota: Option<ToolQuota>,
    ask: Option<Ask>,
    /// The approval that let a held call through.
    approval: Option<String>,
}

impl Decided<'_> {
    fn refused(&self) -> bool {
        self.verdict == Verdict::Deny
    }

    fn refuse(&mut self, reason: String) {
        self.verdict = Verdict::Deny;
        self.reason = Some(reason);
        self.ask = None;
    }
}

impl Exchange {
    pub(super) async fn mcp(
        &self,
        head: &Parts,
        body: &mut RequestBody,
        destination: &Destination,
    ) -> Result<Option<McpForward>, Early> {
        let target = &destination.target;
        let Some(server) = self.rules.policy.mcp_server(&target.host, target.port) else {
            return Ok(None);
        };
        let path = destination
            .path_and_query
            .split('?')
            .next()
            .unwrap_or("/")
            .to_owned();
        let answer = Arc::new(AnswerContext {
            engine: self.engine.clone(),
            conn: self.conn.id,
            exec: self.conn.exec.clone(),
            request: self.id,
            rules: self.rules.clone(),
            host: target.host.clone(),
            server: McpServer {
                host: target.host.to_string(),
                port: target.port,
                path,
            },
            mcp_session: head
                .headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            channel: if head.method == Method::POST {
                "post"
            } else {
                "sse"
            },
        });
        let url = &destination.url;
        let key = answer.server_key();
        let server_key = key.as_str();
        if head.method != Method::POST {
            // Messages travel in POST bodies. A body on another method
            // would reach a server that reads it without being decided.
            if has_body(body) {
                let reason = format!(
                    "airlock: MCP request refused: a {} with a body; MCP messages are sent with POST",
                    head.method
                );
                self.record_call(unreadable(&answer, &reason));
                let body = error_body(vec![error_message(None, &reason)], false);
                return Err(self.refuse_mcp(
                    server_key,
                    head,
                    url,
                    None,
                    reason,
                    StatusCode::BAD_REQUEST,
                    body,
                ));
            }
            return Ok(Some(McpForward { answer }));
        }
        // A body that cannot be read whole, or does not read as MCP, is
        // refused the same way: nothing of it is forwarded.
        let read = match self.mcp_body(head, body).await {
            Ok(bytes) => parse_mcp_body(&bytes)
                .map(|parsed| (bytes, parsed))
                .map_err(Unreadable::from),
            Err(why) => Err(why),
        };
        let (bytes, parsed) = match read {
            Ok(read) => read,
            Err(why) => {
                let reason = format!("airlock: MCP request refused: {why}");
                self.record_call(unreadable(&answer, &reason));
                let body = error_body(vec![error_message(None, &reason)], false);
                return Err(self.refuse_mcp(
                    server_key,
                    head,
                    url,
                    None,
                    reason,
                    StatusCode::BAD_REQUEST,
                    body,
                ));
            }
        };
        let mut decided = self.decide_messages(&server, &parsed);
        // A call a person must approve is held alone: the approval shows
        // the whole body, which is then exactly that call.
        if let [one] = decided.as_mut_slice()
            && let Some(ask) = one.ask.take()
        {
            let held = self
                .await_approval(head, destination, &ask, Some((&bytes, true)))
                .await;
            match held {
                Ok(approved) => {
                    one.verdict = Verdict::Allow;
                    one.rule = Some(ask.rule.clone());
                    one.reason = Some(approved.line);
                    one.approval = approved.id;
                }
                Err(Early::Refused(mut refused)) => {
                    let reason = match &refused.event {
                        Event::Request { exchange, .. } => exchange.reason.clone(),
                        _ => None,
                    }
                    .unwrap_or_else(|| "not approved".to_owned());
                    let reason = format!(
                        "airlock: MCP tool {:?} was held for approval by the ask rule at {} and not approved: {reason}",
                        one.message.tool.as_deref().unwrap_or_default(),
                        ask.rule
                    );
                    one.refuse(reason.clone());
                    one.rule = Some(ask.rule.clone());
                    let record = self.call_record(&answer, one);
                    self.record_call(record);
                    let body =
                        error_body(vec![error_message(one.message.id_value(), &reason)], false);
                    refused.response =
                        self.answer_refusal(server_key, head, StatusCode::OK, body, &reason);
                    return Err(Early::Refused(refused));
                }
                Err(other) => return Err(other),
            }
        }
        self.take_quotas(&mut decided);
        for one in &decided {
            let record = self.call_record(&answer, one);
            if let Err(e) = self
                .engine
                .record(Event::McpCall {
                    ts: TimestampUs::now(),
                    conn: self.conn.id,
                    request: self.id,
                    call: Box::new(record),
                })
                .await
            {
                let refusal = Refusal::AuditUnavailable(e.to_string());
                return Err(self.refuse(head, url, None, refusal));
            }
        }
        if decided.iter().any(Decided::refused) {
            return Err(self.refuse_messages(server_key, head, url, &decided, parsed.batch));
        }
        for one in &decided {
            if let Some(id) = &one.message.id {
                self.engine.mcp_lists.forwarded(
                    &answer.server_key(),
                    id.clone(),
                    Forwarded {
                        method: one.message.method.clone().unwrap_or_default(),
                        tool: one.message.tool.clone(),
                        rule: one.rule.as_ref().map(record_rule),
                        decision: one.verdict,
                        exchange: self.id,
                    },
                );
            }
        }
        *body = RequestBody::Buffered {
            bytes,
            complete: true,
        };
        Ok(Some(McpForward { answer }))
    }

    /// The whole body, read (bounded) and checked for what the reader
    /// needs: uncompressed JSON.
    async fn mcp_body(&self, head: &Parts, body: &mut RequestBody) -> Result<Bytes, Unreadable> {
        if head
            .headers
            .get_all(header::CONTENT_ENCODING)
            .iter()
            .any(|c| !c.as_bytes().trim_ascii().eq_ignore_ascii_case(b"identity"))
        {
            return Err(Unreadable::Compressed);
        }
        let types: Vec<&HeaderValue> = head.headers.get_all(header::CONTENT_TYPE).iter().collect();
        let json = match types.as_slice() {
            [one] => one
                .to_str()
                .ok()
                .and_then(|t| t.split(';').next())
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json")),
            _ => false,
        };
        if !json {
            return Err(Unreadable::NotJson);
        }
        if let Some(incoming) = body.take_unread() {
            let mut buf = BytesMut::new();
            let read = read_prefix(incoming, MAX_BODY_BYTES, &mut buf).await;
            let complete = matches!(read, Ok(true));
            *body = RequestBody::Buffered {
                bytes: buf.freeze(),
                complete,
            };
            read.map_err(Unreadable::Read)?;
        }
        match &*body {
            RequestBody::Buffered {
                bytes,
                complete: true,
            } => Ok(bytes.clone()),
            RequestBody::Buffered { .. } => Err(Unreadable::TooLarge),
            _ => Err(Unreadable::AlreadyForwarded),
        }
    }

    fn decide_messages<'m>(
        &self,
        server: &airlock_policy::McpServer<'_>,
        parsed: &'m McpBody,
    ) -> Vec<Decided<'m>> {
        let report = server.report_only();
        let mut decided: Vec<Decided<'m>> = parsed
            .messages
            .iter()
            .map(|message| {
                let mut one = Decided {
                    message,
                    verdict: Verdict::Allow,
                    rule: None,
                    reason: None,
                    quota: None,
                    ask: None,
                    approval: None,
                };
                match server.decide(message) {
                    McpVerdict::Allow { rule, quota } => {
                        one.rule = rule;
                        one.quota = quota;
                    }
                    McpVerdict::Ask(ask) if parsed.batch => {
                        one.rule = Some(ask.rule.clone());
                        one.refuse(format!(
                            "airlock: MCP tool {:?} needs a person's approval (ask rule at {}), which is given to one call at a time: send it alone, not in a batch",
                            message.tool.as_deref().unwrap_or_default(),
                            ask.rule
                        ));
                    }
                    // Report mode holds nothing: it records whose approval
                    // deny mode would have waited for.
                    McpVerdict::Ask(ask) if report => {
                        one.verdict = Verdict::Report;
                        one.reason = Some(format!(
                            "airlock: MCP tool {:?} would be held for a person's approval (ask rule at {})",
                            message.tool.as_deref().unwrap_or_default(),
                            ask.rule
                        ));
                        one.rule = Some(ask.rule);
                    }
                    McpVerdict::Ask(ask) => {
                        one.rule = Some(ask.rule.clone());
                        one.ask = Some(ask);
                    }
                    McpVerdict::Deny(denial) => {
                        one.rule = denial.rule;
                        let reason = format!("airlock: {}", denial.reason);
                        if report {
                            one.verdict = Verdict::Report;
                            one.reason = Some(reason);
                        } else {
                            one.refuse(reason);
                        }
                    }
                }
                one
            })
            .collect();
        // A batch goes whole or not at all: the simplest rule a client
        // cannot split a refused call out of.
        if parsed.batch
            && let Some(first) = decided.iter().position(Decided::refused)
        {
            for (index, one) in decided.iter_mut().enumerate() {
                if index != first && !one.refused() {
                    one.refuse(format!(
                        "airlock: not sent: message {first} of the same batch was refused, and a batch is forwarded whole or not at all"
                    ));
                }
            }
        }
        decided
    }

    /// `max_calls`, counted when a call is decided (so concurrent calls
    /// cannot all pass), and only when every message may go.
    fn take_quotas(&self, decided: &mut [Decided<'_>]) {
        if decided.iter().any(Decided::refused) {
            return;
        }
        let report = self.rules.policy.default_action() == airlock_policy::DefaultAction::Report;
        for one in decided.iter_mut() {
            let Some(quota) = one.quota.take() else {
                continue;
            };
            if self
                .engine
                .quotas
                .try_take_key(quota.key.clone(), quota.max)
            {
                continue;
            }
            let reason = format!(
                "airlock: MCP tool {:?} may be called {} times per session (max_calls of its entry in the rule at {}), all used; raise max_calls to allow more",
                one.message.tool.as_deref().unwrap_or_default(),
                quota.max,
                one.rule
                    .as_ref()
                    .map_or_else(|| "?".to_owned(), ToString::to_string)
            );
            if report {
                one.verdict = Verdict::Report;
                one.reason = Some(reason);
            } else {
                one.refuse(reason);
            }
        }
    }

    fn call_record(&self, answer: &AnswerContext, one: &Decided<'_>) -> McpCall {
        let message = one.message;
        let too_large = message.arguments_bytes > MAX_RECORDED_ARGUMENTS;
        let call = McpCall {
            exec_id: self.conn.exec.clone(),
            exchange: Some(self.id),
            server: answer.server.clone(),
            mcp_session: answer.mcp_session.clone(),
            rpc_id: message.id_value(),
            method: message.method.clone().unwrap_or_default(),
            tool: message.tool.clone(),
            arguments: if too_large {
                None
            } else {
                message.arguments_value()
            },
            arguments_truncated: too_large,
            arguments_bytes: message
                .is_tool_call()
                .then_some(message.arguments_bytes as u64),
            channel: if message.kind == airlock_policy::McpKind::Response {
                "response".to_owned()
            } else {
                "post".to_owned()
            },
            decision: one.verdict,
            rule: one.rule.as_ref().map(record_rule),
            reason: one.reason.clone(),
            approval: one.approval.clone(),
            result: None,
            tools: None,
        };
        crate::mcp::redacted(&self.rules.credentials, call)
    }

    /// A refused message's record. Its refusal is recorded (fail closed)
    /// with the HTTP exchange; this one adds what the message said.
    fn record_call(&self, call: McpCall) {
        self.engine.record_lossy(Event::McpCall {
            ts: TimestampUs::now(),
            conn: self.conn.id,
            request: self.id,
            call: Box::new(call),
        });
    }

    /// Every refused message answered with a JSON-RPC error carrying its
    /// id (a batch: one per request); nothing is forwarded.
    fn refuse_messages(
        &self,
        server: &str,
        head: &Parts,
        url: &str,
        decided: &[Decided<'_>],
        batch: bool,
    ) -> Early {
        let first = decided.iter().find(|d| d.refused());
        let reason = first
            .and_then(|d| d.reason.clone())
            .unwrap_or_else(|| "airlock: refused".to_owned());
        let rule = first.and_then(|d| d.rule.clone());
        let errors: Vec<serde_json::Value> = decided
            .iter()
            .filter(|d| d.message.id.is_some())
            .map(|d| error_message(d.message.id_value(), d.reason.as_deref().unwrap_or(&reason)))
            .collect();
        let (status, body) = if errors.is_empty() {
            // Only notifications: there is no id to answer.
            (
                StatusCode::FORBIDDEN,
                error_body(vec![error_message(None, &reason)], false),
            )
        } else {
            (StatusCode::OK, error_body(errors, batch))
        };
        self.refuse_mcp(server, head, url, rule, reason, status, body)
    }

    #[allow(clippy::too_many_arguments, reason = "the refusal's parts, each once")]
    fn refuse_mcp(
        &self,
        server: &str,
        head: &Parts,
        url: &str,
        rule: Option<PolicyRule>,
        reason: String,
        status: StatusCode,
        body: Vec<u8>,
    ) -> Early {
        let refusal = Refusal::Mcp {
            rule,
            reason: reason.clone(),
            status,
        };
        let answer = self.answer_refusal(server, head, status, body, &reason);
        match self.refuse(head, url, None, refusal) {
            Early::Refused(mut refused) => {
                refused.response = answer;
                Early::Refused(refused)
            }
            other => other,
        }
    }

    /// The answer to a refused POST: the JSON-RPC errors themselves, or —
    /// on the older HTTP+SSE transport, whose client reads every answer on
    /// the GET stream that named this endpoint — the errors sent on that
    /// stream and `202 Accepted`, as that server answers.
    fn answer_refusal(
        &self,
        server: &str,
        head: &Parts,
        status: StatusCode,
        body: Vec<u8>,
        reason: &str,
    ) -> Response<ProxyBody> {
        let endpoint = head.uri.path_and_query().map_or("/", |p| p.as_str());
        let stream = self.engine.mcp_lists.stream_for(server, endpoint);
        let Some(stream) = stream.filter(|_| status == StatusCode::OK) else {
            return mcp_response(status, body, reason);
        };
        let messages: Vec<serde_json::Value> = match serde_json::from_slice(&body) {
            Ok(serde_json::Value::Array(items)) => items,
            Ok(one) => vec![one],
            Err(_) => Vec::new(),
        };
        for message in messages {
            let _ = stream.send(message.to_string().into_bytes());
        }
        let mut response = mcp_response(StatusCode::ACCEPTED, b"Accepted".to_vec(), reason);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

fn record_rule(rule: &PolicyRule) -> RuleRef {
    RuleRef::new(rule.to_string())
}

/// Whether the request has a body (a declared length over 0, or chunks).
fn has_body(body: &RequestBody) -> bool {
    match body {
        RequestBody::Streamed(incoming) => !http_body::Body::is_end_stream(incoming),
        RequestBody::Buffered { bytes, complete } => !bytes.is_empty() || !complete,
        RequestBody::Forwarded => false,
    }
}

/// A record for a POST whose body could not be read as MCP.
fn unreadable(answer: &AnswerContext, reason: &str) -> McpCall {
    McpCall {
        exec_id: answer.exec.clone(),
        exchange: Some(answer.request),
        server: answer.server.clone(),
        mcp_session: answer.mcp_session.clone(),
        rpc_id: None,
        method: String::new(),
        tool: None,
        arguments: None,
        arguments_truncated: false,
        arguments_bytes: None,
        channel: "post".to_owned(),
        decision: Verdict::Deny,
        rule: None,
        reason: Some(reason.to_owned()),
        approval: None,
        result: None,
        tools: None,
    }
}

/// A JSON-RPC answer from airlock itself.
fn mcp_response(status: StatusCode, body: Vec<u8>, reason: &str) -> Response<ProxyBody> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert("x-airlock-decision", HeaderValue::from_static("deny"));
    let safe: String = reason
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(512)
        .collect();
    if let Ok(v) = HeaderValue::from_str(&safe) {
        headers.insert("x-airlock-reason", v);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
