//! What a wait status of a tracee means (ptrace(2) "Stopped states",
//! PTRACE_SEIZE semantics), as one value the observer's loop can match on.

/// One stop or death of a traced thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// Exited with this code.
    Exited { code: i32 },
    /// Killed by this signal.
    Killed { signal: i32 },
    /// PTRACE_EVENT_EXEC: an execve succeeded.
    Exec,
    /// PTRACE_EVENT_FORK/VFORK/CLONE: a new task; a CLONE may be a thread.
    Fork { thread_maybe: bool },
    /// PTRACE_EVENT_SECCOMP: a SECCOMP_RET_TRACE syscall is about to run.
    Seccomp,
    /// Syscall-exit-stop (SIGTRAP | 0x80 with PTRACE_O_TRACESYSGOOD).
    SyscallExit,
    /// Group-stop (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU): left stopped with PTRACE_LISTEN.
    Paused,
    /// Any other PTRACE_EVENT_STOP (a new child's first stop, an interrupt).
    Event,
    /// Signal-delivery-stop: the signal is passed on.
    Signal { signal: i32 },
}

fn is_stop_signal(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
    )
}

pub(super) fn classify(status: i32) -> Stop {
    if libc::WIFEXITED(status) {
        return Stop::Exited {
            code: libc::WEXITSTATUS(status),
        };
    }
    if libc::WIFSIGNALED(status) {
        return Stop::Killed {
            signal: libc::WTERMSIG(status),
        };
    }
    let sig = libc::WSTOPSIG(status);
    let event = (status >> 16) & 0xff;
    match event {
        libc::PTRACE_EVENT_EXEC => Stop::Exec,
        libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => Stop::Fork {
            thread_maybe: false,
        },
        libc::PTRACE_EVENT_CLONE => Stop::Fork { thread_maybe: true },
        libc::PTRACE_EVENT_SECCOMP => Stop::Seccomp,
        libc::PTRACE_EVENT_STOP if is_stop_signal(sig) => Stop::Paused,
        libc::PTRACE_EVENT_STOP => Stop::Event,
        0 if sig == libc::SIGTRAP | 0x80 => Stop::SyscallExit,
        0 => Stop::Signal { signal: sig },
        // PTRACE_EVENT_VFORK_DONE and PTRACE_EVENT_EXIT are not asked for.
        _ => Stop::Event,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stopped(sig: i32, event: i32) -> i32 {
        (event << 16) | (sig << 8) | 0x7f
    }

    #[test]
    fn statuses_are_classified() {
        assert_eq!(classify(3 << 8), Stop::Exited { code: 3 });
        assert_eq!(
            classify(libc::SIGKILL),
            Stop::Killed {
                signal: libc::SIGKILL
            }
        );
        assert_eq!(
            classify(stopped(libc::SIGTRAP, libc::PTRACE_EVENT_EXEC)),
            Stop::Exec
        );
        assert_eq!(
            classify(stopped(libc::SIGTRAP, libc::PTRACE_EVENT_SECCOMP)),
            Stop::Seccomp
        );
        assert_eq!(
            classify(stopped(libc::SIGTRAP | 0x80, 0)),
            Stop::SyscallExit
        );
        assert_eq!(
            classify(stopped(libc::SIGTSTP, libc::PTRACE_EVENT_STOP)),
            Stop::Paused
        );
        assert_eq!(
            classify(stopped(libc::SIGTRAP, libc::PTRACE_EVENT_STOP)),
            Stop::Event
        );
        assert_eq!(
            classify(stopped(libc::SIGCHLD, 0)),
            Stop::Signal {
                signal: libc::SIGCHLD
            }
        );
    }
}
