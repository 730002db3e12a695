//! One HTTP request through the proxy: the single place where a request is
//! checked against its connection, decided by the policy, given its
//! credentials, forwarded, and recorded.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use airlock_policy::{BodyInput, Decision, DefaultAction, Policy, RequestInfo, Scheme};
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::body::{BodyStalled, CaptureHandle, IdleLimit, ProxyBody, Tap, full};
use crate::credentials::ResponseScrub;
use crate::engine::{BODY_IDLE_TIMEOUT, ConnInfo, Engine};
use crate::events::{Event, RequestId, TimestampUs, Verdict};
use crate::refusal::{Refusal, bad_gateway};
use crate::rules::Rules;
use crate::target::{Target, default_port, names, parse_authority};
use crate::upgrade::{self, UpgradeAsk};
use crate::upstream::{ResolveError, explain};
use crate::websocket::{self, RelayContext};

/// Serve one request; never fails at the HTTP level (errors become responses).
pub async fn handle(
    engine: Arc<Engine>,
    conn: Arc<ConnInfo>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let started = Instant::now();
    let request_id = RequestId(engine.ids.next());
    let rules = engine.rules.load_full();
    let method = req.method().as_str().to_owned();

    let target = match request_target(&conn, &req) {
        Ok(t) => t,
        Err(refusal) => {
            // A refused connection still gets the rule that would allow this request.
            let suggestion = conn.bound.as_ref().map(|bound| {
                Policy::suggest_rule(&RequestInfo {
                    scheme: conn.scheme,
                    host: &bound.host,
                    port: bound.port,
                    method: &method,
                    path_and_query: req.uri().path_and_query().map_or("/", |p| p.as_str()),
                })
            });
            return Ok(refuse(
                &engine,
                &conn,
                request_id,
                &rules,
                &req,
                &display_url(&conn, req.uri()),
                suggestion.as_deref(),
                refusal,
            ));
        }
    };
    let (scheme, target) = target;
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_owned();
    let path_and_query = if path_and_query.is_empty() {
        "/".to_owned()
    } else {
        path_and_query
    };
    let url = target.url(scheme, &path_and_query);
    let info = RequestInfo {
        scheme,
        host: &target.host,
        port: target.port,
        method: &method,
        path_and_query: &path_and_query,
    };

    // An upgrade no rule could grant is refused whatever the policy says.
    let asked_upgrade = match upgrade::asked(req.headers(), req.version()) {
        UpgradeAsk::None => None,
        UpgradeAsk::Grantable(protocol) => Some(protocol),
        UpgradeAsk::Refused(why) => {
            return Ok(refuse(
                &engine,
                &conn,
                request_id,
                &rules,
                &req,
                &url,
                None,
                Refusal::Upgrade(why),
            ));
        }
    };

    // The body prefix a body constraint needs, bounded.
    let (parts, body) = req.into_parts();
    let (body, buffered) = match rules.policy.needs_body(&info) {
        None => (Some(body), None),
        Some(limit) => match read_prefix(body, limit).await {
            Ok(prefix) => (None, Some(prefix)),
            Err(e) => {
                let req = Request::from_parts(parts, ());
                let refusal = Refusal::BadRequest(format!("reading the request body: {e}"));
                return Ok(refuse(
                    &engine, &conn, request_id, &rules, &req, &url, None, refusal,
                ));
            }
        },
    };
    // Every Content-Type header: two are refused on constrained rules. A
    // value that is not visible ASCII stays as "" (an unknown type), so it
    // is refused rather than dropped.
    let content_types: Vec<&str> = parts
        .headers
        .get_all(header::CONTENT_TYPE)
        .iter()
        .map(|v| v.to_str().unwrap_or(""))
        .collect();
    let body_input = buffered.as_ref().map(|(bytes, complete)| BodyInput {
        content_types: &content_types,
        bytes,
        complete: *complete,
    });

    let decision = match asked_upgrade {
        Some(protocol) => rules
            .policy
            .evaluate_upgrade(&info, body_input.as_ref(), protocol),
        None => rules.policy.evaluate(&info, body_input.as_ref()),
    };
    let (mut verdict, allowance) = match decision {
        Decision::Deny(denial) => {
            let req = Request::from_parts(parts, ());
            let refusal = Refusal::Policy(denial);
            let suggestion = match asked_upgrade {
                Some(protocol) => Policy::suggest_upgrade_rule(&info, protocol),
                None => Policy::suggest_rule(&info),
            };
            return Ok(refuse(
                &engine,
                &conn,
                request_id,
                &rules,
                &req,
                &url,
                Some(&suggestion),
                refusal,
            ));
        }
        Decision::Allow(a) => (
            if a.would_deny.is_some() {
                Verdict::Report
            } else {
                Verdict::Allow
            },
            a,
        ),
    };
    let mut report_reason = allowance.would_deny.as_ref().map(|d| d.reason.to_string());
    if let (Some(rule), Some(max)) = (&allowance.rule, allowance.max_requests)
        && !engine.quotas.try_take(rule, max)
    {
        if rules.policy.default_action() == DefaultAction::Report {
            // Report mode never blocks: record what deny mode would have done.
            verdict = Verdict::Report;
            report_reason = Some(format!(
                "the rule's quota of {max} requests per session is used up"
            ));
        } else {
            let req = Request::from_parts(parts, ());
            let refusal = Refusal::Quota {
                rule: rule.clone(),
                max,
            };
            return Ok(refuse(
                &engine, &conn, request_id, &rules, &req, &url, None, refusal,
            ));
        }
    }
    // An IP literal never passes through the connector's resolver, so check it here.
    if target.host.ip().is_some()
        && let Err(e) = engine.upstream.resolver.resolve(&target.host).await
    {
        let req = Request::from_parts(parts, ());
        let refusal = Refusal::NonPublicAddress(e.to_string());
        return Ok(refuse(
            &engine, &conn, request_id, &rules, &req, &url, None, refusal,
        ));
    }

    // Build the upstream request; it upgrades only as the policy granted.
    let granted_upgrade = allowance.upgrade.filter(|p| asked_upgrade == Some(*p));
    let upgrade = granted_upgrade.is_some();
    let mut headers = parts.headers.clone();
    strip_hop_by_hop(&mut headers, upgrade);
    if let Some(protocol) = granted_upgrade {
        upgrade::prepare_request(&mut headers, protocol);
    }
    headers.remove(header::HOST);
    // Secrets only ever travel encrypted: a plain-HTTP request to a
    // credential's host goes out without it (and a placeholder stays one).
    let injected = match scheme {
        Scheme::Https => rules.credentials.inject(&target.host, &mut headers),
        Scheme::Http => Default::default(),
    };
    if !injected.is_empty() {
        // A compressed echo could not be scrubbed; ask for identity.
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    let recorded_headers = record_headers(&rules, &headers);
    // In report mode the record names the rule deny mode would have applied.
    let rule_text = allowance
        .rule
        .as_ref()
        .or(allowance.would_deny.as_ref().and_then(|d| d.rule.as_ref()))
        .map(ToString::to_string);
    let reason = report_reason;
    let request_event = Event::Request {
        ts: TimestampUs::now(),
        conn: conn.id,
        request: request_id,
        method: method.clone(),
        url: rules.credentials.redact(&url),
        http_version: format!("{:?}", parts.version),
        headers: recorded_headers,
        verdict,
        rule: rule_text,
        reason,
        credentials: injected.names.clone(),
        refused_status: None,
    };
    if let Err(e) = engine.record(request_event).await {
        let req = Request::from_parts(parts, ());
        let refusal = Refusal::AuditUnavailable(e.to_string());
        return Ok(refuse(
            &engine, &conn, request_id, &rules, &req, &url, None, refusal,
        ));
    }

    let request_capture = CaptureHandle::default();
    let body_stalled = Arc::new(AtomicBool::new(false));
    let upstream_body: ProxyBody = match (body, buffered) {
        (_, Some((bytes, _))) => {
            let tap = Tap::new(full(bytes), request_capture.clone(), engine.capture_cap);
            tap.boxed_unsync()
        }
        (Some(body), None) => Tap::new(
            IdleLimit::new(body, BODY_IDLE_TIMEOUT, body_stalled.clone()),
            request_capture.clone(),
            engine.capture_cap,
        )
        .boxed_unsync(),
        (None, None) => full(Bytes::new()),
    };
    let uri: Uri = match url.parse() {
        Ok(u) => u,
        Err(e) => {
            return Ok(bad_gateway(
                &method,
                &url,
                &format!("cannot form upstream URL: {e}"),
            ));
        }
    };
    let mut upstream_req = Request::new(upstream_body);
    *upstream_req.method_mut() = parts.method.clone();
    *upstream_req.uri_mut() = uri;
    // What the upstream's 101 must answer (the WebSocket key).
    let upgrade_request_headers = if upgrade {
        headers.clone()
    } else {
        HeaderMap::new()
    };
    *upstream_req.headers_mut() = headers;
    let mut client_parts_for_upgrade = Request::from_parts(parts, ());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut client_parts_for_upgrade));

    let client = engine.upstream.client(upgrade);
    let response = match client.request(upstream_req).await {
        Ok(r) => r,
        Err(e) => {
            let (why, resolve) = if body_stalled.load(Ordering::Acquire) {
                (BodyStalled(BODY_IDLE_TIMEOUT).to_string(), None)
            } else {
                explain(&e)
            };
            let response = match resolve {
                Some(ResolveError::NonPublic { .. }) => Refusal::NonPublicAddress(why.clone())
                    .response(&method, &url, &rules.policy, None),
                _ => bad_gateway(&method, &url, &why),
            };
            engine.record_lossy(response_event(
                &conn,
                request_id,
                response.status(),
                Version::HTTP_11,
                Vec::new(),
                &request_capture,
                &CaptureHandle::default(),
                started,
                started,
                Some(why),
            ));
            return Ok(response);
        }
    };
    let headers_at = Instant::now();
    let mut response = response;
    // Everything from here on came from an upstream that may have seen a
    // credential: one scrub for its head, body and trailers alike.
    let scrub = ResponseScrub::new(&injected);
    // A switch nobody asked for, or to another protocol, opens no tunnel.
    if let Err(why) = upgrade::check_switch(
        response.status(),
        response.headers(),
        granted_upgrade,
        &upgrade_request_headers,
    ) {
        let reply = bad_gateway(&method, &url, &why);
        // The refused head is recorded scrubbed, like any other.
        let (mut parts, _) = response.into_parts();
        scrub.iter().for_each(|s| s.head(&mut parts));
        engine.record_lossy(response_event(
            &conn,
            request_id,
            reply.status(),
            parts.version,
            header_pairs(&parts.headers),
            &request_capture,
            &CaptureHandle::default(),
            started,
            headers_at,
            Some(why),
        ));
        return Ok(reply);
    }
    if let Some(client_upgrade) = client_upgrade
        && response.status() == StatusCode::SWITCHING_PROTOCOLS
    {
        let upstream_upgrade = hyper::upgrade::on(&mut response);
        let (mut parts, _) = response.into_parts();
        scrub.iter().for_each(|s| s.head(&mut parts));
        engine.record_lossy(response_event(
            &conn,
            request_id,
            parts.status,
            parts.version,
            header_pairs(&parts.headers),
            &request_capture,
            &CaptureHandle::default(),
            started,
            headers_at,
            None,
        ));
        // Recorded after the 101, and always ends with its own end event.
        let relay = RelayContext {
            engine: engine.clone(),
            conn: conn.id,
            request: request_id,
            injected: injected.clone(),
        };
        tokio::spawn(websocket::relay(relay, client_upgrade, upstream_upgrade));
        return Ok(Response::from_parts(parts, full(Bytes::new())));
    }

    let (mut resp_parts, resp_body) = response.into_parts();
    if let Some(scrub) = &scrub {
        // Every Content-Encoding header counts (clients apply them all, in
        // order), and so does a Transfer-Encoding coding other than chunked.
        if let Some(encoding) = unscrubbable_coding(&resp_parts.headers) {
            let why = format!(
                "upstream sent a {encoding}-encoded response to a request carrying a credential although identity was requested; Airlock cannot check it for the secret"
            );
            return Ok(bad_gateway(&method, &url, &why));
        }
        scrub.head(&mut resp_parts);
        resp_parts.headers.remove(header::CONTENT_LENGTH);
    }
    strip_hop_by_hop(&mut resp_parts.headers, false);

    let response_capture = CaptureHandle::default();
    let mut tap = Tap::new(resp_body, response_capture.clone(), engine.capture_cap);
    if let Some(scrub) = &scrub {
        tap = tap.scrub(scrub.body());
    }
    let on_end = {
        let engine = engine.clone();
        let conn = conn.clone();
        let status = resp_parts.status;
        let version = resp_parts.version;
        let recorded = header_pairs(&resp_parts.headers);
        let request_capture = request_capture.clone();
        move |error: Option<String>| {
            engine.record_lossy(response_event(
                &conn,
                request_id,
                status,
                version,
                recorded,
                &request_capture,
                &response_capture,
                started,
                headers_at,
                error,
            ));
        }
    };
    Ok(Response::from_parts(
        resp_parts,
        tap.on_end(on_end).boxed_unsync(),
    ))
}

