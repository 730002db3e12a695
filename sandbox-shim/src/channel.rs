//! The control channel between airlock and its sandbox helpers: a
//! SOCK_SEQPACKET socketpair (message boundaries, SCM_RIGHTS, and EOF when
//! the other side dies). See unix(7).
//!
//! Every message is a [`Message`]; [`send`] and [`recv`] are the only places
//! that know its wire form (one tag byte, a payload, descriptors as
//! SCM_RIGHTS), so a sender and a receiver cannot disagree about it.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};
use nix::unistd::Pid;

use crate::step::StepId;
use crate::sys;

pub(crate) mod request;

/// Largest message on the channel, tag byte included: 4096 bytes. [`send`]
/// refuses a longer one ([`ChannelError::TooLong`]) and [`recv`] reports one
/// the kernel had to cut ([`DecodeError::Truncated`]): nothing is cut silently.
pub(crate) const MAX_MSG: usize = 4096;

/// Most descriptors one message carries: a step's request and its three
/// stdio descriptors.
const MAX_FDS: usize = 4;

// Wire tags, one per `Message` variant.
const GO: u8 = b'G';
const INIT_PID: u8 = b'P';
const NETWORK: u8 = b'N';
const READY: u8 = b'R';
const FAILED: u8 = b'E';
const EXIT: u8 = b'X';
const INIT_DIED: u8 = b'C';
const TERMINAL: u8 = b'T';
const TRACE_ME: u8 = b'L';
const TRACED: u8 = b'D';
const BYE: u8 = b'B';
const EXEC: u8 = b'S';
const KILL_STEP: u8 = b'K';
const SIGNAL_STEP: u8 = b'Q';
const STEP_TERMINAL: u8 = b'Y';
const STEP_EXIT: u8 = b'W';
const STEP_FAILED: u8 = b'F';

// The first payload byte of a `FAILED` message: which `Failure`.
const FAILED_USERNS: u8 = b'U';
const FAILED_SETUP: u8 = b'S';

/// Why the sandbox side gave up during setup, as airlock is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The user namespace could not be created: the host does not allow it.
    UserNamespaces(String),
    /// Any other setup step failed.
    Setup(String),
}

impl Failure {
    /// The same failure with its text shortened, visibly, to what one message
    /// holds: an error worth reporting is better cut with a marker than lost
    /// to [`ChannelError::TooLong`].
    pub(crate) fn fitted(self) -> Self {
        let fit = |text| fit_text(text, MAX_MSG - 2);
        match self {
            Self::UserNamespaces(t) => Self::UserNamespaces(fit(t)),
            Self::Setup(t) => Self::Setup(fit(t)),
        }
    }
}

/// `text` shortened, visibly, to `room` bytes.
fn fit_text(text: String, room: usize) -> String {
    const MARK: &str = " [cut: longer than the control channel's 4096-byte message limit]";
    if text.len() <= room {
        return text;
    }
    let mut end = room - MARK.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &text[..end])
}

/// A [`Message::StepFailed`] whose text is cut, visibly, to fit one message
/// (tag byte and step number included): the step is answered either way.
pub(crate) fn step_failed(step: StepId, text: String) -> Message {
    Message::StepFailed(step, fit_text(text, MAX_MSG - 1 - 8))
}

/// One message between airlock, the supervisor, init, the command and the
/// observer. Wait statuses are raw (see waitpid(2)); pids are host pids.
#[derive(Debug)]
pub(crate) enum Message {
    /// airlock → init: let the command exec.
    Go,
    /// supervisor → airlock: init's host pid.
    InitPid(Pid),
    /// init → airlock: the proxy's sockets, bound in the sandbox's network namespace.
    Network {
        transparent: OwnedFd,
        dns_udp: OwnedFd,
        dns_tcp: OwnedFd,
    },
    /// init → airlock: the master of the command's pseudo-terminal.
    Terminal(OwnedFd),
    /// init → airlock: setup is done; waiting for [`Message::Go`].
    Ready,
    /// supervisor or init → airlock: setup failed.
    Failed(Failure),
    /// init → airlock: the command ended with this wait status.
    Exit(i32),
    /// supervisor → airlock: init ended with this wait status.
    InitDied(i32),
    /// airlock → supervisor, in answer to [`Message::InitDied`]: airlock is
    /// alive and takes it from here (the cgroup is its to remove). Without
    /// it, the supervisor removes the cgroup itself.
    Bye,
    /// command → observer, with a pidfd of itself: trace me before I exec.
    TraceMe(OwnedFd),
    /// observer → command (or launcher): attached; go on.
    Traced,
    /// airlock → launcher: run a step. `request` is a sealed memfd holding
    /// the [`crate::StepRequest`] (see [`request`]); `stdio` the command's
    /// 0, 1, 2, or None for a step on its own pseudo-terminal.
    Exec {
        step: StepId,
        request: OwnedFd,
        stdio: Option<[OwnedFd; 3]>,
    },
    /// airlock → launcher: SIGKILL everything the step's holder started.
    KillStep(StepId),
    /// airlock → launcher: send this signal to the step command's process group.
    SignalStep(StepId, i32),
    /// holder → airlock: the master of the step's pseudo-terminal.
    StepTerminal(StepId, OwnedFd),
    /// holder → airlock: the step's command ended with this wait status.
    StepExit(StepId, i32),
    /// launcher or holder → airlock: the step could not be started.
    StepFailed(StepId, String),
}

