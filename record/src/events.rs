// Why this file is long (~600 lines): it is the record's event model, type
// definitions with the serde attributes that are the stored format; one file
// so the whole model can be read and reviewed at once.
//! Every event the record keeps, as a named struct: what ran, what changed
//! on disk, what crossed the network, what a person was asked, and what a
//! live session's steps did.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::codec::{b64, opt_b64};
use crate::{ConnectionId, ExchangeId, ExecId, OsText, RuleRef, StepNo, Verdict};

// -------- What ran: execs, their exits, and tasks the observer did not trace.

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exec {
    pub exec_id: ExecId,
    #[serde(default)]
    pub parent_exec_id: Option<ExecId>,
    pub pid: i32,
    pub ppid: i32,
    pub uid: u32,
    pub path: OsText,
    pub argv: Vec<OsText>,
    pub cwd: OsText,
    #[serde(default)]
    pub env_names: Vec<OsText>,
    /// Keyed by names that are UTF-8 (a JSON object's keys are text):
    /// a variable whose name is not keeps only its name in `env_names`.
    #[serde(default)]
    pub env_values_nonsecret: BTreeMap<String, OsText>,
    /// In a live session, the step whose exec tree this exec is in (the
    /// observer knows: it descends from the step's first process). Left
    /// out when absent, so records made before steps existed verify
    /// unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepNo>,
    /// What the kernel executed, beyond `path` (empty for records made
    /// before 2026-11-25).
    #[serde(default, flatten)]
    pub image: ExecImage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exit {
    pub exec_id: ExecId,
    /// Exit code when the process exited normally.
    #[serde(default)]
    pub status: Option<i32>,
    /// Signal number when the process was killed by a signal.
    #[serde(default)]
    pub signal: Option<i32>,
}

/// A task in the sandbox that the observer did not trace, so nothing it
/// ran is on record: airlock killed its process when it found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Untraced {
    /// The exec responsible for it (its parent's; a thread's own
    /// process's), when that one was traced.
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    /// Its pid (a thread's tid) inside the sandbox.
    pub pid: i32,
    /// Its parent's pid inside the sandbox; 0 for a parent outside it.
    pub ppid: i32,
    pub uid: u32,
    /// Its name (/proc/PID/comm), as it set it.
    pub comm: OsText,
}

/// A file an exec involved besides its image (a `#!` script, the program
/// ld.so loads), as the process resolved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecFile {
    pub path: OsText,
    #[serde(default)]
    pub sha256: Option<String>,
}

/// What an exec ran, as the kernel saw it after the exec succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExecImage {
    /// SHA-256 of the executed image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// "file", "memfd" (memfd_create(2)) or "deleted": images of the last
    /// two kinds also have a file record with op "image" holding their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// For `#!` scripts: the script the interpreter (the image) was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<ExecFile>,
    /// When the image is the dynamic loader run directly: the program it loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded: Option<ExecFile>,
}

// -------- What changed on disk: file operations and the inode they were about.

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileChange {
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    /// Absolute path as seen inside the sandbox.
    pub path: OsText,
    pub op: FileOp,
    #[serde(default)]
    pub size: Option<u64>,
    /// SHA-256 (hex) of the file's content after the operation, as
    /// observed by the producer. Computed from `content` when absent.
    #[serde(default)]
    pub sha256: Option<String>,
    /// The content after the operation, if the producer captured it. The
    /// store moves it to a deduplicated content table (so it is `None` in
    /// events read back) and drops it when larger than the session's
    /// `max_file_bytes`.
    #[serde(default, with = "opt_b64", skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<u8>>,
    #[serde(default)]
    pub rename_to: Option<OsText>,
    #[serde(default)]
    pub mode: Option<u32>,
    /// Set by the store: SHA-256 of the stored content blob. Differs from
    /// `sha256` only when redaction had to change the bytes.
    #[serde(default)]
    pub stored_content: Option<String>,
    /// Set by the store: content was captured but exceeded the cap, so
    /// only its hash is kept.
    #[serde(default)]
    pub content_over_cap: bool,
    /// Set by the store: the session's record budget
    /// (`SessionInfo::max_session_bytes`) was spent, so only the hash and
    /// size are kept. Left out when false, so older records verify
    /// unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub content_over_budget: bool,
    /// Which file the kernel wrote, and how the record learnt of it.
    #[serde(default, flatten)]
    pub identity: FileIdentity,
    /// For op `xattr`: which extended attribute. `size`, `sha256` and
    /// the content are then the attribute's value (kept like file
    /// content: the same cap, budget and store), and `mode`, for a
    /// POSIX ACL, the mode the file had after it. Left out otherwise,
    /// so older records verify unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xattr: Option<Xattr>,
}

/// An extended attribute that a file operation set or removed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Xattr {
    /// e.g. `user.payload`, `system.posix_acl_access`: bytes, as the
    /// kernel has it (see [`OsText`]).
    pub name: OsText,
    /// The file has no such attribute after the operation: removed, or an
    /// ACL that the mode expresses, which the kernel keeps as the mode.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
    /// A POSIX ACL's entries, readable: "user::rwx, user:1000:rwx,
    /// group::---, mask::rwx, other::---".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<String>,
}

