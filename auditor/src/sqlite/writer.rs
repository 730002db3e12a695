//! A session's group commits into SQLite: one connection of its own, one
//! transaction per commit.

use rusqlite::{Connection, params};

use crate::EngineError;
use crate::commit::{Commit, CommitError, SessionWriter};

/// Writes one session's commits, from its recorder's writer thread.
pub(crate) struct SqliteWriter {
    pub(crate) conn: Connection,
    /// The session's row in `sessions`.
    pub(crate) sid: i64,
}

impl SessionWriter for SqliteWriter {
    fn commit(&mut self, commit: &Commit<'_>) -> Result<(), CommitError> {
        self.transaction(commit)
            .map_err(|e| CommitError(EngineError::Sqlite(e)))
    }
}

impl SqliteWriter {
    fn transaction(&mut self, commit: &Commit<'_>) -> rusqlite::Result<()> {
        let durable = commit.durable;
        if durable {
            // In WAL mode FULL fsyncs the WAL at commit, which also covers all
            // earlier NORMAL commits (see https://sqlite.org/pragma.html#pragma_synchronous).
            self.conn.pragma_update(None, "synchronous", "FULL")?;
        }
        let tx = self.conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO events (sid, seq, ts_us, kind, exec_id, payload, hash)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            let mut content = tx.prepare_cached(
                "INSERT OR IGNORE INTO contents (sha256, size, data) VALUES (?1, ?2, ?3)",
            )?;
            let mut index = tx.prepare_cached(
                "INSERT INTO event_terms
                 (sid, seq, ts_us, kind, host, method, verdict, url, path, command)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?;
            for chained in commit.events {
                let row = chained.event;
                if let Some((sha, data)) = &row.content {
                    content.execute(params![sha, data.len() as i64, data])?;
                }
                insert.execute(params![
                    self.sid,
                    row.seq as i64,
                    row.ts_us,
                    row.kind,
                    row.exec_id,
                    row.payload,
                    &chained.hash[..],
                ])?;
                for t in &row.terms {
                    index.execute(params![
                        self.sid,
                        row.seq as i64,
                        row.ts_us,
                        row.kind,
                        t.host,
                        t.method,
                        t.verdict,
                        t.url,
                        t.path,
                        t.command,
                    ])?;
                }
            }
        }
        if let Some(cp) = &commit.checkpoint {
            tx.execute(
                "INSERT INTO checkpoints (sid, seq, ts_us, hash, is_final, signature)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    self.sid,
                    cp.seq as i64,
                    cp.ts_us,
                    &cp.hash[..],
                    cp.is_final,
                    &cp.signature[..]
                ],
            )?;
        }
        if let Some(end) = &commit.end {
            tx.execute(
                "UPDATE sessions SET ended_us = ?1, end_json = ?2, final_seq = ?3 WHERE sid = ?4",
                params![end.ended_us, end.end_json, end.final_seq as i64, self.sid],
            )?;
        }
        tx.commit()?;
        if durable {
            self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        Ok(())
    }
}
