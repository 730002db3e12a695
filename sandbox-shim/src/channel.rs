//! The control channel between airlock and its sandbox helpers: a
//! SOCK_SEQPACKET socketpair (message boundaries, SCM_RIGHTS, and EOF when
//! the other side dies). See unix(7).

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};

use crate::sys;

/// Message tags.
pub const GO: u8 = b'G';
pub const INIT_PID: u8 = b'P';
pub const NETWORK: u8 = b'N';
pub const READY: u8 = b'R';
pub const ERROR: u8 = b'E';
pub const EXIT: u8 = b'X';
pub const INIT_DIED: u8 = b'C';
/// The master of the command's pseudo-terminal (one descriptor).
pub const TERMINAL: u8 = b'T';
// On the observer channel:
/// From the command, with a pidfd of itself: trace me before I exec.
pub const TRACE_ME: u8 = b'L';
/// From the observer: attached; go on.
pub const TRACED: u8 = b'D';

const MAX_MSG: usize = 4096;

pub fn pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(std::io::Error::from)
}

pub fn send(fd: &OwnedFd, tag: u8, payload: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(payload.len() + 1);
    buf.push(tag);
    buf.extend_from_slice(&payload[..payload.len().min(MAX_MSG - 1)]);
    let iov = [IoSlice::new(&buf)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(fd.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
        .map(|_| ())
        .map_err(std::io::Error::from)
}

pub fn send_i32(fd: &OwnedFd, tag: u8, value: i32) -> std::io::Result<()> {
    send(fd, tag, &value.to_le_bytes(), &[])
}

/// One message; None on EOF (every peer closed its end).
pub struct Message {
    pub tag: u8,
    pub payload: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

impl Message {
    pub fn as_i32(&self) -> Option<i32> {
        let bytes: [u8; 4] = self.payload.get(..4)?.try_into().ok()?;
        Some(i32::from_le_bytes(bytes))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }
}

pub fn recv(fd: &OwnedFd) -> std::io::Result<Option<Message>> {
    let mut buf = vec![0u8; MAX_MSG];
    let mut cmsg_space = nix::cmsg_space!([RawFd; 4]);
    loop {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let res = recvmsg::<()>(
            fd.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg_space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        );
        let msg = match res {
            Ok(m) => m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        let mut fds = Vec::new();
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    fds.extend(raw.into_iter().map(sys::own_received_fd));
                }
            }
        }
        let n = msg.bytes;
        if n == 0 {
            return Ok(None);
        }
        return Ok(Some(Message {
            tag: buf[0],
            payload: buf[1..n].to_vec(),
            fds,
        }));
    }
}
