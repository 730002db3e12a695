//! Every `unsafe` call of the crate lives here, each with its justification.
//! Over 500 lines on purpose: one audited place for all of them is worth
//! more than short files.
//! Everything else uses safe `nix`/`std` wrappers.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use nix::unistd::Pid;

/// Result of [`fork`].
pub(crate) enum Forked {
    Child,
    Parent(Pid),
}

/// fork(2).
///
/// The child only runs code of this crate until it execs or `_exit`s. glibc's
/// fork() takes the malloc arena locks across the fork (see fork(2), "the child
/// process is created with a single thread"), so allocating in the child is safe
/// even when the parent is multi-threaded; the child never touches locks owned
/// by other parent threads (stdout, tracing) before exec.
pub(crate) fn fork() -> io::Result<Forked> {
    // SAFETY: see the function comment; the caller's child branch never returns
    // into code that assumes other threads exist.
    match unsafe { nix::unistd::fork() }.map_err(io::Error::from)? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}

/// fork(2) for a command: every signal is blocked across the fork and stays
/// blocked in the child until it calls [`reset_signals`]. Until then the child
/// has its parent's dispositions, and a signal it is sent (a forwarded Ctrl-C)
/// would be discarded if they say ignore; blocked, it stays pending instead
/// and is delivered by the default action once unblocked (signal(7): a
/// blocked signal is never ignored at generation). The parent's mask is
/// restored.
pub(crate) fn fork_signals_held() -> io::Result<Forked> {
    use nix::sys::signal::{SigSet, SigmaskHow, sigprocmask};
    let mut before = SigSet::empty();
    sigprocmask(
        SigmaskHow::SIG_BLOCK,
        Some(&SigSet::all()),
        Some(&mut before),
    )?;
    let forked = fork();
    if !matches!(forked, Ok(Forked::Child)) {
        // EINVAL is its only error (sigprocmask(2)), impossible with SIG_SETMASK.
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&before), None);
    }
    forked
}

/// _exit(2): leave without running atexit handlers or flushing stdio buffers
/// that were inherited from the parent (they belong to the parent).
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(code) }
}

