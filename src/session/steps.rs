//! One step of a live session: the request checked, the command started in
//! the sandbox with its stdio, output relayed to the client and recorded,
//! the per-step timeout, and the exit report. What a step leaves running in
//! the background keeps its output pipes, which are read (and recorded)
//! until it ends, so that it never blocks or dies of SIGPIPE.

use airlock_auditor::Note;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use airlock_auditor::{AuditEvent, OutputStream, StepNo};
use airlock_shim::pty::WindowSize;
use airlock_shim::{ExitKind, StepId, StepRequest, StepStdio};
use anyhow::{Context, bail};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot, watch};

use super::io::{Reader, Writer};
use super::kill_reasons::OomKills;
use super::live::{Live, NewStep, StepEnd};
use super::protocol::{self, ExecRequest, ExitReport, FrameType, Reply};

/// The end-of-file character a pty turns into EOF for its reader (VEOF).
const EOF_CHAR: u8 = 0x04;
/// Output recorded per stream from what a step left running, once it ended.
const BACKGROUND_OUTPUT_RECORDED: usize = 8 << 20;

/// Serve one `exec` request on its connection, to the end.
pub(super) async fn serve(
    live: Arc<Live>,
    connection: (ConnReader, OwnedWriteHalf),
    request: ExecRequest,
) {
    let (mut reader, mut writer) = connection;
    let started = match Started::begin(&live, &request).await {
        Ok(started) => started,
        Err(e) => {
            let reply = Reply::error(crate::one_line(&e));
            let _ = protocol::write_line(&mut writer, &reply).await;
            return;
        }
    };
    let reply = Reply {
        step: Some(started.step.0),
        ..Reply::ok()
    };
    if protocol::write_line(&mut writer, &reply).await.is_err() {
        live.control.kill(started.step).ok();
    }
    started.relay(&live, &mut reader, writer, &request).await;
}

/// The client's side of the connection, buffered.
pub(super) type ConnReader = tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>;

/// A step whose command was handed to the sandbox.
struct Started {
    step: StepId,
    begun: Instant,
    stdin: Option<Writer>,
    outputs: Vec<(Reader, FrameType)>,
    /// The pty master (a terminal step); also its only output.
    terminal: Option<Arc<Terminal>>,
    end: oneshot::Receiver<StepEnd>,
    /// The sandbox's OOM kills before the step, to tell whether one was its.
    oom_before: OomKills,
}

impl Started {
    async fn begin(live: &Arc<Live>, request: &ExecRequest) -> anyhow::Result<Self> {
        if request.argv.is_empty() {
            bail!("no command given: pass one after `--`");
        }
        let env = live.step_env(&request.env)?;
        let cwd = request.cwd.as_deref().map(PathBuf::from);
        if cwd.as_ref().is_some_and(|c| !c.is_absolute()) {
            bail!("--cwd must be an absolute path inside the sandbox");
        }
        let terminal = request.tty.map(|t| WindowSize {
            cols: t.cols.max(1),
            rows: t.rows.max(1),
        });
        // Everything that can fail on this side fails before the step is
        // counted and recorded.
        let (stdio, stdin, outputs) = match terminal {
            Some(_) => (StepStdio::Terminal, None, Vec::new()),
            None => {
                let (stdin_r, stdin_w) = pipe()?;
                let (out_r, out_w) = pipe()?;
                let (err_r, err_w) = pipe()?;
                (
                    StepStdio::Pipes([stdin_r, out_w, err_w]),
                    Some(Writer::new(stdin_w)?),
                    vec![
                        (Reader::new(out_r)?, FrameType::Stdout),
                        (Reader::new(err_r)?, FrameType::Stderr),
                    ],
                )
            }
        };
        let NewStep {
            step,
            end,
            terminal: master_rx,
        } = live.begin_step(request, terminal.is_some())?;
        let shim_request = StepRequest {
            step,
            argv: request.argv.iter().map(OsString::from).collect(),
            env,
            cwd,
            terminal,
        };
        let begun = Instant::now();
        let oom_before = live.kill_reasons.oom_kills();
        if let Err(e) = live.control.exec(&shim_request, stdio) {
            let e = format!("{e:#}");
            live.waiting().ended(step, StepEnd::Failed(e.clone()));
            live.end_step(step, &failed_report(begun, &e));
            bail!("starting the command in the session: {e}");
        }
        let terminal = match master_rx {
            Some(rx) => match terminal_of(rx).await {
                Ok(terminal) => Some(terminal),
                Err(e) => {
                    // The step may be running: end it, and count it ended.
                    let _ = live.control.kill(step);
                    live.waiting().ended(step, StepEnd::Failed(e.to_string()));
                    live.end_step(step, &failed_report(begun, &e.to_string()));
                    return Err(e);
                }
            },
            None => None,
        };
        Ok(Self {
            step,
            begun,
            stdin,
            outputs,
            terminal,
            end,
            oom_before,
        })
    }

