//! `airlock mcp`: the Model Context Protocol over stdio, so that an agent's
//! host (an IDE, a desktop app, an agent framework) can give a model tools
//! that run in an airlock sandbox. One live session per connection (one
//! process per connection, as for every stdio MCP server), stopped when the
//! client goes away or airlock is told to end.
//!
//! - `session`: the live session behind the connection: started, stepped, stopped;
//! - `tools`: the tools and their arguments' schemas;
//! - `answer`: what the tools answer, for a model and for programs;
//! - `paths`: workspace-relative paths from the model, checked;
//! - `output`: a step's output, bounded for a model;
//! - `transport`: stdio, the end of stdin told at once.

mod answer;
mod output;
mod paths;
mod session;
mod tools;
mod transport;

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use rmcp::ServiceExt;
use tokio::signal::unix::{Signal, SignalKind, signal};

use session::{Session, Start};
use tools::Tools;

/// Serve one MCP connection on stdio, in a session started with `options`
/// (those of `airlock session start`).
pub(crate) fn serve(options: &[OsString]) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the MCP server's runtime")?;
    // From the start: a client may end us while the session comes up, and
    // then it is stopped as soon as it is up.
    let told_to_end = {
        let _entered = runtime.enter();
        ToldToEnd::catch().context("catching SIGTERM and SIGINT")?
    };
    let session = match Session::start(options)? {
        Start::Live(session) => Arc::new(session),
        Start::Refused(code) => return Ok(code),
    };
    let mut stop = StopOnDrop {
        session: session.clone(),
        within: STOP_WITHIN,
    };
    let served = runtime.block_on(serve_connection(session, told_to_end));
    if let Ok(Ended::Told) = served {
        // Told to end, we end within a second: the session's server,
        // which watches us (`--stop-with-pid`), finishes stopping alone.
        stop.within = STOP_WITHIN_WHEN_TOLD;
    }
    drop(stop);
    // stdin's reader may still be blocked in read(2): do not wait for it.
    runtime.shutdown_background();
    served.map(|_| ExitCode::SUCCESS)
}

/// How long the session may take to stop once the client went away (its
/// record is closed by then).
const STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(150);
/// The same after SIGTERM or SIGINT, which must end us at once.
const STOP_WITHIN_WHEN_TOLD: std::time::Duration = std::time::Duration::from_millis(800);

/// How serving ended.
enum Ended {
    /// The client left (or the protocol ended).
    Left,
    /// SIGTERM or SIGINT.
    Told,
}

/// Until the client goes away (end of stdin: the transport closed) or we
/// are told to end.
async fn serve_connection(
    session: Arc<Session>,
    mut told_to_end: ToldToEnd,
) -> anyhow::Result<Ended> {
    let (stdio, mut stdin_ended) = transport::stdio();
    let served = async {
        let service = Tools::new(session)
            .serve(stdio)
            .await
            .context("greeting the MCP client")?;
        service.waiting().await.context("serving the MCP client")?;
        anyhow::Ok(())
    };
    tokio::select! {
        served = served => served.map(|()| Ended::Left),
        // Only the end itself: the sender is also dropped with the
        // transport when rmcp ends, and then `served` says how.
        Ok(()) = &mut stdin_ended => Ok(Ended::Left),
        () = told_to_end.recv() => Ok(Ended::Told),
    }
}

/// SIGTERM and SIGINT.
struct ToldToEnd {
    term: Signal,
    int: Signal,
}

impl ToldToEnd {
    fn catch() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Stops the session however `serve` is left, a panic included. It runs
/// outside the server's runtime, on its own.
struct StopOnDrop {
    session: Arc<Session>,
    /// How long to wait for the stop to be confirmed.
    within: std::time::Duration,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let stopped = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting a runtime to stop the session")
            .and_then(|runtime| {
                runtime.block_on(async {
                    tokio::time::timeout(self.within, self.session.stop())
                        .await
                        .unwrap_or(Ok(()))
                })
            });
        if let Err(e) = stopped {
            eprintln!(
                "airlock: stopping session {}: {}",
                self.session.id(),
                crate::one_line(&e)
            );
        }
    }
}
