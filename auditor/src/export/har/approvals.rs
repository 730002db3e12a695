//! Held requests (`[[ask]]` rules) in the HAR: each approval's two records,
//! joined by its id, become an `_approval` object on the entry of the
//! exchange it held. A request the proxy refused after the wait is still an
//! `Http` record (decision deny), so it has an entry to carry this too.

use crate::{ApprovalDecided, ApprovalRequested, ExchangeId};
use std::collections::HashMap;

use serde_json::{Value, json};

use crate::humanize;
use crate::{AuditEvent, Seq, StoredEvent};

/// One approval's records; either may be missing (the session ended
/// mid-wait, or the record was read filtered).
#[derive(Debug, Default)]
pub(super) struct Approval<'a> {
    requested: Option<&'a StoredEvent>,
    decided: Option<&'a StoredEvent>,
}

impl Approval<'_> {
    /// The first of its records, where an entry of its own goes.
    pub(super) fn first_seq(&self) -> Option<Seq> {
        self.requested.or(self.decided).map(|ev| ev.seq)
    }

    /// The exchange it held, as its records name it.
    pub(super) fn exchange(&self) -> Option<ExchangeId> {
        [self.requested, self.decided]
            .into_iter()
            .flatten()
            .find_map(|ev| match &ev.event {
                AuditEvent::ApprovalRequested(ApprovalRequested { exchange, .. })
                | AuditEvent::ApprovalDecided(ApprovalDecided { exchange, .. }) => *exchange,
                _ => None,
            })
    }

    /// The `_approval` object: `{id, outcome, scope, by, note, waited_ms,
    /// body_sha256, rule, reason}`; the decision's fields are null while no
    /// decision was recorded.
    pub(super) fn to_value(&self) -> Value {
        let mut v = json!({
            "id": Value::Null,
            "outcome": Value::Null,
            "scope": Value::Null,
            "by": Value::Null,
            "note": Value::Null,
            "waited_ms": Value::Null,
            "body_sha256": Value::Null,
            "rule": Value::Null,
            "reason": Value::Null,
        });
        if let Some(AuditEvent::ApprovalRequested(ApprovalRequested {
            approval,
            body_sha256,
            rule,
            reason,
            ..
        })) = self.requested.map(|ev| &ev.event)
        {
            v["id"] = approval.as_str().into();
            v["body_sha256"] = body_sha256.as_str().into();
            v["rule"] = rule.as_str().into();
            v["reason"] = reason.clone().into();
        }
        if let Some(AuditEvent::ApprovalDecided(ApprovalDecided {
            approval,
            outcome,
            scope,
            by,
            note,
            waited_ms,
            body_sha256,
            ..
        })) = self.decided.map(|ev| &ev.event)
        {
            v["id"] = approval.as_str().into();
            v["outcome"] = outcome.as_str().into();
            v["scope"] = scope.clone().into();
            v["by"] = by.clone().into();
            v["note"] = note.clone().into();
            v["waited_ms"] = (*waited_ms).into();
            // The hash the decision names: the body it let through.
            v["body_sha256"] = body_sha256.as_str().into();
        }
        v
    }

    /// An entry for a held request with no `Http` record (the session
    /// ended while it waited, or the client went away first), so the HAR
    /// still shows what a person was asked about.
    pub(super) fn entry(&self) -> Option<Value> {
        let first = self.requested.or(self.decided)?;
        // What the request was: in full from the request's record, else the
        // method and URL the decision repeats.
        let (method, url, headers, body_bytes, rule, reason) = match &first.event {
            AuditEvent::ApprovalRequested(ApprovalRequested {
                method,
                url,
                request_headers,
                body_bytes,
                rule,
                reason,
                ..
            }) => (
                method,
                url,
                &request_headers[..],
                *body_bytes,
                Some(rule),
                reason.as_ref(),
            ),
            AuditEvent::ApprovalDecided(ApprovalDecided { method, url, .. }) => {
                (method, url, &[][..], 0, None, None)
            }
            _ => return None,
        };
        let waited = match self.decided.map(|ev| &ev.event) {
            Some(AuditEvent::ApprovalDecided(ApprovalDecided { waited_ms, .. })) => {
                *waited_ms as f64
            }
            _ => 0.0,
        };
        Some(json!({
            "startedDateTime": humanize::rfc3339(first.ts_us),
            "time": waited,
            "request": {
                "method": method,
                "url": url,
                "httpVersion": "",
                "headers": super::headers(headers),
                "queryString": super::query_string(url),
                "cookies": super::request_cookies(headers),
                "headersSize": -1,
                "bodySize": body_bytes,
            },
            // Status 0 is what browsers' HAR has for a request that got no
            // response.
            "response": {
                "status": 0,
                "statusText": "",
                "httpVersion": "",
                "headers": [],
                "cookies": [],
                "content": {"size": 0, "mimeType": ""},
                "redirectURL": "",
                "headersSize": -1,
                "bodySize": -1,
            },
            "cache": {},
            // Waiting for a person is time the request was queued before it
            // could be sent: HAR's "blocked".
            "timings": {"blocked": waited, "send": 0.0, "wait": 0.0, "receive": 0.0},
            "comment": "held by an [[ask]] rule and never recorded as an HTTP exchange: built from its approval records",
            "_seq": first.seq.get(),
            "_decision": Value::Null,
            "_rule": rule,
            "_reason": reason,
            "_approval": self.to_value(),
        }))
    }
}

/// A session's approvals, by id and by the exchange they held.
#[derive(Debug, Default)]
pub(super) struct Approvals<'a> {
    by_id: HashMap<&'a str, Approval<'a>>,
    /// The id of the approval that held each exchange (the latest, should
    /// a producer ever hold one twice).
    by_exchange: HashMap<ExchangeId, &'a str>,
}

impl<'a> Approvals<'a> {
    pub(super) fn collect(events: &'a [StoredEvent]) -> Self {
        let mut by_id: HashMap<&str, Approval<'_>> = HashMap::new();
        for ev in events {
            match &ev.event {
                AuditEvent::ApprovalRequested(ApprovalRequested { approval, .. }) => {
                    by_id.entry(approval).or_default().requested = Some(ev);
                }
                AuditEvent::ApprovalDecided(ApprovalDecided { approval, .. }) => {
                    by_id.entry(approval).or_default().decided = Some(ev);
                }
                _ => {}
            }
        }
        let mut latest: HashMap<ExchangeId, (Option<Seq>, &str)> = HashMap::new();
        for (&id, a) in &by_id {
            if let Some(x) = a.exchange() {
                let this = (a.first_seq(), id);
                let held = latest.entry(x).or_insert(this);
                if this.0 > held.0 {
                    *held = this;
                }
            }
        }
        let by_exchange = latest.into_iter().map(|(x, (_, id))| (x, id)).collect();
        Approvals { by_id, by_exchange }
    }

    /// The approval that held `exchange`.
    pub(super) fn for_exchange(&self, exchange: ExchangeId) -> Option<&Approval<'a>> {
        self.by_id.get(self.by_exchange.get(&exchange)?)
    }

    /// The approval `ev` is a record of.
    pub(super) fn of(&self, ev: &StoredEvent) -> Option<&Approval<'a>> {
        match &ev.event {
            AuditEvent::ApprovalRequested(ApprovalRequested { approval, .. })
            | AuditEvent::ApprovalDecided(ApprovalDecided { approval, .. }) => {
                self.by_id.get(approval.as_str())
            }
            _ => None,
        }
    }
}
