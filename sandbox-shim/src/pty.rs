//! The command's pseudo-terminal: allocated inside the sandbox from its own
//! devpts instance, so the slave has a path there (`tty` prints
//! /dev/pts/N) and is the command's controlling terminal; the master goes
//! back to airlock, which relays it to the caller's terminal. The caller's
//! terminal itself never enters the sandbox. See pty(7), credentials(7).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::sys::termios::{SetArg, Termios, cfmakeraw, tcgetattr, tcsetattr};

use crate::sys;

pub use crate::sys::WindowSize;

/// The multiplexer of the devpts instance mounted at the sandbox's
/// /dev/pts (`newinstance,ptmxmode=0666`, see mounts.rs); /dev/ptmx is a
/// symlink to it, opened directly so no other instance can be meant.
const PTMX: &str = "/dev/pts/ptmx";

/// A new master and its slave, in the sandbox's mount namespace (init calls
/// this after the mounts are in place).
pub(crate) fn allocate() -> io::Result<(OwnedFd, OwnedFd)> {
    let master = nix::fcntl::open(
        PTMX,
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)?;
    let slave = sys::open_pty_peer(master.as_fd())?;
    Ok((master, slave))
}

/// In the command process: a new session whose controlling terminal is
/// `slave`, which becomes stdin, stdout and stderr. The command's process
/// group is then the terminal's foreground group, so Ctrl-C and Ctrl-Z reach
/// it, and a shell can run job control.
pub(crate) fn attach(slave: &OwnedFd) -> io::Result<()> {
    nix::unistd::setsid().map_err(io::Error::from)?;
    sys::set_controlling_terminal(slave.as_fd())?;
    for target in 0..=2 {
        sys::dup_onto(slave.as_raw_fd(), target)?;
    }
    Ok(())
}

/// The window size of the terminal behind `fd`, if it is one.
pub fn window_size(fd: impl AsFd) -> Option<WindowSize> {
    sys::window_size(fd.as_fd()).ok()
}

/// Give a terminal (a pty master, for the relay) a window size.
pub fn set_window_size(fd: impl AsFd, size: WindowSize) -> io::Result<()> {
    sys::set_window_size(fd.as_fd(), size)
}

/// The caller's terminal in raw mode (cfmakeraw(3)) for as long as this value
/// lives: keys reach the relay as bytes, and the pty's own line discipline
/// turns Ctrl-C and Ctrl-Z into signals for the sandbox's foreground group.
/// The saved settings come back on drop, which covers every way out of
/// airlock that runs destructors (returns, errors, panics); a SIGKILL of
/// airlock itself cannot be caught, and then `stty sane` repairs the terminal.
pub struct RawMode {
    tty: OwnedFd,
    saved: Termios,
}

impl std::fmt::Debug for RawMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawMode")
            .field("tty", &self.tty)
            .finish_non_exhaustive()
    }
}

impl RawMode {
    pub fn enter(tty: BorrowedFd<'_>) -> io::Result<Self> {
        let tty = tty.try_clone_to_owned()?;
        let saved = tcgetattr(&tty).map_err(io::Error::from)?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        // TCSADRAIN: what airlock printed before is not lost to the switch.
        tcsetattr(&tty, SetArg::TCSADRAIN, &raw).map_err(io::Error::from)?;
        Ok(Self { tty, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = tcsetattr(&self.tty, SetArg::TCSADRAIN, &self.saved);
    }
}
