//! The caller's side of `airlock session`: `start` (forks the server and
//! waits for its id), `exec` (streams a step), `ls` and `stop`; and the
//! parts other clients in this binary share (`airlock mcp`): a step read
//! frame by frame ([`open_step`]), and [`stop_session`].

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::AsyncReadExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

use super::options::ExecOptions;
use super::protocol::{self, Denial, ExecRequest, ExitReport, FrameType, Reply, Request, TtySize};
use super::registry::Registry;
use crate::exit;

/// How long `start` waits for the server to be ready (the shim's own setup
/// bound is 20 s; this covers a slow audit store on top).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `stop` waits for the record to be closed.
const STOP_TIMEOUT: Duration = Duration::from_secs(150);
/// How long past a step's `--timeout` `exec` waits for its end: the session
/// kills a step on its timeout and answers within two seconds even when the
/// sandbox does not confirm it (`runner::StepRunner::kill_confirmed_within`), so only a
/// session that is not answering at all runs this out.
pub(crate) const ANSWER_GRACE: Duration = Duration::from_secs(3);
/// How long `exec` waits for a session's first answer when the step has no
/// timeout of its own.
const FIRST_ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// How long `exec` waits for the step's end once it has passed on a SIGINT
/// or SIGTERM, before it leaves anyway (its leaving kills the step).
const SIGNAL_GRACE: Duration = Duration::from_millis(500);

/// Say why airlock failed, on one line, and exit 125.
fn failed(e: &anyhow::Error) -> ExitCode {
    eprintln!("airlock: {}", crate::one_line(e));
    ExitCode::from(exit::RUN_FAILED)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the client runtime")
}

/// `airlock session start`: run `airlock session serve` with the same
/// options, detached; print the id it prints once ready. Its stderr is
/// relayed until then (notices, or why it could not start).
pub(crate) fn start() -> ExitCode {
    match start_server() {
        Ok(code) => code,
        Err(e) => failed(&e),
    }
}

fn start_server() -> anyhow::Result<ExitCode> {
    let id = crate::random_id::random_id()?;
    let options: Vec<_> = std::env::args_os()
        .skip_while(|a| a != "start")
        .skip(1)
        .collect();
    let exe = std::env::current_exe().context("finding airlock's own executable")?;
    let mut child = std::process::Command::new(exe)
        .args(["session", "serve", "--id", &id])
        .args(options)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the session's server")?;
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let relay = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut text);
        text
    });
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let Ok(line) = rx.recv_timeout(START_TIMEOUT) else {
        let _ = child.kill();
        let _ = child.wait();
        bail!(
            "the session did not come up within {}s: check system load, and its log in {}",
            START_TIMEOUT.as_secs(),
            Registry::open()?.dir().display()
        );
    };
    let said = relay.join().unwrap_or_default();
    eprint!("{said}");
    if line.trim() == id {
        println!("{id}");
        return Ok(ExitCode::SUCCESS);
    }
    // It could not start: it has said why on stderr (relayed above).
    let status = child.wait().context("waiting for the session's server")?;
    if said.trim().is_empty() {
        bail!("the session's server ended without starting ({status})");
    }
    Ok(ExitCode::from(
        status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .filter(|c| *c != 0)
            .unwrap_or(exit::RUN_FAILED),
    ))
}

/// `airlock session ls`; `json`: one JSON array instead of a table.
pub(crate) fn ls(json: bool) -> ExitCode {
    let listed = runtime().and_then(|rt| {
        rt.block_on(async {
            let registry = Registry::open()?;
            anyhow::Ok(registry.list().await)
        })
    });
    let sessions = match listed {
        Ok(sessions) => sessions,
        Err(e) => return failed(&e),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&sessions).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    println!(
        "{:<16}  {:<16}  {:<20}  {:>8}  {:<13}  {:<14}  POLICY",
        "ID", "NAME", "STARTED", "COMMANDS", "STATE", "PIDS"
    );
    for s in sessions {
        let started = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + Duration::from_secs_f64(s.started.max(0.0)),
        );
        let pids = match s.pids.init {
            Some(init) => format!("{}/{}", s.pids.server, init),
            None => s.pids.server.to_string(),
        };
        println!(
            "{:<16}  {:<16}  {:<20}  {:>8}  {:<13}  {:<14}  {}",
            s.id,
            s.name.as_deref().unwrap_or("-"),
            started.to_string(),
            s.commands,
            s.state,
            pids,
            s.policy
        );
    }
    ExitCode::SUCCESS
}

