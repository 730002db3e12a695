//! Shipping a session's record to a central store as it is written
//! (`--audit-ship`), and holding decisions until it is there
//! (`--audit-ship-required`). The local database stays the spool: the
//! shipper copies from it, and what the central store has not taken yet
//! waits there for the next shipper (`airlock audit ship`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use airlock_auditor::ship::{
    Connect, ShipDestination, ShipFeed, ShipProgress, ShipReport, Shipper,
};
use airlock_auditor::sqlite::SqliteStore;
use airlock_auditor::{Seq, SessionId, SessionRecorder};
use airlock_proxy::Metrics;
use airlock_proxy::events::SinkError;
use airlock_proxy::metrics::ShippingGauges;
use anyhow::Context;

use crate::terminal;

/// How long a session's end waits for its last events to reach the
/// central store before it leaves them in the local record.
const FINISH_WITHIN: Duration = Duration::from_secs(10);
/// How long a decision waits for its event to reach the central store
/// (`--audit-ship-required`) before it is refused.
const CONFIRM_WITHIN: Duration = Duration::from_secs(5);

/// A central store's address, `postgres://…`, without a password: a
/// command line is read by every process that can list processes, the
/// sandbox's own among them (its first process is airlock's child).
#[derive(Clone, Debug)]
pub(crate) struct ShipUrl(String);

impl std::str::FromStr for ShipUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use airlock_auditor::postgres::{PASSWORD_FILE_ENV, is_postgres_url, redact_url};
        if !is_postgres_url(s) {
            return Err(format!(
                "{} is not a central store's address; give postgres://USER@HOST[:PORT]/DATABASE",
                redact_url(s)
            ));
        }
        if redact_url(s) != s {
            return Err(format!(
                "{} carries a password, which any process that lists processes can read; give it in the file named by {PASSWORD_FILE_ENV}, or in PGPASSWORD",
                redact_url(s)
            ));
        }
        Ok(Self(s.to_owned()))
    }
}

impl ShipUrl {
    /// Opens a connection to it each time it is called: the shipper's
    /// way back after a failure.
    pub(crate) fn connect(&self) -> Connect {
        let url = self.0.clone();
        Box::new(move || {
            let store = airlock_auditor::postgres::PgStore::open(&url)?;
            Ok(Box::new(store) as Box<dyn ShipDestination>)
        })
    }
}

/// Parses `--audit-ship` and `--to` so that a refusal shows the URL
/// without its password (clap's own error would quote the value whole).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ShipUrlParser;

impl clap::builder::TypedValueParser for ShipUrlParser {
    type Value = ShipUrl;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<ShipUrl, clap::Error> {
        let flag = arg.and_then(|a| a.get_long()).unwrap_or("audit-ship");
        let refuse = |problem: String| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("--{flag}: {problem}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| refuse("the URL is not UTF-8".into()))?;
        text.parse().map_err(refuse)
    }
}

impl std::fmt::Display for ShipUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The shipper of one running session's database.
pub(crate) struct LiveShipper {
    db: PathBuf,
    to: ShipUrl,
    progress: Arc<ShipProgress>,
    thread: JoinHandle<ShipReport>,
}

impl LiveShipper {
    /// Starts shipping `db` (where `recorder` records) to `to`, taking the
    /// recorder's commits in memory as they land and reading `db` for the
    /// rest. The central store need not be reachable: events wait.
    pub(crate) fn start(
        db: &Path,
        to: &ShipUrl,
        recorder: &SessionRecorder,
    ) -> anyhow::Result<Self> {
        let local = SqliteStore::open_for_shipping(db)
            .with_context(|| format!("--audit-ship: opening {} to ship it", db.display()))?;
        let progress = Arc::new(ShipProgress::default());
        let feed = Arc::new(ShipFeed::default());
        recorder.feed(feed.clone());
        let shipper = Shipper::new(local, to.connect(), progress.clone()).with_feed(feed);
        let thread = std::thread::Builder::new()
            .name("audit-ship".into())
            .spawn(move || shipper.follow())
            .context("starting the audit shipper")?;
        Ok(Self {
            db: db.to_path_buf(),
            to: to.clone(),
            progress,
            thread,
        })
    }

    /// What holds decisions until `session`'s events are shipped.
    pub(crate) fn gate(&self, session: SessionId) -> ShipGate {
        ShipGate {
            progress: self.progress.clone(),
            session,
            last: AtomicU64::new(0),
        }
    }

    /// Reports this shipper in `/metrics`.
    pub(crate) fn report_to(&self, metrics: &Metrics) {
        let progress = self.progress.clone();
        metrics.set_shipping(move || {
            let status = progress.status();
            ShippingGauges {
                pending_events: status.pending_events,
                lag: status.lag,
                shipped_events: status.shipped_events,
                errors: status.errors,
            }
        });
    }

    /// Ships what is left once the session's end is written, for at most
    /// [`FINISH_WITHIN`]; what did not get there waits in the local
    /// record, and the user is told how to ship it.
    pub(crate) fn finish(self) {
        self.progress.stop(Instant::now() + FINISH_WITHIN);
        let _ = self.thread.join();
        let status = self.progress.status();
        if status.pending_events > 0 || status.last_error.is_some() {
            let why = status
                .last_error
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            terminal::eprint_line(&format!(
                "airlock: the central audit store did not take all of this session{why}; what it lacks waits in {db}: ship it with `airlock audit ship --from {db} --to {to}`",
                db = self.db.display(),
                to = self.to,
            ));
        }
    }
}

/// Holds each network decision until its event is in the central store
/// (`--audit-ship-required`).
pub(crate) struct ShipGate {
    progress: Arc<ShipProgress>,
    session: SessionId,
    /// The last event recorded through the sink that holds this gate.
    last: AtomicU64,
}

impl ShipGate {
    pub(crate) fn recorded(&self, seq: Seq) {
        self.last.fetch_max(seq.get(), Ordering::AcqRel);
    }

    /// Waits (blocking) until every event recorded so far is shipped.
    pub(crate) fn confirm(&self) -> Result<(), SinkError> {
        let seq = Seq(self.last.load(Ordering::Acquire));
        if self
            .progress
            .wait_shipped(&self.session, seq, CONFIRM_WITHIN)
        {
            return Ok(());
        }
        let why = self
            .progress
            .status()
            .last_error
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        Err(SinkError(format!(
            "the central audit store has not taken the decision within {}s{why} (--audit-ship-required refuses what it cannot ship)",
            CONFIRM_WITHIN.as_secs()
        )))
    }
}
