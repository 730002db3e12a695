//! Which sockets the sandboxed command may create: an allowlist of address
//! families (address_families(7)) checked on socket(2) and socketpair(2).
//!
//! The network namespace and its nftables rules confine only the families
//! that live in a network namespace and pass through netfilter. Others do
//! not: vsock(7) ignores network namespaces and on a virtual machine reaches
//! the hypervisor's agents; AF_BLUETOOTH, AF_CAN or AF_RDS talk to hardware;
//! AF_ALG, AF_TIPC or AF_KCM are kernel attack surface that a build tool never
//! needs (and whose modules socket(2) would load on demand). So a command gets
//! exactly what ordinary programs use, and every other family, including ones
//! added to Linux after this was written, is refused with EAFNOSUPPORT: what
//! socket(2) says on a kernel built without that family, so programs that
//! probe for it (vsock, Bluetooth) fall back as they would there.
//!
//! - AF_INET, AF_INET6: the traffic the proxy captures. Stream and datagram
//!   sockets of TCP, UDP, ICMP echo ("ping" sockets, still subject to
//!   `net.ipv4.ping_group_range`) and MPTCP (Go listens with it by default
//!   since 1.24, go.dev/issue/56539; its subflows are TCP segments, which
//!   the nftables rules capture like any other). Raw and SOCK_PACKET sockets are EPERM, as without
//!   CAP_NET_RAW; any other protocol (SCTP, UDP-Lite, DCCP, L2TP, and
//!   IPPROTO_SMC, which since Linux 6.11 is AF_SMC under another name) is
//!   EPROTONOSUPPORT and any other type ESOCKTNOSUPPORT, as from a kernel
//!   without that protocol (socket(2), ip(7)).
//! - AF_UNIX: only with `--allow-unix-sockets` (EACCES otherwise): a host
//!   daemon's socket file stays connectable through a read-only mount, and
//!   checking connect(2)'s address from user space would race
//!   (seccomp_unotify(2), "Caveats"); deciding on the domain cannot race.
//!   socketpair(2) always works: the pair is connected to itself and nothing
//!   else, and pipelines, subprocess plumbing and test runners need it.
//! - AF_NETLINK: NETLINK_ROUTE only, which is how `ip addr`, getifaddrs(3),
//!   if_nameindex(3) and glibc's getaddrinfo(3) (for AI_ADDRCONFIG) read the
//!   namespace's own links and addresses. Changing them needs CAP_NET_ADMIN,
//!   which the command does not hold, so it is read-only (netlink(7),
//!   rtnetlink(7)). Every other netlink protocol is EPROTONOSUPPORT:
//!   NETLINK_AUDIT, NETLINK_KOBJECT_UEVENT (host-wide device events),
//!   NETLINK_GENERIC (taskstats, nl80211, WireGuard), NETLINK_SOCK_DIAG,
//!   NETLINK_NETFILTER, NETLINK_XFRM, the connector, and the rest.
//!
//! Other ways to a socket, and why they are closed:
//! - io_uring's IORING_OP_SOCKET (Linux 5.19) creates sockets without calling
//!   socket(2), so seccomp never sees the family: io_uring_setup(2) is refused
//!   outright in `denied_syscalls`.
//! - socketcall(2) multiplexes the socket calls on i386 and has no number in
//!   the x86_64 or aarch64 ABIs; the i386 ABI is killed by the architecture
//!   check and the x32 ABI refused before any of this runs.
//! - accept(2) returns a socket of the listening socket's own family, so it
//!   adds nothing; taking a descriptor from another process (pidfd_getfd(2),
//!   ptrace(2)) is refused; SCM_RIGHTS needs an AF_UNIX peer outside.
//!
//! The kernel reads `domain`, `type` and `protocol` as `int`, so comparing the
//! low 32 bits of each argument is exactly what it acts on (seccomp(2):
//! `struct seccomp_data` holds each argument as 64 bits).

use super::{BPF_AND_K, BPF_JEQ_K, BPF_LD_W_ABS, BPF_RET_K, RET_ALLOW, errno, jump, off_arg, stmt};

/// Obsolete socket type 10 (see packet(7)): on AF_INET the kernel turns it
/// into an AF_PACKET socket. libc marks the constant deprecated.
const SOCK_PACKET: u32 = 10;

/// The low bits of socket(2)'s `type`; SOCK_NONBLOCK and SOCK_CLOEXEC sit above.
const SOCK_TYPE_MASK: u32 = 0xf;

/// IP protocols a stream or datagram socket may use; 0 picks the type's default.
const INET_PROTOCOLS: [i32; 6] = [
    0,
    libc::IPPROTO_TCP,
    libc::IPPROTO_UDP,
    libc::IPPROTO_ICMP,
    libc::IPPROTO_ICMPV6,
    libc::IPPROTO_MPTCP,
];