impl Xattr {
    /// Is this a POSIX ACL (a permission change)?
    pub fn is_acl(&self) -> bool {
        self.name == "system.posix_acl_access" || self.name == "system.posix_acl_default"
    }
}

/// Which inode a file record is about and how it was learnt.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FileIdentity {
    /// Device and inode number of the file the kernel wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ino: Option<u64>,
    /// Every name the inode had in the session, when more than one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<OsText>,
    /// Made by the end-of-session reconcile of the writable mounts (a change
    /// no observed syscall explains), not by an observed syscall.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reconciled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileOp {
    Create,
    Modify,
    Truncate,
    Rename,
    Delete,
    Chmod,
    /// An extended attribute set or removed (see `AuditEvent::File::xattr`).
    Xattr,
    /// The bytes of an executed image with no path on disk (memfd, deleted).
    Image,
    /// What a file that existed before the session held before its first
    /// change in the session, recorded before that change ran: content (up
    /// to the cap), SHA-256 and size, and in `mode` its whole `st_mode`
    /// (file type and permission bits). A directory's path ends in '/', a
    /// symlink's content is its target. Without a mode it was missed: what
    /// the file held is not known.
    Original,
}

impl FileOp {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Modify => "modify",
            Self::Truncate => "truncate",
            Self::Rename => "rename",
            Self::Delete => "delete",
            Self::Chmod => "chmod",
            Self::Xattr => "xattr",
            Self::Image => "image",
            Self::Original => "original",
        }
    }

    /// Does a record with this op carry a file's content?
    pub fn carries_content(self) -> bool {
        matches!(
            self,
            Self::Create | Self::Modify | Self::Truncate | Self::Original
        )
    }
}

impl FileChange {
    /// An operation `op` on `path`, with nothing else known yet.
    pub fn new(path: OsText, op: FileOp) -> Self {
        Self {
            exec_id: None,
            path,
            op,
            size: None,
            sha256: None,
            content: None,
            rename_to: None,
            mode: None,
            stored_content: None,
            content_over_cap: false,
            content_over_budget: false,
            identity: FileIdentity::default(),
            xattr: None,
        }
    }
}

// -------- What crossed the network: DNS queries, TCP connections and HTTP
// exchanges (with an upgraded exchange's WebSocket messages).

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DnsQuery {
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    pub name: String,
    pub qtype: String,
    #[serde(default)]
    pub answer: Vec<String>,
    pub decision: Verdict,
    #[serde(default)]
    pub rule: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpConnection {
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    /// Links the record made when the connection was decided to the one
    /// made when it closed (with byte counts); readers show the latest.
    #[serde(default)]
    pub connection: Option<ConnectionId>,
    /// Destination address as "ip:port".
    pub dst: String,
    #[serde(default)]
    pub host: Option<String>,
    pub port: u16,
    pub decision: Verdict,
    #[serde(default)]
    pub rule: Option<RuleRef>,
    /// Why a refused connection was refused. Left out when absent, so
    /// records written before the field existed verify unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub bytes_up: u64,
    #[serde(default)]
    pub bytes_down: u64,
    #[serde(default)]
    pub duration_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpExchange {
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    /// Links the records of one exchange: the proxy records the decision
    /// before forwarding (so nothing goes out unrecorded, even if airlock
    /// dies mid-request) and the completed exchange when the response
    /// ends. Readers show the latest record of each exchange.
    #[serde(default)]
    pub exchange: Option<ExchangeId>,
    pub method: String,
    pub url: String,
    pub http_version: String,
    #[serde(default)]
    pub request_headers: Vec<(String, String)>,
    #[serde(default, with = "opt_b64")]
    pub request_body: Option<Vec<u8>>,
    #[serde(default)]
    pub request_body_truncated: bool,
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub response_headers: Vec<(String, String)>,
    #[serde(default, with = "opt_b64")]
    pub response_body: Option<Vec<u8>>,
    #[serde(default)]
    pub response_body_truncated: bool,
    #[serde(default)]
    pub bytes_up: u64,
    #[serde(default)]
    pub bytes_down: u64,
    /// When the request started (µs since the epoch); defaults to the
    /// event's own timestamp.
    #[serde(default)]
    pub started_us: Option<i64>,
    /// Milliseconds from request start to response headers.
    #[serde(default)]
    pub ms_to_headers: Option<f64>,
    /// Milliseconds from request start to the end of the response.
    #[serde(default)]
    pub ms_total: Option<f64>,
    /// "allow" | "deny" | "report".
    pub decision: Verdict,
    /// The policy rule that decided, e.g. "policy.toml:12".
    #[serde(default)]
    pub rule: Option<RuleRef>,
    #[serde(default)]
    pub reason: Option<String>,
    /// An upgraded (101) exchange's WebSocket messages and how it ended;
    /// set on the record made when the relay ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub websocket: Option<Box<WebSocketRecord>>,
}

/// What crossed an upgraded WebSocket exchange, and how it ended.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WebSocketRecord {
    /// The first messages of each direction, payloads up to the capture cap.
    #[serde(default)]
    pub messages: Vec<WebSocketMessage>,
    /// "client" | "upstream" | "airlock" (a peer broke the protocol).
    pub closed_by: String,
    #[serde(default)]
    pub close_code: Option<u16>,
    #[serde(default)]
    pub close_reason: Option<String>,
    #[serde(default)]
    pub messages_to_upstream: u64,
    #[serde(default)]
    pub bytes_to_upstream: u64,
    #[serde(default)]
    pub messages_to_client: u64,
    #[serde(default)]
    pub bytes_to_client: u64,
    #[serde(default)]
    pub ms_total: Option<f64>,
    /// Why it ended other than by a closing handshake.
    #[serde(default)]
    pub error: Option<String>,
}

/// One WebSocket message (RFC 6455), as forwarded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebSocketMessage {
    /// Microseconds since the Unix epoch.
    pub ts_us: i64,
    /// "to_upstream" | "to_client".
    pub direction: String,
    /// "text" | "binary" | "close" | "ping" | "pong" | "continuation".
    pub opcode: String,
    #[serde(default)]
    pub fragments: u32,
    /// Payload length as forwarded.
    pub bytes: u64,
    #[serde(with = "b64")]
    pub payload: Vec<u8>,
    #[serde(default)]
    pub truncated: bool,
}

