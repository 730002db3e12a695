//! One HTTP request through the proxy: the single place where a request is
//! checked against its connection, decided by the policy, given its
//! credentials, forwarded, and recorded. This file tells the request's story
//! step by step; each step's rules live in a module named for them:
//!
//! - `request_target`: which host the request is for (no domain fronting);
//! - `body_prefix`: the bounded body a body constraint is checked against;
//! - `hop_by_hop`: the headers that never cross the proxy;
//! - `codings`: the responses the scrubber cannot read;
//! - `context`: the request's context value, which refuses and records;
//! - `refused_body`: the body of a refused request, read for the record only.

mod approval;
mod body_prefix;
mod codings;
mod context;
mod ending;
mod hop_by_hop;
mod mcp;
mod refused_body;
mod request_target;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use airlock_policy::{
    Allowance, BodyInput, Decision, DefaultAction, Denial, DenyReason, Policy, RequestInfo, Scheme,
    UpgradeProtocol,
};
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Request, Response, StatusCode, Uri};
use http_body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use airlock_record::RuleRef;

use crate::body::{BodyStalled, CaptureHandle, IdleLimit, ProxyBody, Tap, full};
use crate::credentials::{Injected, ResponseScrub};
use crate::engine::{BODY_IDLE_TIMEOUT, ConnInfo, Engine};
use crate::events::{Event, TimestampUs, Verdict};
use crate::mcp::{AnswerMode, McpAnswerBody};
use crate::refusal::{Refusal, bad_gateway};
use crate::target::Target;
use crate::upgrade::{self, UpgradeAsk};
use crate::upstream::{ResolveError, explain};
use crate::websocket::{self, RelayContext};

use self::body_prefix::read_prefix;
use self::codings::unscrubbable_coding;
use self::context::{Early, Exchange, RecordedHead, Ruling};
use self::ending::Ending;
use self::hop_by_hop::strip_hop_by_hop;
use self::mcp::McpForward;
use self::request_target::{display_url, request_target};

/// A response either way: `Err` is an early answer, so each step can end the
/// story with `?`.
type Answer = Result<Response<ProxyBody>, Early>;

/// Serve one request; never fails at the HTTP level (errors become responses).
pub(crate) async fn handle(
    engine: Arc<Engine>,
    conn: Arc<ConnInfo>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let exchange = Exchange::new(engine, conn);
    let (head, body) = req.into_parts();
    Ok(exchange.run(head, body).await)
}

/// Where the request goes, as the policy sees it.
struct Destination {
    scheme: Scheme,
    target: Target,
    path_and_query: String,
    url: String,
}

impl Destination {
    fn info<'a>(&'a self, method: &'a str) -> RequestInfo<'a> {
        RequestInfo {
            scheme: self.scheme,
            host: &self.target.host,
            port: self.target.port,
            method,
            path_and_query: &self.path_and_query,
        }
    }
}

/// The request body as far as the exchange has got with it: what is
/// forwarded, or read for a refusal's record.
enum RequestBody {
    /// Not read yet.
    Streamed(Incoming),
    /// The prefix a body constraint read (the whole body when `complete`).
    Buffered { bytes: Bytes, complete: bool },
    /// Gone upstream.
    Forwarded,
}

impl RequestBody {
    /// The body no byte of which was read yet, taken out; None (and left
    /// as it is) when reading has begun.
    fn take_unread(&mut self) -> Option<Incoming> {
        match std::mem::replace(self, Self::Forwarded) {
            Self::Streamed(incoming) => Some(incoming),
            other => {
                *self = other;
                None
            }
        }
    }
}

/// What the policy allowed, as the record and forwarding need it.
struct Allowed {
    verdict: Verdict,
    /// The deciding rule; in report mode, the rule deny mode would have applied.
    rule: Option<String>,
    /// In report mode, why deny mode would have refused.
    report_reason: Option<String>,
    /// The protocol this request may switch to.
    upgrade: Option<UpgradeProtocol>,
}

/// A request on its way upstream: what its response needs.
struct Sent {
    /// The request's end, to be recorded once.
    ending: Ending,
    injected: Injected,
    upgrade: Option<UpgradeProtocol>,
    /// The forwarded request's headers when upgrading (the 101 must answer
    /// its WebSocket key).
    upgrade_request: HeaderMap,
    client_upgrade: Option<OnUpgrade>,
    /// An MCP server's answer is read by the MCP filter.
    mcp: Option<McpForward>,
}

