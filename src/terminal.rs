//! The command's own terminal. When airlock runs from a terminal (or with
//! `--tty`), the command runs on a pseudo-terminal that the sandbox allocates
//! from its own devpts instance; airlock holds the master and relays it to
//! the caller's terminal, which it puts in raw mode meanwhile. The relay is
//! the one place the command's output passes, so it is also where the
//! session's terminal record is made, with the window size and its changes.
//!
//! The caller's terminal never enters the sandbox, so nothing in there can
//! push keystrokes into it (TIOCSTI), change its settings or read from it
//! once airlock is done.

use airlock_auditor::{Output, Resize};
use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use airlock_auditor::{AuditEvent, OutputStream, SessionRecorder};
use airlock_shim::pty::{self, RawMode, WindowSize};
use anyhow::Context;
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// The size a pty gets when airlock has no terminal to copy it from (`--tty`
/// with redirected stdio): the traditional 80x24.
const FALLBACK_SIZE: WindowSize = WindowSize { cols: 80, rows: 24 };
/// How long [`PtyRelay::finish`] waits for the last output once the sandbox
/// is gone (the master reports the hangup at once; this only bounds a stuck
/// write to airlock's own stdout).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// The end-of-file character (VEOF, Ctrl-D) a pty turns into EOF for a
/// reader at the start of a line; sent when airlock's own stdin ends.
const EOF_CHAR: u8 = 0x04;

/// Whether the caller's terminal is in raw mode now (output post-processing
/// off, so a bare "\n" does not return the cursor to the first column).
static RAW: AtomicBool = AtomicBool::new(false);

/// Print one of airlock's own lines on stderr, also readable while the
/// caller's terminal is in raw mode.
pub(crate) fn eprint_line(line: &str) {
    let end = if RAW.load(Ordering::Relaxed) {
        "\r\n"
    } else {
        "\n"
    };
    // One write: stderr is unbuffered, and a formatted write would reach the
    // terminal in pieces, between which the command's output could land.
    let _ = std::io::stderr().write_all(format!("{line}{end}").as_bytes());
}

/// Whether the command gets a pty: `--no-tty` never, `--tty` always,
/// otherwise when airlock's stdin and stdout are both terminals and airlock
/// runs in the foreground. Requiring stdout too keeps `airlock run -- cmd >
/// file` from a terminal as it was: on a pty the command's stderr would land
/// in the file, with CRLF endings. Requiring the foreground keeps `airlock
/// run -- server &` running: a background job that changes its terminal's
/// settings is stopped (SIGTTOU, see termios(3) "Job control").
pub(crate) fn wanted(tty: bool, no_tty: bool) -> bool {
    let stdin = std::io::stdin();
    !no_tty
        && (tty
            || (stdin.is_terminal()
                && std::io::stdout().is_terminal()
                && nix::unistd::tcgetpgrp(&stdin).ok() == Some(nix::unistd::getpgrp())))
}

/// Whether any of airlock's stdin, stdout and stderr is a terminal.
pub(crate) fn caller_has_one() -> bool {
    std::io::stdin().is_terminal()
        || std::io::stdout().is_terminal()
        || std::io::stderr().is_terminal()
}

/// A copy of the caller's terminal descriptor, if any: stdin, else stdout.
fn caller_terminal() -> Option<OwnedFd> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return stdin.as_fd().try_clone_to_owned().ok();
    }
    let stdout = std::io::stdout();
    if stdout.is_terminal() {
        return stdout.as_fd().try_clone_to_owned().ok();
    }
    None
}

/// The window size the command starts with: the caller's, or 80x24.
pub(crate) fn initial_size() -> WindowSize {
    caller_terminal()
        .and_then(|fd| pty::window_size(&fd))
        .filter(|s| s.cols > 0 && s.rows > 0)
        .unwrap_or(FALLBACK_SIZE)
}

/// A running relay between the caller's terminal and the command's pty.
/// Dropping it (airlock's error paths) restores the caller's terminal; the
/// relay thread ends by itself when the sandbox is gone.
pub(crate) struct PtyRelay {
    master: Arc<OwnedFd>,
    recorder: Option<SessionRecorder>,
    relay: Option<JoinHandle<()>>,
    /// Declared last: restored after the relay has stopped writing.
    raw: Option<RawMode>,
}

