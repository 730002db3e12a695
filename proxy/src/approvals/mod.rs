//! Requests an `[[ask]]` rule holds until a person decides.
//!
//! One [`Approvals`] per proxy (that is, per session): the pending requests,
//! the decisions (each made once), the approvals granted for the rest of the
//! session, and the cap on how many may wait at once. The request's own
//! story (holding it, recording, answering) is `exchange/approval.rs`; the
//! HTTP API approvers use is [`api`]; the webhook is `webhook`.

pub mod api;
mod id;
pub mod shown;
mod view;
mod webhook;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;

pub use id::ApprovalId;
pub use view::{DecidedView, PendingView};
pub use webhook::{Webhook, WebhookError, shown_url};

/// How many requests may wait for a decision at once, by default.
pub const DEFAULT_PENDING_CAP: usize = 100;
/// Decisions remembered so that a second one is refused by name.
const DECIDED_KEPT: usize = 1000;

/// What sent a held request, as the sandbox's side knows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Sender {
    /// The process's command line.
    pub command: Vec<String>,
    /// Its exec in the record, and its live-session step.
    pub exec: Option<String>,
    pub step: Option<u64>,
    /// The step's label (an agent's tool-call id), when it has one.
    pub label: Option<String>,
}

/// Finds what sent a request from the client address the proxy saw.
pub type FindSender = Arc<dyn Fn(SocketAddr) -> Option<Sender> + Send + Sync>;

/// Who may decide by default, and what the views call the session.
#[derive(Clone)]
pub struct ApprovalsConfig {
    /// The session's id or name, shown to approvers.
    pub session: String,
    /// The uid of the session's owner: the default approver.
    pub owner_uid: u32,
    /// How many requests may wait at once; past it, new asks are refused.
    pub cap: usize,
    /// Where each pending request is announced, if anywhere.
    pub webhook: Option<Webhook>,
    /// Names the command that sent a request (a sandbox knows; a
    /// standalone proxy does not).
    pub find_sender: Option<FindSender>,
}

impl std::fmt::Debug for ApprovalsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalsConfig")
            .field("session", &self.session)
            .field("owner_uid", &self.owner_uid)
            .field("cap", &self.cap)
            .field("webhook", &self.webhook)
            .field("find_sender", &self.find_sender.is_some())
            .finish()
    }
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            session: String::new(),
            owner_uid: nix::unistd::getuid().as_raw(),
            cap: DEFAULT_PENDING_CAP,
            webhook: None,
            find_sender: None,
        }
    }
}

/// Someone deciding: a local user (by the socket's peer credentials) or the
/// holder of an approval token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decider {
    User { uid: u32, name: Option<String> },
    Token { name: String },
}

impl Decider {
    /// The name `approvers` lists.
    fn name(&self) -> Option<&str> {
        match self {
            Self::User { name, .. } => name.as_deref(),
            Self::Token { name } => Some(name),
        }
    }
}

impl std::fmt::Display for Decider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::User {
                uid,
                name: Some(name),
            } => write!(f, "{name} (uid {uid})"),
            Self::User { uid, name: None } => write!(f, "uid {uid}"),
            Self::Token { name } => write!(f, "token {name}"),
        }
    }
}

/// How far an approval reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This request only.
    Once,
    /// Later requests the same ask rule matches with the same method, host,
    /// port and path pass for the rest of the session.
    Session,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Session => "session",
        }
    }
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    Approve(Scope),
    Deny,
}

/// How a held request's wait ended, as the request learns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub choice: Choice,
    pub by: String,
    pub note: Option<String>,
}

/// Why a decision was not taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecideError {
    #[error("no request is waiting for approval {0}; list them with `airlock approvals`")]
    Unknown(ApprovalId),
    #[error("approval {id} was already {outcome}; a request is decided only once")]
    AlreadyDecided { id: ApprovalId, outcome: String },
    #[error("{who} may not decide approval {id}: its rule names the approvers {approvers}")]
    NotAnApprover {
        id: ApprovalId,
        who: String,
        approvers: String,
    },
    #[error("{who} may not decide approval {id}: only the session's owner (uid {owner}) may")]
    NotTheOwner {
        id: ApprovalId,
        who: String,
        owner: u32,
    },
}

impl DecideError {
    /// The HTTP status the API answers with.
    pub fn status(&self) -> u16 {
        match self {
            Self::Unknown(_) => 404,
            Self::AlreadyDecided { .. } => 409,
            Self::NotAnApprover { .. } | Self::NotTheOwner { .. } => 403,
        }
    }
}

