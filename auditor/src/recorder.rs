// Why this file is long (~580 lines): the recorder handle and its writer
// thread are two ends of one protocol (the Msg channel, group commit, the
// health gate, checkpoints); kept together so that protocol reads in one place.
//! Recording: a cheap cloneable handle in front of one writer thread per
//! session. `record` does the CPU work (redaction, JSON encoding) on the
//! caller's thread and hands the row to the writer over a channel with room
//! for [`QUEUE_DEPTH`] events (`room.rs`); the
//! writer extends the hash chain, inserts whatever has queued up in one
//! transaction (group commit) and signs checkpoints.

use crate::{FileChange, HttpExchange, Note, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};

use crate::budget::{Admit, Budget};
use crate::chain::{self, Hash};
use crate::commit::{
    ChainedEvent, Commit, CommitError, NewCheckpoint, NewEnd, NewEvent, SessionWriter,
};
use crate::search::terms::{self, Terms};
use crate::ship::ShipFeed;
use crate::{AuditError, AuditEvent, FileOp, Redactor, Seq, SessionEnd, SessionId, SessionInfo};

mod room;

use room::Room;

/// Sign a checkpoint after this many events...
const CHECKPOINT_EVERY: u64 = 1000;
/// ...or after this long with unsigned events, whichever comes first.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(500);
/// Upper bound on rows per transaction, so one commit never holds the write
/// lock for long.
const MAX_BATCH: usize = 8192;
/// Having taken events, the writer waits this long for more before
/// committing, unless someone waits for durability: one commit and one
/// wake-up per linger instead of per event, also when events come one at a
/// time (sequential requests: a request and its response were two commits).
/// Events reach the database at most this much later; `sync`/`finish` are
/// never delayed.
const LINGER: Duration = Duration::from_millis(2);
/// Queue depth between `record` and the writer. When full, `record` waits
/// (back-pressure) rather than dropping events.
const QUEUE_DEPTH: usize = 65536;

/// Handle for recording one session's events. Clone it freely; all clones feed
/// the same writer. Dropping the last clone without [`SessionRecorder::finish`]
/// flushes and signs what was recorded but leaves the session marked as not
/// finished (as after a crash).
#[derive(Clone)]
pub struct SessionRecorder {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SessionRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionRecorder")
            .field("session", &self.inner.session)
            .finish_non_exhaustive()
    }
}

struct Inner {
    session: SessionId,
    gate: Mutex<Gate>,
    health: Arc<Health>,
    redactor: Redactor,
    max_file_bytes: u64,
    /// Taken by every event that carries content, from the budget's decision
    /// until the event has its seq, so that no event after the notice keeps
    /// content (lock order: budget, then gate).
    budget: Mutex<Budget>,
    room: Arc<Room>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Where the writer hands each commit once it is in the store.
    feed: Arc<OnceLock<Arc<ShipFeed>>>,
}

/// Everything that must change atomically with sending, so that seq order is
/// channel order.
struct Gate {
    next_seq: u64,
    last_ts_us: i64,
    tx: Option<Sender<Msg>>,
}