/// The first content or transfer coding in `headers` that the scrubber cannot
/// see through (anything but identity, and chunked for Transfer-Encoding).
fn unscrubbable_coding(headers: &HeaderMap) -> Option<String> {
    let codings = |name| {
        headers
            .get_all(name)
            .iter()
            .flat_map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .filter(|c| !c.is_empty())
            .collect::<Vec<_>>()
    };
    let content = codings(header::CONTENT_ENCODING)
        .into_iter()
        .find(|c| c != "identity");
    content.or_else(|| {
        codings(header::TRANSFER_ENCODING)
            .into_iter()
            .find(|c| c != "identity" && c != "chunked")
    })
}

/// The target and scheme a request is for, after checking it against its connection.
fn request_target(conn: &ConnInfo, req: &Request<Incoming>) -> Result<(Scheme, Target), Refusal> {
    if let Some(refusal) = &conn.refusal {
        return Err(refusal.clone());
    }
    if req.method() == Method::CONNECT {
        return Err(Refusal::NestedConnect);
    }
    let host_header = req
        .headers()
        .get(header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
    match &conn.bound {
        Some(bound) => {
            let scheme = conn.scheme;
            let mismatch = |named: &str| Refusal::HostMismatch {
                named: named.to_owned(),
                connection: bound.to_string(),
            };
            if let Some(authority) = req.uri().authority()
                && !names(authority.as_str(), bound, scheme)
            {
                return Err(mismatch(authority.as_str()));
            }
            if let Some(uri_scheme) = req.uri().scheme_str()
                && uri_scheme != crate::target::scheme_str(scheme)
            {
                return Err(mismatch(&format!("{uri_scheme}://")));
            }
            if let Some(h) = &host_header
                && !names(h, bound, scheme)
            {
                return Err(mismatch(h));
            }
            Ok((scheme, bound.clone()))
        }
        None => {
            // The explicit proxy's plain-HTTP front: absolute-form URLs name the target.
            let uri = req.uri();
            match uri.scheme_str() {
                Some("http") => {}
                Some("https") => {
                    return Err(Refusal::BadRequest(
                        "https:// URLs must be tunnelled with CONNECT".into(),
                    ));
                }
                _ => {
                    return Err(Refusal::BadRequest(
                        "a proxy request needs an absolute URL (http://host/path)".into(),
                    ));
                }
            }
            let authority = uri
                .authority()
                .ok_or_else(|| Refusal::BadRequest("URL without a host".into()))?;
            let target = parse_authority(authority.as_str(), default_port(Scheme::Http))
                .map_err(|e| Refusal::BadRequest(e.to_string()))?;
            if let Some(h) = &host_header
                && !names(h, &target, Scheme::Http)
            {
                return Err(Refusal::HostMismatch {
                    named: h.clone(),
                    connection: target.to_string(),
                });
            }
            Ok((Scheme::Http, target))
        }
    }
}

fn display_url(conn: &ConnInfo, uri: &Uri) -> String {
    match (&conn.bound, uri.scheme()) {
        (Some(t), None) => t.url(
            conn.scheme,
            uri.path_and_query().map_or("/", |p| p.as_str()),
        ),
        _ => uri.to_string(),
    }
}

/// Record and answer a refusal.
#[allow(clippy::too_many_arguments)]
fn refuse<B>(
    engine: &Engine,
    conn: &ConnInfo,
    request_id: RequestId,
    rules: &Rules,
    req: &Request<B>,
    url: &str,
    suggestion: Option<&str>,
    refusal: Refusal,
) -> Response<ProxyBody> {
    let method = req.method().as_str();
    engine.record_lossy(Event::Request {
        ts: TimestampUs::now(),
        conn: conn.id,
        request: request_id,
        method: method.to_owned(),
        url: rules.credentials.redact(url),
        http_version: format!("{:?}", req.version()),
        headers: record_headers(rules, req.headers()),
        verdict: Verdict::Deny,
        rule: refusal.rule().map(ToString::to_string),
        reason: Some(refusal.reason()),
        credentials: Vec::new(),
        refused_status: Some(refusal.status().as_u16()),
    });
    tracing::info!(client = %conn.client, front = ?conn.front, method, url, reason = %refusal.reason(), "denied");
    refusal.response(method, url, &rules.policy, suggestion)
}

#[allow(clippy::too_many_arguments)]
fn response_event(
    conn: &ConnInfo,
    request: RequestId,
    status: StatusCode,
    version: Version,
    headers: Vec<(String, String)>,
    request_capture: &CaptureHandle,
    response_capture: &CaptureHandle,
    started: Instant,
    headers_at: Instant,
    error: Option<String>,
) -> Event {
    Event::Response {
        ts: TimestampUs::now(),
        conn: conn.id,
        request,
        status: status.as_u16(),
        http_version: format!("{version:?}"),
        headers,
        request_body: request_capture.snapshot(),
        response_body: response_capture.snapshot(),
        time_to_headers_us: micros(headers_at.duration_since(started)),
        total_us: micros(started.elapsed()),
        error,
    }
}

/// Response headers as they go into the record.
fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Headers as they go into the record: every secret replaced by its marker.
fn record_headers(rules: &Rules, headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            let text = String::from_utf8_lossy(v.as_bytes());
            (k.as_str().to_owned(), rules.credentials.redact(&text))
        })
        .collect()
}