    /// Relay until the command ends, then report.
    async fn relay(
        self,
        live: &Arc<Live>,
        reader: &mut ConnReader,
        writer: OwnedWriteHalf,
        request: &ExecRequest,
    ) {
        let Self {
            step,
            begun,
            stdin,
            mut outputs,
            terminal,
            mut end,
            oom_before,
        } = self;
        let (frames, frames_rx) = mpsc::channel::<(FrameType, Vec<u8>)>(64);
        let writer = tokio::spawn(write_frames(writer, frames_rx));
        let (exited, exited_rx) = watch::channel(false);
        let mut drained = Vec::new();
        if let Some(terminal) = &terminal {
            outputs.clear();
            drained.push(spawn_pump(
                Output::Terminal(terminal.clone()),
                FrameType::Stdout,
                Pump {
                    live: live.clone(),
                    step,
                    frames: frames.clone(),
                    exited: exited_rx.clone(),
                },
            ));
        }
        for (end_fd, kind) in outputs {
            drained.push(spawn_pump(
                Output::Pipe(end_fd),
                kind,
                Pump {
                    live: live.clone(),
                    step,
                    frames: frames.clone(),
                    exited: exited_rx.clone(),
                },
            ));
        }
        let input = Input {
            live: live.clone(),
            step,
            stdin,
            terminal: terminal.clone(),
        };
        let mut timed_out = false;
        let mut reason = None;
        let outcome = {
            let client = input.run(reader);
            tokio::pin!(client);
            let deadline = request.timeout();
            let sleep = tokio::time::sleep(deadline.unwrap_or_default());
            tokio::pin!(sleep);
            // Armed when the step is killed: how long its end may take.
            let unconfirmed = tokio::time::sleep(std::time::Duration::MAX);
            tokio::pin!(unconfirmed);
            let mut killed = false;
            let mut client_done = false;
            let mut held_stdin = None;
            // A `kill` request from another connection.
            let mut kill_asked = live.kills.arm(step);
            let mut kill_seen = false;
            // How long a killed step's end may take to be confirmed by the
            // sandbox before airlock reports the step ended anyway and the
            // session as not answering: the caller's timeout is kept by
            // this clock, outside the sandbox.
            let confirm_within = live.control.kill_confirmed_within();
            loop {
                tokio::select! {
                    result = &mut end => {
                        // The sandbox answers: whatever was said of it before.
                        live.answering();
                        drop(held_stdin.take());
                        break result;
                    }
                    () = &mut sleep, if deadline.is_some() && !timed_out => {
                        timed_out = true;
                        killed = true;
                        let _ = live.control.kill(step);
                        unconfirmed.as_mut().reset(tokio::time::Instant::now() + confirm_within);
                    }
                    () = &mut unconfirmed, if killed => {
                        // Nothing inside may hold the caller: it has its answer.
                        live.not_answering(step);
                        reason = Some(format!(
                            "the sandbox did not confirm the end of step {} within {}s of its kill: the session is not answering; stop it with `airlock session stop`",
                            step.0,
                            confirm_within.as_secs()
                        ));
                        break Ok(StepEnd::Exited(ExitKind::Signaled(nix::sys::signal::Signal::SIGKILL as i32)));
                    }
                    asked = &mut kill_asked, if !kill_seen => {
                        kill_seen = true;
                        if asked.is_ok() && !killed {
                            reason = Some("killed: its client asked (kill)".to_owned());
                            killed = true;
                            let _ = live.control.kill(step);
                            unconfirmed.as_mut().reset(tokio::time::Instant::now() + confirm_within);
                        }
                    }
                    said = &mut client, if !client_done => {
                        client_done = true;
                        reason = Some(match said {
                            ClientSaid::Gone => "killed: the client disconnected",
                            ClientSaid::Kill(stdin) => {
                                // Its stdin stays open until it is dead: closed
                                // now, a command reading it could exit 0 first.
                                held_stdin = stdin;
                                "killed: its client asked (kill)"
                            }
                        }.to_owned());
                        killed = true;
                        let _ = live.control.kill(step);
                        unconfirmed.as_mut().reset(tokio::time::Instant::now() + confirm_within);
                    }
                }
            }
        };
        live.kills.disarm(step);
        let _ = exited.send(true);
        for pump in drained {
            let _ = pump.await;
        }
        let mut report = match outcome {
            Ok(StepEnd::Exited(status)) => {
                let reason = reason.or_else(|| {
                    let timeout = request.timeout().filter(|_| timed_out);
                    live.kill_reasons.reason(oom_before, status, timeout)
                });
                exit_report(begun, status, timed_out, reason)
            }
            // Killed on its timeout, however the sandbox put its end: the
            // caller asked for a bound, and it held.
            Ok(StepEnd::Failed(why)) if timed_out => exit_report(
                begun,
                ExitKind::Signaled(nix::sys::signal::Signal::SIGKILL as i32),
                true,
                Some(why),
            ),
            Ok(StepEnd::Failed(why)) => failed_report(begun, &why),
            // The command did not end its own way: airlock ended it.
            Ok(StepEnd::SessionEnded(why)) => failed_report(begun, &why),
            Err(_) => failed_report(begun, "the session lost track of the step"),
        };
        report.denials = live.denials.of_step(step, begun);
        report.held = live.denials.held_of_step(step, begun);
        live.end_step(step, &report);
        let frame = match report.exit_code {
            125 if report.status.is_none() && report.signal.is_none() => (
                FrameType::Error,
                serde_json::json!({ "error": report.reason.clone().unwrap_or_default() }),
            ),
            _ => (
                FrameType::Exit,
                serde_json::to_value(&report).unwrap_or_default(),
            ),
        };
        let _ = frames
            .send((frame.0, frame.1.to_string().into_bytes()))
            .await;
        drop(frames);
        let _ = writer.await;
    }
}