#[derive(Default)]
struct Health {
    failed: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl Health {
    fn fail(&self, reason: String) {
        // Not an error log: whoever runs the session reports it once, with
        // what to do (the proxy's engine, `airlock run`).
        tracing::debug!(%reason, "audit store failed; refusing further events");
        let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_none() {
            *r = Some(reason);
        }
        self.failed.store(true, Ordering::SeqCst);
    }

    /// Why the store failed, in the store's own words.
    fn reason(&self) -> String {
        let r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        r.clone().unwrap_or_else(|| "unknown failure".into())
    }

    fn error(&self) -> AuditError {
        AuditError::WriterFailed(self.reason())
    }

    fn check(&self) -> Result<(), AuditError> {
        if self.failed.load(Ordering::SeqCst) {
            Err(self.error())
        } else {
            Ok(())
        }
    }
}

/// The writer's answer to a sync or finish.
type Reply = Sender<Result<(), AuditError>>;

enum Msg {
    Event(NewEvent),
    Sync(Reply),
    Finish {
        ended_us: i64,
        end_json: String,
        reply: Reply,
    },
}

/// An event as JSON, before it has a seq.
struct Encoded {
    kind: &'static str,
    exec_id: Option<String>,
    payload: String,
    terms: Vec<Terms>,
}

/// Whether the event may carry content the record budget counts.
fn carries_content(event: &AuditEvent) -> bool {
    match event {
        AuditEvent::File(FileChange { content, .. }) => content.is_some(),
        AuditEvent::Http(HttpExchange {
            request_body,
            response_body,
            websocket,
            ..
        }) => {
            request_body.is_some()
                || response_body.is_some()
                || websocket.as_ref().is_some_and(|w| !w.messages.is_empty())
        }
        AuditEvent::Output(Output { data, .. }) => !data.is_empty(),
        _ => false,
    }
}

/// Content kept inside the event itself (bodies, WebSocket messages,
/// output): dropped past the budget. Bodies then read as truncated with
/// nothing kept, output as empty; the notice says why. Returns whether this
/// was the first drop.
fn drop_inline_content(event: &mut AuditEvent, budget: &mut Budget) -> bool {
    let len = |b: &Option<Vec<u8>>| b.as_ref().map_or(0, |b| b.len() as u64);
    let (bytes, drop): (u64, fn(&mut AuditEvent)) = match event {
        AuditEvent::Http(HttpExchange {
            request_body,
            response_body,
            websocket,
            ..
        }) => (
            len(request_body)
                + len(response_body)
                + websocket.as_ref().map_or(0, |w| {
                    w.messages.iter().map(|m| m.payload.len() as u64).sum()
                }),
            |event| {
                if let AuditEvent::Http(HttpExchange {
                    request_body,
                    request_body_truncated,
                    response_body,
                    response_body_truncated,
                    websocket,
                    ..
                }) = event
                {
                    *request_body_truncated |= request_body.take().is_some();
                    *response_body_truncated |= response_body.take().is_some();
                    if let Some(w) = websocket {
                        w.messages.clear();
                    }
                }
            },
        ),
        AuditEvent::Output(Output { data, .. }) => (data.len() as u64, |event| {
            if let AuditEvent::Output(Output { data, .. }) = event {
                data.clear();
            }
        }),
        _ => return false,
    };
    match budget.admit(bytes) {
        Admit::Keep => false,
        Admit::Drop { first } => {
            drop(event);
            first
        }
    }
}

/// The one notice a session gets when its record budget is spent.
fn budget_notice(seq: u64, limit: u64, used: u64) -> String {
    format!(
        "record budget spent: {used} of {limit} bytes of content kept (--audit-max-session); \
         from event {seq} on, file versions keep their hash and size only, and HTTP bodies, \
         WebSocket messages and output are not kept"
    )
}

struct WriterSetup {
    /// Where the store commits this session's writes.
    pub writer: Box<dyn SessionWriter>,
    pub session: SessionId,
    pub key: SigningKey,
    pub genesis: Hash,
    pub redactor: Redactor,
    pub max_file_bytes: u64,
    /// The record budget (bytes of content); `u64::MAX` for none.
    pub max_session_bytes: u64,
}

/// A session about to begin, the same for every store: its id, start time
/// and info as recorded (scrubbed), and its key. A store writes the
/// session's row from it, then starts its recorder with [`Self::start`].
pub(crate) struct NewSession {
    pub(crate) id: SessionId,
    pub(crate) started_us: i64,
    pub(crate) info_json: String,
    pub(crate) public: VerifyingKey,
    key: SigningKey,
    redactor: Redactor,
    max_file_bytes: u64,
    max_session_bytes: u64,
}

impl NewSession {
    pub(crate) fn new(
        info: &SessionInfo,
        key: SigningKey,
        redactor: &Redactor,
    ) -> Result<Self, AuditError> {
        let started_us = now_us();
        let id = crate::ids::new_session_id(u64::try_from(started_us / 1000).unwrap_or(0))?;
        let mut info_value = serde_json::to_value(info)?;
        redactor.scrub_json(&mut info_value);
        let info_json = serde_json::to_string(&info_value)?;
        Ok(Self {
            id,
            started_us,
            info_json,
            public: key.verifying_key(),
            key,
            redactor: redactor.clone(),
            max_file_bytes: info.max_file_bytes,
            max_session_bytes: info.max_session_bytes.unwrap_or(u64::MAX),
        })
    }

