//! What approvers see of a held request, and of a decided one: the JSON of
//! the HTTP API, the webhook and `airlock approvals --json`.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::shown::{Bound, Held, Shown};
use super::{ApprovalId, HoldRequest, Scope, Sender};

/// How much of the body `body_preview` carries.
const PREVIEW_BYTES: usize = 4 * 1024;

/// A request waiting for a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingView {
    pub id: ApprovalId,
    pub session: String,
    pub method: String,
    pub url: String,
    /// Every header as sent; secrets shown as `[secret:NAME]`.
    pub headers: Vec<(String, String)>,
    pub body_bytes: u64,
    /// The first 4 KiB of the body, as text (invalid UTF-8 replaced).
    pub body_preview: String,
    pub body_preview_truncated: bool,
    /// What the approver reads: the headers that change the request's
    /// meaning, the body as fields or lines, warnings (within
    /// [`Bound::LISTING`]; whole from `GET /v1/approvals/ID?view=whole`).
    pub shown: Shown,
    /// SHA-256 of the exact body held: what is approved is this request.
    pub body_sha256: String,
    pub rule: String,
    pub reason: Option<String>,
    /// Who may decide; empty = the session's owner.
    pub approvers: Vec<String>,
    pub timeout_ms: u64,
    /// When it was held, µs since the epoch.
    pub requested_at_us: u64,
    /// When it is denied unless decided, µs since the epoch.
    pub expires_at_us: u64,
    /// The sandbox-side address that sent it, and the command behind it
    /// (its command line, exec and step) when known.
    pub client: String,
    pub sender: Option<Sender>,
}

impl PendingView {
    pub(super) fn new(
        id: &ApprovalId,
        session: &str,
        request: &HoldRequest,
        now: SystemTime,
    ) -> Self {
        let requested_at_us = micros_since_epoch(now);
        let timeout_us = u64::try_from(request.timeout.as_micros()).unwrap_or(u64::MAX);
        let body = &request.body;
        let preview = &body[..body.len().min(PREVIEW_BYTES)];
        let held = Held {
            method: &request.method,
            url: &request.url,
            headers: &request.headers,
            body,
        };
        Self {
            id: id.clone(),
            session: session.to_owned(),
            method: request.method.clone(),
            url: request.url.clone(),
            headers: request.headers.clone(),
            body_bytes: body.len() as u64,
            body_preview: request.redactor.text(&String::from_utf8_lossy(preview)),
            body_preview_truncated: body.len() > PREVIEW_BYTES,
            shown: Shown::new(held, &request.redactor, &Bound::LISTING),
            body_sha256: request.body_sha256.clone(),
            rule: request.rule.clone(),
            reason: request.reason.clone(),
            approvers: request.approvers.clone(),
            timeout_ms: timeout_us / 1000,
            requested_at_us,
            expires_at_us: requested_at_us.saturating_add(timeout_us),
            client: request.client.clone(),
            sender: request.sender.clone(),
        }
    }
}

/// A request whose wait ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DecidedView {
    pub id: ApprovalId,
    pub session: String,
    pub method: String,
    pub url: String,
    pub rule: String,
    /// "approved", "denied", "expired" or "abandoned".
    pub outcome: String,
    pub scope: Option<Scope>,
    pub by: Option<String>,
    pub note: Option<String>,
    pub waited_ms: u64,
    pub body_sha256: String,
}

impl DecidedView {
    pub(super) fn new(
        pending: &PendingView,
        outcome: &str,
        scope: Option<Scope>,
        by: Option<String>,
        note: Option<String>,
    ) -> Self {
        let now = micros_since_epoch(SystemTime::now());
        Self {
            id: pending.id.clone(),
            session: pending.session.clone(),
            method: pending.method.clone(),
            url: pending.url.clone(),
            rule: pending.rule.clone(),
            outcome: outcome.to_owned(),
            scope,
            by,
            note,
            waited_ms: now.saturating_sub(pending.requested_at_us) / 1000,
            body_sha256: pending.body_sha256.clone(),
        }
    }
}

fn micros_since_epoch(at: SystemTime) -> u64 {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
}
