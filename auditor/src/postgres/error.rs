//! What can go wrong with the central store, each a one-line message that
//! names the problem and the fix. URLs in them are always redacted.

use std::path::PathBuf;

use super::connect::{PASSWORD_FILE_ENV, SslMode};

/// Why a connection to the central store was refused or failed.
#[derive(Debug)]
pub enum ConnectFailure {
    Password { user: String },
    NoPassword,
    NoDatabase { database: String },
    NoTls { mode: SslMode },
    Certificate { cause: String },
    Unreachable { cause: String },
    Other { cause: String },
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Password { user } => write!(
                f,
                "the server refused the password for role {user:?}; check the password given in the URL, the file {PASSWORD_FILE_ENV} names, or PGPASSWORD"
            ),
            Self::NoPassword => write!(
                f,
                "the server asks for a password and none was given; put it in a file named by {PASSWORD_FILE_ENV}, or in PGPASSWORD"
            ),
            Self::NoDatabase { database } => write!(
                f,
                "the server has no database {database:?}; create it (createdb {database}) or fix the URL's database"
            ),
            Self::NoTls { mode } => write!(
                f,
                "the server does not offer TLS and sslmode={} requires it; enable ssl on the server, or add ?sslmode=disable to the URL for a server on a trusted network",
                mode.as_str()
            ),
            Self::Certificate { cause } => write!(
                f,
                "the server's certificate does not verify ({cause}); name its CA with ?sslrootcert=FILE, or use ?sslmode=require to encrypt without checking the server's identity"
            ),
            Self::Unreachable { cause } => write!(
                f,
                "cannot reach the server ({cause}); check the URL's host and port, and that PostgreSQL is running and accepts TCP connections there"
            ),
            Self::Other { cause } => write!(f, "{cause}"),
        }
    }
}

/// The central store's own errors (the engine's are
/// [`crate::EngineError::Postgres`] in [`crate::AuditError::Db`]).
#[derive(Debug, thiserror::Error)]
pub enum CentralError {
    #[error(
        "invalid central store URL {url}: {problem}; give postgres://USER@HOST[:PORT]/DATABASE[?sslmode=disable|prefer|require|verify-full]"
    )]
    Url { url: String, problem: String },

    #[error(
        "invalid sslmode {0:?} in the central store URL; use disable, prefer, require or verify-full"
    )]
    SslMode(String),

    #[error(
        "cannot read the central store's password file {path} ({PASSWORD_FILE_ENV}): {source}; check the path and its permissions"
    )]
    PasswordFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "cannot read sslrootcert {path}: {problem}; give a PEM file holding the CA that signed the server's certificate"
    )]
    RootCert { path: PathBuf, problem: String },

    #[error("cannot set up TLS for the central store: {0}")]
    Tls(String),

    #[error("cannot connect to the central store {url}: {failure}")]
    Connect {
        url: String,
        failure: ConnectFailure,
    },

    #[error(
        "the central store {url} holds no airlock record yet; ship a node's record to it first (--audit-ship {url})"
    )]
    Empty { url: String },

    #[error(
        "the database of {url} is not an airlock central store (it has other tables and no airlock schema version); pass the right URL"
    )]
    NotAirlock { url: String },

    #[error(
        "the central store {url} has schema version {found}, and this airlock reads version {expected}; use the airlock that created it, or another database"
    )]
    Schema {
        url: String,
        found: String,
        expected: u32,
    },

    #[error(
        "sessions are not recorded into the central store {url}: a node records into its local --audit-db FILE and ships it there with --audit-ship {url}"
    )]
    RecordsLocally { url: String },

    #[error(
        "session {session} is held in the central store with another start, key or metadata; refusing to merge two records under one id (check which node shipped it)"
    )]
    Conflict { session: String },

    #[error(
        "a batch of session {session} begins at event {first}, after the central store's last ({held}); ship from where the store stands (its shipped position)"
    )]
    Gap {
        session: String,
        first: u64,
        held: u64,
    },

    #[error(
        "{0} is not an airlock audit public key; give a key file (audit.key or its .pub) or the key's text line"
    )]
    BadKey(String),

    #[error("no enrolled node key has fingerprint {0}; list them with `airlock audit keys list`")]
    UnknownKey(String),
}
