//! A request an `[[ask]]` rule matched: held, whole, until a person
//! decides, with both ends of the wait on record. Nothing goes upstream
//! meanwhile; other requests (other streams of the same HTTP/2 connection
//! too) go on, since each request is its own task.

use std::time::{Duration, Instant};

use airlock_policy::Ask;
use bytes::Bytes;
use http::request::Parts;
use ring::digest::{SHA256, digest};

use airlock_record::{ApprovalDecided, ApprovalRequested, RuleRef};

use crate::approvals::shown::Redactor;
use crate::approvals::{ApprovalId, Approvals, Choice, HoldError, HoldRequest, Resolution, Ticket};
use crate::events::{Event, TimestampUs};
use crate::refusal::{NotApproved, Refusal};

use super::Destination;
use super::context::{Early, Exchange};

/// How a held request came to be approved.
pub(super) struct Approved {
    /// For the record: by whom, in what scope, which approval.
    pub(super) line: String,
    /// The approval's id; None when an earlier approval for the session
    /// let it through.
    pub(super) id: Option<String>,
}

impl Exchange {
    /// Hold the request until it is approved (Ok: who approved it) or not
    /// (Err: the refusal, answered and recorded).
    pub(super) async fn await_approval(
        &self,
        head: &Parts,
        destination: &Destination,
        ask: &Ask,
        body: Option<(&Bytes, bool)>,
    ) -> Result<Approved, Early> {
        let url = &destination.url;
        let not_approved = |why| Refusal::NotApproved {
            rule: ask.rule.clone(),
            why,
        };
        let (bytes, complete) = body.unwrap_or((&EMPTY, true));
        if !complete {
            return Err(self.refuse(head, url, None, not_approved(NotApproved::BodyTooLarge)));
        }
        let mut request = self.hold_request(head, destination, ask, bytes);
        let approvals = &self.engine.approvals;
        if let Some(by) = approvals.granted_for_session(&request) {
            return Ok(Approved {
                line: format!("approved for the session by {by}"),
                id: None,
            });
        }
        let (finder, client) = (approvals.clone(), self.conn.client);
        request.sender = tokio::task::spawn_blocking(move || finder.find_sender(client))
            .await
            .ok()
            .flatten();
        let id = match approvals.reserve() {
            Ok(id) => id,
            Err(full @ HoldError::Full(_)) => {
                let refusal = not_approved(NotApproved::Full(full.to_string()));
                return Err(self.refuse(head, url, None, refusal));
            }
        };
        let mut wait = Wait {
            exchange: self,
            approvals,
            request: &request,
            id,
            stage: Stage::Reserved,
            held_at: Instant::now(),
        };
        // On record before anyone is asked: if it cannot be, nobody is.
        if let Err(e) = self.engine.record(wait.requested_event()).await {
            let refusal = Refusal::AuditUnavailable(e.to_string());
            return Err(self.refuse(head, url, None, refusal));
        }
        wait.stage = Stage::Recorded;
        let ticket = approvals.hold(wait.id.clone(), request.clone());
        wait.stage = Stage::Held;
        wait.held_at = Instant::now();
        tracing::info!(approval = %ticket.id, method = %request.method, url = %request.url, "held for approval");
        match wait.outcome(ticket, ask.timeout).await {
            Some(Resolution {
                choice: Choice::Approve(scope),
                by,
                note,
            }) => {
                let decided = wait.decided_event("approved", Some(scope.as_str()), Some(&by), note);
                // Nothing goes out unrecorded, an approval included.
                if let Err(e) = self.engine.record(decided).await {
                    let refusal = Refusal::AuditUnavailable(e.to_string());
                    return Err(self.refuse(head, url, None, refusal));
                }
                Ok(Approved {
                    line: format!("approved {} by {by} (approval {})", scope.as_str(), wait.id),
                    id: Some(wait.id.to_string()),
                })
            }
            Some(Resolution {
                choice: Choice::Deny,
                by,
                note,
            }) => {
                let event = wait.decided_event("denied", None, Some(&by), note.clone());
                self.engine.record_lossy(event);
                let why = NotApproved::Denied {
                    id: wait.id.to_string(),
                    by,
                    note,
                };
                Err(self.refuse(head, url, None, not_approved(why)))
            }
            None => {
                let why = NotApproved::Expired {
                    id: wait.id.to_string(),
                    after: ask.timeout,
                };
                Err(self.refuse(head, url, None, not_approved(why)))
            }
        }
    }

