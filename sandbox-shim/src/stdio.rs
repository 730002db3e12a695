//! Handing a process its stdin, stdout and stderr: the supervisor does it
//! for `airlock run`'s helpers, a holder for its step's command.

use std::os::fd::{AsRawFd, OwnedFd};

use crate::sys;

/// Make the given descriptors this process's (and so its children's) 0, 1,
/// 2. Copies above 2 first, so a given descriptor that is itself 0..2
/// survives.
pub(crate) fn install(fds: &[OwnedFd; 3]) -> std::io::Result<()> {
    let mut high = [0; 3];
    for (h, fd) in high.iter_mut().zip(fds) {
        *h = sys::dup_above(fd.as_raw_fd(), 3)?;
    }
    for (target, h) in high.iter().enumerate() {
        sys::dup_onto(*h, target as i32)?;
    }
    Ok(())
}
