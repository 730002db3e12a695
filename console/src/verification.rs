//! The verification badge: the chain recomputed and the signatures checked
//! (what `airlock audit verify` does), remembered only while the database
//! is unchanged.
//!
//! `PRAGMA data_version` changes whenever another connection commits, be it
//! a recorder appending events or someone editing a row with `sqlite3`, so a
//! remembered answer is never older than the data it describes.

use std::collections::HashMap;
use std::sync::Mutex;

use airlock_auditor::VerifyReport;
use airlock_record::SessionId;
use serde::Serialize;

use crate::ConsoleError;
use crate::server::State;

#[derive(Debug, Default)]
pub(crate) struct Cache {
    inner: Mutex<Remembered>,
}

#[derive(Debug, Default)]
struct Remembered {
    version: Option<i64>,
    reports: HashMap<SessionId, VerifyReport>,
}

/// What the sessions list shows of a report.
#[derive(Debug, Serialize)]
pub(crate) struct Badge {
    outcome: airlock_auditor::VerifyOutcome,
    first_bad_seq: Option<airlock_auditor::Seq>,
    summary: String,
}

impl Badge {
    pub(crate) fn of(report: &VerifyReport) -> Self {
        Self {
            outcome: report.outcome,
            first_bad_seq: report.first_bad_seq,
            summary: report.summary(),
        }
    }
}

impl Cache {
    pub(crate) fn report(
        &self,
        state: &State,
        id: &SessionId,
    ) -> Result<VerifyReport, ConsoleError> {
        let version = state.store.data_version()?;
        {
            let mut remembered = self.lock();
            if remembered.version != Some(version) {
                remembered.reports.clear();
                remembered.version = Some(version);
            }
            if let Some(report) = remembered.reports.get(id) {
                return Ok(report.clone());
            }
        }
        let report = state.store.verify(id, &state.trust)?;
        let mut remembered = self.lock();
        if remembered.version == Some(version) {
            remembered.reports.insert(id.clone(), report.clone());
        }
        Ok(report)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        // A panic elsewhere while holding the lock leaves a map of finished
        // reports: still sound to use.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
