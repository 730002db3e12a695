//! The SQLite schema and connection settings.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::{AuditError, EngineError};

pub(crate) const SCHEMA_VERSION: u32 = 1;

pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- sid is an internal integer key so event rows stay small; id is the public
-- session id users see and type.
CREATE TABLE IF NOT EXISTS sessions (
    sid             INTEGER PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    started_us      INTEGER NOT NULL,
    info_json       TEXT NOT NULL,
    public_key      BLOB NOT NULL,
    key_fingerprint TEXT NOT NULL,
    ended_us        INTEGER,
    end_json        TEXT,
    final_seq       INTEGER
);
-- No UNIQUE(sid, seq) on purpose: verify must be able to see (and report) a
-- duplicated or inserted seq rather than the database hiding it.
CREATE TABLE IF NOT EXISTS events (
    sid     INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    ts_us   INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    exec_id TEXT,
    payload TEXT NOT NULL,
    hash    BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_seq ON events (sid, seq);
CREATE TABLE IF NOT EXISTS checkpoints (
    sid       INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    ts_us     INTEGER NOT NULL,
    hash      BLOB NOT NULL,
    is_final  INTEGER NOT NULL,
    signature BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS checkpoints_by_seq ON checkpoints (sid, seq);
-- File contents, deduplicated by the SHA-256 of the stored bytes.
CREATE TABLE IF NOT EXISTS contents (
    sha256 TEXT PRIMARY KEY,
    size   INTEGER NOT NULL,
    data   BLOB NOT NULL
);
-- What `airlock audit search` looks events up by: one row per searchable
-- value of an event (a rename has two paths, so two rows), written in the
-- same transaction as the event. Outside the hash chain: it is derived from
-- the payload, and search reads the matching events back from `events`.
-- host holds the name's labels reversed (api.example.com is stored as
-- com.example.api) so that *.example.com is a range on the index.
CREATE TABLE IF NOT EXISTS event_terms (
    sid     INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    ts_us   INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    host    TEXT,
    method  TEXT,
    verdict TEXT,
    url     TEXT,
    path    TEXT,
    command TEXT
);
CREATE INDEX IF NOT EXISTS event_terms_by_host ON event_terms (host) WHERE host IS NOT NULL;
CREATE INDEX IF NOT EXISTS event_terms_by_path ON event_terms (path) WHERE path IS NOT NULL;
-- The verdict index holds what was refused or reported, never an allow:
-- nearly every decision recorded is an allow, so indexing them was a
-- B-tree insert per event on the recorder's hot path (BENCHMARKS.md, 'The
-- search index, cheaper'), for searches that match most of the table
-- anyway. Search repeats this condition for deny and report (see
-- sqlite/search.rs) so that SQLite may use the index; a search for allowed
-- events reads the table. Databases made before keep their full index,
-- which serves the same queries.
CREATE INDEX IF NOT EXISTS event_terms_by_verdict ON event_terms (verdict, ts_us) WHERE verdict <> 'allow';
CREATE INDEX IF NOT EXISTS event_terms_by_session ON event_terms (sid, seq);
-- Sessions whose events all have their terms: those begun by a recorder
-- that writes them. Search scans the others (recorded by older versions).
CREATE TABLE IF NOT EXISTS search_indexed (
    sid INTEGER PRIMARY KEY
);
-- How far a shipper has copied each session into a central store
-- (`--audit-ship`, `airlock audit ship`): what `audit sessions` shows as
-- `shipped up to event N`. Informational: a shipper always asks the
-- destination where it stands, so a mark lost in a crash costs nothing.
-- Outside the hash chain, like the search terms.
CREATE TABLE IF NOT EXISTS shipped (
    sid    INTEGER PRIMARY KEY,
    up_to  INTEGER,
    ended  INTEGER NOT NULL,
    at_us  INTEGER NOT NULL
);
";

/// How long a writer waits for another's lock before it gives up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    // Several writers (one per session) and readers share the file; wait for
    // locks instead of failing immediately with SQLITE_BUSY.
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(())
}

/// Opens (creating if needed) a database for writing: WAL mode so readers
/// never block the writer, synchronous=NORMAL so a commit costs no fsync
/// (WAL commits survive a process crash; `sync()` upgrades to FULL when the
/// caller needs power-loss durability).
pub(crate) fn open_rw(path: &Path) -> Result<Connection, AuditError> {
    // Processes that open a new file at the same moment can each hold a
    // shared lock while asking for the exclusive one (the switch to WAL):
    // SQLite then answers one of them SQLITE_BUSY at once, without the busy
    // handler, since waiting would deadlock. The one refused lets go of its
    // lock by failing, so trying again succeeds.
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match try_open_rw(path) {
            Err(AuditError::Open {
                cause: EngineError::Sqlite(cause),
                ..
            }) if cause.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            opened => return opened,
        }
    }
}

