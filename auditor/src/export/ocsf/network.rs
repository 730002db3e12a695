//! What crossed the network, as OCSF's Network Activity category: HTTP
//! exchanges and the approvals of held requests (HTTP Activity, 4002), DNS
//! queries (DNS Activity, 4003) and TCP connections (Network Activity, 4001).

use serde_json::{Map, Value, json};

use super::envelope::{
    Activity, Context, DNS_ACTIVITY, Event, HTTP_ACTIVITY, NETWORK_ACTIVITY, millis,
};
use crate::{ApprovalDecided, ApprovalRequested, DnsQuery, HttpExchange, TcpConnection, Verdict};

/// HTTP Activity's activity is the request's method.
fn method_activity(method: &str) -> Activity {
    match method.to_ascii_uppercase().as_str() {
        "CONNECT" => Activity(1, "Connect"),
        "DELETE" => Activity(2, "Delete"),
        "GET" => Activity(3, "Get"),
        "HEAD" => Activity(4, "Head"),
        "OPTIONS" => Activity(5, "Options"),
        "POST" => Activity(6, "Post"),
        "PUT" => Activity(7, "Put"),
        "TRACE" => Activity(8, "Trace"),
        "PATCH" => Activity(9, "Patch"),
        _ => Activity(99, "Other"),
    }
}

fn headers(list: &[(String, String)]) -> Value {
    list.iter()
        .map(|(n, v)| json!({"name": n, "value": v}))
        .collect()
}

fn header<'a>(list: &'a [(String, String)], name: &str) -> Option<&'a str> {
    list.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A URL's parts as OCSF's `url` object: what a SIEM filters on.
struct UrlParts<'u> {
    scheme: Option<&'u str>,
    host: Option<&'u str>,
    port: Option<u16>,
    path: &'u str,
    query: Option<&'u str>,
}

impl<'u> UrlParts<'u> {
    fn parse(url: &'u str) -> Self {
        let (scheme, rest) = match url.split_once("://") {
            Some((s, r)) => (Some(s), r),
            None => (None, url),
        };
        let rest = rest.split('#').next().unwrap_or(rest);
        let (authority, path_query) = match rest.find('/') {
            Some(i) if scheme.is_some() => (&rest[..i], &rest[i..]),
            None if scheme.is_some() => (rest, ""),
            _ => ("", rest),
        };
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let (host, port) = split_host_port(authority);
        let (path, query) = match path_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_query, None),
        };
        Self {
            scheme,
            host: (!host.is_empty()).then_some(host),
            port: port.or(match scheme {
                Some("https") => Some(443),
                Some("http") => Some(80),
                _ => None,
            }),
            path: if path.is_empty() { "/" } else { path },
            query,
        }
    }
}

/// `host:port`, `[v6]:port` or a bare host.
fn split_host_port(authority: &str) -> (&str, Option<u16>) {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        return (host, after.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => match p.parse() {
            Ok(port) => (h, Some(port)),
            Err(_) => (authority, None),
        },
        _ => (authority, None),
    }
}

fn url_object(url: &str) -> (Value, Value) {
    let parts = UrlParts::parse(url);
    let mut obj = Map::new();
    obj.insert("url_string".into(), url.into());
    obj.insert("path".into(), parts.path.into());
    if let Some(s) = parts.scheme {
        obj.insert("scheme".into(), s.into());
    }
    if let Some(h) = parts.host {
        obj.insert("hostname".into(), h.into());
    }
    if let Some(p) = parts.port {
        obj.insert("port".into(), p.into());
    }
    if let Some(q) = parts.query {
        obj.insert("query_string".into(), q.into());
    }
    (Value::Object(obj), endpoint(parts.host, parts.port))
}

/// An endpoint by address or name, and port.
pub(super) fn endpoint(host: Option<&str>, port: Option<u16>) -> Value {
    let mut obj = Map::new();
    match host {
        Some(h) if h.parse::<std::net::IpAddr>().is_ok() => {
            obj.insert("ip".into(), h.into());
        }
        Some(h) => {
            obj.insert("hostname".into(), h.into());
        }
        None => {}
    }
    if let Some(p) = port {
        obj.insert("port".into(), p.into());
    }
    if obj.is_empty() {
        return Value::Null;
    }
    Value::Object(obj)
}

/// Outbound TCP, as everything the sandbox sends is.
fn outbound(uid: Option<String>) -> Value {
    let mut conn = json!({
        "protocol_name": "tcp",
        "protocol_num": 6,
        "direction_id": 2,
        "direction": "Outbound",
    });
    if let (Some(uid), Some(obj)) = (uid, conn.as_object_mut()) {
        obj.insert("uid".into(), uid.into());
    }
    conn
}