/// A request about to be held: what the approver is shown.
#[derive(Debug, Clone)]
pub struct HoldRequest {
    pub method: String,
    pub url: String,
    /// Host, port and path (no query): with the rule and the method, what
    /// a session-wide approval covers.
    pub host: String,
    pub port: u16,
    pub path: String,
    /// Secrets already shown as `[secret:NAME]`.
    pub headers: Vec<(String, String)>,
    /// The whole body, as held (shared with the exchange, not copied): the
    /// views render it, `approvals show` whole.
    pub body: bytes::Bytes,
    pub body_sha256: String,
    /// What shows secrets as `[secret:NAME]` in what the body renders to.
    pub redactor: shown::Redactor,
    /// The ask rule, e.g. "policy.toml:12", and its content key.
    pub rule: String,
    pub rule_key: String,
    pub reason: Option<String>,
    pub timeout: Duration,
    pub approvers: Vec<String>,
    /// Where the request came from (the sandbox-side address), and the
    /// command that sent it when known.
    pub client: String,
    pub sender: Option<Sender>,
}

/// Why a request could not be held.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HoldError {
    #[error(
        "{0} requests are already waiting for approval in this session (the cap); decide some with `airlock approvals`, then retry"
    )]
    Full(usize),
}

/// A held request's place in line; dropping it withdraws the request.
#[derive(Debug)]
pub struct Ticket {
    pub id: ApprovalId,
    pub decision: oneshot::Receiver<Resolution>,
}

/// A session-wide approval: rule, method, host, port and path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Grant {
    rule_key: String,
    method: String,
    host: String,
    port: u16,
    path: String,
}

impl Grant {
    fn of(request: &HoldRequest) -> Self {
        Self {
            rule_key: request.rule_key.clone(),
            method: request.method.clone(),
            host: request.host.clone(),
            port: request.port,
            path: request.path.clone(),
        }
    }
}

struct Waiting {
    view: PendingView,
    /// To render the whole request on demand.
    headers: Vec<(String, String)>,
    body: bytes::Bytes,
    redactor: shown::Redactor,
    grant: Grant,
    approvers: Vec<String>,
    answer: oneshot::Sender<Resolution>,
}

#[derive(Default)]
struct State {
    pending: HashMap<ApprovalId, Waiting>,
    /// Oldest first, bounded.
    decided: VecDeque<DecidedView>,
    /// Session-wide approvals and who granted them.
    granted: HashMap<Grant, String>,
    /// Ids ever handed out, so none is reused within the session.
    issued: HashSet<ApprovalId>,
    /// Places taken by requests being recorded, not yet shown.
    reserved: usize,
}

/// The session's held requests. Cheap to share (`Arc`).
pub struct Approvals {
    config: ApprovalsConfig,
    state: Mutex<State>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("session", &self.config.session)
            .field("cap", &self.config.cap)
            .finish_non_exhaustive()
    }
}

impl Approvals {
    pub fn new(config: ApprovalsConfig) -> Arc<Self> {
        Arc::new(Self {
            config,
            state: Mutex::new(State::default()),
        })
    }

    pub fn session(&self) -> &str {
        &self.config.session
    }

