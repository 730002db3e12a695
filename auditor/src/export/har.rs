//! HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/) of the session's
//! HTTP exchanges, for browser dev tools and HAR viewers. Airlock specifics
//! (decision, rule, seq, a held request's approval, the MCP messages an
//! exchange carried) go in underscore-prefixed custom fields, which the
//! spec reserves for exactly that.

use crate::{ApprovalDecided, ApprovalRequested, HttpExchange};
use std::collections::HashSet;
use std::io::Write;

use serde_json::{Value, json};

use crate::humanize;
use crate::{AuditError, AuditEvent, SessionSummary, StoredEvent};
use airlock_record::codec::b64_encode;

mod approvals;
mod mcp;

fn headers(list: &[(String, String)]) -> Value {
    Value::Array(
        list.iter()
            .map(|(n, v)| json!({"name": n, "value": v}))
            .collect(),
    )
}

fn header<'a>(list: &'a [(String, String)], name: &str) -> Option<&'a str> {
    list.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn query_string(url: &str) -> Value {
    let query = url
        .split_once('?')
        .map(|(_, q)| q.split('#').next().unwrap_or(""))
        .unwrap_or("");
    Value::Array(
        query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (n, v) = p.split_once('=').unwrap_or((p, ""));
                json!({"name": n, "value": v})
            })
            .collect(),
    )
}

fn request_cookies(list: &[(String, String)]) -> Value {
    let mut out = Vec::new();
    for (n, v) in list {
        if n.eq_ignore_ascii_case("cookie") {
            for pair in v.split(';') {
                if let Some((name, value)) = pair.trim().split_once('=') {
                    out.push(json!({"name": name, "value": value}));
                }
            }
        }
    }
    Value::Array(out)
}

fn response_cookies(list: &[(String, String)]) -> Value {
    let mut out = Vec::new();
    for (n, v) in list {
        if n.eq_ignore_ascii_case("set-cookie")
            && let Some((name, value)) = v.split(';').next().and_then(|p| p.trim().split_once('='))
        {
            out.push(json!({"name": name, "value": value}));
        }
    }
    Value::Array(out)
}