fn exit_report(
    begun: Instant,
    status: ExitKind,
    timed_out: bool,
    reason: Option<String>,
) -> ExitReport {
    let (code, status, signal) = match status {
        ExitKind::Exited(code) => (code, Some(code), None),
        ExitKind::Signaled(sig) => (128 + sig, None, Some(sig)),
    };
    ExitReport {
        exit_code: if timed_out {
            i32::from(crate::exit::TIMED_OUT)
        } else {
            code
        },
        status,
        signal,
        timed_out,
        duration_ms: begun.elapsed().as_secs_f64() * 1000.0,
        reason,
        denials: Vec::new(),
        held: Vec::new(),
    }
}

fn failed_report(begun: Instant, why: &str) -> ExitReport {
    ExitReport {
        exit_code: i32::from(crate::exit::RUN_FAILED),
        status: None,
        signal: None,
        timed_out: false,
        duration_ms: begun.elapsed().as_secs_f64() * 1000.0,
        reason: Some(why.to_owned()),
        denials: Vec::new(),
        held: Vec::new(),
    }
}

/// The step's pty master, as the sandbox hands it over.
async fn terminal_of(rx: oneshot::Receiver<OwnedFd>) -> anyhow::Result<Arc<Terminal>> {
    let master = tokio::select! {
        master = rx => master.ok(),
        // The sandbox could not make one (the step then fails on its own).
        _ = tokio::time::sleep(std::time::Duration::from_secs(20)) => None,
    };
    let master = master.context("the sandbox did not hand over the step's terminal")?;
    Ok(Arc::new(Terminal::new(master)?))
}

fn pipe() -> anyhow::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("creating a pipe for the step")
}

