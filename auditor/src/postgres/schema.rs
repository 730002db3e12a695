//! The central store's schema: SQLite's tables (see `crate::sqlite`),
//! with what a fleet adds: a UNIQUE (session, seq) that makes shipping
//! idempotent, each session's node and labels readable for filters, the
//! count of batches committed (the store's data version) and the
//! enrolled node keys.

use super::client::{Client, Queries};

use super::connect::PgTarget;
use super::error::CentralError;
use crate::AuditError;

pub(crate) const SCHEMA_VERSION: u32 = 1;

/// Any fixed number: the advisory lock that makes two first opens at once
/// create the schema one after the other.
const SCHEMA_LOCK: i64 = 0x6169_726c_6f63_6b31;

/// Host and path terms are compared byte by byte (COLLATE "C"): a
/// `*.example.com` or `DIR/` search is a range on the index, which a
/// locale's collation would reorder.
pub(crate) const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    sid             BIGSERIAL PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    started_us      BIGINT NOT NULL,
    info_json       TEXT NOT NULL,
    public_key      BYTEA NOT NULL,
    key_fingerprint TEXT NOT NULL,
    ended_us        BIGINT,
    end_json        TEXT,
    final_seq       BIGINT,
    node            TEXT NOT NULL DEFAULT '',
    labels          JSONB NOT NULL DEFAULT '{}',
    batches         BIGINT NOT NULL DEFAULT 0,
    shipped_us      BIGINT
);
CREATE INDEX IF NOT EXISTS sessions_by_start ON sessions (started_us, sid);
CREATE INDEX IF NOT EXISTS sessions_by_node ON sessions (node);
CREATE INDEX IF NOT EXISTS sessions_by_labels ON sessions USING GIN (labels);
-- No foreign key to sessions: its check was a lookup and a row lock per
-- event stored. A shipped batch writes (or finds) its session's row, and
-- locks it, before its events, in the same transaction (ship.rs), so an
-- event is never stored for a session the store does not hold.
CREATE TABLE IF NOT EXISTS events (
    sid     BIGINT NOT NULL,
    seq     BIGINT NOT NULL,
    ts_us   BIGINT NOT NULL,
    kind    TEXT NOT NULL,
    exec_id TEXT,
    payload TEXT NOT NULL,
    hash    BYTEA NOT NULL,
    PRIMARY KEY (sid, seq)
);
CREATE TABLE IF NOT EXISTS checkpoints (
    sid       BIGINT NOT NULL REFERENCES sessions (sid),
    seq       BIGINT NOT NULL,
    hash      BYTEA NOT NULL,
    is_final  BOOLEAN NOT NULL,
    signature BYTEA NOT NULL,
    PRIMARY KEY (sid, seq, is_final)
);
CREATE TABLE IF NOT EXISTS contents (
    sha256 TEXT PRIMARY KEY,
    size   BIGINT NOT NULL,
    data   BYTEA NOT NULL
);
-- part: the row's place among its event's rows (a rename has two), the
-- order verify compares them in.
CREATE TABLE IF NOT EXISTS event_terms (
    sid     BIGINT NOT NULL,
    seq     BIGINT NOT NULL,
    part    INTEGER NOT NULL,
    ts_us   BIGINT NOT NULL,
    kind    TEXT NOT NULL,
    host    TEXT COLLATE "C",
    method  TEXT,
    verdict TEXT,
    url     TEXT,
    path    TEXT COLLATE "C",
    command TEXT
);
CREATE INDEX IF NOT EXISTS event_terms_by_host ON event_terms (host) WHERE host IS NOT NULL;
CREATE INDEX IF NOT EXISTS event_terms_by_path ON event_terms (path) WHERE path IS NOT NULL;
CREATE INDEX IF NOT EXISTS event_terms_by_verdict ON event_terms (verdict, ts_us) WHERE verdict IS NOT NULL;
CREATE INDEX IF NOT EXISTS event_terms_by_session ON event_terms (sid, seq, part);
CREATE TABLE IF NOT EXISTS node_keys (
    fingerprint TEXT PRIMARY KEY,
    public_key  BYTEA NOT NULL UNIQUE,
    name        TEXT,
    added_us    BIGINT NOT NULL,
    revoked_us  BIGINT,
    changes     BIGINT NOT NULL DEFAULT 1
);
"#;

/// Creates the schema if the database has none (one opener at a time),
/// then checks its version.
pub(crate) fn create(client: &mut Client, target: &PgTarget) -> Result<(), AuditError> {
    let db = |e: tokio_postgres::Error| super::db_error("creating the central store's schema", e);
    let mut tx = client.transaction().map_err(db)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .map_err(db)?;
    if !has_table(&mut tx, "meta").map_err(db)? && has_other_tables(&mut tx).map_err(db)? {
        return Err(CentralError::NotAirlock {
            url: target.shown().to_string(),
        }
        .into());
    }
    tx.batch_execute(SCHEMA).map_err(db)?;
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', $1) ON CONFLICT (key) DO NOTHING",
        &[&SCHEMA_VERSION.to_string()],
    )
    .map_err(db)?;
    tx.commit().map_err(db)?;
    check(client, target)
}

/// Checks that the database holds an airlock store of this version,
/// writing nothing (readers, replicas).
pub(crate) fn check(client: &mut Client, target: &PgTarget) -> Result<(), AuditError> {
    let db = |e: tokio_postgres::Error| super::db_error("reading the central store's schema", e);
    let url = || target.shown().to_string();
    if !has_table(client, "meta").map_err(db)? {
        return Err(if has_other_tables(client).map_err(db)? {
            CentralError::NotAirlock { url: url() }
        } else {
            CentralError::Empty { url: url() }
        }
        .into());
    }
    let found: Option<String> = client
        .query_opt("SELECT value FROM meta WHERE key = 'schema_version'", &[])
        .map_err(db)?
        .map(|r| r.get(0));
    match found {
        Some(v) if v == SCHEMA_VERSION.to_string() => Ok(()),
        Some(found) => Err(CentralError::Schema {
            url: url(),
            found,
            expected: SCHEMA_VERSION,
        }
        .into()),
        None => Err(CentralError::NotAirlock { url: url() }.into()),
    }
}

fn has_table(client: &mut impl Queries, name: &str) -> Result<bool, tokio_postgres::Error> {
    client
        .query_one(
            "SELECT to_regclass(current_schema() || '.' || $1) IS NOT NULL",
            &[&name],
        )
        .map(|r| r.get(0))
}

fn has_other_tables(client: &mut impl Queries) -> Result<bool, tokio_postgres::Error> {
    client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema())",
            &[],
        )
        .map(|r| r.get(0))
}