    /// Starts recording, through the writer the store made for the
    /// session's row.
    pub(crate) fn start(
        self,
        writer: Box<dyn SessionWriter>,
    ) -> Result<SessionRecorder, AuditError> {
        let genesis = chain::genesis(
            self.id.as_str(),
            self.public.as_bytes(),
            self.started_us,
            &self.info_json,
        );
        SessionRecorder::start(WriterSetup {
            writer,
            session: self.id,
            key: self.key,
            genesis,
            redactor: self.redactor,
            max_file_bytes: self.max_file_bytes,
            max_session_bytes: self.max_session_bytes,
        })
    }
}

pub(crate) fn now_us() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl SessionRecorder {
    fn start(setup: WriterSetup) -> Result<Self, AuditError> {
        let (tx, rx) = mpsc::channel();
        let room = Arc::new(Room::new(QUEUE_DEPTH));
        let health = Arc::new(Health::default());
        let feed = Arc::new(OnceLock::new());
        let writer = Writer {
            sink: setup.writer,
            session: setup.session.clone(),
            key: setup.key,
            prev: setup.genesis,
            last_seq: 0,
            signed_seq: 0,
            last_checkpoint: Instant::now(),
            health: health.clone(),
            feed: feed.clone(),
            room: room.clone(),
        };
        let handle = std::thread::Builder::new()
            .name(format!(
                "audit-{}",
                setup.session.as_str().chars().take(8).collect::<String>()
            ))
            .spawn(move || writer.run(rx))
            .map_err(AuditError::io("cannot start the audit writer thread"))?;
        Ok(Self {
            inner: Arc::new(Inner {
                session: setup.session,
                gate: Mutex::new(Gate {
                    next_seq: 1,
                    last_ts_us: 0,
                    tx: Some(tx),
                }),
                health,
                redactor: setup.redactor,
                max_file_bytes: setup.max_file_bytes,
                budget: Mutex::new(Budget::new(setup.max_session_bytes)),
                room,
                writer: Mutex::new(Some(handle)),
                feed,
            }),
        })
    }

    pub fn session_id(&self) -> &SessionId {
        &self.inner.session
    }

    /// Hands every commit from now on to `feed` as well, once it is in
    /// the store: the live shipper's copy (see [`ShipFeed`]). A recorder
    /// feeds one shipper; a second feed is ignored.
    pub fn feed(&self, feed: Arc<ShipFeed>) {
        let _ = self.inner.feed.set(feed);
    }

    /// The redactor applied to this session's events; secrets registered here
    /// are scrubbed from every later event.
    pub fn redactor(&self) -> &Redactor {
        &self.inner.redactor
    }

    /// False once the store could not be written (disk full, read-only,
    /// permissions). The caller must then refuse new work and stop the
    /// session: nothing may happen off the record.
    pub fn healthy(&self) -> bool {
        !self.inner.health.failed.load(Ordering::SeqCst)
    }

    /// Queues one event and returns its sequence number. Does not wait for the
    /// disk (see [`Self::sync`]); waits only if the writer is far behind.
    /// Errors once the writer has failed, so callers fail closed.
    ///
    /// `Ok` means "queued": events queued since the last successful commit
    /// are lost if the writer then fails, which is why every later call
    /// (including `sync` and `finish`) reports the failure. Use `sync` where
    /// an action must not proceed before its record is on disk.
    pub fn record(&self, mut event: AuditEvent) -> Result<Seq, AuditError> {
        self.inner.health.check()?;
        let mut budget = carries_content(&event)
            .then(|| self.inner.budget.lock().unwrap_or_else(|p| p.into_inner()));
        let mut first_drop = false;
        let content = self.take_content(&mut event, budget.as_deref_mut(), &mut first_drop);
        if let Some(b) = budget.as_deref_mut() {
            first_drop |= drop_inline_content(&mut event, b);
        }
        let row = self.encode(event)?;
        let mut gate = self.inner.gate.lock().unwrap_or_else(|p| p.into_inner());
        if first_drop {
            let limit = budget.as_deref().map_or(0, Budget::limit);
            let used = budget.as_deref().map_or(0, Budget::used);
            let notice = AuditEvent::Note(Note {
                // The event after the notice is the first without content.
                text: budget_notice(gate.next_seq + 1, limit, used),
                policy: None,
            });
            let notice = self.encode(notice)?;
            self.send(&mut gate, notice, None)?;
        }
        self.send(&mut gate, row, content)
    }

    /// The CPU work of recording: redaction, JSON, search terms.
    fn encode(&self, mut event: AuditEvent) -> Result<Encoded, AuditError> {
        let redactor = &self.inner.redactor;
        let payload = if redactor.is_empty() {
            serde_json::to_string(&event)?
        } else {
            redactor.scrub_event_bytes(&mut event);
            let mut value = serde_json::to_value(&event)?;
            redactor.scrub_json(&mut value);
            serde_json::to_string(&value)?
        };
        let kind = event.kind().as_str();
        let terms = terms::of(&event, redactor);
        let exec_id = event.exec_id().map(|id| {
            let mut s = id.0.clone();
            redactor.scrub_string(&mut s);
            s
        });
        Ok(Encoded {
            kind,
            exec_id,
            payload,
            terms,
        })
    }

    /// Gives the event its seq and hands it to the writer.
    fn send(
        &self,
        gate: &mut Gate,
        encoded: Encoded,
        content: Option<(String, Vec<u8>)>,
    ) -> Result<Seq, AuditError> {
        let seq = gate.next_seq;
        // Timestamps never go backwards within a session, even if the wall
        // clock does, so "chronological" and "seq order" agree.
        let ts_us = now_us().max(gate.last_ts_us);
        let Some(tx) = gate.tx.as_ref() else {
            return Err(AuditError::Finished);
        };
        let row = NewEvent {
            seq,
            ts_us,
            kind: encoded.kind,
            exec_id: encoded.exec_id,
            payload: encoded.payload,
            content,
            terms: encoded.terms,
        };
        let sent = self.inner.room.take().is_ok() && tx.send(Msg::Event(row)).is_ok();
        if !sent {
            self.inner
                .health
                .fail("the audit writer thread stopped".into());
            return Err(self.inner.health.error());
        }
        gate.next_seq += 1;
        gate.last_ts_us = ts_us;
        Ok(Seq(seq))
    }

    /// Moves file content out of the event: computes hash/size, applies the
    /// size cap and redaction, and returns (hash of stored bytes, bytes).
    /// Past the record budget, only (hash, size) are kept and
    /// `content_over_budget` is set; `first_drop` is set for the first such.
    fn take_content(
        &self,
        event: &mut AuditEvent,
        budget: Option<&mut Budget>,
        first_drop: &mut bool,
    ) -> Option<(String, Vec<u8>)> {
        let AuditEvent::File(FileChange {
            op,
            content,
            sha256,
            size,
            stored_content,
            content_over_cap,
            content_over_budget,
            ..
        }) = event
        else {
            return None;
        };
        // Never trust store-only fields from the caller.
        *stored_content = None;
        *content_over_budget = false;
        let Some(mut bytes) = content.take() else {
            // The observer leaves out content over the cap itself: say so.
            // An xattr record's content is the attribute's value.
            let writes_content = op.carries_content() || *op == FileOp::Xattr;
            *content_over_cap =
                writes_content && size.is_some_and(|s| s > self.inner.max_file_bytes);
            return None;
        };
        *content_over_cap = false;
        if sha256.is_none() {
            *sha256 = Some(chain::sha256_hex(&bytes));
        }
        if size.is_none() {
            *size = Some(bytes.len() as u64);
        }
        if bytes.len() as u64 > self.inner.max_file_bytes {
            *content_over_cap = true;
            return None;
        }
        self.inner.redactor.scrub_bytes(&mut bytes);
        let stored = chain::sha256_hex(&bytes);
        if let Some(budget) = budget
            && let Admit::Drop { first } = budget.admit(bytes.len() as u64)
        {
            *first_drop |= first;
            *content_over_budget = true;
            return None;
        }
        *stored_content = Some(stored.clone());
        Some((stored, bytes))
    }

    /// Blocks until every event recorded so far is committed and fsynced
    /// (power-loss durable). From async code call it via
    /// `tokio::task::spawn_blocking`; it is cheap when nothing is pending.
    pub fn sync(&self) -> Result<(), AuditError> {
        self.inner.health.check()?;
        let (reply, wait) = mpsc::channel();
        {
            let gate = self.inner.gate.lock().unwrap_or_else(|p| p.into_inner());
            let Some(tx) = gate.tx.as_ref() else {
                return Err(AuditError::Finished);
            };
            if tx.send(Msg::Sync(reply)).is_err() {
                return Err(self.inner.health.error());
            }
        }
        match wait.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(self.inner.health.error()),
        }
    }

