//! Opening a record store from where it is: the one place that picks the
//! engine, so a second one is one more arm here.

use std::collections::HashMap;
use std::ops::Deref;
use std::path::{Path, PathBuf};

use ed25519_dalek::VerifyingKey;

use crate::keys::{SigningKeySource, TrustAnchor};
use crate::postgres::{CentralError, PgStore, is_postgres_url, redact_url};
use crate::ship::ShipMark;
use crate::sqlite::SqliteStore;
use crate::{
    AuditError, EventKind, RecordStore, Redactor, SearchQuery, SearchResults, Seq, SessionId,
    SessionInfo, SessionRecorder, SessionRows, SessionSummary, StoredEvent, VerifyReport,
};

/// What a store is opened for.
#[derive(Debug, Clone)]
pub enum Access {
    /// Recording, signing with this key (created if missing).
    Record(SigningKeySource),
    /// Reading and verification only: the store is never written.
    ReadOnly,
}

/// An opened record store, whichever engine keeps it. It is a
/// [`RecordStore`] itself (each method passes to the engine's), and
/// dereferences to one, so its methods are called without importing the
/// trait.
#[derive(Debug)]
pub struct AuditStore {
    location: PathBuf,
    store: Box<dyn RecordStore>,
}

/// Opens the store at `location`: a `postgres://` or `postgresql://` URL
/// names a central store (read-only: nodes record locally and ship to
/// it), anything else an SQLite file (created for recording if missing,
/// with its directory mode 0700).
pub fn open_store(location: &Path, access: Access) -> Result<AuditStore, AuditError> {
    if let Some(url) = location.to_str().filter(|l| is_postgres_url(l)) {
        let store = match access {
            Access::Record(_) => {
                return Err(CentralError::RecordsLocally {
                    url: redact_url(url),
                }
                .into());
            }
            Access::ReadOnly => PgStore::open_readonly(url)?,
        };
        return Ok(AuditStore {
            // Shown in messages: never with the password.
            location: PathBuf::from(store.url()),
            store: Box::new(store),
        });
    }
    let store = match access {
        Access::Record(key) => SqliteStore::open(location, key)?,
        Access::ReadOnly => SqliteStore::open_readonly(location)?,
    };
    Ok(AuditStore {
        location: location.to_path_buf(),
        store: Box::new(store),
    })
}

impl AuditStore {
    /// Opens or creates the store for recording, loading or creating the
    /// signing key.
    pub fn open(db: &Path, key: SigningKeySource) -> Result<Self, AuditError> {
        open_store(db, Access::Record(key))
    }

    /// Opens an existing store for reading and verification only.
    pub fn open_readonly(db: &Path) -> Result<Self, AuditError> {
        open_store(db, Access::ReadOnly)
    }

    /// Where the store was opened from (a central store's URL without its
    /// password).
    pub fn path(&self) -> &Path {
        &self.location
    }
}

impl Deref for AuditStore {
    type Target = dyn RecordStore;

    fn deref(&self) -> &Self::Target {
        &*self.store
    }
}

impl RecordStore for AuditStore {
    fn public_key(&self) -> Option<VerifyingKey> {
        self.store.public_key()
    }

    fn redactor(&self) -> &Redactor {
        self.store.redactor()
    }

    fn begin_session(&self, info: SessionInfo) -> Result<SessionRecorder, AuditError> {
        self.store.begin_session(info)
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>, AuditError> {
        self.store.sessions()
    }

    fn session(&self, id: &SessionId) -> Result<SessionSummary, AuditError> {
        self.store.session(id)
    }

    fn resolve_session(&self, text: &str) -> Result<SessionId, AuditError> {
        self.store.resolve_session(text)
    }

    fn events(
        &self,
        session: &SessionId,
        kinds: Option<&[EventKind]>,
    ) -> Result<Vec<StoredEvent>, AuditError> {
        self.store.events(session, kinds)
    }

    fn events_after(
        &self,
        session: &SessionId,
        after: Seq,
    ) -> Result<Vec<StoredEvent>, AuditError> {
        self.store.events_after(session, after)
    }

    fn first_step_command(
        &self,
        summary: &SessionSummary,
    ) -> Result<Option<Vec<String>>, AuditError> {
        self.store.first_step_command(summary)
    }

    fn ship_marks(&self) -> Result<HashMap<SessionId, ShipMark>, AuditError> {
        self.store.ship_marks()
    }

    fn content(&self, sha256: &str) -> Result<Option<Vec<u8>>, AuditError> {
        self.store.content(sha256)
    }

    fn search(&self, query: &SearchQuery) -> Result<SearchResults, AuditError> {
        self.store.search(query)
    }

    fn data_version(&self) -> Result<i64, AuditError> {
        self.store.data_version()
    }

    fn read_rows(
        &self,
        session: &SessionId,
        read: &mut dyn FnMut(&mut dyn SessionRows) -> Result<(), AuditError>,
    ) -> Result<(), AuditError> {
        self.store.read_rows(session, read)
    }

    fn verify(&self, session: &SessionId, trust: &TrustAnchor) -> Result<VerifyReport, AuditError> {
        self.store.verify(session, trust)
    }
}
