//! How a session's record ends, for every mode (`run`, `session`, `proxy`,
//! `sidecar`): in the one order that guarantees nothing is recorded after
//! the end. Every writer stops first, each one before those it feeds:
//!
//! 1. the terminal relay (`run`): the command's last output, and the
//!    caller's terminal given back;
//! 2. the proxy's front doors: its listeners, DNS, the approvals API;
//! 3. its connections (their worker threads are joined, so their last
//!    events are queued);
//! 4. the threads that record the sandbox's output and what its processes
//!    did;
//!
//! and only then is the session's end written ([`Quiet::finish`]), and
//! shipped to the central store with `--audit-ship`. The
//! recorder refuses events once it is finished, so a writer left running
//! would fail, not slip past the end.

use std::io;
use std::thread::JoinHandle;
use std::time::Duration;

use airlock_auditor::{AuditError, SessionEnd, SessionRecorder};
use airlock_proxy::Proxy;
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

use crate::ship::LiveShipper;
use crate::terminal::PtyRelay;

/// How long a front doors' runtime may take to stop.
const FRONT_DOORS_STOP_WITHIN: Duration = Duration::from_secs(1);

/// A session's record and everything that may still write to it.
pub(crate) struct Finish {
    /// None: an unrecorded session (`--no-audit`, a proxy without
    /// `--audit-db`); its writers are stopped all the same.
    recorder: Option<SessionRecorder>,
    proxy: Proxy,
    /// `airlock run`'s terminal relay.
    pty: Option<PtyRelay>,
    /// The threads that record the sandbox's output and observations.
    recording: Vec<JoinHandle<()>>,
    /// `--audit-ship`: ships the end once it is written.
    shipper: Option<LiveShipper>,
}

impl Finish {
    /// A sandbox's session (`run`, `session`): what `launch` wired.
    pub(crate) fn new(
        recorder: Option<SessionRecorder>,
        proxy: Proxy,
        pty: Option<PtyRelay>,
        recording: Vec<JoinHandle<()>>,
    ) -> Self {
        Self {
            recorder,
            proxy,
            pty,
            recording,
            shipper: None,
        }
    }

    /// The record is shipped by `shipper` (`--audit-ship`): its end too.
    pub(crate) fn shipping(self, shipper: Option<LiveShipper>) -> Self {
        Self { shipper, ..self }
    }

    /// The proxy alone: `airlock proxy` and `airlock sidecar`.
    pub(crate) fn proxy(proxy: Proxy, recorder: Option<SessionRecorder>) -> Self {
        Self::new(recorder, proxy, None, Vec::new())
    }

    /// Stop every writer (`run`, `session`: once the sandbox has ended, off
    /// any runtime); `front_doors` is the runtime that serves the proxy's
    /// sockets.
    pub(crate) fn stop(self, front_doors: Runtime) -> Quiet {
        self.stop_in_order(Some(front_doors))
    }

    /// Stop every writer (`proxy`, `sidecar`: from the runtime whose tasks
    /// in `front_doors` are the proxy's listeners). They are not only told
    /// to stop but awaited, so none answers another query after the end.
    pub(crate) async fn stop_serving(
        self,
        front_doors: &mut JoinSet<io::Result<()>>,
    ) -> Result<Quiet, tokio::task::JoinError> {
        front_doors.abort_all();
        while front_doors.join_next().await.is_some() {}
        // Joins the worker threads: not on this runtime's thread.
        tokio::task::spawn_blocking(move || self.stop_in_order(None)).await
    }

    /// Steps 1 to 4 of the module's list; the front doors of `proxy` and
    /// `sidecar` (which have no terminal) are closed before this is called.
    fn stop_in_order(self, front_doors: Option<Runtime>) -> Quiet {
        let Self {
            recorder,
            proxy,
            pty,
            recording,
            shipper,
        } = self;
        if let Some(pty) = pty {
            pty.finish();
        }
        if let Some(runtime) = front_doors {
            runtime.shutdown_timeout(FRONT_DOORS_STOP_WITHIN);
        }
        proxy.stop_connections();
        for thread in recording {
            let _ = thread.join();
        }
        Quiet { recorder, shipper }
    }
}

/// Nothing writes to the record any more: only its end is left to write.
#[must_use = "the session's end is not written until `finish` is called"]
pub(crate) struct Quiet {
    recorder: Option<SessionRecorder>,
    shipper: Option<LiveShipper>,
}

impl Quiet {
    /// Write the session's end (nothing to do for an unrecorded one), and
    /// ship what the central store still lacks (`--audit-ship`).
    pub(crate) fn finish(self, end: SessionEnd) -> Result<(), AuditError> {
        let finished = match self.recorder {
            Some(recorder) => recorder.finish(end),
            None => Ok(()),
        };
        if let Some(shipper) = self.shipper {
            shipper.finish();
        }
        finished
    }

    /// [`Self::finish`] from a runtime's thread: the write waits for the
    /// disk, so it runs where blocking is allowed.
    pub(crate) async fn finish_blocking(
        self,
        end: SessionEnd,
    ) -> Result<Result<(), AuditError>, tokio::task::JoinError> {
        tokio::task::spawn_blocking(move || self.finish(end)).await
    }
}