    /// Flushes everything, writes the signed final checkpoint and the end
    /// record, and stops the writer. Other clones get `Finished` afterwards.
    pub fn finish(self, end: SessionEnd) -> Result<(), AuditError> {
        let end_json = serde_json::to_string(&end)?;
        let (reply, wait) = mpsc::channel();
        let sent = {
            let mut gate = self.inner.gate.lock().unwrap_or_else(|p| p.into_inner());
            let Some(tx) = gate.tx.take() else {
                return Err(AuditError::Finished);
            };
            tx.send(Msg::Finish {
                ended_us: now_us().max(gate.last_ts_us),
                end_json,
                reply,
            })
            .is_ok()
        };
        let result = match (sent, wait.recv()) {
            (true, Ok(Ok(()))) => Ok(()),
            (true, Ok(Err(e))) => Err(e),
            _ => Err(self.inner.health.error()),
        };
        self.inner.join_writer();
        result
    }
}

impl Inner {
    fn join_writer(&self) {
        let handle = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle
            && h.join().is_err()
        {
            self.health.fail("the audit writer thread panicked".into());
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel tells the writer to flush, sign and exit; wait
        // for it so "dropped" means "on disk".
        self.gate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tx
            .take();
        self.join_writer();
    }
}

struct Writer {
    sink: Box<dyn SessionWriter>,
    session: SessionId,
    key: SigningKey,
    prev: Hash,
    last_seq: u64,
    signed_seq: u64,
    last_checkpoint: Instant,
    health: Arc<Health>,
    feed: Arc<OnceLock<Arc<ShipFeed>>>,
    room: Arc<Room>,
}

impl Drop for Writer {
    /// However the writer ends (finished, failed, panicked), nobody is left
    /// waiting for room it will never give back.
    fn drop(&mut self) {
        self.room.close();
    }
}

/// Take what is queued, up to [`MAX_BATCH`], without waiting.
fn drain(rx: &Receiver<Msg>, batch: &mut Vec<Msg>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(m) => batch.push(m),
            Err(_) => break,
        }
    }
}

