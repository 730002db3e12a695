//! Requests an `[[ask]]` rule held, and how each wait ended.

use serde::{Deserialize, Serialize};

use crate::{ExchangeId, ExecId, RuleRef};

/// A request an `[[ask]]` rule held for a person's decision. Recorded
/// before anyone is asked, so no one can be asked off the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequested {
    /// The approval's id (what `airlock approve ID` takes), e.g. "k3v9q2xa".
    pub approval: String,
    /// Filled by the binary's attribution, as for `Http`.
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    /// The exchange of the held request: links this record to the
    /// `Http` records of the same exchange (see `Http::exchange`).
    #[serde(default)]
    pub exchange: Option<ExchangeId>,
    pub method: String,
    /// Secrets already redacted by the producer.
    pub url: String,
    #[serde(default)]
    pub request_headers: Vec<(String, String)>,
    pub body_bytes: u64,
    /// SHA-256 (hex) of the exact body held: what the person was shown
    /// is what is forwarded if they approve.
    pub body_sha256: String,
    /// The `[[ask]]` rule, e.g. "policy.toml:12".
    pub rule: RuleRef,
    /// The rule's reason text, shown to the approver.
    #[serde(default)]
    pub reason: Option<String>,
    pub timeout_ms: u64,
    /// Who may decide; empty means the session's owner.
    #[serde(default)]
    pub approvers: Vec<String>,
}

/// The end of a held request's wait: a person's decision, or none in time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalDecided {
    pub approval: String,
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    #[serde(default)]
    pub exchange: Option<ExchangeId>,
    /// "approved", "denied", "expired" (nobody decided within the
    /// timeout) or "abandoned" (the client went away or the session
    /// ended first).
    pub outcome: String,
    /// "once" or "session" when approved.
    #[serde(default)]
    pub scope: Option<String>,
    /// Who decided, e.g. "alice (uid 1000)" or "token ci-bot"; `None`
    /// when expired or abandoned.
    #[serde(default)]
    pub by: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
    pub waited_ms: u64,
    /// Repeated from the request, so the decision names the exact body
    /// it let through even when read alone.
    pub body_sha256: String,
    pub method: String,
    pub url: String,
}