fn try_open_rw(path: &Path) -> Result<Connection, AuditError> {
    let open_err = |cause| unreadable(path, cause);
    let conn = Connection::open(path).map_err(open_err)?;
    configure(&conn).map_err(open_err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(open_err)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(open_err)?;
    // The schema is created in one write transaction, taken before the
    // first read: another process opening the same new file waits for it
    // (busy handler), and never sees it half made (tables, but no `meta`
    // or no version yet), which would read as someone else's database.
    let tx = rusqlite::Transaction::new_unchecked(&conn, rusqlite::TransactionBehavior::Immediate)
        .map_err(open_err)?;
    // A database with tables but no `meta` is someone else's: refused
    // before the schema adds airlock's tables to it.
    if !has_table(&tx, "meta").map_err(open_err)? && has_table(&tx, "%").map_err(open_err)? {
        return Err(AuditError::NotAirlock {
            path: path.to_path_buf(),
        });
    }
    tx.execute_batch(SCHEMA).map_err(open_err)?;
    match schema_version(&tx).map_err(open_err)? {
        None => {
            tx.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?1)",
                [SCHEMA_VERSION.to_string()],
            )
            .map_err(open_err)?;
        }
        Some(found) => check_version(path, found)?,
    }
    tx.commit().map_err(open_err)?;
    Ok(conn)
}

/// Opens an existing database without ever writing to it (readers, verify).
pub(crate) fn open_ro(path: &Path) -> Result<Connection, AuditError> {
    let open_err = |cause| unreadable(path, cause);
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(open_err)?;
    configure(&conn).map_err(open_err)?;
    if !has_table(&conn, "meta").map_err(open_err)? {
        let path = path.to_path_buf();
        return Err(match std::fs::metadata(&path).map(|m| m.len()) {
            Ok(0) => AuditError::Empty { path },
            _ => AuditError::NotAirlock { path },
        });
    }
    match schema_version(&conn).map_err(open_err)? {
        Some(found) => check_version(path, found)?,
        None => {
            return Err(AuditError::NotAirlock {
                path: path.to_path_buf(),
            });
        }
    }
    Ok(conn)
}

/// Whether a table named like `pattern` exists. The first read of a file:
/// where a damaged or foreign one shows.
fn has_table(conn: &Connection, pattern: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name LIKE ?1)",
        [pattern],
        |r| r.get(0),
    )
}

fn schema_version(conn: &Connection) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT value FROM meta WHERE key = 'schema_version'",
        [],
        |r| r.get(0),
    )
    .optional()
}

fn check_version(path: &Path, found: String) -> Result<(), AuditError> {
    match found == SCHEMA_VERSION.to_string() {
        true => Ok(()),
        false => Err(AuditError::Schema {
            path: path.to_path_buf(),
            found,
            expected: SCHEMA_VERSION,
        }),
    }
}

/// What SQLite's refusal means for the user: a file cut short or
/// overwritten (damaged), one that is no SQLite database at all, or a
/// path that cannot be opened.
fn unreadable(path: &Path, cause: rusqlite::Error) -> AuditError {
    let path = path.to_path_buf();
    match cause.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => AuditError::Damaged {
            path,
            cause: EngineError::Sqlite(cause),
        },
        Some(rusqlite::ErrorCode::NotADatabase) => AuditError::NotSqlite { path },
        _ => AuditError::Open {
            path,
            cause: EngineError::Sqlite(cause),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many writers opening one new file at once (twenty `airlock run`s on
    /// the default database): every one of them opens it.
    #[test]
    fn writers_that_open_a_new_database_at_the_same_moment_all_open_it() {
        for round in 0..100 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("audit.db");
            let start = std::sync::Barrier::new(16);
            std::thread::scope(|scope| {
                let opens: Vec<_> = (0..16)
                    .map(|_| {
                        scope.spawn(|| {
                            start.wait();
                            open_rw(&path).map(drop)
                        })
                    })
                    .collect();
                for open in opens {
                    if let Err(e) = open.join().unwrap() {
                        panic!("round {round}: {e}");
                    }
                }
            });
        }
    }
}
