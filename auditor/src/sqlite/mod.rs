//! The SQLite record store: the first implementation of [`RecordStore`],
//! and the one place SQL is written. A WAL-mode database file; one
//! connection per recording session (its writer thread) and one shared by
//! the readers.
//!
//! [`RecordStore`]: crate::RecordStore

mod schema;
mod search;
mod ship_source;
mod shipped;
mod store;
mod verify_rows;
mod writer;

pub use rusqlite::Error as SqliteError;
pub use shipped::Unshipped;
pub use store::SqliteStore;

use crate::{AuditError, EngineError};

/// SQLite's error while doing `context`, as the store reports it.
pub(crate) fn db(context: &'static str) -> impl FnOnce(rusqlite::Error) -> AuditError {
    move |source| AuditError::Db {
        context,
        source: EngineError::Sqlite(source),
    }
}