/// A message that arrived but does not read as a [`Message`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("unknown control message tag {0:#04x}")]
    UnknownTag(u8),
    #[error("control message {tag:?} has a malformed payload")]
    BadPayload { tag: char },
    #[error("the sandbox handed over fewer than {want} {what}")]
    MissingFds { what: &'static str, want: usize },
    #[error("control message longer than {MAX_MSG} bytes (or with too many descriptors)")]
    Truncated,
    /// An [`Message::Exec`] whose descriptors are not a request and 0 or 3
    /// stdio descriptors; the step is known, so it can be answered.
    #[error("{step} came with {got} descriptors (want a request and 0 or 3 stdio descriptors)")]
    ExecFds { step: StepId, got: usize },
}

/// Why a message could not be sent or received.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("control message of {len} bytes exceeds the channel's {MAX_MSG}-byte limit")]
    TooLong { len: usize },
    #[error(transparent)]
    Malformed(#[from] DecodeError),
}

impl From<ChannelError> for std::io::Error {
    fn from(e: ChannelError) -> Self {
        match e {
            ChannelError::Io(e) => e,
            other => Self::other(other),
        }
    }
}

pub(crate) fn pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(std::io::Error::from)
}

fn status_payload(value: i32) -> Vec<u8> {
    value.to_le_bytes().to_vec()
}

/// A step number followed by `rest`.
fn step_payload(step: StepId, rest: &[u8]) -> Vec<u8> {
    let mut payload = step.0.to_le_bytes().to_vec();
    payload.extend_from_slice(rest);
    payload
}

/// The wire form: tag byte and payload, and the descriptors to pass along.
fn encode(msg: &Message) -> (Vec<u8>, Vec<RawFd>) {
    let (tag, payload, fds) = match msg {
        Message::Go => (GO, Vec::new(), Vec::new()),
        Message::InitPid(pid) => (INIT_PID, status_payload(pid.as_raw()), Vec::new()),
        Message::Network {
            transparent,
            dns_udp,
            dns_tcp,
        } => (
            NETWORK,
            Vec::new(),
            vec![
                transparent.as_raw_fd(),
                dns_udp.as_raw_fd(),
                dns_tcp.as_raw_fd(),
            ],
        ),
        Message::Terminal(master) => (TERMINAL, Vec::new(), vec![master.as_raw_fd()]),
        Message::Ready => (READY, Vec::new(), Vec::new()),
        Message::Failed(failure) => {
            let (kind, text) = match failure {
                Failure::UserNamespaces(t) => (FAILED_USERNS, t),
                Failure::Setup(t) => (FAILED_SETUP, t),
            };
            let mut payload = vec![kind];
            payload.extend_from_slice(text.as_bytes());
            (FAILED, payload, Vec::new())
        }
        Message::Exit(status) => (EXIT, status_payload(*status), Vec::new()),
        Message::InitDied(status) => (INIT_DIED, status_payload(*status), Vec::new()),
        Message::TraceMe(pidfd) => (TRACE_ME, Vec::new(), vec![pidfd.as_raw_fd()]),
        Message::Traced => (TRACED, Vec::new(), Vec::new()),
        Message::Bye => (BYE, Vec::new(), Vec::new()),
        Message::Exec {
            step,
            request,
            stdio,
        } => {
            let mut fds = vec![request.as_raw_fd()];
            fds.extend(stdio.iter().flatten().map(AsRawFd::as_raw_fd));
            (EXEC, step_payload(*step, &[]), fds)
        }
        Message::KillStep(step) => (KILL_STEP, step_payload(*step, &[]), Vec::new()),
        Message::SignalStep(step, sig) => (
            SIGNAL_STEP,
            step_payload(*step, &sig.to_le_bytes()),
            Vec::new(),
        ),
        Message::StepTerminal(step, master) => (
            STEP_TERMINAL,
            step_payload(*step, &[]),
            vec![master.as_raw_fd()],
        ),
        Message::StepExit(step, status) => (
            STEP_EXIT,
            step_payload(*step, &status.to_le_bytes()),
            Vec::new(),
        ),
        Message::StepFailed(step, text) => (
            STEP_FAILED,
            step_payload(*step, text.as_bytes()),
            Vec::new(),
        ),
    };
    let mut bytes = Vec::with_capacity(payload.len() + 1);
    bytes.push(tag);
    bytes.extend_from_slice(&payload);
    (bytes, fds)
}