impl PtyRelay {
    /// Give the pty its size, switch the caller's terminal to raw mode and
    /// start relaying. Call before the command is released, so the first
    /// thing it sees is the right size and the first byte it writes is
    /// recorded.
    pub(crate) fn start(
        master: OwnedFd,
        size: WindowSize,
        recorder: Option<SessionRecorder>,
    ) -> anyhow::Result<Self> {
        pty::set_window_size(&master, size).context("setting the terminal's window size")?;
        // Only the relay writes to it; a full input queue must not stop the
        // relay from draining the command's output (the command may be
        // blocked writing while it does not read).
        fcntl(&master, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
            .context("making the terminal non-blocking")?;
        let stdin = std::io::stdin();
        let raw = match stdin.is_terminal() {
            true => {
                Some(RawMode::enter(stdin.as_fd()).context("putting the terminal in raw mode")?)
            }
            false => None,
        };
        RAW.store(raw.is_some(), Ordering::Relaxed);
        // A copy, so the relay owns what it polls; None when stdin is closed.
        let input = stdin.as_fd().try_clone_to_owned().ok();
        let master = Arc::new(master);
        let relay = {
            let master = master.clone();
            let recorder = recorder.clone();
            std::thread::Builder::new()
                .name("airlock-tty".into())
                .spawn(move || relay(&master, input, recorder.as_ref()))
                .context("starting the terminal relay")?
        };
        Ok(Self {
            master,
            recorder,
            relay: Some(relay),
            raw,
        })
    }

    /// Copy the caller's window size to the command's on every SIGWINCH.
    /// Call inside the tokio runtime (the signal is registered here, so no
    /// resize after this call is missed); the returned task runs until the
    /// runtime stops.
    pub(crate) fn forward_resizes(&self) -> anyhow::Result<impl Future<Output = ()> + use<>> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut winch =
            signal(SignalKind::window_change()).context("listening for window size changes")?;
        let master = self.master.clone();
        let recorder = self.recorder.clone();
        let caller = caller_terminal();
        Ok(async move {
            let Some(caller) = caller else {
                return;
            };
            let mut last = pty::window_size(master.as_fd());
            while winch.recv().await.is_some() {
                let Some(size) = pty::window_size(&caller) else {
                    continue;
                };
                if Some(size) == last || pty::set_window_size(master.as_fd(), size).is_err() {
                    continue;
                }
                last = Some(size);
                if let Some(r) = &recorder {
                    let _ = r.record(AuditEvent::Resize(Resize {
                        cols: size.cols,
                        rows: size.rows,
                    }));
                }
            }
        })
    }

    /// After the sandbox ended: let the relay write the last output (bounded)
    /// and give the caller back their terminal as it was.
    pub(crate) fn finish(mut self) {
        if let Some(handle) = self.relay.take() {
            let deadline = Instant::now() + DRAIN_TIMEOUT;
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            if handle.is_finished() {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for PtyRelay {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            drop(raw);
            RAW.store(false, Ordering::Relaxed);
        }
    }
}

/// Copy the caller's stdin to the master and the master to airlock's stdout
/// (and the record) until the pty hangs up: every process in the sandbox has
/// closed it, which happens at the latest when the sandbox ends.
fn relay(master: &OwnedFd, input: Option<OwnedFd>, recorder: Option<&SessionRecorder>) {
    let mut stdin_open = input.is_some();
    // Input read from the caller but not yet accepted by the pty.
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let mut master_events = PollFlags::POLLIN;
        if !pending.is_empty() {
            master_events |= PollFlags::POLLOUT;
        }
        let read_stdin = stdin_open && pending.is_empty();
        let mut fds = vec![PollFd::new(master.as_fd(), master_events)];
        if let Some(input) = input.as_ref().filter(|_| read_stdin) {
            fds.push(PollFd::new(input.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(_) => return,
        }
        let master_ready = fds[0].revents().unwrap_or(PollFlags::empty());
        let stdin_ready = fds
            .get(1)
            .and_then(PollFd::revents)
            .unwrap_or(PollFlags::empty());
        drop(fds);
        // POLLHUP without data: read once more, which reports EIO and ends.
        if master_ready.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
            && !copy_output(master, &mut buf, recorder)
        {
            return;
        }
        if master_ready.contains(PollFlags::POLLOUT) {
            match nix::unistd::write(master, &pending) {
                Ok(n) => {
                    pending.drain(..n);
                }
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(_) => return,
            }
        }
        if let Some(input) = input
            .as_ref()
            .filter(|_| read_stdin && !stdin_ready.is_empty())
        {
            match nix::unistd::read(input, &mut buf) {
                Ok(0) | Err(_) => {
                    // airlock's input ended (a pipe with --tty): the command
                    // sees end-of-file as if Ctrl-D was typed.
                    stdin_open = false;
                    pending.push(EOF_CHAR);
                }
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
        }
    }
}

/// Everything the master has now, to airlock's stdout and the record; false
/// once the pty has hung up.
fn copy_output(master: &OwnedFd, buf: &mut [u8], recorder: Option<&SessionRecorder>) -> bool {
    loop {
        let n = match nix::unistd::read(master, buf) {
            Ok(0) => return false,
            Ok(n) => n,
            Err(Errno::EAGAIN) => return true,
            Err(Errno::EINTR) => continue,
            // EIO: the slave side is closed everywhere (pty(7)).
            Err(_) => return false,
        };
        let data = &buf[..n];
        // The person at the terminal sees the output first; the record follows.
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(data).and_then(|()| out.flush());
        drop(out);
        if let Some(r) = recorder {
            let _ = r.record(AuditEvent::Output(Output {
                stream: OutputStream::Stdout,
                data: data.to_vec(),
                step: None,
            }));
        }
    }
}