async fn write_frames(mut writer: OwnedWriteHalf, mut rx: mpsc::Receiver<(FrameType, Vec<u8>)>) {
    while let Some((kind, data)) = rx.recv().await {
        if protocol::write_frame(&mut writer, kind, &data)
            .await
            .is_err()
        {
            // The client is gone: keep draining so the pumps never block.
            while rx.recv().await.is_some() {}
            return;
        }
    }
}

/// What the client sends while the step runs.
struct Input {
    live: Arc<Live>,
    step: StepId,
    stdin: Option<Writer>,
    terminal: Option<Arc<Terminal>>,
}

/// Why the client's side of a step ended before the step did.
enum ClientSaid {
    /// It hung up or broke the protocol.
    Gone,
    /// It sent a kill frame: end the step's whole tree and report it. The
    /// command's stdin, kept open until then.
    Kill(Option<Writer>),
}

impl Input {
    /// Until the client asks for the step's end: by hanging up (or breaking
    /// the protocol), or by a kill frame, after which it still reads the
    /// exit report.
    async fn run(mut self, reader: &mut ConnReader) -> ClientSaid {
        loop {
            let Ok(Some(frame)) = protocol::read_frame(reader).await else {
                return ClientSaid::Gone;
            };
            match frame {
                (FrameType::Stdin, data) => {
                    let target = match &self.terminal {
                        Some(terminal) => Some(&terminal.input),
                        None => self.stdin.as_ref(),
                    };
                    if let Some(target) = target
                        && feed(target, &data, reader).await == Fed::ClientGone
                    {
                        return ClientSaid::Gone;
                    }
                }
                (FrameType::StdinEof, _) => match &self.terminal {
                    Some(terminal) => {
                        let _ = terminal.input.write_all(&[EOF_CHAR]).await;
                    }
                    None => self.stdin = None,
                },
                (FrameType::Resize, data) if data.len() == 4 => {
                    if let Some(terminal) = &self.terminal {
                        let size = WindowSize {
                            cols: u16::from_be_bytes([data[0], data[1]]),
                            rows: u16::from_be_bytes([data[2], data[3]]),
                        };
                        let _ = airlock_shim::pty::set_window_size(&terminal.master, size);
                    }
                }
                (FrameType::Signal, data) if data.len() == 1 => {
                    let _ = self.live.control.signal(self.step, i32::from(data[0]));
                }
                (FrameType::Kill, data) if data.is_empty() => return ClientSaid::Kill(self.stdin),
                _ => return ClientSaid::Gone,
            }
        }
    }
}

/// How feeding the command's input went.
#[derive(Debug, PartialEq, Eq)]
enum Fed {
    /// Written, or refused by a command that closed its input (its business).
    Done,
    ClientGone,
}

/// Write to the command's input while watching the connection: no frame is
/// read while a write waits for a command that does not read, so a client
/// that hung up (or was cancelled) would go unnoticed, its step running on.
async fn feed(target: &Writer, data: &[u8], reader: &ConnReader) -> Fed {
    let write = target.write_all(data);
    tokio::pin!(write);
    loop {
        tokio::select! {
            _ = &mut write => return Fed::Done,
            gone = hung_up(reader) => if gone {
                return Fed::ClientGone;
            },
        }
    }
}

/// True once the client has closed its end of the connection (unix(7):
/// the peer's close is seen as read-hangup); false, after a pause, when it
/// merely has more frames waiting, which must wait for the write.
async fn hung_up(reader: &ConnReader) -> bool {
    match reader.get_ref().ready(tokio::io::Interest::READABLE).await {
        Ok(ready) if ready.is_read_closed() => true,
        Ok(_) => {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            false
        }
        Err(_) => true,
    }
}

/// A terminal step's pty master: read for its output, written for its
/// input, and sized.
struct Terminal {
    master: OwnedFd,
    output: Reader,
    input: Writer,
}

impl Terminal {
    fn new(master: OwnedFd) -> anyhow::Result<Self> {
        let output = Reader::new(master.try_clone()?)?;
        let input = Writer::new(master.try_clone()?)?;
        Ok(Self {
            master,
            output,
            input,
        })
    }
}