    fn hold_request(
        &self,
        head: &Parts,
        destination: &Destination,
        ask: &Ask,
        body: &Bytes,
    ) -> HoldRequest {
        let credentials = &self.rules.credentials;
        let redacting = self.rules.clone();
        let path = destination
            .path_and_query
            .split_once('?')
            .map_or(destination.path_and_query.as_str(), |(path, _)| path);
        HoldRequest {
            method: head.method.as_str().to_owned(),
            url: credentials.redact(&destination.url),
            host: destination.target.host.as_str().to_owned(),
            port: destination.target.port,
            path: path.to_owned(),
            headers: self.record_headers(&head.headers),
            body: body.clone(),
            redactor: Redactor::new(move |text| redacting.credentials.redact(text)),
            body_sha256: hex(digest(&SHA256, body).as_ref()),
            rule: ask.rule.to_string(),
            rule_key: ask.rule.key(),
            reason: ask.reason.clone(),
            timeout: ask.timeout,
            approvers: ask.approvers.clone(),
            client: self.conn.client.to_string(),
            sender: None,
        }
    }
}

static EMPTY: Bytes = Bytes::new();

/// One request's wait; if the request goes away first (its client hung up,
/// the session ended), dropping this gives its place back or withdraws it,
/// and records why.
struct Wait<'a> {
    exchange: &'a Exchange,
    approvals: &'a Approvals,
    request: &'a HoldRequest,
    id: ApprovalId,
    stage: Stage,
    held_at: Instant,
}

/// How far a wait got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// A place in line, not yet on record nor shown.
    Reserved,
    /// On record, not yet shown.
    Recorded,
    /// Shown to approvers, waiting.
    Held,
    /// Its end is known (and recorded, unless a decision is still to be).
    Ended,
}

impl Wait<'_> {
    /// The decision, or None when nobody decided in time.
    async fn outcome(&mut self, mut ticket: Ticket, timeout: Duration) -> Option<Resolution> {
        match tokio::time::timeout(timeout, &mut ticket.decision).await {
            Ok(Ok(resolution)) => {
                self.stage = Stage::Ended;
                Some(resolution)
            }
            Ok(Err(_)) | Err(_) => {
                if self.approvals.withdraw(&self.id, "expired").is_some() {
                    self.end("expired");
                    return None;
                }
                // Decided just as the time ran out: the decision stands.
                self.stage = Stage::Ended;
                ticket.decision.try_recv().ok()
            }
        }
    }

    /// Record an end nobody decided.
    fn end(&mut self, outcome: &str) {
        self.stage = Stage::Ended;
        let event = self.decided_event(outcome, None, None, None);
        self.exchange.engine.record_lossy(event);
    }

    fn requested_event(&self) -> Event {
        let request = self.request;
        Event::ApprovalRequested {
            ts: TimestampUs::now(),
            conn: self.exchange.conn.id,
            request: self.exchange.id,
            held: Box::new(ApprovalRequested {
                approval: self.id.to_string(),
                exec_id: self.exchange.conn.exec.clone(),
                exchange: Some(self.exchange.id),
                method: request.method.clone(),
                url: request.url.clone(),
                request_headers: request.headers.clone(),
                body_bytes: request.body.len() as u64,
                body_sha256: request.body_sha256.clone(),
                rule: RuleRef::new(request.rule.clone()),
                reason: request.reason.clone(),
                timeout_ms: u64::try_from(request.timeout.as_millis()).unwrap_or(u64::MAX),
                approvers: request.approvers.clone(),
            }),
        }
    }

    fn decided_event(
        &self,
        outcome: &str,
        scope: Option<&str>,
        by: Option<&str>,
        note: Option<String>,
    ) -> Event {
        let waited = self.held_at.elapsed();
        Event::ApprovalDecided {
            ts: TimestampUs::now(),
            conn: self.exchange.conn.id,
            request: self.exchange.id,
            decided: Box::new(ApprovalDecided {
                approval: self.id.to_string(),
                exec_id: self.exchange.conn.exec.clone(),
                exchange: Some(self.exchange.id),
                outcome: outcome.to_owned(),
                scope: scope.map(str::to_owned),
                by: by.map(str::to_owned),
                note,
                waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                body_sha256: self.request.body_sha256.clone(),
                method: self.request.method.clone(),
                url: self.request.url.clone(),
            }),
        }
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        match self.stage {
            Stage::Reserved => self.approvals.cancel(),
            Stage::Recorded => {
                self.approvals.cancel();
                self.end("abandoned");
            }
            Stage::Held => {
                if self.approvals.withdraw(&self.id, "abandoned").is_some() {
                    self.end("abandoned");
                }
            }
            Stage::Ended => {}
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
