//! Which exec opened a network connection: the proxy's accepted sockets live
//! in the sandbox's network namespace, so the connection's peer address is the
//! local address of a socket held by a sandbox process. We walk the sandbox's
//! processes (/proc/<pid>/task/*/children, see proc(5)), look at their socket
//! descriptors (/proc/<pid>/fd) and compare each one's getsockname(2) through
//! a pidfd_getfd(2) duplicate. (/proc/<pid>/net/tcp would name the inode too,
//! but reading it walks the kernel's global TCP hash table: milliseconds.)

use nix::unistd::Pid;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::sys::socket::{SockType, SockaddrStorage, getsockname, getsockopt, sockopt};

use crate::observation::ExecSeq;
use crate::observer::{Published, SharedState};
use crate::procfs;
use crate::step::StepId;
use crate::sys;

/// Most processes we look at per lookup (bounds the cost on fork-heavy sandboxes).
const MAX_PROCS: usize = 4096;

/// Maps a connection's sandbox-side address to the exec that opened it.
/// Cheap to clone; safe to use from any thread.
#[derive(Debug, Clone)]
pub struct Attributor {
    init: Pid,
    shared: SharedState,
}

fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

fn local_addr(sock: &OwnedFd) -> Option<SocketAddr> {
    let ss: SockaddrStorage = getsockname(sock.as_raw_fd()).ok()?;
    if let Some(v4) = ss.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    let v6 = ss.as_sockaddr_in6()?;
    Some(canonical(SocketAddr::V6((*v6).into())))
}

/// An unconnected UDP socket is bound to 0.0.0.0:port; the kernel picks the
/// source address per datagram, so only the port (and family) must match.
fn same_endpoint(bound: SocketAddr, seen: SocketAddr) -> bool {
    bound.port() == seen.port()
        && (bound.ip() == seen.ip()
            || (bound.ip().is_unspecified() && bound.is_ipv4() == seen.is_ipv4()))
}

/// Does `pid` hold a socket of the right type whose local address is `local`?
fn holds_socket(pid: Pid, local: SocketAddr, udp: bool) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let mut pidfd: Option<OwnedFd> = None;
    let want = if udp {
        SockType::Datagram
    } else {
        SockType::Stream
    };
    for entry in dir.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .map(|t| t.as_os_str().as_encoded_bytes().starts_with(b"socket:"))
            .unwrap_or(false);
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if !is_socket {
            continue;
        }
        if pidfd.is_none() {
            pidfd = sys::pidfd_open(pid).ok();
        }
        let Some(pfd) = &pidfd else {
            return false;
        };
        let Ok(sock) = sys::pidfd_getfd(pfd.as_fd(), fd) else {
            continue;
        };
        if getsockopt(&sock, sockopt::SockType).ok() == Some(want)
            && local_addr(&sock).is_some_and(|a| same_endpoint(a, local))
        {
            return true;
        }
    }
    false
}

impl Attributor {
    pub(crate) fn new(init: Pid, shared: SharedState) -> Self {
        Self { init, shared }
    }

    /// The exec that owns the sandbox socket at `peer` (the address the proxy
    /// sees as the connection's peer, or a DNS query's source). None when the
    /// socket is already closed or belongs to no observed exec.
    pub fn exec_for_peer(&self, peer: SocketAddr, udp: bool) -> Option<ExecSeq> {
        self.published_for_peer(peer, udp).map(|p| p.exec)
    }

    /// The live-session step whose process owns the sandbox socket at
    /// `peer`. None outside a step, or when the socket is already closed.
    pub fn step_for_peer(&self, peer: SocketAddr, udp: bool) -> Option<StepId> {
        self.published_for_peer(peer, udp).and_then(|p| p.step)
    }

    /// The command line of the process that owns the sandbox socket at
    /// `peer` (the kernel's copy, /proc/PID/cmdline, see proc_pid_cmdline(5)),
    /// for a person asked to approve what it sent. None when the socket is
    /// already closed.
    pub fn command_of_peer(&self, peer: SocketAddr, udp: bool) -> Option<Vec<String>> {
        let pid = self.owner_of_peer(peer, udp)?;
        let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        Some(
            bytes
                .split(|b| *b == 0)
                .filter(|arg| !arg.is_empty())
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect(),
        )
    }

    fn published_for_peer(&self, peer: SocketAddr, udp: bool) -> Option<Published> {
        self.published_of(self.owner_of_peer(peer, udp)?)
    }

    /// The sandbox process holding the socket at `peer`.
    fn owner_of_peer(&self, peer: SocketAddr, udp: bool) -> Option<Pid> {
        let local = canonical(peer);
        let mut queue = procfs::children(self.init);
        let mut seen = 0;
        while let Some(pid) = queue.pop() {
            seen += 1;
            if seen > MAX_PROCS {
                return None;
            }
            if holds_socket(pid, local, udp) {
                return Some(pid);
            }
            queue.extend(procfs::children(pid));
        }
        None
    }

    /// What is known of `pid`, or of its nearest observed ancestor.
    fn published_of(&self, mut pid: Pid) -> Option<Published> {
        for _ in 0..64 {
            if pid.as_raw() <= 1 || pid == self.init {
                return None;
            }
            if let Some(p) = self.shared.lock().ok()?.procs.get(&pid) {
                return Some(*p);
            }
            pid = procfs::status(pid)?.ppid;
        }
        None
    }
}
