//! The local side of shipping: which sessions still have rows to copy to a
//! central store, and the marks that say how far each one was copied.

use std::collections::HashMap;

use rusqlite::{OptionalExtension, params};

use super::db;
use super::store::SqliteStore;
use crate::ship::{ShipMark, Shipped};
use crate::{AuditError, Seq, SessionId};

/// A session with rows a destination may still lack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unshipped {
    pub session: SessionId,
    /// Where the local mark says the destination stands: a hint, since
    /// a mark lost in a crash lags behind the destination.
    pub mark: Shipped,
    /// The session's last event here.
    pub last: Option<Seq>,
}

impl SqliteStore {
    /// Sessions not yet wholly shipped, oldest first.
    pub fn unshipped_sessions(&self) -> Result<Vec<Unshipped>, AuditError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT s.id, m.up_to, COALESCE(m.ended, 0),
                        (SELECT MAX(seq) FROM events e WHERE e.sid = s.sid)
                 FROM sessions s LEFT JOIN shipped m ON m.sid = s.sid
                 WHERE COALESCE(m.ended, 0) = 0 ORDER BY s.started_us, s.sid",
            )
            .map_err(db("listing sessions to ship"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(Unshipped {
                    session: SessionId::from_stored(r.get::<_, String>(0)?),
                    mark: Shipped {
                        up_to: r.get::<_, Option<i64>>(1)?.map(to_seq),
                        ended: r.get::<_, bool>(2)?,
                    },
                    last: r.get::<_, Option<i64>>(3)?.map(to_seq),
                })
            })
            .map_err(db("listing sessions to ship"))?;
        rows.collect::<Result<_, _>>()
            .map_err(db("listing sessions to ship"))
    }

    /// Notes that the destination now holds `session` as far as `shipped`.
    pub fn mark_shipped(
        &self,
        session: &SessionId,
        shipped: Shipped,
        at_us: i64,
    ) -> Result<(), AuditError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO shipped (sid, up_to, ended, at_us)
                 SELECT sid, ?2, ?3, ?4 FROM sessions WHERE id = ?1
                 ON CONFLICT (sid) DO UPDATE SET up_to = ?2, ended = ?3, at_us = ?4",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    session.as_str(),
                    shipped.up_to.map(|s| s.get() as i64),
                    shipped.ended,
                    at_us
                ])
            })
            .map_err(db("marking a session shipped"))?;
        Ok(())
    }

    /// Every shipped session's mark. A database that was never shipped
    /// from (or one written before shipping existed) has none.
    pub(crate) fn marks(&self) -> Result<HashMap<SessionId, ShipMark>, AuditError> {
        let conn = self.conn();
        let has_table: Option<i64> = conn
            .query_row(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'shipped'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(db("reading shipping marks"))?;
        if has_table.is_none() {
            return Ok(HashMap::new());
        }
        let mut stmt = conn
            .prepare_cached(
                "SELECT s.id, m.up_to, m.ended, m.at_us FROM shipped m JOIN sessions s ON s.sid = m.sid",
            )
            .map_err(db("reading shipping marks"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    SessionId::from_stored(r.get::<_, String>(0)?),
                    ShipMark {
                        shipped: Shipped {
                            up_to: r.get::<_, Option<i64>>(1)?.map(to_seq),
                            ended: r.get::<_, bool>(2)?,
                        },
                        at_us: r.get(3)?,
                    },
                ))
            })
            .map_err(db("reading shipping marks"))?;
        rows.collect::<Result<_, _>>()
            .map_err(db("reading shipping marks"))
    }
}

fn to_seq(n: i64) -> Seq {
    Seq(u64::try_from(n).unwrap_or(0))
}
