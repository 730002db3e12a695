//! The live session behind one MCP connection: started as the CLI starts
//! one, driven over its control socket as any client drives one, stopped
//! when the connection ends.

use std::convert::Infallible;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::net::unix::OwnedWriteHalf;

use super::output::{Bounded, LIMIT};
use crate::session::client::{self, StepOutput};
use crate::session::protocol::{
    self, Denial, ExecRequest, ExitReport, FrameType, MAX_FRAME, Request,
};
use crate::session::registry::Registry;

/// A live session, addressed by its id.
pub(super) struct Session {
    registry: Registry,
    id: String,
}

/// How starting one went.
pub(super) enum Start {
    Live(Session),
    /// `airlock session start` said why not on stderr and exited with this.
    Refused(ExitCode),
}

/// One step, as a tool asks for it.
pub(super) struct Step {
    pub argv: Vec<String>,
    /// Fed to the command, then end of file.
    pub stdin: Vec<u8>,
    pub timeout: Option<Duration>,
    /// Names the tool in the record (`mcp:run_command`).
    pub label: &'static str,
}

/// How a step went, its output bounded for a model.
pub(super) struct Ran {
    pub report: ExitReport,
    /// The step's, for telling after how long it timed out.
    pub timeout: Option<Duration>,
    pub stdout: Bounded,
    pub stderr: Bounded,
    /// The holding line of each of its requests an `[[ask]]` rule held.
    pub held: Vec<String>,
}

impl Session {
    /// Run this binary as `airlock session start OPTIONS`: the session is
    /// then served by its own detached process, exactly as from the CLI, and
    /// this process stays a client. What it says on stderr (notices, or why
    /// it could not start) goes to ours.
    pub(super) fn start(options: &[OsString]) -> anyhow::Result<Start> {
        let registry = Registry::open()?;
        let exe = std::env::current_exe().context("finding airlock's own executable")?;
        let out = std::process::Command::new(exe)
            .args(["session", "start"])
            .args(options)
            // Should this process die without stopping it (SIGKILL), the
            // session stops by itself.
            .arg("--stop-with-pid")
            .arg(std::process::id().to_string())
            // Never the MCP client's messages.
            .stdin(Stdio::null())
            // Out of our process group, which is what a client signals to
            // end a stdio server (the MCP Python SDK does): killed halfway,
            // it would leave a session whose id nobody learnt, so nobody
            // stops. Whole, it tells us the id, and we stop the session.
            .process_group(0)
            .stderr(Stdio::inherit())
            .output()
            .context("running `airlock session start`")?;
        if !out.status.success() {
            let code = out
                .status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .filter(|c| *c != 0)
                .unwrap_or(crate::exit::RUN_FAILED);
            return Ok(Start::Refused(ExitCode::from(code)));
        }
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if id.len() != 16 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
            bail!("`airlock session start` printed {id:?}, not a session id");
        }
        Ok(Start::Live(Self { registry, id }))
    }

    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// Run one step to its end, collecting its output.
    pub(super) async fn run(&self, step: Step) -> anyhow::Result<Ran> {
        let request = ExecRequest {
            argv: step.argv,
            env: Vec::new(),
            cwd: None,
            label: Some(step.label.to_owned()),
            timeout_ms: step.timeout.map(|t| t.as_millis() as u64),
            tty: None,
        };
        // Never held by a session that stopped answering: past the step's
        // timeout and the grace, the agent gets its answer.
        let until = tokio::time::Instant::now()
            + step
                .timeout
                .map_or(Duration::from_secs(100 * 365 * 86_400), |t| {
                    t + client::ANSWER_GRACE
                });
        let not_answering = || {
            anyhow::anyhow!(
                "session {} is not answering: the step did not end within its timeout of {} and {}s more; stop the session with `airlock session stop {}`",
                self.id,
                humantime::format_duration(step.timeout.unwrap_or_default()),
                client::ANSWER_GRACE.as_secs(),
                self.id
            )
        };
        let opened =
            tokio::time::timeout_at(until, client::open_step(&self.registry, &self.id, request));
        let (mut stream, mut writer) = opened.await.map_err(|_| not_answering())??;
        // What an [[ask]] rule held of this step, for the result.
        let held = Arc::new(std::sync::Mutex::new(Vec::new()));
        let holds = {
            let held = held.clone();
            tokio::spawn(crate::session::holds::watch(
                self.id.clone(),
                stream.step,
                move |line| {
                    if let Ok(mut held) = held.lock() {
                        held.push(line);
                    }
                },
            ))
        };
        let mut stdout = Bounded::new(LIMIT);
        let mut stderr = Bounded::new(LIMIT);
        let collect = async {
            loop {
                match stream.next().await? {
                    StepOutput::Stdout(data) => stdout.push(&data),
                    StepOutput::Stderr(data) => stderr.push(&data),
                    StepOutput::Exited(report) => return anyhow::Ok(report),
                }
            }
        };
        // Fed while the output is read: a command that writes before it has
        // read all its input would otherwise wait for us as we wait for it.
        let feed = async {
            // A command that ends without reading all its stdin ends the
            // step (and the connection) first; what it did not read is lost.
            let _ = feed(&mut writer, &step.stdin).await;
            std::future::pending::<Infallible>().await
        };
        // `writer` lives until the end: the session takes a closed
        // connection for a client gone away and kills the step.
        let step_ends = async {
            tokio::select! {
                report = collect => report,
                never = feed => match never {},
            }
        };
        let report = tokio::time::timeout_at(until, step_ends).await;
        holds.abort();
        let report = report.map_err(|_| not_answering())??;
        let held = held.lock().map(|h| h.clone()).unwrap_or_default();
        Ok(Ran {
            report,
            timeout: step.timeout,
            stdout,
            stderr,
            held,
        })
    }

    /// Every refusal of the session so far, and how many more were not kept.
    pub(super) async fn denials(&self) -> anyhow::Result<(Vec<Denial>, u64)> {
        let reply = self.registry.ask(&self.id, &Request::Denials).await?;
        if !reply.ok {
            bail!(reply.error.unwrap_or_default());
        }
        Ok((
            reply.denials.unwrap_or_default(),
            reply.dropped.unwrap_or(0),
        ))
    }

    /// Stop the session; returns once its record is closed.
    pub(super) async fn stop(&self) -> anyhow::Result<()> {
        client::stop_session(&self.registry, &self.id).await
    }
}

async fn feed(writer: &mut OwnedWriteHalf, data: &[u8]) -> Result<(), protocol::ProtocolError> {
    for chunk in data.chunks(MAX_FRAME) {
        protocol::write_frame(writer, FrameType::Stdin, chunk).await?;
    }
    protocol::write_frame(writer, FrameType::StdinEof, &[]).await
}
