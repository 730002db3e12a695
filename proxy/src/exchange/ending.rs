//! The end of a decided exchange, recorded exactly once. An [`Ending`] is
//! made as the exchange is decided and is spent by recording the end; one
//! dropped unspent (the client went away, and hyper dropped the exchange's
//! future mid-flight) records the end itself, so no decided exchange is
//! left without one, and none gets two.

use std::time::Instant;

use airlock_record::HttpExchange;

use crate::body::CaptureHandle;
use crate::events::{Event, TimestampUs};

use super::context::{Exchange, RecordedHead, micros, millis};

/// Why an exchange ended when nothing else said: its future was dropped.
const CLIENT_WENT_AWAY: &str = "the client went away before the exchange ended";

pub(super) struct Ending {
    exchange: Exchange,
    /// The record as decided, until the end is recorded.
    decided: Option<HttpExchange>,
    /// What of the request body went upstream.
    request: CaptureHandle,
}

impl Ending {
    pub(super) fn new(exchange: &Exchange, decided: HttpExchange, request: CaptureHandle) -> Self {
        Self {
            exchange: exchange.clone(),
            decided: Some(decided),
            request,
        }
    }

    /// The decided record was never made (the audit failed): there is
    /// nothing to end.
    pub(super) fn abandon(mut self) {
        self.decided = None;
    }

    /// Record the end: the response head (or Airlock's own answer), what
    /// crossed, and the error that ended it, if one did.
    pub(super) fn end(
        self,
        head: RecordedHead,
        response: &CaptureHandle,
        headers_at: Instant,
        error: Option<String>,
    ) {
        let exchange = self.exchange.clone();
        let ended = self.into_ended(head, response, headers_at, error);
        record(&exchange, ended);
    }

    /// The record as the exchange ended, for whoever records it later (the
    /// WebSocket relay, when it ends).
    pub(super) fn into_ended(
        mut self,
        head: RecordedHead,
        response: &CaptureHandle,
        headers_at: Instant,
        error: Option<String>,
    ) -> HttpExchange {
        let mut ended = self.finish(error);
        let response = response.snapshot();
        ended.status = Some(head.status.as_u16());
        ended.response_headers = head.headers;
        ended.bytes_down = response.bytes;
        ended.response_body_truncated = response.truncated;
        ended.response_body = Some(response.captured);
        ended.ms_to_headers = Some(millis(headers_at.duration_since(self.exchange.started)));
        ended
    }

    /// The decided record with what is known whatever the ending: the
    /// request body as it went, the times, and the error.
    fn finish(&mut self, error: Option<String>) -> HttpExchange {
        let mut ended = self.decided.take().unwrap_or_else(|| {
            unreachable!("an Ending is spent once: end, into_ended and abandon take it by value")
        });
        let request = self.request.snapshot();
        let total = self.exchange.started.elapsed();
        ended.bytes_up = request.bytes;
        ended.request_body_truncated = request.truncated;
        ended.request_body = Some(request.captured);
        ended.started_us = i64::try_from(TimestampUs::now().0.saturating_sub(micros(total))).ok();
        ended.ms_total = Some(millis(total));
        if error.is_some() {
            ended.reason = error;
        }
        ended
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        if self.decided.is_some() {
            let ended = self.finish(Some(CLIENT_WENT_AWAY.into()));
            record(&self.exchange, ended);
        }
    }
}

/// The exchange's one end event (best effort: the decided record, made
/// before forwarding, is the one that fails closed).
pub(super) fn record(exchange: &Exchange, ended: HttpExchange) {
    exchange.engine.record_lossy(Event::Response {
        ts: TimestampUs::now(),
        conn: exchange.conn.id,
        request: exchange.id,
        exchange: Box::new(ended),
    });
}