fn status_text(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

/// Body as HAR text: UTF-8 verbatim, anything else base64.
fn body_text(body: &[u8]) -> (String, Option<&'static str>) {
    match std::str::from_utf8(body) {
        Ok(s) => (s.to_string(), None),
        Err(_) => (b64_encode(body), Some("base64")),
    }
}

fn entry(ev: &StoredEvent) -> Option<Value> {
    let AuditEvent::Http(HttpExchange {
        method,
        url,
        http_version,
        request_headers,
        request_body,
        request_body_truncated,
        status,
        response_headers,
        response_body,
        response_body_truncated,
        started_us,
        ms_to_headers,
        ms_total,
        decision,
        rule,
        reason,
        websocket,
        ..
    }) = &ev.event
    else {
        return None;
    };
    let started = started_us.unwrap_or(ev.ts_us);
    let total = ms_total.unwrap_or(0.0).max(0.0);
    let wait = ms_to_headers.unwrap_or(total).clamp(0.0, total);
    let mut request = json!({
        "method": method,
        "url": url,
        "httpVersion": http_version,
        "headers": headers(request_headers),
        "queryString": query_string(url),
        "cookies": request_cookies(request_headers),
        "headersSize": -1,
        "bodySize": request_body.as_ref().map_or(0, |b| b.len()),
    });
    if let (Some(body), Some(obj)) = (request_body, request.as_object_mut()) {
        let (text, encoding) = body_text(body);
        let mut post = json!({
            "mimeType": header(request_headers, "content-type").unwrap_or(""),
            "text": text,
        });
        if let (Some(enc), Some(p)) = (encoding, post.as_object_mut()) {
            p.insert("_encoding".into(), enc.into());
        }
        obj.insert("postData".into(), post);
        if *request_body_truncated {
            obj.insert("_bodyTruncated".into(), true.into());
        }
    }
    let code = status.unwrap_or(0);
    let mut content = json!({
        "size": response_body.as_ref().map_or(0, |b| b.len()),
        "mimeType": header(response_headers, "content-type").unwrap_or(""),
    });
    if let (Some(body), Some(obj)) = (response_body, content.as_object_mut()) {
        let (text, encoding) = body_text(body);
        obj.insert("text".into(), text.into());
        if let Some(enc) = encoding {
            obj.insert("encoding".into(), enc.into());
        }
        if *response_body_truncated {
            obj.insert(
                "comment".into(),
                "body truncated by airlock's capture limit".into(),
            );
        }
    }
    let response = json!({
        "status": code,
        "statusText": status_text(code),
        "httpVersion": http_version,
        "headers": headers(response_headers),
        "cookies": response_cookies(response_headers),
        "content": content,
        "redirectURL": header(response_headers, "location").unwrap_or(""),
        "headersSize": -1,
        "bodySize": response_body.as_ref().map_or(0, |b| b.len() as i64),
    });
    let mut entry = json!({
        "startedDateTime": humanize::rfc3339(started),
        "time": total,
        "request": request,
        "response": response,
        "cache": {},
        "timings": {"send": 0.0, "wait": wait, "receive": total - wait},
        "_seq": ev.seq.get(),
        "_decision": decision,
        "_rule": rule,
        "_reason": reason,
    });
    if let (Some(ws), Some(obj)) = (websocket, entry.as_object_mut()) {
        obj.insert("_webSocketMessages".into(), websocket_messages(ws));
        obj.insert(
            "_webSocketEnd".into(),
            json!({
                "closedBy": ws.closed_by,
                "closeCode": ws.close_code,
                "closeReason": ws.close_reason,
                "error": ws.error,
                "messagesToUpstream": ws.messages_to_upstream,
                "bytesToUpstream": ws.bytes_to_upstream,
                "messagesToClient": ws.messages_to_client,
                "bytesToClient": ws.bytes_to_client,
            }),
        );
    }
    Some(entry)
}

/// Chrome DevTools' convention: `{type: "send"|"receive", time (seconds
/// since the epoch), opcode, data}`; binary data as base64 (Chrome's
/// convention for opcode 2), with airlock's own fields prefixed `_`.
fn websocket_messages(ws: &crate::WebSocketRecord) -> Value {
    ws.messages
        .iter()
        .map(|m| {
            let opcode = m.opcode_number();
            let data = match (opcode, std::str::from_utf8(&m.payload)) {
                (2, _) | (_, Err(_)) => b64_encode(&m.payload),
                (_, Ok(text)) => text.to_owned(),
            };
            json!({
                "type": if m.direction == "to_client" { "receive" } else { "send" },
                "time": m.ts_us as f64 / 1_000_000.0,
                "opcode": opcode,
                "data": data,
                "_bytes": m.bytes,
                "_truncated": m.truncated,
            })
        })
        .collect()
}

/// The HAR document for a session's HTTP events. An exchange an `[[ask]]`
/// rule held carries its approval in `_approval` (`{id, outcome, scope,
/// by, note, waited_ms, body_sha256, rule, reason}`); a held request with
/// no HTTP record (the session ended while it waited, or the client went
/// away first) gets an entry of its own where its first approval record
/// is, so no request a person was asked about is missing.
pub fn to_value(summary: &SessionSummary, events: &[StoredEvent]) -> Value {
    let events = crate::collapse_exchanges(events);
    let approvals = approvals::Approvals::collect(&events);
    let mut mcp = mcp::Messages::collect(&events);
    let with_http: HashSet<crate::ExchangeId> = events
        .iter()
        .filter_map(|ev| match &ev.event {
            AuditEvent::Http(HttpExchange {
                exchange: Some(x), ..
            }) => Some(*x),
            _ => None,
        })
        .collect();
    let mut entries = Vec::new();
    for ev in &events {
        match &ev.event {
            AuditEvent::Http(HttpExchange { exchange, .. }) => {
                let Some(mut e) = entry(ev) else { continue };
                if let (Some(a), Some(obj)) = (
                    exchange.and_then(|x| approvals.for_exchange(x)),
                    e.as_object_mut(),
                ) {
                    obj.insert("_approval".into(), a.to_value());
                }
                if let (Some(calls), Some(obj)) =
                    (exchange.and_then(|x| mcp.take(x)), e.as_object_mut())
                {
                    obj.insert("_mcp".into(), calls);
                }
                entries.push(e);
            }
            AuditEvent::ApprovalRequested(ApprovalRequested { .. })
            | AuditEvent::ApprovalDecided(ApprovalDecided { .. }) => {
                let Some(a) = approvals.of(ev) else { continue };
                let recorded = a.exchange().is_some_and(|x| with_http.contains(&x));
                if !recorded
                    && a.first_seq() == Some(ev.seq)
                    && let Some(e) = a.entry()
                {
                    entries.push(e);
                }
            }
            _ => {}
        }
    }
    let mut log = json!({
        "version": "1.2",
        "creator": {"name": "airlock", "version": env!("CARGO_PKG_VERSION")},
        "pages": [],
        "entries": entries,
        "comment": format!("airlock audit session {}", summary.id),
    });
    // MCP messages whose exchange has no HTTP record here (none should: a
    // message is decided inside its exchange), so that none is missing.
    if let (Some(rest), Some(obj)) = (mcp.rest(), log.as_object_mut()) {
        obj.insert("_mcp".into(), rest);
    }
    json!({ "log": log })
}

pub fn write(
    summary: &SessionSummary,
    events: &[StoredEvent],
    out: &mut dyn Write,
) -> Result<(), AuditError> {
    serde_json::to_writer_pretty(&mut *out, &to_value(summary, events))?;
    out.write_all(b"\n")
        .map_err(AuditError::io("cannot write HAR export"))
}