fn ret(k: u32) -> libc::sock_filter {
    stmt(BPF_RET_K, k)
}

/// `if A is one of values { block }`: the block must end in a return, so when
/// no value matches, A is unchanged for the next test.
fn when_one_of(values: &[i32], block: Vec<libc::sock_filter>) -> Vec<libc::sock_filter> {
    let mut out = Vec::with_capacity(values.len() + block.len());
    let last = values.len().saturating_sub(1);
    for (i, value) in values.iter().enumerate() {
        // On a match jump over the remaining tests to the block; the last
        // test, on a mismatch, jumps over the block. All far below 255.
        let to_block = u8::try_from(last - i).unwrap_or(u8::MAX);
        let past_block = if i == last {
            u8::try_from(block.len()).unwrap_or(u8::MAX)
        } else {
            0
        };
        out.push(jump(BPF_JEQ_K, *value as u32, to_block, past_block));
    }
    out.extend(block);
    out
}

/// socket(2) on AF_INET / AF_INET6: `type` and `protocol`.
fn inet_rules() -> Vec<libc::sock_filter> {
    let mut protocol = vec![stmt(BPF_LD_W_ABS, off_arg(2))];
    protocol.extend(when_one_of(&INET_PROTOCOLS, vec![ret(RET_ALLOW)]));
    protocol.push(ret(errno(libc::EPROTONOSUPPORT)));

    let mut block = vec![
        stmt(BPF_LD_W_ABS, off_arg(1)),
        stmt(BPF_AND_K, SOCK_TYPE_MASK),
    ];
    block.extend(when_one_of(
        &[libc::SOCK_RAW, SOCK_PACKET as i32],
        vec![ret(errno(libc::EPERM))],
    ));
    block.extend(when_one_of(
        &[libc::SOCK_STREAM, libc::SOCK_DGRAM],
        protocol,
    ));
    block.push(ret(errno(libc::ESOCKTNOSUPPORT)));
    block
}

/// socket(2) on AF_NETLINK: NETLINK_ROUTE only.
fn netlink_rules() -> Vec<libc::sock_filter> {
    let mut block = vec![stmt(BPF_LD_W_ABS, off_arg(2))];
    block.extend(when_one_of(&[libc::NETLINK_ROUTE], vec![ret(RET_ALLOW)]));
    block.push(ret(errno(libc::EPROTONOSUPPORT)));
    block
}

/// The body of `if nr == socket`: decides on every path (ends in returns).
pub(super) fn socket_rules(allow_unix_sockets: bool) -> Vec<libc::sock_filter> {
    let unix = if allow_unix_sockets {
        ret(RET_ALLOW)
    } else {
        ret(errno(libc::EACCES))
    };
    let mut block = vec![stmt(BPF_LD_W_ABS, off_arg(0))];
    block.extend(when_one_of(&[libc::AF_INET, libc::AF_INET6], inet_rules()));
    block.extend(when_one_of(&[libc::AF_UNIX], vec![unix]));
    block.extend(when_one_of(&[libc::AF_NETLINK], netlink_rules()));
    block.push(ret(errno(libc::EAFNOSUPPORT)));
    block
}

/// The body of `if nr == socketpair`: AF_UNIX always (the only family whose
/// pairs Linux offers besides AF_TIPC), nothing else.
pub(super) fn socketpair_rules() -> Vec<libc::sock_filter> {
    let mut block = vec![stmt(BPF_LD_W_ABS, off_arg(0))];
    block.extend(when_one_of(&[libc::AF_UNIX], vec![ret(RET_ALLOW)]));
    block.push(ret(errno(libc::EAFNOSUPPORT)));
    block
}

#[cfg(test)]
mod tests {
    use super::super::eval::{Call, run};
    use super::super::{RET_ALLOW, errno, filter_with};

    fn socket(allow_unix: bool, family: i32, kind: i32, protocol: i32) -> u32 {
        let prog = filter_with(true, allow_unix);
        let args = [family as u64, kind as u64, protocol as u64];
        run(&prog, &Call::new(libc::SYS_socket, &args))
    }

    fn socketpair(family: i32) -> u32 {
        let prog = filter_with(false, false);
        run(
            &prog,
            &Call::new(libc::SYS_socketpair, &[family as u64, 1, 0, 0]),
        )
    }

    #[test]
    fn every_family_outside_the_allowlist_is_refused_as_unsupported() {
        let allowed = [
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_UNIX,
            libc::AF_NETLINK,
        ];
        // Every family Linux has (AF_MAX is 46 in 6.x) and numbers it may add.
        for family in (0..=4096).chain([i32::MAX, -1, i32::MIN]) {
            if allowed.contains(&family) {
                continue;
            }
            for kind in [libc::SOCK_STREAM, libc::SOCK_DGRAM, libc::SOCK_RAW, 5] {
                assert_eq!(
                    socket(true, family, kind, 0),
                    errno(libc::EAFNOSUPPORT),
                    "family {family} type {kind}"
                );
            }
        }
        assert_eq!(
            socket(
                false,
                libc::AF_VSOCK,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0
            ),
            errno(libc::EAFNOSUPPORT)
        );
    }