/// Bring `lo` up (SIOCSIFFLAGS, see netdevice(7)).
pub(crate) fn loopback_up(sock: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: req is a valid ifreq and outlives the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS filled the ifru_flags member of the union.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: as above.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Drop every capability from the bounding set (PR_CAPBSET_DROP), clear the
/// ambient set, then zero effective/permitted/inheritable with capset(2).
/// See capabilities(7).
pub(crate) fn drop_all_capabilities(last_cap: u32) -> io::Result<()> {
    drop_bounding_and_ambient(last_cap)?;
    clear_capability_sets()
}

/// Empty the bounding and ambient sets but keep the effective set (needed to
/// switch uid/gid afterwards). See capabilities(7).
pub(crate) fn drop_bounding_and_ambient(last_cap: u32) -> io::Result<()> {
    for cap in 0..=last_cap {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// capset(2) with all-zero sets (version 3 header, two data words).
pub(crate) fn clear_capability_sets() -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: header and data match the kernel's v3 layout and outlive the call.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Install a seccomp filter (seccomp(2), SECCOMP_SET_MODE_FILTER). The caller
/// must have set no_new_privs first.
pub(crate) fn install_seccomp(filter: &[libc::sock_filter]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: u16::try_from(filter.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "seccomp filter too long"))?,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prog points at `filter`, which outlives the call; the kernel copies it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reset every signal disposition to default and unblock all signals, so the
/// command does not inherit SIG_IGN from the shim (see signal(7): ignored
/// signals stay ignored across execve).
pub(crate) fn reset_signals() {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL is always sound; invalid numbers just fail.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // SAFETY: set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Ignore terminal-generated signals in the shim's helper processes: Ctrl-C
/// belongs to the command (it is in the same foreground process group).
pub(crate) fn ignore_terminal_signals() {
    for sig in [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
    ] {
        // SAFETY: installing SIG_IGN is always sound.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
}

/// Ignore every signal that can be ignored and is not the kernel's word on
/// this process itself (a fault, SIGCHLD, SIGCONT): a holder shares its
/// step's uid, and kill(2) would otherwise end it. The command it forks
/// sets them back ([`reset_signals`]).
pub(crate) fn ignore_signals_from_processes() {
    const KERNEL_ONLY: [i32; 10] = [
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGCHLD,
        libc::SIGCONT,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
        libc::SIGSYS,
    ];
    for sig in 1..=libc::SIGRTMAX() {
        if KERNEL_ONLY.contains(&sig) {
            continue;
        }
        // SAFETY: installing SIG_IGN is always sound; invalid numbers just fail.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
}

/// waitpid(2) for `pid`, or for any child when None, that also works for
/// children that are not ours by clone flags (__WALL); returns (pid, raw status).
pub(crate) fn wait_any(pid: Option<Pid>, nohang: bool) -> io::Result<Option<(Pid, i32)>> {
    let mut status = 0;
    let flags = if nohang { libc::WNOHANG } else { 0 } | libc::__WALL;
    let raw = pid.map_or(-1, Pid::as_raw);
    loop {
        // SAFETY: status is a valid out-pointer.
        let rc = unsafe { libc::waitpid(raw, &mut status, flags) };
        if rc > 0 {
            return Ok(Some((Pid::from_raw(rc), status)));
        }
        if rc == 0 {
            return Ok(None);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// kill(2) without touching nix's typed Signal (raw numbers come from wait statuses).
pub(crate) fn kill(pid: Pid, sig: i32) {
    // 0 and negative values name process groups (kill(2)): never meant here.
    if pid.as_raw() <= 0 {
        return;
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid.as_raw(), sig) };
}

/// killpg(2): `pgid`'s whole process group (a positive id only).
pub(crate) fn kill_group(pgid: Pid, sig: i32) {
    if pgid.as_raw() <= 1 {
        return;
    }
    // SAFETY: kill has no memory-safety preconditions; a negative pid names
    // the group (kill(2)).
    unsafe { libc::kill(-pgid.as_raw(), sig) };
}

/// SIGCHLD as a descriptor to poll (signalfd(2)): blocked for the process,
/// so it is never delivered as a signal (nor, when traced, reported to the
/// tracer). Children inherit the blocked mask; a command unblocks it in
/// [`reset_signals`].
pub(crate) struct ChildSignals(nix::sys::signalfd::SignalFd);

impl ChildSignals {
    pub(crate) fn open() -> io::Result<Self> {
        use nix::sys::signal::{SigSet, Signal};
        use nix::sys::signalfd::{SfdFlags, SignalFd};
        let mut set = SigSet::empty();
        set.add(Signal::SIGCHLD);
        set.thread_block()?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(Self(fd))
    }

    /// Read every pending SIGCHLD (what ended is found by waitpid(2)).
    pub(crate) fn drain(&mut self) {
        while let Ok(Some(_)) = self.0.read_signal() {}
    }
}

impl std::os::fd::AsFd for ChildSignals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Take ownership of a descriptor the kernel just installed for us via
/// SCM_RIGHTS (see unix(7)); nothing else refers to it.
pub(crate) fn own_received_fd(raw: RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: `raw` was returned by recvmsg in an SCM_RIGHTS message and is not
    // owned by any other object in this process.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) }
}

/// pidfd_open(2): a descriptor that becomes readable when `pid` exits.
pub(crate) fn pidfd_open(pid: Pid) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscall with integer arguments.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(rc as RawFd) })
}

/// pidfd_send_signal(2): signal the process behind `pidfd`, which cannot be
/// another process that reused its pid.
pub(crate) fn pidfd_kill(pidfd: BorrowedFd<'_>, sig: i32) -> io::Result<()> {
    // SAFETY: plain syscall; a null siginfo means "as kill(2) would".
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// mount_setattr(2) with AT_RECURSIVE and MOUNT_ATTR_RDONLY: the mount at
/// `path` and every mount below it become read-only, including mounts that
/// another mount covers and no path reaches any more. Linux 5.12 and later;
/// older kernels fail with ENOSYS.
pub(crate) fn make_tree_readonly(path: &std::ffi::CStr) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is NUL-terminated and `attr` is a mount_attr of the size
    // passed; both outlive the call and the kernel only reads them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE,
            &attr as *const libc::mount_attr,
            size_of::<libc::mount_attr>(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How the observer traces the command (ptrace(2)): stop after every
/// successful execve (before the new image's first instruction), follow every
/// fork, vfork and clone, stop at the syscalls the seccomp filter marks with
/// SECCOMP_RET_TRACE, tell syscall stops apart (TRACESYSGOOD), and kill every
/// tracee if airlock dies (EXITKILL), so nothing runs on unobserved.
fn trace_options() -> nix::sys::ptrace::Options {
    use nix::sys::ptrace::Options;
    Options::PTRACE_O_TRACEEXEC
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK
        | Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACESECCOMP
        | Options::PTRACE_O_TRACESYSGOOD
        | Options::PTRACE_O_EXITKILL
}

/// At a signal-delivery stop of `tid`: whether a process sent the signal
/// (kill(2), tgkill(2), sigqueue(3): si_code SI_USER or below, see
/// sigaction(2)) rather than the kernel (a fault, SIGCHLD, SIGPIPE).
pub(crate) fn trace_signal_sent_by_process(tid: Pid) -> bool {
    nix::sys::ptrace::getsiginfo(tid).is_ok_and(|info| info.si_code <= 0)
}

/// PTRACE_SEIZE `pid` with [`trace_options`]; its children are traced too.
pub(crate) fn trace_seize(pid: Pid) -> io::Result<()> {
    nix::sys::ptrace::seize(pid, trace_options()).map_err(io::Error::from)
}

/// Resume a stopped tracee, delivering `signal` (0 for none). ESRCH (the
/// tracee was killed meanwhile) is not an error worth reporting.
pub(crate) fn trace_resume(tid: Pid, signal: i32) {
    // SAFETY: PTRACE_CONT takes integer arguments only.
    unsafe { libc::ptrace(libc::PTRACE_CONT, tid.as_raw(), 0, signal as libc::c_long) };
}

/// Resume a tracee stopped at a seccomp stop until the end of that syscall
/// (the next stop is its syscall-exit-stop, ptrace(2) "Syscall-stops").
pub(crate) fn trace_to_syscall_exit(tid: Pid) {
    // SAFETY: PTRACE_SYSCALL takes integer arguments only.
    unsafe { libc::ptrace(libc::PTRACE_SYSCALL, tid.as_raw(), 0, 0) };
}

/// Leave a tracee in its group-stop (SIGSTOP, SIGTSTP...) without resuming
/// it, so job control works as without a tracer (PTRACE_LISTEN, ptrace(2)).
pub(crate) fn trace_listen(tid: Pid) {
    // SAFETY: PTRACE_LISTEN takes integer arguments only.
    unsafe { libc::ptrace(libc::PTRACE_LISTEN, tid.as_raw(), 0, 0) };
}

/// PTRACE_GETEVENTMSG: the new pid of a fork/clone event, the former thread
/// id of an exec event.
pub(crate) fn trace_event_message(tid: Pid) -> Option<i64> {
    nix::sys::ptrace::getevent(tid).ok()
}

/// Where a tracee stopped inside a syscall (PTRACE_GET_SYSCALL_INFO, Linux 5.3).
#[derive(Debug, Clone, Copy)]
pub(crate) enum SyscallStop {
    /// A seccomp stop (SECCOMP_RET_TRACE): before the syscall runs.
    Entry {
        nr: i64,
        args: [u64; 6],
    },
    /// After it ran: its return value, or -errno when `failed`.
    Exit {
        value: i64,
        failed: bool,
    },
    Other,
}

pub(crate) fn syscall_stop(tid: Pid) -> io::Result<SyscallStop> {
    let info = nix::sys::ptrace::syscall_info(tid)?;
    Ok(match info.op {
        libc::PTRACE_SYSCALL_INFO_SECCOMP => {
            // SAFETY: op SECCOMP says the kernel filled the `seccomp` member.
            let s = unsafe { info.u.seccomp };
            SyscallStop::Entry {
                nr: s.nr as i64,
                args: s.args,
            }
        }
        libc::PTRACE_SYSCALL_INFO_EXIT => {
            // SAFETY: op EXIT says the kernel filled the `exit` member.
            let e = unsafe { info.u.exit };
            SyscallStop::Exit {
                value: e.sval,
                failed: e.is_error != 0,
            }
        }
        _ => SyscallStop::Other,
    })
}

/// The next stop or death among this thread's tracees: waitpid(-1) with
/// __WALL (threads too) and __WNOTHREAD (not the children that other
/// threads of airlock forked, such as the sandbox supervisor); returns
/// (tid, raw status), or None once no tracee is left (ECHILD).
pub(crate) fn wait_tracee() -> io::Result<Option<(Pid, i32)>> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out-pointer.
        let rc = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::__WNOTHREAD) };
        if rc > 0 {
            return Ok(Some((Pid::from_raw(rc), status)));
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ECHILD) => return Ok(None),
            _ => return Err(err),
        }
    }
}

/// Overwrite this process's argument strings in place with `title` and
/// NULs, so that /proc/<pid>/cmdline (readable by every process that can
/// see the pid, whatever its dumpable flag) shows `title` instead of the
/// command line airlock was started with. Only this process's copy of the
/// memory changes: it is a fork, so airlock itself keeps its arguments.
pub(crate) fn overwrite_command_line(title: &[u8]) -> io::Result<()> {
    let area = crate::procfs::own_arg_area()
        .ok_or_else(|| io::Error::other("no argument area in /proc/self/stat"))?;
    let len = area.len();
    let keep = title.len().min(len.saturating_sub(1));
    // SAFETY: [arg_start, arg_end) is the argument area the kernel placed
    // at the top of this process's stack at exec: mapped and writable for
    // the life of the process. This process is single-threaded (a forked
    // child), and nothing in it reads argv after this point, so nothing
    // observes the bytes changing. The last byte stays NUL, so the kernel
    // reads it as the plain argument list (no setproctitle overflow).
    unsafe {
        let start = area.start as *mut u8;
        std::ptr::write_bytes(start, 0, len);
        std::ptr::copy_nonoverlapping(title.as_ptr(), start, keep);
    }
    Ok(())
}

/// The current coarse wall-clock time: the clock the kernel stamps inode
/// times from (current_time(), see inode(7) "Timestamps"), so a file changed
/// after this call never has an earlier ctime.
pub(crate) fn coarse_now() -> std::time::SystemTime {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    std::time::UNIX_EPOCH
        + std::time::Duration::new(
            ts.tv_sec.max(0) as u64,
            ts.tv_nsec.clamp(0, 999_999_999) as u32,
        )
}

/// dup2(2) onto a fixed descriptor number (stdio of the sandbox helpers). The
/// forked child owns its descriptor table; `target` is 0, 1 or 2.
pub(crate) fn dup_onto(fd: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: dup2 only manipulates the descriptor table.
    if unsafe { libc::dup2(fd, target) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// fcntl(F_DUPFD): a copy of `fd` numbered at least `min`.
pub(crate) fn dup_above(fd: RawFd, min: RawFd) -> io::Result<RawFd> {
    // SAFETY: F_DUPFD only manipulates the descriptor table.
    let rc = unsafe { libc::fcntl(fd, libc::F_DUPFD, min) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// Close every descriptor >= 3 except those in `keep` (close_range(2)), so
/// nothing the host process had open leaks into the sandbox.
pub(crate) fn close_fds_except_all(keep: &[RawFd]) -> io::Result<()> {
    let mut keep: Vec<libc::c_uint> = keep
        .iter()
        .filter(|fd| **fd >= 3)
        .map(|fd| *fd as libc::c_uint)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut lo: libc::c_uint = 3;
    for k in keep.iter().copied().chain([libc::c_uint::MAX]) {
        if k > lo {
            let hi = if k == libc::c_uint::MAX { k } else { k - 1 };
            // SAFETY: close_range only closes descriptors; no Rust object in
            // the forked child owns the closed ones (it owns only `keep`).
            let rc = unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        lo = k.saturating_add(1);
    }
    Ok(())
}

/// pidfd_getfd(2): a duplicate of descriptor `fd` of the process behind
/// `pidfd` (needs ptrace access to it, see ptrace(2) "access mode checking").
pub(crate) fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: RawFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscall with integer arguments.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a fresh descriptor (close-on-exec) that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(rc as RawFd) })
}

/// Unlock a pseudo-terminal master (TIOCSPTLCK with 0, what unlockpt(3) does)
/// and open its slave through the master itself (TIOCGPTPEER, Linux 4.13):
/// no path lookup, so the slave is the peer of this very master on the same
/// devpts instance, close-on-exec and not made the caller's controlling
/// terminal. See ioctl_tty(2), pty(7).
pub(crate) fn open_pty_peer(master: BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from a valid pointer that outlives the call.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: TIOCGPTPEER takes the open flags by value and returns a new descriptor.
    let rc = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(rc) })
}

/// TIOCSCTTY: make `tty` the controlling terminal of the calling session
/// leader (which must have none); its process group becomes the terminal's
/// foreground group. See ioctl_tty(2), credentials(7).
pub(crate) fn set_controlling_terminal(tty: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an int by value (0: do not steal from another session).
    if unsafe { libc::ioctl(tty.as_raw_fd(), libc::TIOCSCTTY, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A terminal's window size in character cells (struct winsize, ioctl_tty(2)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSize {
    pub cols: u16,
    pub rows: u16,
}

/// TIOCGWINSZ: the window size of the terminal behind `fd`.
pub(crate) fn window_size(fd: BorrowedFd<'_>) -> io::Result<WindowSize> {
    // SAFETY: winsize is plain old data; all-zero is a valid value.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize through a valid pointer that outlives the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(WindowSize {
        cols: ws.ws_col,
        rows: ws.ws_row,
    })
}

/// TIOCSWINSZ: set the window size; on a pty master the kernel sends SIGWINCH
/// to the slave's foreground process group when the size changes.
pub(crate) fn set_window_size(fd: BorrowedFd<'_>, size: WindowSize) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer that outlives the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
