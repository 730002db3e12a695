//! The central store: its connection, kept open and reopened after the
//! server went away.

use std::sync::{Mutex, MutexGuard};

use ed25519_dalek::VerifyingKey;

use super::client::{Client, Queries};

use super::connect::PgTarget;
use super::error::CentralError;
use super::verify_rows::PgRows;
use super::{db, read, schema, search};
use crate::keys::resolve_anchor;
use crate::verify::verify_session;
use crate::{
    AuditError, EventKind, RecordStore, Redactor, SearchQuery, SearchResults, Seq, SessionId,
    SessionInfo, SessionRecorder, SessionRows, SessionSummary, ShippedUpTo, StoredEvent,
    TrustAnchor, VerifyReport,
};

/// One central PostgreSQL record store.
pub struct PgStore {
    target: PgTarget,
    /// None until connected, and again once the connection was lost.
    client: Mutex<Option<Client>>,
    /// Readers open it read-only: every transaction is READ ONLY, so a
    /// reader (or a replica) never writes.
    read_only: bool,
    /// Nothing is recorded here, so nothing is scrubbed; the readers'
    /// interface still hands one out.
    redactor: Redactor,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.target.shown())
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Opens the store at `url` to ship into it (and enroll keys),
    /// creating its schema on first use.
    pub fn open(url: &str) -> Result<Self, AuditError> {
        let store = Self::new(PgTarget::parse(url)?, false);
        store.with(|c| schema::create(c, &store.target))?;
        Ok(store)
    }

    /// Opens an existing store for reading and verification only: it is
    /// never written (every transaction is read-only), so a read replica
    /// serves as well.
    pub fn open_readonly(url: &str) -> Result<Self, AuditError> {
        let store = Self::new(PgTarget::parse(url)?, true);
        store.with(|c| schema::check(c, &store.target))?;
        Ok(store)
    }

    fn new(target: PgTarget, read_only: bool) -> Self {
        Self {
            target,
            client: Mutex::new(None),
            read_only,
            redactor: Redactor::new(),
        }
    }

    /// The store's URL, its password replaced by `***`.
    pub fn url(&self) -> &str {
        self.target.shown()
    }

    /// Runs `f` on the connection, connecting first when there is none or
    /// the last one was lost (the server restarted, the network dropped).
    pub(super) fn with<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, AuditError>,
    ) -> Result<T, AuditError> {
        let mut guard = self.lock();
        if guard.as_ref().is_none_or(Client::is_closed) {
            *guard = None;
            let mut client = self.target.connect()?;
            if self.read_only {
                client
                    .batch_execute("SET default_transaction_read_only = on")
                    .map_err(db("opening the central store read-only"))?;
            }
            *guard = Some(client);
        }
        let Some(client) = guard.as_mut() else {
            unreachable!("connected above");
        };
        f(client)
    }

    fn lock(&self) -> MutexGuard<'_, Option<Client>> {
        self.client.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for PgStore {
    /// The client owns a small runtime of its own, which tokio refuses to
    /// drop from inside another runtime's task (the console drops its store
    /// there): it is dropped on a thread of its own.
    fn drop(&mut self) {
        if let Some(client) = self.lock().take() {
            let _ = std::thread::spawn(move || drop(client)).join();
        }
    }
}

impl RecordStore for PgStore {
    /// None: the central store signs nothing (each node signs its own).
    fn public_key(&self) -> Option<VerifyingKey> {
        None
    }

    fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Refused: nodes record locally and ship (see [`crate::ship`]).
    fn begin_session(&self, _info: SessionInfo) -> Result<SessionRecorder, AuditError> {
        Err(CentralError::RecordsLocally {
            url: self.url().to_string(),
        }
        .into())
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>, AuditError> {
        self.with(|c| read::summaries(c, None))
    }

    fn session(&self, id: &SessionId) -> Result<SessionSummary, AuditError> {
        self.with(|c| {
            let sid = read::sid(c, id)?;
            read::summaries(c, Some(sid))?
                .into_iter()
                .next()
                .ok_or_else(|| AuditError::UnknownSession(id.to_string()))
        })
    }

    fn resolve_session(&self, text: &str) -> Result<SessionId, AuditError> {
        self.with(|c| read::resolve(c, text))
    }

    fn events(
        &self,
        session: &SessionId,
        kinds: Option<&[EventKind]>,
    ) -> Result<Vec<StoredEvent>, AuditError> {
        self.with(|c| {
            let sid = read::sid(c, session)?;
            read::events(c, sid, -1, kinds)
        })
    }

    fn events_after(
        &self,
        session: &SessionId,
        after: Seq,
    ) -> Result<Vec<StoredEvent>, AuditError> {
        self.with(|c| {
            let sid = read::sid(c, session)?;
            read::events(c, sid, i64::try_from(after.0).unwrap_or(i64::MAX), None)
        })
    }

    fn content(&self, sha256: &str) -> Result<Option<Vec<u8>>, AuditError> {
        self.with(|c| read::content(c, sha256))
    }

    fn search(&self, query: &SearchQuery) -> Result<SearchResults, AuditError> {
        query.check()?;
        self.with(|c| {
            let sid = match &query.session {
                Some(text) => {
                    let id = read::resolve(c, text)?;
                    Some(read::sid(c, &id)?)
                }
                None => None,
            };
            search::run(c, query, sid)
        })
    }

    fn data_version(&self) -> Result<i64, AuditError> {
        self.with(read::data_version)
    }

    fn read_rows(
        &self,
        session: &SessionId,
        read: &mut dyn FnMut(&mut dyn SessionRows) -> Result<(), AuditError>,
    ) -> Result<(), AuditError> {
        self.with(|c| {
            let sid = read::sid(c, session)?;
            PgRows::read(c, sid, read)
        })
    }

    /// Verifies against the enrolled node keys (narrowed to the one key
    /// `trust` names, when it names one): a session whose key is not
    /// enrolled, or was revoked, is unverified. A session whose end was
    /// never shipped says how far it was.
    fn verify(&self, session: &SessionId, trust: &TrustAnchor) -> Result<VerifyReport, AuditError> {
        let anchor = match trust {
            TrustAnchor::Enrolled(_) => trust.clone(),
            _ => {
                let mut keys = self.node_keys()?;
                if let Some(only) = resolve_anchor(trust)? {
                    keys.retain(|k| k.key == only);
                }
                TrustAnchor::Enrolled(keys)
            }
        };
        let mut report = None;
        self.read_rows(session, &mut |rows| {
            report = Some(verify_session(rows, session, &anchor)?);
            Ok(())
        })?;
        let mut report = report.ok_or_else(|| AuditError::UnknownSession(session.to_string()))?;
        if !report.finished {
            report.shipped = Some(self.with(|c| shipped_up_to(c, session))?);
        }
        Ok(report)
    }
}

/// The last event the store holds of a session, and its time (the
/// session's start when it holds none).
fn shipped_up_to(c: &mut Client, session: &SessionId) -> Result<ShippedUpTo, AuditError> {
    let r = c
        .query_one(
            "SELECT COALESCE(e.seq, 0), COALESCE(e.ts_us, s.started_us)
             FROM sessions s
             LEFT JOIN LATERAL (SELECT seq, ts_us FROM events WHERE sid = s.sid ORDER BY seq DESC LIMIT 1) e ON TRUE
             WHERE s.id = $1",
            &[&session.as_str()],
        )
        .map_err(db("reading how far the session was shipped"))?;
    Ok(ShippedUpTo {
        seq: Seq(u64::try_from(r.get::<_, i64>(0)).unwrap_or(0)),
        ts_us: r.get(1),
    })
}
