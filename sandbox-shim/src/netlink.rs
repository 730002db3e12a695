//! Netlink requests built by hand with safe socket calls (netlink(7)): a
//! message builder for the two families the shim speaks (rtnetlink's route,
//! nfnetlink's nf_tables batch) and a socket that sends a request and reads
//! the kernel's acknowledgements.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType, recv, send, setsockopt, socket,
    sockopt,
};
use nix::sys::time::TimeVal;

pub(crate) const NLM_F_REQUEST: u16 = libc::NLM_F_REQUEST as u16;
pub(crate) const NLM_F_ACK: u16 = libc::NLM_F_ACK as u16;
pub(crate) const NLM_F_EXCL: u16 = libc::NLM_F_EXCL as u16;
pub(crate) const NLM_F_CREATE: u16 = libc::NLM_F_CREATE as u16;
pub(crate) const NLM_F_APPEND: u16 = libc::NLM_F_APPEND as u16;
const NLMSG_ERROR: u16 = libc::NLMSG_ERROR as u16;
const NLA_F_NESTED: u16 = 1 << 15;
const HEADER_LEN: usize = 16;

/// One netlink message: `nlmsghdr`, then the family's header and attributes,
/// each padded to 4 bytes.
pub(crate) struct Message {
    buf: Vec<u8>,
}

impl Message {
    pub(crate) fn new(kind: u16, flags: u16, seq: u32) -> Self {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set by `finish`
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
        Self { buf }
    }

    /// The family's fixed header (`rtmsg`, `nfgenmsg`, ...).
    pub(crate) fn header(&mut self, bytes: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(bytes);
        self.pad();
        self
    }

    pub(crate) fn attr(&mut self, kind: u16, payload: &[u8]) -> &mut Self {
        let len = 4 + payload.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.pad();
        self
    }

    /// A NUL-terminated string attribute.
    pub(crate) fn attr_str(&mut self, kind: u16, value: &str) -> &mut Self {
        let mut bytes = Vec::with_capacity(value.len() + 1);
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
        self.attr(kind, &bytes)
    }

    /// A 32-bit attribute in network byte order, as nf_tables takes them.
    pub(crate) fn attr_be32(&mut self, kind: u16, value: u32) -> &mut Self {
        self.attr(kind, &value.to_be_bytes())
    }

    /// An attribute holding the attributes `fill` adds.
    pub(crate) fn nested(&mut self, kind: u16, fill: impl FnOnce(&mut Self)) -> &mut Self {
        let start = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        fill(self);
        let len = (self.buf.len() - start) as u16;
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    pub(crate) fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }
}

/// Why a netlink request failed.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("netlink {step}: {source}")]
    Socket {
        step: &'static str,
        #[source]
        source: Errno,
    },
    /// The kernel refused the message with this sequence number.
    #[error("message {seq} refused: {source}")]
    Refused {
        seq: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("unexpected netlink answer")]
    UnexpectedAnswer,
}

/// A netlink socket of one protocol.
pub(crate) struct Socket(OwnedFd);

impl Socket {
    /// Long enough for any kernel; a wedged one must not wedge the start.
    const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

    pub(crate) fn open(protocol: SockProtocol) -> Result<Self, NetlinkError> {
        let step = |step| move |source| NetlinkError::Socket { step, source };
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            protocol,
        )
        .map_err(step("socket"))?;
        let timeout = TimeVal::new(Self::ANSWER_TIMEOUT.as_secs() as _, 0);
        setsockopt(&fd, sockopt::ReceiveTimeout, &timeout).map_err(step("timeout"))?;
        Ok(Self(fd))
    }

    /// Sends `request` (one message or a batch, one datagram) and waits for
    /// `acks` acknowledgements; the first refusal is the answer.
    pub(crate) fn request(&self, request: &[u8], acks: usize) -> Result<(), NetlinkError> {
        let step = |step| move |source| NetlinkError::Socket { step, source };
        send(self.0.as_raw_fd(), request, MsgFlags::empty()).map_err(step("send"))?;
        let mut buf = vec![0u8; 16 * 1024];
        let mut acked = 0;
        while acked < acks {
            let n = recv(self.0.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(step("recv"))?;
            let mut answers = buf.get(..n).ok_or(NetlinkError::UnexpectedAnswer)?;
            while !answers.is_empty() {
                let (seq, errno, len) = ack(answers)?;
                if errno != 0 {
                    return Err(NetlinkError::Refused {
                        seq,
                        source: std::io::Error::from_raw_os_error(-errno),
                    });
                }
                acked += 1;
                answers = answers.get(len..).unwrap_or_default();
            }
        }
        Ok(())
    }
}

/// Reads one `NLMSG_ERROR` answer (an acknowledgement when its error is 0):
/// its sequence number, error and aligned length.
fn ack(answer: &[u8]) -> Result<(u32, i32, usize), NetlinkError> {
    let u32_at = |at: usize| {
        answer
            .get(at..at + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    let len = u32_at(0).ok_or(NetlinkError::UnexpectedAnswer)? as usize;
    let kind = answer
        .get(4..6)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .ok_or(NetlinkError::UnexpectedAnswer)?;
    let seq = u32_at(8).ok_or(NetlinkError::UnexpectedAnswer)?;
    // nlmsgerr: int error, then the request's header.
    let errno = u32_at(HEADER_LEN).ok_or(NetlinkError::UnexpectedAnswer)? as i32;
    if kind != NLMSG_ERROR || len < HEADER_LEN + 4 || len > answer.len() {
        return Err(NetlinkError::UnexpectedAnswer);
    }
    Ok((seq, errno, len.next_multiple_of(4)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_cover_the_message_and_every_nested_attribute() {
        let mut m = Message::new(24, NLM_F_REQUEST, 7);
        m.header(&[1, 2, 3]).nested(4, |m| {
            m.attr_str(1, "lo").attr_be32(2, 9);
        });
        let bytes = m.finish();
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(
            u32::from_ne_bytes(bytes[..4].try_into().unwrap()) as usize,
            bytes.len()
        );
        // header (16) + family header padded (4); the nest: 4 + "lo\0" padded
        // (8) + a u32 (8).
        let nest = &bytes[20..];
        assert_eq!(u16::from_ne_bytes([nest[0], nest[1]]), 20);
        assert_eq!(u16::from_ne_bytes([nest[2], nest[3]]), 4 | NLA_F_NESTED);
        assert_eq!(&nest[16..20], &9u32.to_be_bytes());
    }

    #[test]
    fn an_answer_shorter_than_it_claims_is_refused_not_read_past() {
        let mut answer = Message::new(NLMSG_ERROR, 0, 3);
        answer.header(&0i32.to_ne_bytes());
        let mut bytes = answer.finish();
        assert_eq!(ack(&bytes).unwrap(), (3, 0, 20));
        bytes[..4].copy_from_slice(&64u32.to_ne_bytes());
        assert!(matches!(ack(&bytes), Err(NetlinkError::UnexpectedAnswer)));
        assert!(matches!(
            ack(&bytes[..10]),
            Err(NetlinkError::UnexpectedAnswer)
        ));
    }
}