/// Read a wire message back; extra descriptors are closed.
fn decode(bytes: &[u8], fds: Vec<OwnedFd>) -> Result<Message, DecodeError> {
    let (&tag, payload) = bytes
        .split_first()
        .ok_or(DecodeError::BadPayload { tag: '?' })?;
    let bad = || DecodeError::BadPayload { tag: tag as char };
    let int = || -> Result<i32, DecodeError> {
        let bytes: [u8; 4] = payload.try_into().map_err(|_| bad())?;
        Ok(i32::from_le_bytes(bytes))
    };
    // A step message: the step number, then the rest.
    let step = || -> Result<(StepId, &[u8]), DecodeError> {
        let (head, rest) = payload.split_at_checked(8).ok_or_else(bad)?;
        let head: [u8; 8] = head.try_into().map_err(|_| bad())?;
        Ok((StepId(u64::from_le_bytes(head)), rest))
    };
    let step_int = || -> Result<(StepId, i32), DecodeError> {
        let (step, rest) = step()?;
        let rest: [u8; 4] = rest.try_into().map_err(|_| bad())?;
        Ok((step, i32::from_le_bytes(rest)))
    };
    if tag == EXEC {
        let (step, rest) = step()?;
        if !rest.is_empty() {
            return Err(bad());
        }
        let got = fds.len();
        let mut fds = fds.into_iter();
        let (Some(request), stdio) = (fds.next(), fds.collect::<Vec<_>>()) else {
            return Err(DecodeError::ExecFds { step, got });
        };
        let stdio = match <[OwnedFd; 3]>::try_from(stdio) {
            Ok(three) => Some(three),
            Err(none) if none.is_empty() => None,
            Err(_) => return Err(DecodeError::ExecFds { step, got }),
        };
        return Ok(Message::Exec {
            step,
            request,
            stdio,
        });
    }
    let mut fds = fds.into_iter();
    let mut fd =
        |what: &'static str, want: usize| fds.next().ok_or(DecodeError::MissingFds { what, want });
    Ok(match tag {
        GO => Message::Go,
        INIT_PID => Message::InitPid(Pid::from_raw(int()?)),
        NETWORK => Message::Network {
            transparent: fd("network sockets", 3)?,
            dns_udp: fd("network sockets", 3)?,
            dns_tcp: fd("network sockets", 3)?,
        },
        TERMINAL => Message::Terminal(fd("terminal", 1)?),
        READY => Message::Ready,
        FAILED => {
            let (&kind, text) = payload.split_first().ok_or_else(bad)?;
            let text = String::from_utf8_lossy(text).into_owned();
            Message::Failed(match kind {
                FAILED_USERNS => Failure::UserNamespaces(text),
                FAILED_SETUP => Failure::Setup(text),
                _ => return Err(bad()),
            })
        }
        EXIT => Message::Exit(int()?),
        INIT_DIED => Message::InitDied(int()?),
        TRACE_ME => Message::TraceMe(fd("pidfd", 1)?),
        TRACED => Message::Traced,
        BYE => Message::Bye,
        KILL_STEP => match step()? {
            (step, []) => Message::KillStep(step),
            _ => return Err(bad()),
        },
        SIGNAL_STEP => {
            let (step, sig) = step_int()?;
            Message::SignalStep(step, sig)
        }
        STEP_TERMINAL => {
            let (step, rest) = step()?;
            if !rest.is_empty() {
                return Err(bad());
            }
            Message::StepTerminal(step, fd("step terminal", 1)?)
        }
        STEP_EXIT => {
            let (step, status) = step_int()?;
            Message::StepExit(step, status)
        }
        STEP_FAILED => {
            let (step, text) = step()?;
            Message::StepFailed(step, String::from_utf8_lossy(text).into_owned())
        }
        other => return Err(DecodeError::UnknownTag(other)),
    })
}

/// Send one message; [`ChannelError::TooLong`] past [`MAX_MSG`].
pub(crate) fn send(fd: &OwnedFd, msg: &Message) -> Result<(), ChannelError> {
    let (bytes, fds) = encode(msg);
    if bytes.len() > MAX_MSG {
        return Err(ChannelError::TooLong { len: bytes.len() });
    }
    let iov = [IoSlice::new(&bytes)];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(fd.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
        .map(|_| ())
        .map_err(|e| ChannelError::Io(e.into()))
}

/// One message; None on EOF (every peer closed its end).
pub(crate) fn recv(fd: &OwnedFd) -> Result<Option<Message>, ChannelError> {
    // One byte more than allowed, so that an oversized message shows as such
    // even where the kernel does not set MSG_TRUNC.
    let mut buf = vec![0u8; MAX_MSG + 1];
    let mut cmsg_space = nix::cmsg_space!([RawFd; MAX_FDS]);
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
            Err(e) => return Err(ChannelError::Io(e.into())),
        };
        let mut fds = Vec::new();
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    fds.extend(raw.into_iter().map(sys::own_received_fd));
                }
            }
        }
        let cut = msg
            .flags
            .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
        let n = msg.bytes;
        if n == 0 && !cut {
            return Ok(None);
        }
        if cut || n > MAX_MSG {
            return Err(DecodeError::Truncated.into());
        }
        return Ok(Some(decode(&buf[..n], fds)?));
    }
}

#[cfg(test)]
mod tests;