    #[test]
    fn tcp_udp_ping_and_mptcp_sockets_are_allowed_and_nothing_else_of_ip() {
        for family in [libc::AF_INET, libc::AF_INET6] {
            for (kind, protocol) in [
                (libc::SOCK_STREAM, 0),
                (
                    libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    0,
                ),
                (libc::SOCK_STREAM, libc::IPPROTO_TCP),
                (libc::SOCK_STREAM, libc::IPPROTO_MPTCP),
                (libc::SOCK_DGRAM, 0),
                (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, libc::IPPROTO_UDP),
                (libc::SOCK_DGRAM, libc::IPPROTO_ICMP),
                (libc::SOCK_DGRAM, libc::IPPROTO_ICMPV6),
            ] {
                assert_eq!(socket(false, family, kind, protocol), RET_ALLOW);
            }
            for (kind, protocol, refusal) in [
                (libc::SOCK_RAW, 0, libc::EPERM),
                (
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::IPPROTO_ICMP,
                    libc::EPERM,
                ),
                (10, 0x300, libc::EPERM), // SOCK_PACKET
                (libc::SOCK_STREAM, 256, libc::EPROTONOSUPPORT), // IPPROTO_SMC
                (libc::SOCK_STREAM, libc::IPPROTO_SCTP, libc::EPROTONOSUPPORT),
                (
                    libc::SOCK_DGRAM,
                    libc::IPPROTO_UDPLITE,
                    libc::EPROTONOSUPPORT,
                ),
                (libc::SOCK_DGRAM, 115, libc::EPROTONOSUPPORT), // IPPROTO_L2TP
                (libc::SOCK_SEQPACKET, 0, libc::ESOCKTNOSUPPORT),
                (6, 33, libc::ESOCKTNOSUPPORT), // SOCK_DCCP, IPPROTO_DCCP
                (libc::SOCK_RDM, 0, libc::ESOCKTNOSUPPORT),
            ] {
                assert_eq!(
                    socket(true, family, kind, protocol),
                    errno(refusal),
                    "family {family} type {kind} protocol {protocol}"
                );
            }
        }
    }

    #[test]
    fn unix_sockets_need_the_flag_but_socketpair_always_works() {
        for kind in [libc::SOCK_STREAM, libc::SOCK_DGRAM, libc::SOCK_SEQPACKET] {
            assert_eq!(socket(false, libc::AF_UNIX, kind, 0), errno(libc::EACCES));
            assert_eq!(socket(true, libc::AF_UNIX, kind, 0), RET_ALLOW);
        }
        assert_eq!(socketpair(libc::AF_UNIX), RET_ALLOW);
        for family in [libc::AF_TIPC, libc::AF_INET, libc::AF_VSOCK, 46, 1000] {
            assert_eq!(socketpair(family), errno(libc::EAFNOSUPPORT), "{family}");
        }
    }

    #[test]
    fn netlink_is_route_only() {
        for kind in [libc::SOCK_RAW, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC] {
            assert_eq!(
                socket(false, libc::AF_NETLINK, kind, libc::NETLINK_ROUTE),
                RET_ALLOW
            );
            for protocol in (1..=32).chain([1000, -1]) {
                assert_eq!(
                    socket(false, libc::AF_NETLINK, kind, protocol),
                    errno(libc::EPROTONOSUPPORT),
                    "netlink protocol {protocol}"
                );
            }
        }
    }

    #[test]
    fn only_the_low_32_bits_decide_as_in_the_kernel() {
        // socket(2) takes ints: the kernel drops the upper half, and so does the filter.
        let prog = filter_with(false, false);
        let vsock = (1u64 << 32) | libc::AF_VSOCK as u64;
        let call = Call::new(libc::SYS_socket, &[vsock, 1, 0]);
        assert_eq!(run(&prog, &call), errno(libc::EAFNOSUPPORT));
        let inet = (0xdead_u64 << 32) | libc::AF_INET as u64;
        let call = Call::new(libc::SYS_socket, &[inet, 1, 0]);
        assert_eq!(run(&prog, &call), RET_ALLOW);
    }

    #[test]
    fn io_uring_cannot_be_set_up_to_make_sockets_past_the_filter() {
        let prog = filter_with(false, true);
        for nr in [
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ] {
            assert_eq!(run(&prog, &Call::new(nr, &[8, 0])), errno(libc::EPERM));
        }
    }
}
