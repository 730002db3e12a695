//! The recorded sessions `replay` and `suggest` read: the store opened
//! read-only, and every id resolved before anything is read.

use std::path::Path;

use airlock_auditor::{Access, AuditStore, SessionId};
use anyhow::anyhow;

/// The store at `audit_db` (else the per-user default) and the sessions the
/// user named (ids or unique prefixes), each once. A typo fails here, before
/// anything is printed (exit 2).
pub(super) fn open_sessions(
    audit_db: Option<&Path>,
    sessions: &[String],
) -> anyhow::Result<(AuditStore, Vec<SessionId>)> {
    let db = match audit_db {
        Some(path) => path.to_owned(),
        None => crate::paths::default_audit_db().map_err(|_| {
            anyhow!("cannot locate the audit database: HOME is not set; pass --audit-db FILE")
        })?,
    };
    let store = airlock_auditor::open_store(&db, Access::ReadOnly)?;
    let mut ids: Vec<SessionId> = Vec::new();
    for text in sessions {
        let id = store.resolve_session(text)?;
        // A session named twice (say, by prefix and in full) counts once.
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok((store, ids))
}
