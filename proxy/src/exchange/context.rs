//! What one request carries through the pipeline — its engine, connection,
//! id, rules and start time — and the two things every step may need to do
//! with them: refuse the request, and record a response.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::HeaderMap;
use http::request::Parts;
use http::{Response, StatusCode};

use airlock_record::{HttpExchange, RuleRef};

use crate::body::ProxyBody;
use crate::engine::{ConnInfo, Engine};
use crate::events::{Event, RequestId, TimestampUs, Verdict};
use crate::refusal::Refusal;
use crate::rules::Rules;

use super::RequestBody;
use super::refused_body::ForRecord;

/// One request's context, built once when it arrives. Cheap to clone (the
/// response's end-of-body hook keeps a copy).
#[derive(Clone)]
pub(super) struct Exchange {
    pub(super) engine: Arc<Engine>,
    pub(super) conn: Arc<ConnInfo>,
    pub(super) id: RequestId,
    /// The rules in force when the request arrived; a reload mid-request
    /// does not change its decision.
    pub(super) rules: Arc<Rules>,
    pub(super) started: Instant,
}

/// An early answer. Boxed, since it is the cold path and keeps every
/// step's `Result` small.
pub(super) enum Early {
    /// An error the proxy answers itself, already on record.
    Answered(Box<Response<ProxyBody>>),
    /// A refusal, recorded once the body the client sent has been read for
    /// the record (see `refused_body`); whoever holds the body does that.
    Refused(Box<Refused>),
}

impl From<Response<ProxyBody>> for Early {
    fn from(response: Response<ProxyBody>) -> Self {
        Self::Answered(Box::new(response))
    }
}

/// A refusal decided and answered, its record waiting for the body.
pub(super) struct Refused {
    /// The request's record, as it was when refused; its body goes in last.
    pub(super) event: Event,
    pub(super) response: Response<ProxyBody>,
}

/// A response head as it goes into the record.
pub(super) struct RecordedHead {
    pub(super) status: StatusCode,
    pub(super) headers: Vec<(String, String)>,
}

impl RecordedHead {
    pub(super) fn new(status: StatusCode, headers: &HeaderMap) -> Self {
        Self {
            status,
            headers: header_pairs(headers),
        }
    }
}

impl Exchange {
    pub(super) fn new(engine: Arc<Engine>, conn: Arc<ConnInfo>) -> Self {
        Self {
            id: RequestId(engine.ids.next()),
            rules: engine.rules.load_full(),
            started: Instant::now(),
            engine,
            conn,
        }
    }

    /// Answer a refusal of the request whose head is `head`; its record is
    /// made by [`Exchange::record_refusal`], with the body.
    pub(super) fn refuse(
        &self,
        head: &Parts,
        url: &str,
        suggestion: Option<&str>,
        refusal: Refusal,
    ) -> Early {
        let method = head.method.as_str();
        let mut exchange = self.decided(
            head,
            &head.headers,
            url,
            Ruling {
                verdict: Verdict::Deny,
                rule: refusal.rule().map(|r| RuleRef::new(r.to_string())),
                reason: Some(refusal.reason()),
            },
        );
        // Decided and ended at once: Airlock's own answer is the outcome.
        exchange.status = Some(refusal.status().as_u16());
        exchange.request_body = Some(Vec::new());
        let event = Event::Request {
            ts: TimestampUs::now(),
            conn: self.conn.id,
            request: self.id,
            credentials: Vec::new(),
            rule_to_add: refusal
                .rule_to_add(suggestion)
                .map(|rule| self.rules.credentials.redact(rule)),
            exchange: Box::new(exchange),
        };
        tracing::info!(client = %self.conn.client, front = ?self.conn.front, method, url, reason = %refusal.reason(), "denied");
        let response = refusal.response(method, url, &self.rules.policy, suggestion);
        Early::Refused(Box::new(Refused { event, response }))
    }

    /// Record a refusal with the body its client sent (read for the record
    /// only, bounded), then give its answer.
    pub(super) async fn record_refusal(
        &self,
        refused: Refused,
        body: RequestBody,
        declared: Option<u64>,
    ) -> Response<ProxyBody> {
        let Refused {
            mut event,
            response,
        } = refused;
        // Nothing more can be recorded once the audit failed: no reason to wait.
        if !self.engine.events.failed()
            && let Event::Request { exchange, .. } = &mut event
        {
            let for_record = ForRecord {
                cap: self.engine.capture_cap,
                scrub: self.rules.credentials.scrub_set().map(AsRef::as_ref),
                declared,
            };
            let body = for_record.capture(body).await.unwrap_or_default();
            exchange.bytes_up = body.bytes;
            exchange.request_body_truncated = body.truncated;
            exchange.request_body = Some(body.captured);
        }
        self.engine.record_lossy(event);
        response
    }

    /// This request's record as decided: what was asked, and what the
    /// policy said. `headers` are the ones that go upstream (or would have).
    pub(super) fn decided(
        &self,
        head: &Parts,
        headers: &HeaderMap,
        url: &str,
        ruling: Ruling,
    ) -> HttpExchange {
        HttpExchange {
            exec_id: self.conn.exec.clone(),
            exchange: Some(self.id),
            request_headers: self.record_headers(headers),
            started_us: i64::try_from(TimestampUs::now().0).ok(),
            rule: ruling.rule,
            reason: ruling.reason,
            ..HttpExchange::decided(
                head.method.as_str().to_owned(),
                self.rules.credentials.redact(url),
                format!("{:?}", head.version),
                ruling.verdict,
            )
        }
    }

    /// Request headers as they go into the record: every secret replaced by
    /// its marker.
    pub(super) fn record_headers(&self, headers: &HeaderMap) -> Vec<(String, String)> {
        headers
            .iter()
            .map(|(k, v)| {
                let text = String::from_utf8_lossy(v.as_bytes());
                (k.as_str().to_owned(), self.rules.credentials.redact(&text))
            })
            .collect()
    }
}

/// Response headers as they go into the record (already scrubbed when a
/// credential was injected).
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

pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Milliseconds, as the record keeps durations.
pub(super) fn millis(d: Duration) -> f64 {
    micros(d) as f64 / 1000.0
}

/// What the policy said about a request.
pub(super) struct Ruling {
    pub(super) verdict: Verdict,
    pub(super) rule: Option<RuleRef>,
    /// Why, for a refusal or a request that report mode let through.
    pub(super) reason: Option<String>,
}