/// Read at most `limit` bytes of a body; `complete` is false when there was more.
async fn read_prefix(body: Incoming, limit: usize) -> Result<(Bytes, bool), String> {
    let mut body = body;
    let mut buf = BytesMut::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| e.to_string())?;
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
                if buf.len() > limit {
                    return Ok::<bool, String>(false);
                }
            }
        }
        Ok(true)
    };
    let complete = tokio::time::timeout(crate::engine::BODY_READ_TIMEOUT, read)
        .await
        .map_err(|_| "timed out waiting for the body".to_owned())??;
    Ok((buf.freeze(), complete))
}

fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = String> + '_ {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// Remove hop-by-hop headers (RFC 9110 §7.6.1), keeping the upgrade pair when upgrading.
fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    let named: Vec<HeaderName> = connection_tokens(headers)
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    for name in named {
        if !(keep_upgrade && name == header::UPGRADE) {
            headers.remove(name);
        }
    }
    let te_trailers = headers
        .get(header::TE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    for name in [
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
    ] {
        headers.remove(name);
    }
    for name in ["keep-alive", "proxy-connection"] {
        headers.remove(name);
    }
    if keep_upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::CONNECTION);
        headers.remove(header::UPGRADE);
    }
    if te_trailers {
        // gRPC needs `te: trailers` end to end; it is the one TE value HTTP/2 allows.
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn every_coding_header_is_checked() {
        assert_eq!(unscrubbable_coding(&headers(&[])), None);
        assert_eq!(
            unscrubbable_coding(&headers(&[("content-encoding", "identity")])),
            None
        );
        assert_eq!(
            unscrubbable_coding(&headers(&[("transfer-encoding", "chunked")])),
            None
        );
        // A second header behind an innocent first one (found by
        // tests/adversarial.rs: only the first was checked before).
        assert_eq!(
            unscrubbable_coding(&headers(&[
                ("content-encoding", "identity"),
                ("content-encoding", "gzip")
            ])),
            Some("gzip".into())
        );
        assert_eq!(
            unscrubbable_coding(&headers(&[("content-encoding", "identity, BR")])),
            Some("br".into())
        );
        assert_eq!(
            unscrubbable_coding(&headers(&[("transfer-encoding", "gzip, chunked")])),
            Some("gzip".into())
        );
    }
}
