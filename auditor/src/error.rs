//! One error type for the crate. Every message is a single line that names
//! the problem and, where there is one, the fix.

use std::path::PathBuf;

/// What a store's database engine reported, kept whole for the source
/// chain: one variant per engine a store is built on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error(transparent)]
    Sqlite(#[from] crate::sqlite::SqliteError),
    /// Shown whole on one line (the engine's message and its database
    /// error's detail), so it is not a source of its own.
    #[error("{}", crate::postgres::describe(.0))]
    Postgres(crate::postgres::PostgresError),
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot open audit database {path}: {cause}; check the path exists and is writable")]
    Open { path: PathBuf, cause: EngineError },

    #[error(
        "the audit database {path} is damaged ({cause}): it begins as one but cannot be read whole, as when a copy was cut short; check it with `sqlite3 {path} 'PRAGMA integrity_check'`, restore it from a backup, or pass another --audit-db"
    )]
    Damaged { path: PathBuf, cause: EngineError },

    #[error(
        "{path} is not an SQLite database, so not an airlock audit database; pass the right --audit-db"
    )]
    NotSqlite { path: PathBuf },

    #[error("audit database error while {context}: {source}")]
    Db {
        context: &'static str,
        #[source]
        source: EngineError,
    },

    #[error(
        "{path} is an SQLite database but not an airlock audit database (it has no airlock schema version); pass the right --audit-db"
    )]
    NotAirlock { path: PathBuf },

    #[error("{path} is empty, so it holds no airlock record; pass the right --audit-db")]
    Empty { path: PathBuf },

    #[error(
        "the audit database {path} has schema version {found}, and this airlock reads version {expected}; read it with the airlock that wrote it, or pass another --audit-db"
    )]
    Schema {
        path: PathBuf,
        found: String,
        expected: u32,
    },

    #[error("audit key {path}: {problem}")]
    Key { path: PathBuf, problem: String },

    #[error("audit database {0} does not exist; pass --audit-db FILE or record a session first")]
    NoDatabase(PathBuf),

    #[error("audit database is opened read-only; open it with AuditStore::open to record")]
    ReadOnly,

    #[error("no audit session matches {0:?}; list them with `airlock audit sessions`")]
    UnknownSession(String),

    #[error(
        "session prefix {prefix:?} is ambiguous ({count} sessions match); give more characters"
    )]
    AmbiguousSession { prefix: String, count: usize },

    #[error("invalid session id {0:?}: expected hexadecimal characters")]
    BadSessionId(String),

    #[error(
        "audit store has failed ({0}); the session must stop: free disk space or fix permissions, then start a new session"
    )]
    WriterFailed(String),

    #[error("audit session is already finished; start a new session to record more")]
    Finished,

    #[error("cannot encode audit event: {0}")]
    Encode(#[from] serde_json::Error),

    #[error(
        "stored event seq {seq} has an unreadable payload: {problem}; run `airlock audit verify`"
    )]
    Corrupt { seq: u64, problem: String },

    #[error("cannot register secret {name:?}: {problem}")]
    Secret { name: String, problem: String },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    #[error(transparent)]
    Query(#[from] crate::search::QueryError),

    #[error(
        "shipping session {session} made no progress: the destination took a batch but still stands where it stood; check the destination's log"
    )]
    ShipStalled { session: String },

    #[error(transparent)]
    Central(#[from] crate::postgres::CentralError),

    #[error("random number generator failed: {0}; the kernel's getrandom(2) must be available")]
    Random(String),
}

impl AuditError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}

impl From<airlock_record::BadSessionId> for AuditError {
    fn from(e: airlock_record::BadSessionId) -> Self {
        Self::BadSessionId(e.0)
    }
}
