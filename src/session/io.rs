//! A pipe end or pty master on the tokio runtime: non-blocking, read and
//! written as the kernel allows (pipe(7), pty(7)).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

#[derive(Debug)]
pub struct FdEnd(AsyncFd<OwnedFd>);

impl FdEnd {
    pub fn new(fd: OwnedFd) -> io::Result<FdEnd> {
        let flags = fcntl(&fd, FcntlArg::F_GETFL).map_err(io::Error::from)?;
        fcntl(
            &fd,
            FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
        )
        .map_err(io::Error::from)?;
        Ok(FdEnd(AsyncFd::with_interest(
            fd,
            Interest::READABLE | Interest::WRITABLE,
        )?))
    }

    /// Some bytes, or 0 at the end (a pty master's EIO once every slave is
    /// closed counts as the end, see pty(7)).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.0.readable().await?;
            match guard.try_io(|fd| read_now(fd.get_ref(), buf)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// What can be read without waiting: `Ok(None)` when nothing is there.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match read_now(self.0.get_ref(), buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.0.writable().await?;
            match guard.try_io(|fd| {
                nix::unistd::write(fd.get_ref(), data).map_err(io::Error::from)
            }) {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    pub fn raw(&self) -> &OwnedFd {
        self.0.get_ref()
    }
}

fn read_now(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    match nix::unistd::read(fd, buf) {
        Ok(n) => Ok(n),
        Err(nix::errno::Errno::EIO) => Ok(0),
        Err(e) => Err(io::Error::from(e)),
    }
}

impl AsRawFd for FdEnd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}
