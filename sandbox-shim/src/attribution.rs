//! Which exec opened a network connection: the proxy's accepted sockets live
//! in the sandbox's network namespace, so the connection's peer address is the
//! sandbox-side socket. Its inode comes from /proc/<init>/net/{tcp,udp}[6]
//! (see proc_net(5)); the process holding socket:[inode] from /proc/<pid>/fd.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::observation::ExecId;
use crate::observer::SharedState;
use crate::procfs;

/// Most processes we look at per lookup (bounds the cost on fork-heavy sandboxes).
const MAX_PROCS: usize = 4096;

/// Maps a connection's sandbox-side address to the exec that opened it.
/// Cheap to clone; safe to use from any thread.
#[derive(Debug, Clone)]
pub struct Attributor {
    init: i32,
    shared: SharedState,
}

fn parse_addr(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    // The kernel prints each 32-bit word of the address in host byte order.
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(
            u32::from_str_radix(ip, 16).ok()?.to_ne_bytes(),
        )),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_mut(4).enumerate() {
                let word = u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?;
                chunk.copy_from_slice(&word.to_ne_bytes());
            }
            let v6 = Ipv6Addr::from(bytes);
            v6.to_ipv4_mapped()
                .map(IpAddr::V4)
                .unwrap_or(IpAddr::V6(v6))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
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

/// Inode of the socket whose local address is `local` in the sandbox netns.
fn socket_inode(init: i32, local: SocketAddr, udp: bool) -> Option<u64> {
    let tables: [&str; 2] = if udp {
        ["udp", "udp6"]
    } else {
        ["tcp", "tcp6"]
    };
    for table in tables {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{init}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(addr), Some(inode)) = (fields.get(1), fields.get(9)) else {
                continue;
            };
            if parse_addr(addr) == Some(local)
                && let Ok(inode) = inode.parse::<u64>()
                && inode != 0
            {
                return Some(inode);
            }
        }
    }
    None
}

fn holds_socket(pid: i32, needle: &str) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    dir.flatten().any(|e| {
        std::fs::read_link(e.path())
            .map(|t| t.as_os_str() == needle)
            .unwrap_or(false)
    })
}

impl Attributor {
    pub(crate) fn new(init: i32, shared: SharedState) -> Attributor {
        Attributor { init, shared }
    }

    /// The exec that owns the sandbox socket at `peer` (the address the proxy
    /// sees as the connection's peer, or a DNS query's source). None when the
    /// socket is already closed or belongs to no observed exec.
    pub fn exec_for_peer(&self, peer: SocketAddr, udp: bool) -> Option<ExecId> {
        let inode = socket_inode(self.init, canonical(peer), udp)?;
        let needle = format!("socket:[{inode}]");
        let mut queue = procfs::children(self.init);
        let mut seen = 0;
        while let Some(pid) = queue.pop() {
            seen += 1;
            if seen > MAX_PROCS {
                return None;
            }
            if holds_socket(pid, &needle) {
                return self.exec_of(pid);
            }
            queue.extend(procfs::children(pid));
        }
        None
    }

    /// The current exec of `pid`, or of its nearest observed ancestor.
    fn exec_of(&self, mut pid: i32) -> Option<ExecId> {
        for _ in 0..64 {
            if pid <= 1 || pid == self.init {
                return None;
            }
            if let Some(e) = self.shared.lock().ok()?.procs.get(&pid) {
                return Some(*e);
            }
            pid = procfs::status(pid)?.ppid;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn proc_net_addresses_parse() {
        assert_eq!(
            super::parse_addr("0100007F:3A99"),
            Some("127.0.0.1:15001".parse().unwrap())
        );
        assert_eq!(
            super::parse_addr("0000000000000000FFFF00000100007F:0050"),
            Some("127.0.0.1:80".parse().unwrap())
        );
    }
}
