//! A classic-BPF seccomp filter modelled on Docker's default profile: allow by
//! default, refuse (EPERM) the syscalls that manipulate the kernel, other
//! processes, mounts or namespaces. Built by hand (no C library) so we also
//! close the x32 ABI hole and can inspect arguments. See seccomp(2).
//! Which sockets may be created is an allowlist of its own: `sockets`.

#[cfg(test)]
mod eval;
mod sockets;

const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const BPF_JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const BPF_AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
/// A ptrace stop for the observer before the syscall runs (seccomp(2)
/// SECCOMP_RET_TRACE); with no tracer attached the syscall fails with ENOSYS,
/// so an unobserved command cannot write at all (fail closed).
const RET_TRACE: u32 = libc::SECCOMP_RET_TRACE;

// Offsets into struct seccomp_data (little endian: low word of each arg first).
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const fn off_arg(i: u32) -> u32 {
    16 + 8 * i
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// clone(2) flags that would create namespaces (CLONE_NEWTIME is 0x80).
const CLONE_NS_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32
    | 0x80;

/// CLONE_UNTRACED: the tracer cannot force CLONE_PTRACE on the child
/// (ptrace(2), PTRACE_O_TRACECLONE), so the observer would never see it or
/// anything it runs. No ordinary program asks for it (it is meant for
/// kernel threads); refusing it keeps every task of the sandbox traced.
const CLONE_UNTRACED: u32 = libc::CLONE_UNTRACED as u32;

/// clone(2) flags refused with EPERM.
const CLONE_REFUSED_FLAGS: u32 = CLONE_NS_FLAGS | CLONE_UNTRACED;

/// personality(2) values Docker allows.
const ALLOWED_PERSONALITIES: [u32; 5] = [0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// Syscalls refused unconditionally.
fn denied_syscalls() -> Vec<libc::c_long> {
    #[allow(unused_mut)]
    let mut list = vec![
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_process_madvise,
        libc::SYS_pidfd_getfd,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_syslog,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_userfaultfd,
        // io_uring's operations run without passing through seccomp, and
        // IORING_OP_SOCKET (Linux 5.19) creates sockets of any family
        // without socket(2): see sockets.rs. Refusing setup closes all of it.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_fanotify_init,
        libc::SYS_lookup_dcookie,
    ];
    #[cfg(target_arch = "x86_64")]
    list.extend([
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_uselib,
        174, // create_module (obsolete, not in libc)
        177, // get_kernel_syms
        178, // query_module
    ]);
    list
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

fn errno(e: i32) -> u32 {
    RET_ERRNO | (e as u32 & 0xffff)
}

/// Emit `if nr == sys { <block> }`; the block must end in a return.
fn guarded(prog: &mut Vec<libc::sock_filter>, sys: libc::c_long, block: Vec<libc::sock_filter>) {
    prog.push(stmt(BPF_LD_W_ABS, OFF_NR));
    // Blocks are far shorter than 255 instructions.
    let skip = u8::try_from(block.len()).unwrap_or(u8::MAX);
    prog.push(jump(BPF_JEQ_K, sys as u32, 0, skip));
    prog.extend(block);
}

/// open(2) flags that mean "this may change a file".
const WRITE_FLAGS: u32 = (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u32;

/// fchmodat2(2) (Linux 6.6) has the same number on every architecture.
pub(crate) const SYS_FCHMODAT2: libc::c_long = 452;
/// setxattrat(2) and removexattrat(2) (Linux 6.13), numbered alike on every
/// architecture; not in the libc crate yet.
pub(crate) const SYS_SETXATTRAT: libc::c_long = 463;
pub(crate) const SYS_REMOVEXATTRAT: libc::c_long = 466;

/// Syscalls the observer always stops at. execve and exit are not among
/// them: ptrace reports a successful exec and every death by itself.
fn traced_syscalls() -> Vec<libc::c_long> {
    #[allow(unused_mut)]
    let mut list = vec![
        libc::SYS_openat2,
        libc::SYS_renameat,
        libc::SYS_renameat2,
        libc::SYS_unlinkat,
        libc::SYS_truncate,
        libc::SYS_ftruncate,
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        SYS_FCHMODAT2,
        libc::SYS_mkdirat,
        libc::SYS_linkat,
        libc::SYS_symlinkat,
        // Extended attributes hold data (850 bytes in `user.payload`) and
        // permissions (a POSIX ACL): every way to set or remove one.
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        SYS_SETXATTRAT,
        SYS_REMOVEXATTRAT,
    ];
    #[cfg(target_arch = "x86_64")]
    list.extend([
        libc::SYS_creat,
        libc::SYS_rename,
        libc::SYS_unlink,
        libc::SYS_rmdir,
        libc::SYS_chmod,
        libc::SYS_mkdir,
        libc::SYS_link,
        libc::SYS_symlink,
    ]);
    list
}

/// `if nr == sys && (arg & WRITE_FLAGS) { trace }`: plain reads never leave the kernel.
fn trace_if_writing(prog: &mut Vec<libc::sock_filter>, sys: libc::c_long, flags_arg: u32) {
    guarded(
        prog,
        sys,
        vec![
            stmt(BPF_LD_W_ABS, off_arg(flags_arg)),
            jump(BPF_JSET_K, WRITE_FLAGS, 0, 1),
            stmt(BPF_RET_K, RET_TRACE),
            stmt(BPF_RET_K, RET_ALLOW),
        ],
    );
}

/// The filter; with `observe`, file-changing syscalls stop for the observer
/// (the tracer) first, which lets each run and looks at its result.
pub(crate) fn filter_with(observe: bool, allow_unix_sockets: bool) -> Vec<libc::sock_filter> {
    let eperm = errno(libc::EPERM);
    let mut prog = vec![
        // Foreign architectures (e.g. i386 via int 0x80) are killed outright.
        stmt(BPF_LD_W_ABS, OFF_ARCH),
        jump(BPF_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, OFF_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        // x32 syscalls (bit 30) pass the arch check; refuse them all.
        prog.push(jump(BPF_JGE_K, 0x4000_0000, 0, 1));
        prog.push(stmt(BPF_RET_K, eperm));
    }
    for sys in denied_syscalls() {
        prog.push(jump(BPF_JEQ_K, sys as u32, 0, 1));
        prog.push(stmt(BPF_RET_K, eperm));
    }
    // clone3 passes flags in memory we cannot inspect (CLONE_UNTRACED among
    // them): ENOSYS makes libc fall back to clone (glibc's __clone_internal
    // does, for fork, pthread_create and posix_spawn alike).
    prog.push(jump(BPF_JEQ_K, libc::SYS_clone3 as u32, 0, 1));
    prog.push(stmt(BPF_RET_K, errno(libc::ENOSYS)));

    // clone(flags, ...): flags are arg 0 on x86_64 and aarch64 (only the
    // later arguments differ in order); the kernel reads their low 32 bits.
    guarded(
        &mut prog,
        libc::SYS_clone,
        vec![
            stmt(BPF_LD_W_ABS, off_arg(0)),
            jump(BPF_JSET_K, CLONE_REFUSED_FLAGS, 0, 1),
            stmt(BPF_RET_K, eperm),
            stmt(BPF_RET_K, RET_ALLOW),
        ],
    );
    // prlimit64(pid, resource, new, old): setting another process's limits
    // needs only its uid (no capability, prlimit(2)), and a step shares the
    // uid of airlock's helpers: an open-files limit of 0 would starve the
    // init that serves a session. A process may still set its own (pid 0)
    // and read anyone's (new NULL).
    guarded(
        &mut prog,
        libc::SYS_prlimit64,
        vec![
            stmt(BPF_LD_W_ABS, off_arg(2)),
            jump(BPF_JEQ_K, 0, 0, 2),
            stmt(BPF_LD_W_ABS, off_arg(2) + 4),
            jump(BPF_JEQ_K, 0, 3, 0),
            stmt(BPF_LD_W_ABS, off_arg(0)),
            jump(BPF_JEQ_K, 0, 1, 0),
            stmt(BPF_RET_K, eperm),
            stmt(BPF_RET_K, RET_ALLOW),
        ],
    );
    // Which sockets the command may create: an allowlist of address families (sockets.rs).
    guarded(
        &mut prog,
        libc::SYS_socket,
        sockets::socket_rules(allow_unix_sockets),
    );
    guarded(&mut prog, libc::SYS_socketpair, sockets::socketpair_rules());
    // personality(persona): only the values Docker allows.
    let mut persona = vec![stmt(BPF_LD_W_ABS, off_arg(0))];
    let n = ALLOWED_PERSONALITIES.len();
    for (i, p) in ALLOWED_PERSONALITIES.iter().enumerate() {
        // On match jump to the ALLOW after the EPERM.
        let to_allow = u8::try_from(n - i).unwrap_or(u8::MAX);
        persona.push(jump(BPF_JEQ_K, *p, to_allow, 0));
    }
    persona.push(stmt(BPF_RET_K, eperm));
    persona.push(stmt(BPF_RET_K, RET_ALLOW));
    guarded(&mut prog, libc::SYS_personality, persona);
    // ioctl(fd, TIOCSTI/TIOCLINUX): pushing keystrokes into a terminal's input
    // (see ioctl_tty(2)). The caller's terminal never enters the sandbox (the
    // command gets a pty of its own, or pipes); this stays as a second wall,
    // e.g. against a program typing into a shell it shares the pty with.
    guarded(
        &mut prog,
        libc::SYS_ioctl,
        vec![
            stmt(BPF_LD_W_ABS, off_arg(1)),
            jump(BPF_JEQ_K, libc::TIOCSTI as u32, 1, 0),
            jump(BPF_JEQ_K, libc::TIOCLINUX as u32, 0, 1),
            stmt(BPF_RET_K, eperm),
            stmt(BPF_RET_K, RET_ALLOW),
        ],
    );
    if observe {
        #[cfg(target_arch = "x86_64")]
        trace_if_writing(&mut prog, libc::SYS_open, 1);
        trace_if_writing(&mut prog, libc::SYS_openat, 2);
        prog.push(stmt(BPF_LD_W_ABS, OFF_NR));
        for sys in traced_syscalls() {
            prog.push(jump(BPF_JEQ_K, sys as u32, 0, 1));
            prog.push(stmt(BPF_RET_K, RET_TRACE));
        }
    }
    prog.push(stmt(BPF_RET_K, RET_ALLOW));
    prog
}

#[cfg(test)]
mod tests {
    use super::eval::{Call, run};
    use super::{RET_ALLOW, errno};

    /// What glibc passes for fork(), a thread, posix_spawn and vfork.
    const FORK: u64 =
        (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD) as u64;
    const THREAD: u64 = (libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID) as u64;
    const SPAWN: u64 = (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64;

    fn clone_verdict(observe: bool, flags: u64) -> u32 {
        run(
            &super::filter_with(observe, false),
            &Call::new(libc::SYS_clone, &[flags, 0, 0, 0, 0]),
        )
    }

    #[test]
    fn only_a_process_own_limits_can_be_set() {
        let prlimit = |pid: u64, new: u64| {
            run(
                &super::filter_with(true, false),
                &Call::new(libc::SYS_prlimit64, &[pid, 7, new, 0, 0]),
            )
        };
        let eperm = errno(libc::EPERM);
        assert_eq!(prlimit(0, 0x7ffd_0000_1000), RET_ALLOW, "its own");
        assert_eq!(prlimit(1, 0), RET_ALLOW, "reading another's");
        assert_eq!(prlimit(1, 0x7ffd_0000_1000), eperm, "setting init's");
        assert_eq!(prlimit(42, 0x1000), eperm, "setting another's");
        assert_eq!(
            prlimit(42, 0x7ffd_0000_0000),
            eperm,
            "a pointer in the high word"
        );
    }

    #[test]
    fn clone_with_untraced_is_refused_however_it_is_combined() {
        let untraced = libc::CLONE_UNTRACED as u64;
        for observe in [false, true] {
            for flags in [
                untraced,
                untraced | FORK,
                untraced | THREAD,
                untraced | SPAWN,
                untraced | libc::CLONE_PTRACE as u64,
                // The high word is ignored by the kernel, not by us.
                untraced | (1 << 40),
            ] {
                assert_eq!(
                    clone_verdict(observe, flags),
                    errno(libc::EPERM),
                    "clone({flags:#x})"
                );
            }
        }
    }

    #[test]
    fn ordinary_forks_threads_and_spawns_are_allowed() {
        for flags in [FORK, THREAD, SPAWN, libc::SIGCHLD as u64] {
            assert_eq!(clone_verdict(true, flags), RET_ALLOW, "clone({flags:#x})");
        }
    }

    #[test]
    fn clone3_and_ptrace_are_refused_so_no_task_escapes_the_tracer() {
        let prog = super::filter_with(true, false);
        let clone3 = Call::new(libc::SYS_clone3, &[0, 88]);
        assert_eq!(run(&prog, &clone3), errno(libc::ENOSYS));
        for request in [
            libc::PTRACE_TRACEME,
            libc::PTRACE_ATTACH,
            libc::PTRACE_SEIZE,
        ] {
            let call = Call::new(libc::SYS_ptrace, &[request as u64, 1]);
            assert_eq!(run(&prog, &call), errno(libc::EPERM));
        }
        for sys in [libc::SYS_io_uring_setup, libc::SYS_unshare, libc::SYS_setns] {
            assert_eq!(run(&prog, &Call::new(sys, &[])), errno(libc::EPERM));
        }
    }

    #[test]
    fn every_way_to_set_or_remove_an_xattr_stops_for_the_observer() {
        let observed = super::filter_with(true, false);
        let unobserved = super::filter_with(false, false);
        for sys in [
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_fsetxattr,
            libc::SYS_removexattr,
            libc::SYS_lremovexattr,
            libc::SYS_fremovexattr,
            super::SYS_SETXATTRAT,
            super::SYS_REMOVEXATTRAT,
        ] {
            let call = Call::new(sys, &[0, 0, 0, 0, 0]);
            assert_eq!(run(&observed, &call), super::RET_TRACE, "syscall {sys}");
            assert_eq!(run(&unobserved, &call), RET_ALLOW, "syscall {sys}");
        }
        // Reading attributes changes nothing: never a stop.
        for sys in [libc::SYS_getxattr, libc::SYS_listxattr, libc::SYS_fgetxattr] {
            assert_eq!(run(&observed, &Call::new(sys, &[0, 0, 0, 0])), RET_ALLOW);
        }
    }

    #[test]
    fn filter_fits_in_a_bpf_program() {
        let prog = super::filter_with(false, false);
        assert!(prog.len() < 4096, "BPF_MAXINSNS is 4096");
        assert_eq!(prog.last().map(|i| i.k), Some(RET_ALLOW));
        let observed = super::filter_with(true, false);
        assert!(observed.len() > prog.len() && observed.len() < 4096);
    }
}
