//! Recording what happens inside a sandbox: the programs it runs, the files
//! it writes (the shim's observer sends them as record events), and its
//! terminal output.

use airlock_auditor::Output;
use std::io::{IsTerminal, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;

use airlock_auditor::{AuditEvent, OutputStream, SessionRecorder};
use anyhow::Context;

/// Record every event the observer sends until the sandbox ends (the
/// channel closes), except what `already` says is on record (under gVisor,
/// a reconciled file the trace points recorded with the same content).
pub(crate) fn record_observations(
    observations: Receiver<AuditEvent>,
    recorder: SessionRecorder,
    already: Option<crate::launch::Recorded>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name("airlock-observe".into())
        .spawn(move || {
            for event in observations {
                if already.as_ref().is_some_and(|a| a.explains(&event)) {
                    continue;
                }
                // A failing store stops the session elsewhere (fail closed);
                // here there is nothing better to do than keep draining.
                let _ = recorder.record(event);
            }
        })
        .unwrap_or_else(|_| std::thread::spawn(|| ()))
}

/// The command's stdout and stderr go through pipes that airlock copies to
/// its own and into the terminal recording, with timestamps. When the
/// command runs without a pty (`--no-tty`, or airlock's stdin is not a
/// terminal), this is how it gets its stdio: a terminal stdin is relayed
/// through a pipe too, so the sandbox never holds the caller's terminal.
pub(crate) struct Terminal {
    /// stdin, stdout and stderr for the command.
    pub stdio: [OwnedFd; 3],
    readers: TerminalReaders,
}

/// Airlock's ends of the output pipes, until recording starts.
pub(crate) struct TerminalReaders([(OwnedFd, OutputStream); 2]);

impl Terminal {
    pub(crate) fn new() -> anyhow::Result<Self> {
        use nix::fcntl::OFlag;
        let (out_read, out_write) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).context("creating the stdout pipe")?;
        let (err_read, err_write) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).context("creating the stderr pipe")?;
        let stdin = std::io::stdin();
        let stdin = match stdin.is_terminal() {
            true => relay_terminal_input(stdin.as_fd_owned().context("duplicating stdin")?)?,
            false => stdin.lock().as_fd_owned().context("duplicating stdin")?,
        };
        Ok(Self {
            stdio: [stdin, out_write, err_write],
            readers: TerminalReaders([
                (out_read, OutputStream::Stdout),
                (err_read, OutputStream::Stderr),
            ]),
        })
    }

    /// The command's stdio now; the readers once the recorder exists (the
    /// pipes hold whatever the command writes until then).
    pub(crate) fn split(self) -> ([OwnedFd; 3], TerminalReaders) {
        (self.stdio, self.readers)
    }
}

impl TerminalReaders {
    /// Start copying (and recording, with a recorder); the returned handles
    /// finish when the command's side closes.
    pub(crate) fn record(self, recorder: Option<&SessionRecorder>) -> Vec<JoinHandle<()>> {
        self.0
            .into_iter()
            .map(|(fd, stream)| {
                let recorder = recorder.cloned();
                std::thread::spawn(move || copy_and_record(fd, stream, recorder.as_ref()))
            })
            .collect()
    }
}

fn copy_and_record(fd: OwnedFd, stream: OutputStream, recorder: Option<&SessionRecorder>) {
    let mut source = std::fs::File::from(fd);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let data = &buf[..n];
        // The person at the terminal sees the output first; the record follows.
        let _ = match stream {
            OutputStream::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(data).and_then(|()| out.flush())
            }
            OutputStream::Stderr => std::io::stderr().lock().write_all(data),
        };
        if let Some(recorder) = recorder {
            let _ = recorder.record(AuditEvent::Output(Output {
                stream,
                data: data.to_vec(),
                step: None,
            }));
        }
    }
}

/// The read end of a pipe fed from the caller's terminal by a thread: lines
/// as the terminal's line discipline delivers them, EOF at Ctrl-D. The
/// thread stops as soon as the command's side is closed (the pipe's write
/// end then polls POLLERR, see poll(2)), so it does not swallow input typed
/// after the command ended; at most a line already read is lost. While
/// airlock is a background job it leaves the terminal alone (a read would
/// stop it with SIGTTIN although the command may never want input), as a
/// program that does not read does.
fn relay_terminal_input(tty: OwnedFd) -> anyhow::Result<OwnedFd> {
    use nix::fcntl::OFlag;
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    /// How often a background airlock checks whether it is foreground again.
    const BACKGROUND_POLL_MS: u16 = 200;
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).context("creating the stdin pipe")?;
    std::thread::Builder::new()
        .name("airlock-stdin".into())
        .spawn(move || {
            let mut buf = vec![0u8; 4096];
            let mut sink = std::fs::File::from(write);
            loop {
                let foreground = nix::unistd::tcgetpgrp(&tty).ok() == Some(nix::unistd::getpgrp());
                let mut fds = vec![PollFd::new(sink.as_fd(), PollFlags::empty())];
                let timeout = if foreground {
                    fds.push(PollFd::new(tty.as_fd(), PollFlags::POLLIN));
                    PollTimeout::NONE
                } else {
                    PollTimeout::from(BACKGROUND_POLL_MS)
                };
                match poll(&mut fds, timeout) {
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => return,
                }
                if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                    return;
                }
                if fds
                    .get(1)
                    .and_then(PollFd::revents)
                    .is_some_and(|r| !r.is_empty())
                {
                    match nix::unistd::read(&tty, &mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if sink.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        })
        .context("starting the stdin relay")?;
    Ok(read)
}

trait DupFd {
    fn as_fd_owned(&self) -> std::io::Result<OwnedFd>;
}

impl<T: AsFd> DupFd for T {
    fn as_fd_owned(&self) -> std::io::Result<OwnedFd> {
        self.as_fd().try_clone_to_owned()
    }
}