impl Exchange {
    async fn run(&self, head: Parts, body: Incoming) -> Response<ProxyBody> {
        // Known before any byte is read: a refused body's total length.
        let declared = body.size_hint().exact();
        let mut body = RequestBody::Streamed(body);
        match self.steps(head, &mut body).await {
            Ok(response) => response,
            Err(Early::Answered(response)) => *response,
            // Whatever step refused it, the record keeps what it carried.
            Err(Early::Refused(refused)) => self.record_refusal(*refused, body, declared).await,
        }
    }

    async fn steps(&self, head: Parts, body: &mut RequestBody) -> Answer {
        let destination = self.destination(&head)?;
        let allowed = self.decide(&head, body, &destination).await?;
        let mcp = self.mcp(&head, body, &destination).await?;
        self.forward(head, body, &destination, allowed, mcp).await
    }

    /// Step 1: the request must name its connection's destination.
    fn destination(&self, head: &Parts) -> Result<Destination, Early> {
        let method = head.method.as_str();
        let (scheme, target) = request_target(&self.conn, head).map_err(|refusal| {
            // A refused connection still gets the rule that would allow this request.
            let suggestion = self.conn.bound.as_ref().map(|bound| {
                Policy::suggest_rule(&RequestInfo {
                    scheme: self.conn.scheme,
                    host: &bound.host,
                    port: bound.port,
                    method,
                    path_and_query: head.uri.path_and_query().map_or("/", |p| p.as_str()),
                })
            });
            let url = display_url(&self.conn, &head.uri);
            self.refuse(head, &url, suggestion.as_deref(), refusal)
        })?;
        let path_and_query = match head.uri.path_and_query().map(|pq| pq.as_str()) {
            None | Some("") => "/".to_owned(),
            Some(pq) => pq.to_owned(),
        };
        let url = target.url(scheme, &path_and_query);
        Ok(Destination {
            scheme,
            target,
            path_and_query,
            url,
        })
    }

    /// Step 2: the policy decides (an upgrade, the body prefix a constraint
    /// needs, the rule's quota, and the public-address rule for literals).
    async fn decide(
        &self,
        head: &Parts,
        body: &mut RequestBody,
        destination: &Destination,
    ) -> Result<Allowed, Early> {
        let url = &destination.url;
        let info = destination.info(head.method.as_str());
        let policy = &self.rules.policy;

        // An upgrade no rule could grant is refused whatever the policy says.
        let asked_upgrade = match upgrade::asked(&head.headers, head.version) {
            UpgradeAsk::None => None,
            UpgradeAsk::Grantable(protocol) => Some(protocol),
            UpgradeAsk::Refused(why) => {
                return Err(self.refuse(head, url, None, Refusal::Upgrade(why)));
            }
        };

        // The body prefix a body constraint needs, bounded.
        if let Some(limit) = policy.needs_body(&info)
            && let Some(incoming) = body.take_unread()
        {
            let mut buf = BytesMut::new();
            let read = read_prefix(incoming, limit, &mut buf).await;
            // What was read stays for the record, a refusal's included.
            *body = RequestBody::Buffered {
                bytes: buf.freeze(),
                complete: matches!(read, Ok(true)),
            };
            if let Err(e) = read {
                let refusal = Refusal::BadRequest(format!("reading the request body: {e}"));
                return Err(self.refuse(head, url, None, refusal));
            }
        }
        let prefix = match &*body {
            RequestBody::Buffered { bytes, complete } => Some((bytes, *complete)),
            _ => None,
        };
        let (decision, approved) = match self.evaluate(head, &info, prefix, asked_upgrade) {
            // Held until a person decides; approved, it goes on as if an
            // allow rule (the ask rule) had matched.
            Decision::Ask(ask) => {
                let approved = self.await_approval(head, destination, &ask, prefix).await?;
                let allowance = Allowance {
                    rule: Some(ask.rule),
                    max_requests: None,
                    would_deny: None,
                    upgrade: None,
                };
                (Decision::Allow(allowance), Some(approved))
            }
            decision => (decision, None),
        };
        let mut allowed = self
            .allowed(head, destination, decision, asked_upgrade)
            .await?;
        if let Some(approved) = approved {
            allowed.report_reason = Some(approved.line);
        }
        Ok(allowed)
    }