impl Writer {
    fn run(mut self, rx: Receiver<Msg>) {
        loop {
            let first = match rx.recv_timeout(CHECKPOINT_INTERVAL) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    if self.last_seq > self.signed_seq
                        && let Err(e) = self.transaction(&[], None, true)
                    {
                        self.health.fail(e.to_string());
                        break;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // Dropped without finish: sign what we have.
                    if let Err(e) = self.transaction(&[], None, true) {
                        self.health.fail(e.to_string());
                    }
                    return;
                }
            };
            let mut batch = vec![first];
            drain(&rx, &mut batch);
            let durability_wanted =
                |batch: &[Msg]| batch.iter().any(|m| !matches!(m, Msg::Event(_)));
            if batch.len() < MAX_BATCH && !durability_wanted(&batch) {
                std::thread::sleep(LINGER);
                drain(&rx, &mut batch);
            }
            let events = batch.iter().filter(|m| matches!(m, Msg::Event(_))).count();
            self.room.give_back(events);
            let mut replies = Vec::new();
            let mut rows = Vec::with_capacity(batch.len());
            let mut finish = None;
            for msg in batch {
                match msg {
                    Msg::Event(row) => rows.push(row),
                    Msg::Sync(r) => replies.push(r),
                    Msg::Finish {
                        ended_us,
                        end_json,
                        reply,
                    } => {
                        replies.push(reply);
                        finish = Some((ended_us, end_json));
                    }
                }
            }
            // A sync request forces a signed, fsynced checkpoint.
            let outcome = self.transaction(&rows, finish.as_ref(), !replies.is_empty());
            let done = finish.is_some();
            match outcome {
                Ok(()) => replies.into_iter().for_each(|r| {
                    let _ = r.send(Ok(()));
                }),
                Err(e) => {
                    let reason = e.to_string();
                    self.health.fail(reason.clone());
                    replies.into_iter().for_each(|r| {
                        let _ = r.send(Err(AuditError::WriterFailed(reason.clone())));
                    });
                    break;
                }
            }
            if done {
                return;
            }
        }
        // Failed: keep answering so callers waiting on sync/finish get an
        // error instead of hanging, until every handle is gone.
        while let Ok(msg) = rx.recv() {
            match msg {
                Msg::Sync(r) | Msg::Finish { reply: r, .. } => {
                    let _ = r.send(Err(self.health.error()));
                }
                Msg::Event(_) => self.room.give_back(1),
            }
        }
    }

    /// One group commit: rows, then a checkpoint if due (or forced), then the
    /// end record if finishing. `durable` makes this commit fsync the WAL.
    fn transaction(
        &mut self,
        rows: &[NewEvent],
        finish: Option<&(i64, String)>,
        force_checkpoint: bool,
    ) -> Result<(), CommitError> {
        let durable = force_checkpoint || finish.is_some();
        let mut prev = self.prev;
        let mut last_seq = self.last_seq;
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            prev = chain::link(
                &prev,
                row.seq,
                row.ts_us,
                row.kind,
                row.exec_id.as_deref(),
                row.payload.as_bytes(),
            );
            events.push(ChainedEvent {
                event: row,
                hash: prev,
            });
            last_seq = row.seq;
        }
        let due = last_seq > self.signed_seq
            && (last_seq - self.signed_seq >= CHECKPOINT_EVERY
                || self.last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL
                || force_checkpoint);
        let end_json = finish.map(|(_, j)| j.as_str());
        let checkpoint = (due || finish.is_some()).then(|| {
            let msg = chain::checkpoint_message(self.session.as_str(), last_seq, &prev, end_json);
            NewCheckpoint {
                seq: last_seq,
                ts_us: now_us(),
                hash: prev,
                is_final: finish.is_some(),
                signature: self.key.sign(&msg).to_bytes(),
            }
        });
        let end = finish.map(|(ended_us, end_json)| NewEnd {
            ended_us: *ended_us,
            end_json,
            final_seq: last_seq,
        });
        let commit = Commit {
            events: &events,
            checkpoint,
            end,
            durable,
        };
        self.sink.commit(&commit)?;
        if let Some(feed) = self.feed.get() {
            feed.committed(&self.session, self.last_seq, &commit);
        }
        self.prev = prev;
        self.last_seq = last_seq;
        if due || finish.is_some() {
            self.signed_seq = last_seq;
            self.last_checkpoint = Instant::now();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::mpsc::SyncSender;

    /// Keeps the seqs it commits; its first commit waits for `go`.
    struct HeldWriter {
        go: Option<Receiver<()>>,
        committed: Arc<Mutex<Vec<u64>>>,
    }

    impl SessionWriter for HeldWriter {
        fn commit(&mut self, commit: &Commit<'_>) -> Result<(), CommitError> {
            if let Some(go) = self.go.take() {
                let _ = go.recv();
            }
            let mut committed = self.committed.lock().unwrap();
            committed.extend(commit.events.iter().map(|e| e.event.seq));
            Ok(())
        }
    }

    fn info() -> SessionInfo {
        SessionInfo {
            command: Vec::new(),
            policy_name: "test".into(),
            policy_text: String::new(),
            limits: serde_json::Value::Null,
            airlock_version: "test".into(),
            host: "test".into(),
            mode: crate::SessionMode::Run,
            capabilities_note: None,
            max_file_bytes: 0,
            terminal: None,
            max_session_bytes: None,
            writable_dirs: Vec::new(),
            labels: Default::default(),
            isolation: Default::default(),
        }
    }

    fn note(i: u64) -> AuditEvent {
        AuditEvent::Note(Note {
            text: format!("note {i}"),
            policy: None,
        })
    }

    #[test]
    fn a_full_queue_holds_record_back_and_loses_or_reorders_nothing() {
        let (go, held): (SyncSender<()>, _) = mpsc::sync_channel(1);
        let committed = Arc::new(Mutex::new(Vec::new()));
        let writer = HeldWriter {
            go: Some(held),
            committed: committed.clone(),
        };
        let key = SigningKey::from_bytes(&[7; 32]);
        let recorder = NewSession::new(&info(), key, &Redactor::new())
            .unwrap()
            .start(Box::new(writer))
            .unwrap();
        // The writer takes at most one batch before its commit holds it;
        // then the queue fills and `record` must wait.
        let total = (MAX_BATCH + QUEUE_DEPTH) as u64 + 1000;
        let recorded = Arc::new(AtomicU64::new(0));
        let producer = {
            let recorder = recorder.clone();
            let recorded = recorded.clone();
            std::thread::spawn(move || {
                for i in 0..total {
                    recorder.record(note(i)).unwrap();
                    recorded.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        let held_at = loop {
            let before = recorded.load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(200));
            let after = recorded.load(Ordering::SeqCst);
            if before == after {
                break after;
            }
        };
        assert!(!producer.is_finished(), "record never waited");
        assert!(
            held_at >= QUEUE_DEPTH as u64 && held_at <= (MAX_BATCH + QUEUE_DEPTH) as u64 + 1,
            "held after {held_at} events"
        );
        go.send(()).unwrap();
        producer.join().unwrap();
        recorder
            .finish(SessionEnd {
                exit_status: Some(0),
                signal: None,
                reason: None,
            })
            .unwrap();
        let committed = committed.lock().unwrap();
        assert!(
            committed.iter().copied().eq(1..=total),
            "seqs out of order or missing"
        );
    }
}
