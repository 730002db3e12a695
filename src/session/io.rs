//! Pipe ends and pty masters on the tokio runtime, read and written as the
//! kernel allows (pipe(7), pty(7)). tokio's pipe types take any descriptor
//! "unchecked"; a pty master is read through one and written through a
//! duplicate of it.

use std::io;
use std::os::fd::OwnedFd;

use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

/// What the sandbox writes: a pipe's read end, or a pty master.
#[derive(Debug)]
pub struct Reader(pipe::Receiver);

impl Reader {
    pub fn new(fd: OwnedFd) -> io::Result<Reader> {
        pipe::Receiver::from_owned_fd_unchecked(fd).map(Reader)
    }

    /// Some bytes, or 0 at the end (a pty master's EIO once every slave is
    /// closed counts as the end, see pty(7)).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            self.0.readable().await?;
            match self.try_read(buf)? {
                Some(n) => return Ok(n),
                None => continue,
            }
        }
    }

    /// What can be read without waiting: `Ok(None)` when nothing is there.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.0.try_read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) if e.raw_os_error() == Some(nix::libc::EIO) => Ok(Some(0)),
            Err(e) => Err(e),
        }
    }
}

/// Where the sandbox reads from: a pipe's write end, or a pty master.
#[derive(Debug)]
pub struct Writer(tokio::sync::Mutex<pipe::Sender>);

impl Writer {
    pub fn new(fd: OwnedFd) -> io::Result<Writer> {
        pipe::Sender::from_owned_fd_unchecked(fd).map(|s| Writer(tokio::sync::Mutex::new(s)))
    }

    pub async fn write_all(&self, data: &[u8]) -> io::Result<()> {
        self.0.lock().await.write_all(data).await
    }
}