    fn evaluate(
        &self,
        head: &Parts,
        info: &RequestInfo<'_>,
        body: Option<(&Bytes, bool)>,
        asked_upgrade: Option<UpgradeProtocol>,
    ) -> Decision {
        // Every Content-Type header: two are refused on constrained rules. A
        // value that is not visible ASCII stays as "" (an unknown type), so it
        // is refused rather than dropped.
        let content_types: Vec<&str> = head
            .headers
            .get_all(header::CONTENT_TYPE)
            .iter()
            .map(|v| v.to_str().unwrap_or(""))
            .collect();
        let body_input = body.map(|(bytes, complete)| BodyInput {
            content_types: &content_types,
            bytes,
            complete,
        });
        let policy = &self.rules.policy;
        match asked_upgrade {
            Some(protocol) => policy.evaluate_upgrade(info, body_input.as_ref(), protocol),
            None => policy.evaluate(info, body_input.as_ref()),
        }
    }

    /// The policy's decision, then the rule's quota and the public-address
    /// rule for an IP literal.
    async fn allowed(
        &self,
        head: &Parts,
        destination: &Destination,
        decision: Decision,
        asked_upgrade: Option<UpgradeProtocol>,
    ) -> Result<Allowed, Early> {
        let url = &destination.url;
        let allowance = match decision {
            Decision::Deny(denial) => {
                let info = destination.info(head.method.as_str());
                let suggestion = match asked_upgrade {
                    Some(protocol) => Policy::suggest_upgrade_rule(&info, protocol),
                    None => Policy::suggest_rule(&info),
                };
                return Err(self.refuse(head, url, Some(&suggestion), Refusal::Policy(denial)));
            }
            Decision::Allow(allowance) => allowance,
            // Resolved by `decide` before it gets here; never forwarded unasked.
            Decision::Ask(ask) => {
                let denial = Denial {
                    rule: Some(ask.rule),
                    reason: DenyReason::NeedsApproval,
                };
                return Err(self.refuse(head, url, None, Refusal::Policy(denial)));
            }
        };
        let mut verdict = if allowance.would_deny.is_some() {
            Verdict::Report
        } else {
            Verdict::Allow
        };
        let mut report_reason = allowance.would_deny.as_ref().map(|d| d.reason.to_string());
        if let (Some(rule), Some(max)) = (&allowance.rule, allowance.max_requests)
            && !self.engine.quotas.try_take(rule, max)
        {
            if self.rules.policy.default_action() == DefaultAction::Report {
                // Report mode never blocks: record what deny mode would have done.
                verdict = Verdict::Report;
                report_reason = Some(format!(
                    "the rule's quota of {max} requests per session is used up"
                ));
            } else {
                let refusal = Refusal::Quota {
                    rule: rule.clone(),
                    max,
                };
                return Err(self.refuse(head, url, None, refusal));
            }
        }
        // An IP literal never passes through the connector's resolver, so check it here.
        let host = &destination.target.host;
        if host.ip().is_some()
            && let Err(e) = self.engine.upstream.resolver.resolve(host).await
        {
            let refusal = Refusal::NonPublicAddress(e.to_string());
            return Err(self.refuse(head, url, None, refusal));
        }
        // In report mode the record names the rule deny mode would have applied.
        let rule = allowance
            .rule
            .as_ref()
            .or(allowance.would_deny.as_ref().and_then(|d| d.rule.as_ref()))
            .map(ToString::to_string);
        Ok(Allowed {
            verdict,
            rule,
            report_reason,
            // It upgrades only as the policy granted.
            upgrade: allowance.upgrade.filter(|p| asked_upgrade == Some(*p)),
        })
    }