/// `airlock session stop SESSION`: returns once the record is closed.
pub(crate) fn stop(session: &str) -> ExitCode {
    let stopped = runtime().and_then(|rt| {
        rt.block_on(async {
            let registry = Registry::open()?;
            let id = registry.resolve(session).await?;
            stop_session(&registry, &id).await
        })
    });
    match stopped {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => failed(&e),
    }
}

/// Ask session `id` to stop; returns once its record is closed.
pub(crate) async fn stop_session(registry: &Registry, id: &str) -> anyhow::Result<()> {
    let exchange = async {
        let mut stream = connect(registry, id).await?;
        protocol::write_line(&mut stream, &Request::Stop).await?;
        let reply: Option<Reply> = protocol::read_line(&mut stream).await?;
        anyhow::Ok(reply)
    };
    let reply = tokio::time::timeout(STOP_TIMEOUT, exchange)
        .await
        .with_context(|| format!("session {id} did not stop within {STOP_TIMEOUT:?}"))??;
    match reply {
        Some(Reply { ok: true, .. }) => Ok(()),
        Some(Reply { error, .. }) => bail!(error.unwrap_or_default()),
        None => bail!("session {id} closed the connection before confirming the stop"),
    }
}

async fn connect(registry: &Registry, id: &str) -> anyhow::Result<tokio::net::UnixStream> {
    match registry.connect(id).await {
        Ok(stream) => Ok(stream),
        Err(e) => {
            // Its server is gone (killed): asking cleans the socket away.
            let _ = registry.info(id).await;
            Err(e.context(format!(
                "session {id} is no longer running: see `airlock session ls`"
            )))
        }
    }
}

/// `airlock session exec`: the step's exit status, or 125.
pub(crate) fn exec(options: ExecOptions) -> ExitCode {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return failed(&e),
    };
    let result = rt.block_on(exec_step(options));
    // stdin's reader may be blocked in read(2): do not wait for it.
    rt.shutdown_background();
    match result {
        Ok(code) => code,
        Err(e) => failed(&e),
    }
}

async fn exec_step(options: ExecOptions) -> anyhow::Result<ExitCode> {
    // From the start: a Ctrl-C must reach the step, never end the client
    // before the step has heard of it.
    let signals = Signals::install().context("installing signal handlers")?;
    let registry = Registry::open()?;
    let id = registry.resolve(&options.session).await?;
    let mut argv = Vec::with_capacity(options.command.len());
    for arg in &options.command {
        argv.push(
            arg.to_str()
                .with_context(|| {
                    format!("{arg:?} is not valid UTF-8: the control protocol carries text")
                })?
                .to_owned(),
        );
    }
    let tty = options.tty.then(|| {
        let size = crate::terminal::initial_size();
        TtySize {
            cols: size.cols,
            rows: size.rows,
        }
    });
    let request = ExecRequest {
        argv,
        env: options.env.clone(),
        cwd: options.cwd.clone(),
        label: options.label.clone(),
        timeout_ms: options.timeout.map(|t| t.as_millis() as u64),
        tty,
    };
    // The caller's bound on the wait: the step's timeout and a grace (the
    // first answer alone comes at once from a session that answers at all).
    let until = tokio::time::Instant::now()
        + options
            .timeout
            .map_or(FIRST_ANSWER_WITHIN, |t| t + ANSWER_GRACE);
    let (mut step, mut writer) =
        match tokio::time::timeout_at(until, open_step(&registry, &id, request)).await {
            Ok(opened) => opened?,
            Err(_) => return gave_up(Gone::NotAnswering.into(), &id, options.timeout),
        };
    let stdin = std::io::stdin();
    let raw = match tty.is_some() && stdin.is_terminal() {
        true => Some(
            airlock_shim::pty::RawMode::enter(stdin.as_fd())
                .context("putting the terminal in raw mode")?,
        ),
        false => None,
    };
    let (frames, mut frames_rx) = mpsc::channel::<(FrameType, Vec<u8>)>(16);
    tokio::spawn(async move {
        while let Some((kind, data)) = frames_rx.recv().await {
            if protocol::write_frame(&mut writer, kind, &data)
                .await
                .is_err()
            {
                return;
            }
        }
    });
    tokio::spawn(pump_stdin(frames.clone()));
    // What an [[ask]] rule holds of this step, said as `airlock run` says it.
    let holds = tokio::spawn(super::holds::announce(id.clone(), step.step));
    let (quit, mut quit_rx) = mpsc::channel(1);
    tokio::spawn(signals.forward(frames, tty.is_some(), quit));
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    // Then a signal's grace once one came.
    let give_up = tokio::time::sleep_until(match options.timeout {
        Some(_) => until,
        None => tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 86_400),
    });
    tokio::pin!(give_up);
    let mut signalled = None;
    let ended = loop {
        tokio::select! {
            next = step.next() => match next {
                Ok(StepOutput::Stdout(data)) => {
                    let _ = out.write_all(&data).and_then(|()| out.flush());
                }
                Ok(StepOutput::Stderr(data)) => {
                    let _ = err.write_all(&data);
                }
                Ok(StepOutput::Exited(report)) => break Ok(report),
                Err(e) => break Err(e),
            },
            Some(signal) = quit_rx.recv(), if signalled.is_none() => {
                signalled = Some(signal);
                give_up.as_mut().reset(tokio::time::Instant::now() + SIGNAL_GRACE);
            }
            () = &mut give_up => break Err(match signalled {
                Some(signal) => Gone::Signalled(signal),
                None => Gone::NotAnswering,
            }.into()),
        }
    };
    holds.abort();
    drop(raw);
    let report = match ended {
        Ok(report) => report,
        Err(e) => return gave_up(e, &id, options.timeout),
    };
    for denial in &report.denials {
        crate::terminal::eprint_line(&refusal_notice(denial));
    }
    // A timeout is said below, with the session living on.
    if let Some(reason) = report
        .reason
        .as_ref()
        .filter(|r| !r.starts_with("killed: time limit"))
    {
        let prefix = if reason.starts_with("airlock:") {
            ""
        } else {
            "airlock: "
        };
        eprintln!("{prefix}{reason}");
    }
    if report.timed_out {
        eprintln!(
            "airlock: the command timed out after {} (--timeout) and was killed; the session lives on",
            humantime::format_duration(options.timeout.unwrap_or_default())
        );
    }
    Ok(ExitCode::from(
        u8::try_from(report.exit_code).unwrap_or(exit::RUN_FAILED),
    ))
}

