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
use std::sync::{Arc, OnceLock};

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
///
/// It exists from the sandbox's fork, before setup reports init's pid, so
/// the proxy can be built while the sandbox is set up; until then it
/// attributes nothing (no command runs before the release, which comes
/// after setup).
#[derive(Debug, Clone)]
pub struct Attributor {
    init: Arc<OnceLock<Pid>>,
    pub(crate) shared: SharedState,
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
    pub(crate) fn new(shared: SharedState) -> Self {
        Self {
            init: Arc::default(),
            shared,
        }
    }

    /// Setup reported init's pid: the walk over the sandbox's processes
    /// starts there.
    pub(crate) fn init_known(&self, init: Pid) {
        let _ = self.init.set(init);
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
        let mut queue = procfs::children(*self.init.get()?);
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
        let init = *self.init.get()?;
        for _ in 0..64 {
            if pid.as_raw() <= 1 || pid == init {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::process::{Child, Command, Stdio};
    use std::sync::Mutex;

    /// A child of this process holding a connection to `listener`.
    struct Holder(Child);

    impl Drop for Holder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn connect_from_a_child(listener: &TcpListener) -> (Holder, SocketAddr) {
        let port = listener.local_addr().unwrap().port();
        let child = Command::new("python3")
            .args([
                "-c",
                &format!(
                    "import socket, time\ns = socket.create_connection(('127.0.0.1', {port}))\ntime.sleep(60)"
                ),
            ])
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 runs");
        let (_conn, peer) = listener.accept().unwrap();
        (Holder(child), peer)
    }

    /// The attributor exists from the fork, before setup names init: until
    /// then it attributes nothing, and from then on it finds the process
    /// behind a connection by walking init's descendants.
    #[test]
    fn attributes_nothing_until_init_is_known_then_finds_the_socket_owner() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let (holder, peer) = connect_from_a_child(&listener);
        let attributor = Attributor::new(Arc::new(Mutex::new(Default::default())));

        assert_eq!(attributor.command_of_peer(peer, false), None);
        assert!(attributor.exec_for_peer(peer, false).is_none());

        // This test process stands in for the sandbox's init.
        attributor.init_known(Pid::this());
        assert_eq!(
            attributor.owner_of_peer(peer, false),
            Some(Pid::from_raw(holder.0.id() as i32))
        );
        let command = attributor.command_of_peer(peer, false).unwrap();
        assert!(command.iter().any(|arg| arg.contains("create_connection")));
    }
}