    /// Step 3: credentials in, the decision on record, the request upstream.
    async fn forward(
        &self,
        head: Parts,
        body: &mut RequestBody,
        destination: &Destination,
        allowed: Allowed,
        mcp: Option<McpForward>,
    ) -> Answer {
        let method = head.method.as_str().to_owned();
        let url = &destination.url;
        let upgrade = allowed.upgrade.is_some();
        let mut headers = head.headers.clone();
        strip_hop_by_hop(&mut headers, upgrade);
        if let Some(protocol) = allowed.upgrade {
            upgrade::prepare_request(&mut headers, protocol);
        }
        headers.remove(header::HOST);
        // Secrets only ever travel encrypted: a plain-HTTP request to a
        // credential's host goes out without it (and a placeholder stays one).
        let injected = match destination.scheme {
            Scheme::Https => self
                .rules
                .credentials
                .inject(&destination.target.host, &mut headers),
            Scheme::Http => Default::default(),
        };
        if !injected.is_empty() || mcp.is_some() {
            // A compressed echo could not be scrubbed, nor an MCP answer
            // filtered; ask for identity.
            headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        let decided = self.decided(
            &head,
            &headers,
            url,
            Ruling {
                verdict: allowed.verdict,
                rule: allowed.rule.map(RuleRef::new),
                reason: allowed.report_reason,
            },
        );
        let request_event = Event::Request {
            ts: TimestampUs::now(),
            conn: self.conn.id,
            request: self.id,
            credentials: injected.names.clone(),
            rule_to_add: None,
            exchange: Box::new(decided.clone()),
        };
        // From here on the exchange ends exactly once, whoever ends it.
        let request_capture = CaptureHandle::default();
        let ending = Ending::new(self, decided, request_capture.clone());
        if let Err(e) = self.engine.record(request_event).await {
            ending.abandon();
            let refusal = Refusal::AuditUnavailable(e.to_string());
            return Err(self.refuse(&head, url, None, refusal));
        }

        let body_stalled = Arc::new(AtomicBool::new(false));
        let capture_cap = self.engine.capture_cap;
        let upstream_body: ProxyBody = match std::mem::replace(body, RequestBody::Forwarded) {
            RequestBody::Buffered { bytes, .. } => {
                Tap::new(full(bytes), request_capture.clone(), capture_cap).boxed_unsync()
            }
            RequestBody::Streamed(body) => Tap::new(
                IdleLimit::new(body, BODY_IDLE_TIMEOUT, body_stalled.clone()),
                request_capture.clone(),
                capture_cap,
            )
            .boxed_unsync(),
            // Never: only this step sends a body upstream, once.
            RequestBody::Forwarded => full(Bytes::new()),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e| bad_gateway(&method, url, &format!("cannot form upstream URL: {e}")))?;
        let mut upstream_req = Request::new(upstream_body);
        *upstream_req.method_mut() = head.method.clone();
        *upstream_req.uri_mut() = uri;
        let upgrade_request = if upgrade {
            headers.clone()
        } else {
            HeaderMap::new()
        };
        *upstream_req.headers_mut() = headers;
        let mut client_head = Request::from_parts(head, ());
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut client_head));