impl WebSocketMessage {
    /// The opcode's number (RFC 6455 §5.2), as HAR's `_webSocketMessages` has it.
    pub fn opcode_number(&self) -> u8 {
        match self.opcode.as_str() {
            "text" => 1,
            "binary" => 2,
            "close" => 8,
            "ping" => 9,
            "pong" => 10,
            _ => 0,
        }
    }
}

impl HttpExchange {
    /// An exchange as decided, before anything crossed: what was asked and
    /// what the policy said; the rest is filled in as it ends.
    pub fn decided(method: String, url: String, http_version: String, decision: Verdict) -> Self {
        Self {
            exec_id: None,
            exchange: None,
            method,
            url,
            http_version,
            request_headers: Vec::new(),
            request_body: None,
            request_body_truncated: false,
            status: None,
            response_headers: Vec::new(),
            response_body: None,
            response_body_truncated: false,
            bytes_up: 0,
            bytes_down: 0,
            started_us: None,
            ms_to_headers: None,
            ms_total: None,
            decision,
            rule: None,
            reason: None,
            websocket: None,
        }
    }
}

// -------- Requests an `[[ask]]` rule held, and how each wait ended.

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

// -------- A live session's steps, what commands printed, and airlock's own notes.

/// Terminal output, for asciicast export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Output {
    pub stream: OutputStream,
    #[serde(with = "b64")]
    pub data: Vec<u8>,
    /// In a live session, the step whose stdout or stderr this is. Left
    /// out when absent (as for `Exec::step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepNo>,
}

/// A session-level note from airlock itself (e.g. "policy reloaded").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Note {
    pub text: String,
    /// For a policy reload: the policy that decides from this note on.
    /// Left out otherwise (and in every note recorded before reloads were
    /// on record, so those verify unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyInForce>,
}

impl Note {
    /// A note that is only text.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            policy: None,
        }
    }
}

/// A policy as it came into force during a session (a reload), as the
/// session's own info records the one it started under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyInForce {
    /// The policy file, as named on the command line (`SessionInfo::policy_name`).
    pub name: String,
    /// SHA-256 (hex) of its text: the same digest as
    /// `SessionInfo::policy_sha256` and `sha256sum` of the file.
    pub sha256: String,
    /// Its text, as read.
    pub text: String,
    /// Every file it was read from, the bases it `extends` first and the
    /// file itself last, each with the SHA-256 of the text read: a change
    /// to a base alone shows here.
    pub files: Vec<PolicySource>,
}

/// One file of a policy in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySource {
    pub name: String,
    pub sha256: String,
}

/// The command's terminal got a new window size (the caller resized
/// theirs), for asciicast export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resize {
    pub cols: u16,
    pub rows: u16,
}

/// A live session (`airlock session exec`) began a step: one command
/// run in the session's sandbox, with the caller's label (an agent's
/// tool-call id or turn number; untrusted text, like everything the
/// caller chooses).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepStart {
    pub step: StepNo,
    #[serde(default)]
    pub label: Option<String>,
    pub command: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// The command ran on a pty.
    #[serde(default)]
    pub tty: bool,
}

/// A step's command ended. Processes it left in the background may
/// still run; their events stay the step's (they are in its exec tree).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEnd {
    pub step: StepNo,
    /// Exit code when the command exited normally.
    #[serde(default)]
    pub exit_status: Option<i32>,
    /// Signal number when the command was killed by a signal.
    #[serde(default)]
    pub signal: Option<i32>,
    /// The step's own timeout killed it.
    #[serde(default)]
    pub timed_out: bool,
    /// From the step's start to its end.
    pub duration_ms: f64,
    /// Why airlock ended it, if it did (e.g. "killed: the client
    /// disconnected").
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    Stdout,
    Stderr,
}