enum Output {
    Pipe(Reader),
    Terminal(Arc<Terminal>),
}

impl Output {
    fn end(&self) -> &Reader {
        match self {
            Self::Pipe(end) => end,
            Self::Terminal(terminal) => &terminal.output,
        }
    }
}

/// What an output pump needs besides its descriptor.
struct Pump {
    live: Arc<Live>,
    step: StepId,
    frames: mpsc::Sender<(FrameType, Vec<u8>)>,
    exited: watch::Receiver<bool>,
}

/// Copy one output to the client and the record. When the command ends,
/// what it wrote is drained to the client (the returned handle resolves
/// then); what background processes write later is only recorded.
fn spawn_pump(output: Output, kind: FrameType, pump: Pump) -> tokio::task::JoinHandle<()> {
    let (drained_tx, drained_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let Pump {
            live,
            step,
            frames,
            mut exited,
        } = pump;
        let stream = match kind {
            FrameType::Stderr => OutputStream::Stderr,
            _ => OutputStream::Stdout,
        };
        let mut frames = Some(frames);
        let mut drained_tx = Some(drained_tx);
        let mut buf = vec![0u8; 16 * 1024];
        let end = output.end();
        // Bytes recorded since the step ended, from what it left running.
        let mut after_end = 0usize;
        loop {
            tokio::select! {
                read = end.read(&mut buf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) if frames.is_some() => {
                        emit(&live, step, stream, kind, frames.as_ref(), &buf[..n]).await;
                    }
                    Ok(n) => {
                        // Still read, so the writer never blocks or dies of
                        // SIGPIPE; recorded up to a bound, then said so once.
                        if after_end < BACKGROUND_OUTPUT_RECORDED {
                            emit(&live, step, stream, kind, None, &buf[..n]).await;
                            after_end += n;
                            if after_end >= BACKGROUND_OUTPUT_RECORDED {
                                note_output_cut(&live, step, stream);
                            }
                        }
                    }
                },
                _ = exited.changed(), if frames.is_some() => {
                    // Everything the command wrote before it ended is in the
                    // pipe now: hand it over, then stop talking to the
                    // client. No more than the pipe can hold: a background
                    // process that keeps writing must not keep the step
                    // from ending (its output is still recorded below).
                    let mut left = end.capacity();
                    while left > 0 {
                        let chunk = buf.len().min(left);
                        let Ok(Some(n)) = end.read_now(&mut buf[..chunk]) else {
                            break;
                        };
                        if n == 0 {
                            break;
                        }
                        left -= n;
                        emit(&live, step, stream, kind, frames.as_ref(), &buf[..n]).await;
                    }
                    frames = None;
                    if let Some(tx) = drained_tx.take() {
                        let _ = tx.send(());
                    }
                }
            }
        }
        if let Some(tx) = drained_tx.take() {
            let _ = tx.send(());
        }
    });
    tokio::spawn(async move {
        let _ = drained_rx.await;
    })
}

async fn emit(
    live: &Live,
    step: StepId,
    stream: OutputStream,
    kind: FrameType,
    frames: Option<&mpsc::Sender<(FrameType, Vec<u8>)>>,
    data: &[u8],
) {
    if let Some(frames) = frames {
        let _ = frames.send((kind, data.to_vec())).await;
    }
    if let Some(recorder) = &live.recorder {
        // record() waits when the store's queue is full: never with the
        // runtime's worker, which serves every other step and request.
        tokio::task::block_in_place(|| {
            let _ = recorder.record(AuditEvent::Output(airlock_auditor::Output {
                stream,
                data: data.to_vec(),
                step: Some(StepNo(step.0)),
            }));
        });
    }
}

/// Said once in the record when a step's background output stops being kept.
fn note_output_cut(live: &Live, step: StepId, stream: OutputStream) {
    if let Some(recorder) = &live.recorder {
        let stream = match stream {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        };
        let _ = recorder.record(AuditEvent::Note(Note {
            text: format!(
                "step {}: what it left running wrote more than {} MiB to {stream} after the step ended; the rest is not recorded",
                step.0,
                BACKGROUND_OUTPUT_RECORDED >> 20
            ), policy: None }));
    }
}