/// Why `exec` stopped waiting for a step's end.
#[derive(Debug, thiserror::Error)]
enum Gone {
    #[error("a signal ({0}) came and the step did not end within its grace")]
    Signalled(i32),
    #[error("the session did not answer within the step's timeout and grace")]
    NotAnswering,
}

/// What `exec` says and exits with when it stopped waiting (its leaving
/// kills the step, when the session still hears it), or the error itself.
fn gave_up(e: anyhow::Error, id: &str, timeout: Option<Duration>) -> anyhow::Result<ExitCode> {
    match e.downcast_ref::<Gone>() {
        Some(Gone::Signalled(signal)) => {
            eprintln!(
                "airlock: left on signal {signal}; the step is killed as the session sees its caller go (if it is not answering: airlock session stop {id})"
            );
            Ok(ExitCode::from(128 + (*signal as u8)))
        }
        Some(Gone::NotAnswering) => {
            let waited = match timeout {
                Some(t) => format!(
                    "the step did not end within its --timeout of {} and {}s more",
                    humantime::format_duration(t),
                    ANSWER_GRACE.as_secs()
                ),
                None => format!(
                    "it did not take the step within {}s",
                    FIRST_ANSWER_WITHIN.as_secs()
                ),
            };
            eprintln!(
                "airlock: session {id} is not answering: {waited}; stop the session with `airlock session stop {id}`"
            );
            Ok(ExitCode::from(exit::RUN_FAILED))
        }
        None => Err(e),
    }
}

/// A step running in a session, read from the client's side: what it
/// writes, then how it ended. Its stdin, signals and window size go to the
/// writer that [`open_step`] returns with it, which must stay open until
/// the step ends: the session takes a client that hangs up for one that
/// went away, and kills the step.
pub(crate) struct StepStream {
    id: String,
    /// The step's number, as the session's first answer gives it.
    pub step: Option<u64>,
    /// Buffered: the answer line and the frames after it.
    reader: tokio::io::BufReader<OwnedReadHalf>,
}

/// What a running step says next.
pub(crate) enum StepOutput {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The last word: nothing follows.
    Exited(ExitReport),
}