    /// The command that sent a request from `client`, when it can be known.
    /// Reads /proc: call it off the async threads.
    pub fn find_sender(&self, client: SocketAddr) -> Option<Sender> {
        self.config
            .find_sender
            .as_ref()
            .and_then(|find| find(client))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not stop every decision: the state is
        // consistent after each short critical section.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Who granted this request for the rest of the session, if anyone did.
    pub fn granted_for_session(&self, request: &HoldRequest) -> Option<String> {
        self.state().granted.get(&Grant::of(request)).cloned()
    }

    /// A place in line and the request's id, taken before the request is
    /// recorded: nobody sees it until [`Approvals::hold`], so the record
    /// comes first. Give it back with [`Approvals::cancel`] if it is never
    /// held.
    pub fn reserve(&self) -> Result<ApprovalId, HoldError> {
        let mut state = self.state();
        if state.pending.len() + state.reserved >= self.config.cap {
            return Err(HoldError::Full(self.config.cap));
        }
        state.reserved += 1;
        loop {
            let id = ApprovalId::random();
            if state.issued.insert(id.clone()) {
                return Ok(id);
            }
        }
    }

    /// Give back a reservation that will not be held.
    pub fn cancel(&self) {
        let mut state = self.state();
        state.reserved = state.reserved.saturating_sub(1);
    }

    /// Hold a reserved request: approvers see it (and the webhook hears of
    /// it), and it waits until decided, expired or withdrawn.
    pub fn hold(&self, id: ApprovalId, request: HoldRequest) -> Ticket {
        // Rendered before the lock: the body may be a 1 MiB document.
        let view = PendingView::new(&id, &self.config.session, &request, SystemTime::now());
        let mut state = self.state();
        state.reserved = state.reserved.saturating_sub(1);
        let (answer, decision) = oneshot::channel();
        if let Some(webhook) = &self.config.webhook {
            webhook.announce(&view);
        }
        state.pending.insert(
            id.clone(),
            Waiting {
                view,
                grant: Grant::of(&request),
                headers: request.headers,
                body: request.body,
                redactor: request.redactor,
                approvers: request.approvers,
                answer,
            },
        );
        Ticket { id, decision }
    }

    /// Every request waiting now, oldest first.
    pub fn pending(&self) -> Vec<PendingView> {
        let mut views: Vec<PendingView> = self
            .state()
            .pending
            .values()
            .map(|w| w.view.clone())
            .collect();
        views.sort_by_key(|v| v.requested_at_us);
        views
    }

    /// One request, waiting or decided.
    pub fn lookup(&self, id: &ApprovalId) -> Option<Result<PendingView, DecidedView>> {
        let state = self.state();
        if let Some(waiting) = state.pending.get(id) {
            return Some(Ok(waiting.view.clone()));
        }
        state.decided.iter().find(|d| &d.id == id).cloned().map(Err)
    }

    /// A waiting request with every header and its whole body shown
    /// (`airlock approvals show ID`), or the decided one.
    pub fn lookup_whole(&self, id: &ApprovalId) -> Option<Result<PendingView, DecidedView>> {
        let waiting = self.state().pending.get(id).map(|w| {
            (
                w.view.clone(),
                w.headers.clone(),
                w.body.clone(),
                w.redactor.clone(),
            )
        });
        // The guard is gone by now: `lookup` takes the lock again.
        let Some((mut view, headers, body, redactor)) = waiting else {
            return self.lookup(id);
        };
        // Rendered outside the lock: a whole body is up to 1 MiB.
        let held = shown::Held {
            method: &view.method,
            url: &view.url,
            headers: &headers,
            body: &body,
        };
        view.shown = shown::Shown::new(held, &redactor, &shown::Bound::WHOLE);
        Some(Ok(view))
    }

    /// Decide a waiting request, once.
    pub fn decide(
        &self,
        id: &ApprovalId,
        choice: Choice,
        by: &Decider,
        note: Option<String>,
    ) -> Result<DecidedView, DecideError> {
        let mut state = self.state();
        let Some(waiting) = state.pending.remove(id) else {
            return Err(match state.decided.iter().find(|d| &d.id == id) {
                Some(done) => DecideError::AlreadyDecided {
                    id: id.clone(),
                    outcome: done.outcome.clone(),
                },
                None => DecideError::Unknown(id.clone()),
            });
        };
        if let Err(e) = self.authorize(id, &waiting.approvers, by) {
            // Not theirs to decide: it waits on for someone who may.
            state.pending.insert(id.clone(), waiting);
            return Err(e);
        }
        let by_text = by.to_string();
        if let Choice::Approve(Scope::Session) = choice {
            state.granted.insert(waiting.grant.clone(), by_text.clone());
        }
        let outcome = match choice {
            Choice::Approve(_) => "approved",
            Choice::Deny => "denied",
        };
        let scope = match &choice {
            Choice::Approve(scope) => Some(*scope),
            Choice::Deny => None,
        };
        let done = DecidedView::new(
            &waiting.view,
            outcome,
            scope,
            Some(by_text.clone()),
            note.clone(),
        );
        remember(&mut state, done.clone());
        drop(state);
        // The request may have gone meanwhile (its client hung up): then
        // the decision is on record here and nothing else happens.
        let _ = waiting.answer.send(Resolution {
            choice,
            by: by_text,
            note,
        });
        Ok(done)
    }

    /// Only the rule's approvers, or the owner when it names none.
    fn authorize(
        &self,
        id: &ApprovalId,
        approvers: &[String],
        by: &Decider,
    ) -> Result<(), DecideError> {
        if approvers.is_empty() {
            let owner = self.config.owner_uid;
            // A token was handed out by the owner: it decides for them.
            return match by {
                Decider::Token { .. } => Ok(()),
                Decider::User { uid, .. } if *uid == owner => Ok(()),
                Decider::User { .. } => Err(DecideError::NotTheOwner {
                    id: id.clone(),
                    who: by.to_string(),
                    owner,
                }),
            };
        }
        match by.name() {
            Some(name) if approvers.iter().any(|a| a == name) => Ok(()),
            _ => Err(DecideError::NotAnApprover {
                id: id.clone(),
                who: by.to_string(),
                approvers: approvers.join(", "),
            }),
        }
    }

    /// The request's wait ended without a decision (`outcome`: "expired"
    /// or "abandoned"). None when it had been decided meanwhile.
    pub fn withdraw(&self, id: &ApprovalId, outcome: &str) -> Option<DecidedView> {
        let mut state = self.state();
        let waiting = state.pending.remove(id)?;
        let done = DecidedView::new(&waiting.view, outcome, None, None, None);
        remember(&mut state, done.clone());
        Some(done)
    }
}

fn remember(state: &mut State, done: DecidedView) {
    if state.decided.len() >= DECIDED_KEPT {
        state.decided.pop_front();
    }
    state.decided.push_back(done);
}

#[cfg(test)]
mod tests;
