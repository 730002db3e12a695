//! The central store: its connection, kept open and reopened after the
//! server went away.

use std::sync::{Mutex, MutexGuard};

use super::client::{Client, Queries};

use super::connect::PgTarget;
use super::schema;
use crate::AuditError;

/// One central PostgreSQL record store.
pub struct PgStore {
    target: PgTarget,
    /// None until connected, and again once the connection was lost.
    client: Mutex<Option<Client>>,
    /// Readers open it read-only: every transaction is READ ONLY, so a
    /// reader (or a replica) never writes.
    read_only: bool,
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
                    .map_err(super::db("opening the central store read-only"))?;
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
