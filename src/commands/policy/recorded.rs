//! The recorded sessions `replay` and `suggest` read: the store opened
//! read-only, and the sessions chosen (by id, or by when and where they
//! ran, as a fleet's week of traffic is) before anything is read.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use airlock_auditor::search::{LabelFilter, ScopeError, SessionScope};
use airlock_auditor::{Access, AuditStore, RecordStore, SessionId, StoredEvent, humanize};
use anyhow::{Context, anyhow, bail};

/// Which recorded sessions to read, and from where.
#[derive(Debug, clap::Args)]
pub(super) struct Recorded {
    /// Session ids or unique prefixes (as `airlock audit sessions` lists them); or choose them with --since, --label and --node.
    sessions: Vec<String>,
    /// Every session with events at or after this time (a duration back from now, 7d or 2h, or an RFC 3339 time), and only those events.
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Only sessions labelled KEY=VALUE when recorded (repeatable: every one must hold).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<LabelFilter>,
    /// Only sessions recorded on this node (its host name).
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// Audit database, or a fleet's central store (postgres://…) [default: $XDG_DATA_HOME/airlock/audit.db or ~/.local/share/airlock/audit.db]
    #[arg(long, value_name = "FILE", env = "AIRLOCK_AUDIT_DB")]
    pub(super) audit_db: Option<PathBuf>,
}

fn parse_label(text: &str) -> Result<LabelFilter, ScopeError> {
    text.parse()
}

/// The chosen sessions of an opened store.
pub(super) struct Chosen {
    pub(super) store: AuditStore,
    pub(super) ids: Vec<SessionId>,
    /// `--since`: events before this (µs since the epoch) are left out.
    since_us: Option<i64>,
}

impl Chosen {
    /// Of `events`, those the choice covers.
    pub(super) fn within(&self, mut events: Vec<StoredEvent>) -> Vec<StoredEvent> {
        if let Some(since) = self.since_us {
            events.retain(|e| e.ts_us >= since);
        }
        events
    }
}

impl Recorded {
    /// Whether any session was chosen on the command line at all.
    pub(super) fn given(&self) -> bool {
        !self.sessions.is_empty()
            || self.since.is_some()
            || !self.labels.is_empty()
            || self.node.is_some()
    }

    /// Opens the store and resolves the choice, each session once; a typo
    /// or an empty choice fails here, before anything is printed.
    pub(super) fn open(&self) -> anyhow::Result<Chosen> {
        if !self.given() {
            bail!(
                "give the sessions to read: their ids, or choose them with --since (7d), --label KEY=VALUE or --node NAME"
            );
        }
        let db = match &self.audit_db {
            Some(path) => path.to_owned(),
            None => crate::paths::default_audit_db().map_err(|_| {
                anyhow!("cannot locate the audit database: HOME is not set; pass --audit-db FILE")
            })?,
        };
        let since_us = self
            .since
            .as_deref()
            .map(|text| {
                humanize::time_bound(text, now_us()).ok_or_else(|| {
                    anyhow!(
                        "invalid --since {text:?}: give a duration back from now (7d, 2h) or an RFC 3339 time (2026-11-25T18:00:00Z)"
                    )
                })
            })
            .transpose()?;
        let store = airlock_auditor::open_store(&db, Access::ReadOnly)?;
        let mut ids: Vec<SessionId> = Vec::new();
        for text in &self.sessions {
            let id = store.resolve_session(text)?;
            // A session named twice (say, by prefix and in full) counts once.
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        if self.sessions.is_empty() {
            ids = self.chosen(&store, since_us)?;
        } else if self.since.is_some() || !self.labels.is_empty() || self.node.is_some() {
            let scoped = self.chosen(&store, since_us)?;
            ids.retain(|id| scoped.contains(id));
        }
        if ids.is_empty() {
            bail!("no recorded session matches; list them with `airlock audit sessions`");
        }
        Ok(Chosen {
            store,
            ids,
            since_us,
        })
    }

    /// Every session in the labels' and node's scope that was still
    /// running at `since` or began after it, oldest first.
    fn chosen(&self, store: &AuditStore, since_us: Option<i64>) -> anyhow::Result<Vec<SessionId>> {
        let scope = SessionScope {
            labels: self.labels.clone(),
            node: self.node.clone(),
        };
        scope.check()?;
        let since = since_us.unwrap_or(i64::MIN);
        Ok(store
            .sessions()
            .context("listing the recorded sessions")?
            .into_iter()
            .filter(|s| scope.admits(&s.info) && s.ended_us.is_none_or(|end| end >= since))
            .map(|s| s.id)
            .collect())
    }
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