fn http_request(
    method: &str,
    url: &str,
    version: Option<&str>,
    hdrs: &[(String, String)],
) -> Value {
    let (url, _) = url_object(url);
    let mut req = json!({
        "url": url,
        "http_headers": headers(hdrs),
    });
    if let Some(obj) = req.as_object_mut() {
        // OCSF knows the nine standard methods only; another (WebDAV's
        // PROPFIND) is the activity "Other" and kept in `unmapped`.
        if method_activity(method).0 != 99 {
            obj.insert("http_method".into(), method.to_ascii_uppercase().into());
        }
        if let Some(v) = version {
            obj.insert("version".into(), v.into());
        }
        if let Some(ua) = header(hdrs, "user-agent") {
            obj.insert("user_agent".into(), ua.into());
        }
    }
    req
}

/// One HTTP record: as decided (the request and the verdict) or as ended
/// (the response too); `metadata.correlation_uid` links the two.
pub(super) fn http(cx: &Context<'_>, h: &HttpExchange) -> Value {
    let mut e = Event::new(*cx, HTTP_ACTIVITY, method_activity(&h.method));
    e.keep("method", h.method.clone().into())
        .verdict(h.decision)
        .rule(h.rule.as_ref().map(|r| r.as_str()), h.reason.as_deref())
        .set(
            "http_request",
            http_request(&h.method, &h.url, Some(&h.http_version), &h.request_headers),
        )
        .set("dst_endpoint", url_object(&h.url).1)
        .set(
            "connection_info",
            outbound(h.exchange.map(|x| format!("exchange-{x}"))),
        )
        .set("start_time", h.started_us.map(millis).into())
        .set(
            "duration",
            h.ms_total.map(|ms| ms.max(0.0).round() as i64).into(),
        );
    if let Some(code) = h.status {
        let mut resp = json!({
            "code": code,
            "http_headers": headers(&h.response_headers),
        });
        if let (Some(ct), Some(obj)) = (
            header(&h.response_headers, "content-type"),
            resp.as_object_mut(),
        ) {
            obj.insert("content_type".into(), ct.into());
        }
        e.set("http_response", resp)
            .set("http_status", code.into())
            .set(
                "traffic",
                json!({
                    "bytes_out": h.bytes_up,
                    "bytes_in": h.bytes_down,
                    "bytes": h.bytes_up.saturating_add(h.bytes_down),
                }),
            );
    }
    e.message(format!(
        "{} {} {}{}",
        h.decision,
        h.method,
        h.url,
        h.status.map(|s| format!(" -> {s}")).unwrap_or_default()
    ));
    if let Some(ws) = &h.websocket {
        e.keep(
            "websocket",
            json!({
                "closed_by": ws.closed_by,
                "close_code": ws.close_code,
                "messages_to_upstream": ws.messages_to_upstream,
                "bytes_to_upstream": ws.bytes_to_upstream,
                "messages_to_client": ws.messages_to_client,
                "bytes_to_client": ws.bytes_to_client,
            }),
        );
    }
    e.build()
}

/// A DNS query and its answer (DNS Activity, Traffic).
pub(super) fn dns(cx: &Context<'_>, d: &DnsQuery) -> Value {
    let mut e = Event::new(*cx, DNS_ACTIVITY, Activity(6, "Traffic"));
    let answers: Vec<Value> = d.answer.iter().map(|a| json!({"rdata": a})).collect();
    // A DNS record's `rule` holds the rule that allowed a name
    // (`policy.toml:2`), or why it was refused.
    let (rule, reason) = match d.rule.as_deref() {
        Some(r) if is_rule_ref(r) => (Some(r), None),
        other => (None, other),
    };
    e.verdict(d.decision)
        .rule(rule, reason)
        .set("query", json!({"hostname": d.name, "type": d.qtype}))
        .set("src_endpoint", json!({"hostname": device_host(cx)}))
        .message(format!("{} DNS {} {}", d.decision, d.qtype, d.name));
    if !answers.is_empty() {
        e.set("answers", Value::Array(answers));
    }
    e.build()
}

/// `FILE:LINE`, as the policy names its rules.
fn is_rule_ref(text: &str) -> bool {
    text.rsplit_once(':').is_some_and(|(file, line)| {
        !file.is_empty() && !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit())
    })
}

pub(super) fn device_host<'c>(cx: &Context<'c>) -> &'c str {
    if cx.summary.info.host.is_empty() {
        "unknown"
    } else {
        &cx.summary.info.host
    }
}

/// A TCP connection (Network Activity): Open when allowed, Refuse when
/// denied, Close (with its bytes and duration) when it ended.
pub(super) fn tcp(cx: &Context<'_>, t: &TcpConnection) -> Value {
    let activity = match (t.duration_ms, t.decision) {
        (Some(_), _) => Activity(2, "Close"),
        (None, Verdict::Deny) => Activity(5, "Refuse"),
        (None, _) => Activity(1, "Open"),
    };
    let mut e = Event::new(*cx, NETWORK_ACTIVITY, activity);
    let (addr, port) = split_host_port(&t.dst);
    let mut dst = endpoint(Some(addr), Some(port.unwrap_or(t.port)));
    if let (Some(host), Some(obj)) = (&t.host, dst.as_object_mut()) {
        obj.insert("hostname".into(), host.clone().into());
    }
    e.verdict(t.decision)
        .rule(t.rule.as_ref().map(|r| r.as_str()), t.reason.as_deref())
        .set("dst_endpoint", dst)
        .set(
            "connection_info",
            outbound(t.connection.map(|c| format!("connection-{c}"))),
        )
        .message(format!(
            "{} TCP {}",
            t.decision,
            t.host
                .as_ref()
                .map_or_else(|| t.dst.clone(), |h| format!("{h}:{}", t.port))
        ));
    if let Some(ms) = t.duration_ms {
        e.set("duration", (ms.max(0.0).round() as i64).into()).set(
            "traffic",
            json!({
                "bytes_out": t.bytes_up,
                "bytes_in": t.bytes_down,
                "bytes": t.bytes_up.saturating_add(t.bytes_down),
            }),
        );
    }
    e.build()
}

