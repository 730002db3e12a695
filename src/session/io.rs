//! Pipe ends and pty masters on the tokio runtime, read and written as the
//! kernel allows (pipe(7), pty(7)). tokio's pipe types take any descriptor
//! "unchecked"; a pty master is read through one and written through a
//! duplicate of it. A pty master's duplicate shares its file description,
//! so O_NONBLOCK set on one is set on both (fcntl(2), F_SETFL).

use std::io;
use std::os::fd::OwnedFd;

use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

/// What the sandbox writes: a pipe's read end, or a pty master.
#[derive(Debug)]
pub(super) struct Reader(pipe::Receiver);

impl Reader {
    pub(super) fn new(fd: OwnedFd) -> io::Result<Self> {
        pipe::Receiver::from_owned_fd_unchecked(nonblocking(fd)?).map(Reader)
    }

    /// Some bytes, or 0 at the end (a pty master's EIO once every slave is
    /// closed counts as the end, see pty(7)).
    pub(super) async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            self.0.readable().await?;
            // tokio's own try_read: on EAGAIN it clears the readiness it
            // cached, so the next wait really waits.
            match eio_is_end(self.0.try_read(buf)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }

    /// The most a writer can have left in it: a pipe's capacity
    /// (F_GETPIPE_SZ, fcntl(2)); a pty master has none to ask, and gets the
    /// most an unprivileged process can give a pipe (1 MiB, pipe(7)).
    pub(super) fn capacity(&self) -> usize {
        use nix::fcntl::{FcntlArg, fcntl};
        fcntl(&self.0, FcntlArg::F_GETPIPE_SZ)
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(1 << 20)
    }

    /// What is in the pipe right now, asking the kernel itself: `Ok(None)`
    /// when nothing is. Not tokio's try_read, which answers from readiness it
    /// has cached and can say "nothing" while the kernel holds bytes that
    /// arrived since (they would be missed by a drain).
    pub(super) fn read_now(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match eio_is_end(nix::unistd::read(&self.0, buf).map_err(io::Error::from)) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A pty master reads EIO once every slave is closed: that is its end.
fn eio_is_end(read: io::Result<usize>) -> io::Result<usize> {
    match read {
        Err(e) if e.raw_os_error() == Some(nix::libc::EIO) => Ok(0),
        other => other,
    }
}

/// Where the sandbox reads from: a pipe's write end, or a pty master.
#[derive(Debug)]
pub(super) struct Writer(tokio::sync::Mutex<pipe::Sender>);

impl Writer {
    pub(super) fn new(fd: OwnedFd) -> io::Result<Self> {
        pipe::Sender::from_owned_fd_unchecked(nonblocking(fd)?)
            .map(|s| Self(tokio::sync::Mutex::new(s)))
    }

    pub(super) async fn write_all(&self, data: &[u8]) -> io::Result<()> {
        self.0.lock().await.write_all(data).await
    }
}

/// The "unchecked" constructors leave the descriptor as it is; the runtime
/// (and `read_now`) need it to never block (O_NONBLOCK, fcntl(2)).
fn nonblocking(fd: OwnedFd) -> io::Result<OwnedFd> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = OFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GETFL)?);
    fcntl(&fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(fd)
}
