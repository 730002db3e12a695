//! The central record store on PostgreSQL: where a fleet's nodes ship
//! their records ([`crate::ship`]) and where every reader can read them
//! (`--audit-db postgres://…`). The second implementation of
//! [`RecordStore`], and the one place Postgres SQL is written.
//!
//! The rows are SQLite's, shipped as they were stored (hashes and
//! signatures included), so a session verifies here exactly as on its
//! node. The store's own additions: a UNIQUE (session, seq) that makes a
//! batch sent twice land once, each session's node and labels for
//! filters, and the enrolled node keys that say which signers to trust.
//!
//! The client is the synchronous `postgres` crate (one connection per
//! store, reopened after the server went away), which runs its own small
//! runtime: callers inside tokio call it from `spawn_blocking`, as the
//! console does.
//!
//! [`RecordStore`]: crate::RecordStore

mod client;
mod connect;
mod error;
mod keys;
mod read;
mod schema;
mod search;
mod ship;
mod store;
mod verify_rows;

pub use client::mark_connections;
pub use connect::{
    PASSWORD_FILE_ENV, PgTarget, SslMode, is_postgres_url, password_from_environment, redact_url,
};
pub use error::{CentralError, ConnectFailure};
pub use store::PgStore;
pub use tokio_postgres::Error as PostgresError;

use crate::{AuditError, EngineError};

/// Postgres's error while doing `context`, as the store reports it.
pub(crate) fn db_error(context: &'static str, source: tokio_postgres::Error) -> AuditError {
    AuditError::Db {
        context,
        source: EngineError::Postgres(source),
    }
}

/// [`db_error`] as a closure for `map_err`.
pub(crate) fn db(context: &'static str) -> impl Fn(tokio_postgres::Error) -> AuditError {
    move |source| db_error(context, source)
}

/// An engine error on one line: its message and its sources'.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    connect::full_text(e)
}