/// A request an `[[ask]]` rule held (HTTP Activity, disposition Delayed):
/// an approval is a decision about one HTTP request, so it is filed where
/// the request's own records are.
pub(super) fn approval_requested(cx: &Context<'_>, a: &ApprovalRequested) -> Value {
    let mut e = Event::new(*cx, HTTP_ACTIVITY, method_activity(&a.method));
    e.keep("method", a.method.clone().into())
        .outcome((99, "Held"), (14, "Delayed"), (2, "Low"))
        .rule(Some(a.rule.as_str()), a.reason.as_deref())
        .set(
            "http_request",
            http_request(&a.method, &a.url, None, &a.request_headers),
        )
        .set("dst_endpoint", url_object(&a.url).1)
        .keep("approval", a.approval.clone().into())
        .keep("body_bytes", a.body_bytes.into())
        .keep("body_sha256", a.body_sha256.clone().into())
        .keep("timeout_ms", a.timeout_ms.into())
        .message(format!(
            "held {} {} for approval {}",
            a.method, a.url, a.approval
        ));
    if !a.approvers.is_empty() {
        e.keep("approvers", a.approvers.clone().into());
    }
    e.build()
}

/// How a held request's wait ended: approved (Allowed, Approved), denied
/// (Denied, Rejected), or nobody decided in time or the client went away
/// (Denied, Blocked). The person who decided is `actor.user`.
pub(super) fn approval_decided(cx: &Context<'_>, a: &ApprovalDecided) -> Value {
    let mut e = Event::new(*cx, HTTP_ACTIVITY, method_activity(&a.method));
    let (action, disposition, severity) = match a.outcome.as_str() {
        "approved" => ((1, "Allowed"), (8, "Approved"), (1, "Informational")),
        "denied" => ((2, "Denied"), (25, "Rejected"), (3, "Medium")),
        _ => ((2, "Denied"), (2, "Blocked"), (3, "Medium")),
    };
    e.keep("method", a.method.clone().into())
        .outcome(action, disposition, severity)
        .rule(None, None)
        .set("http_request", http_request(&a.method, &a.url, None, &[]))
        .set("dst_endpoint", url_object(&a.url).1)
        .set("duration", a.waited_ms.into())
        .keep("approval", a.approval.clone().into())
        .keep("outcome", a.outcome.clone().into())
        .keep("scope", a.scope.clone().into())
        .keep("by", a.by.clone().into())
        .keep("note", a.note.clone().into())
        .keep("waited_ms", a.waited_ms.into())
        .keep("body_sha256", a.body_sha256.clone().into())
        .message(format!(
            "approval {} {}{}: {} {}",
            a.approval,
            a.outcome,
            a.by.as_ref()
                .map(|b| format!(" by {b}"))
                .unwrap_or_default(),
            a.method,
            a.url
        ));
    if let Some(by) = &a.by {
        e.actor_user(by);
    }
    e.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dns_records_rule_is_a_rule_only_when_it_names_a_file_and_line() {
        assert!(is_rule_ref("policy.toml:12"));
        assert!(is_rule_ref("/etc/airlock/base.toml:3"));
        assert!(!is_rule_ref("no rule allows this name"));
        assert!(!is_rule_ref("denied: by policy.toml"));
        assert!(!is_rule_ref(":12"));
    }

    #[test]
    fn a_url_is_split_as_a_siem_filters_on_it() {
        let u = UrlParts::parse("https://user@api.test:8443/a/b?x=1&y=2#frag");
        assert_eq!(
            (u.scheme, u.host, u.port, u.path, u.query),
            (
                Some("https"),
                Some("api.test"),
                Some(8443),
                "/a/b",
                Some("x=1&y=2")
            )
        );
        let u = UrlParts::parse("http://[2001:db8::1]/");
        assert_eq!(
            (u.host, u.port, u.path),
            (Some("2001:db8::1"), Some(80), "/")
        );
        let u = UrlParts::parse("https://api.test");
        assert_eq!(
            (u.host, u.port, u.path, u.query),
            (Some("api.test"), Some(443), "/", None)
        );
        let u = UrlParts::parse("/relative?q");
        assert_eq!((u.host, u.path, u.query), (None, "/relative", Some("q")));
    }
}