/// Start a step in session `id`.
pub(crate) async fn open_step(
    registry: &Registry,
    id: &str,
    request: ExecRequest,
) -> anyhow::Result<(StepStream, OwnedWriteHalf)> {
    let stream = connect(registry, id).await?;
    let (reader, mut writer) = stream.into_split();
    let mut reader = tokio::io::BufReader::new(reader);
    protocol::write_line(&mut writer, &Request::Exec(request)).await?;
    let reply: Reply = protocol::read_line(&mut reader)
        .await?
        .with_context(|| format!("session {id} closed the connection without answering"))?;
    if !reply.ok {
        bail!(reply.error.unwrap_or_default());
    }
    let step = StepStream {
        id: id.to_owned(),
        step: reply.step,
        reader,
    };
    Ok((step, writer))
}

impl StepStream {
    /// The step's next output, or its end. An error when airlock failed the
    /// step (the reason) or the session went away.
    pub(crate) async fn next(&mut self) -> anyhow::Result<StepOutput> {
        loop {
            match protocol::read_frame(&mut self.reader).await {
                Ok(Some((FrameType::Stdout, data))) => return Ok(StepOutput::Stdout(data)),
                Ok(Some((FrameType::Stderr, data))) => return Ok(StepOutput::Stderr(data)),
                Ok(Some((FrameType::Exit, data))) => {
                    return Ok(StepOutput::Exited(serde_json::from_slice(&data)?));
                }
                Ok(Some((FrameType::Error, data))) => {
                    let text = serde_json::from_slice::<serde_json::Value>(&data)
                        .ok()
                        .and_then(|v| v["error"].as_str().map(str::to_owned))
                        .unwrap_or_default();
                    bail!(text);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => bail!(
                    "session {} ended the connection before the command finished: see `airlock session ls`",
                    self.id
                ),
            }
        }
    }
}

/// One line on what the step was refused and how to allow it, as `airlock
/// run` prints them live. Names and URLs are the sandboxed program's text.
fn refusal_notice(denial: &Denial) -> String {
    use airlock_auditor::escape::text;
    let what = match (&denial.method, &denial.url) {
        (Some(method), Some(url)) => format!("{} {}", text(method), text(url)),
        _ => text(&denial.host).into_owned(),
    };
    let times = match denial.count {
        1 => String::new(),
        n => format!(" ({n} times)"),
    };
    let advice = match &denial.rule {
        Some(rule) => format!(
            "; to allow it, add: {}",
            text(&rule.trim_end().replace('\n', " "))
        ),
        None => String::new(),
    };
    format!(
        "airlock: refused {what}{times}: {} (decided by {}){advice}",
        text(&denial.reason),
        text(&denial.decided_by)
    )
}

/// Copy airlock's stdin to the step, then say it ended.
async fn pump_stdin(frames: mpsc::Sender<(FrameType, Vec<u8>)>) {
    let mut stdin = tokio::io::stdin();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match stdin.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if frames
                    .send((FrameType::Stdin, buf[..n].to_vec()))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
    let _ = frames.send((FrameType::StdinEof, Vec::new())).await;
}

/// Window size changes, Ctrl-C and SIGTERM, caught from the start.
struct Signals {
    winch: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            winch: signal(SignalKind::window_change())?,
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// Forward them to the step: window sizes with a terminal; Ctrl-C and
    /// SIGTERM without one (with a terminal, Ctrl-C is a keystroke for the
    /// command's pty).
    /// SIGINT and SIGTERM are also said on `quit`: the caller waits only
    /// a short grace for the step's end after them.
    async fn forward(
        mut self,
        frames: mpsc::Sender<(FrameType, Vec<u8>)>,
        tty: bool,
        quit: mpsc::Sender<i32>,
    ) {
        loop {
            let frame = tokio::select! {
                _ = self.winch.recv() => {
                    if !tty {
                        continue;
                    }
                    let size = crate::terminal::initial_size();
                    let mut data = size.cols.to_be_bytes().to_vec();
                    data.extend_from_slice(&size.rows.to_be_bytes());
                    (FrameType::Resize, data)
                }
                _ = self.int.recv() => (FrameType::Signal, vec![nix::sys::signal::Signal::SIGINT as u8]),
                _ = self.term.recv() => (FrameType::Signal, vec![nix::sys::signal::Signal::SIGTERM as u8]),
            };
            if let (FrameType::Signal, [signal]) = (frame.0, frame.1.as_slice()) {
                let _ = quit.try_send(i32::from(*signal));
            }
            // The step's end may be unread while the writer waits: never
            // hold the signal on it.
            let _ = frames.try_send(frame);
        }
    }
}