        let client = self.engine.upstream.client(upgrade);
        let response = match client.request(upstream_req).await {
            Ok(response) => response,
            Err(e) => {
                let (why, resolve) = if body_stalled.load(Ordering::Acquire) {
                    (BodyStalled(BODY_IDLE_TIMEOUT).to_string(), None)
                } else {
                    explain(&e)
                };
                let response = match resolve {
                    Some(ResolveError::NonPublic { .. }) => Refusal::NonPublicAddress(why.clone())
                        .response(&method, url, &self.rules.policy, None),
                    _ => bad_gateway(&method, url, &why),
                };
                ending.end(
                    RecordedHead::new(response.status(), &HeaderMap::new()),
                    &CaptureHandle::default(),
                    self.started,
                    Some(why),
                );
                return Err(response.into());
            }
        };
        let sent = Sent {
            ending,
            injected,
            upgrade: allowed.upgrade,
            upgrade_request,
            client_upgrade,
            mcp,
        };
        self.respond(&method, url, response, sent)
    }

    /// Step 4: the response back to the client, scrubbed, and on record.
    fn respond(
        &self,
        method: &str,
        url: &str,
        mut response: Response<Incoming>,
        sent: Sent,
    ) -> Answer {
        let headers_at = Instant::now();
        // Everything from here on came from an upstream that may have seen a
        // credential: one scrub for its head, body and trailers alike.
        let scrub = ResponseScrub::new(&sent.injected);
        let no_response_body = CaptureHandle::default();
        // A switch nobody asked for, or to another protocol, opens no tunnel.
        if let Err(why) = upgrade::check_switch(
            response.status(),
            response.headers(),
            sent.upgrade,
            &sent.upgrade_request,
        ) {
            let why = why.to_string();
            let reply = bad_gateway(method, url, &why);
            // The refused head is recorded scrubbed, like any other.
            let (mut parts, _) = response.into_parts();
            scrub.iter().for_each(|s| s.head(&mut parts));
            let recorded = RecordedHead::new(reply.status(), &parts.headers);
            sent.ending
                .end(recorded, &no_response_body, headers_at, Some(why));
            return Err(reply.into());
        }
        if let Some(client_upgrade) = sent.client_upgrade
            && response.status() == StatusCode::SWITCHING_PROTOCOLS
        {
            let upstream_upgrade = hyper::upgrade::on(&mut response);
            let (mut parts, _) = response.into_parts();
            scrub.iter().for_each(|s| s.head(&mut parts));
            let recorded = RecordedHead::new(parts.status, &parts.headers);
            // The exchange ends with the relay: its end event carries the
            // 101 and everything the relay saw.
            let relay = RelayContext {
                engine: self.engine.clone(),
                conn: self.conn.id,
                request: self.id,
                upgraded: sent
                    .ending
                    .into_ended(recorded, &no_response_body, headers_at, None),
                messages: Default::default(),
                injected: sent.injected.clone(),
            };
            tokio::spawn(websocket::relay(relay, client_upgrade, upstream_upgrade));
            return Ok(Response::from_parts(parts, full(Bytes::new())));
        }

        let (mut parts, body) = response.into_parts();
        let body: ProxyBody = match sent.mcp {
            Some(mcp) => {
                // An answer the filter cannot read could carry a tool list
                // the client may not see: refused, like an unscrubbable one.
                if let Some(encoding) = unscrubbable_coding(&parts.headers) {
                    let why = format!(
                        "the MCP server sent a {encoding}-encoded answer although identity was requested; Airlock cannot read it to filter its tool lists"
                    );
                    let reply = bad_gateway(method, url, &why);
                    let recorded = RecordedHead::new(reply.status(), &HeaderMap::new());
                    sent.ending
                        .end(recorded, &no_response_body, headers_at, Some(why));
                    return Err(reply.into());
                }
                let sse = parts
                    .headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|t| {
                        t.trim()
                            .to_ascii_lowercase()
                            .starts_with("text/event-stream")
                    });
                let mode = if sse {
                    AnswerMode::Sse
                } else {
                    AnswerMode::Json
                };
                parts.headers.remove(header::CONTENT_LENGTH);
                McpAnswerBody::new(body, mode, mcp.answer).boxed_unsync()
            }
            None => body.map_err(Into::into).boxed_unsync(),
        };
        if let Some(scrub) = &scrub {
            // Every Content-Encoding header counts (clients apply them all, in
            // order), and so does a Transfer-Encoding coding other than chunked.
            if let Some(encoding) = unscrubbable_coding(&parts.headers) {
                let why = format!(
                    "upstream sent a {encoding}-encoded response to a request carrying a credential although identity was requested; Airlock cannot check it for the secret"
                );
                let reply = bad_gateway(method, url, &why);
                // Its head is not recorded: it was never scrubbed.
                let recorded = RecordedHead::new(reply.status(), &HeaderMap::new());
                sent.ending
                    .end(recorded, &no_response_body, headers_at, Some(why));
                return Err(reply.into());
            }
            scrub.head(&mut parts);
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        strip_hop_by_hop(&mut parts.headers, false);

        let response_capture = CaptureHandle::default();
        let mut tap = Tap::new(body, response_capture.clone(), self.engine.capture_cap);
        if let Some(scrub) = &scrub {
            tap = tap.scrub(scrub.body());
        }
        let on_end = {
            let head = RecordedHead::new(parts.status, &parts.headers);
            let ending = sent.ending;
            move |error: Option<String>| ending.end(head, &response_capture, headers_at, error)
        };
        Ok(Response::from_parts(
            parts,
            tap.on_end(on_end).boxed_unsync(),
        ))
    }
}
