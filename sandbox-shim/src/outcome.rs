//! How the command ended, and how that maps to airlock's own exit status.

/// The command's wait status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    Exited(i32),
    Signaled(i32),
}

impl ExitKind {
    pub(crate) fn from_raw(status: i32) -> Self {
        if libc::WIFSIGNALED(status) {
            Self::Signaled(libc::WTERMSIG(status))
        } else {
            Self::Exited(libc::WEXITSTATUS(status))
        }
    }
}

/// Result of [`crate::Sandbox::wait`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub status: ExitKind,
    pub timed_out: bool,
    pub oom_killed: bool,
    pub(crate) memory_limit: Option<u64>,
    pub(crate) timeout: Option<std::time::Duration>,
}

impl Outcome {
    /// The outcome of a command another runtime ran (gVisor's runsc, under
    /// `--isolation gvisor`), told the same way as the shim's own.
    pub fn of_external(
        status: ExitKind,
        timed_out: bool,
        timeout: Option<std::time::Duration>,
    ) -> Self {
        Self {
            status,
            timed_out,
            oom_killed: false,
            memory_limit: None,
            timeout,
        }
    }

    /// The command's own code; 124 on timeout; 128+N on signal N (137 when OOM-killed).
    pub fn exit_code(&self) -> i32 {
        if self.timed_out {
            return 124;
        }
        if self.oom_killed {
            return 137;
        }
        match self.status {
            ExitKind::Exited(code) => code,
            ExitKind::Signaled(sig) => 128 + sig,
        }
    }

    /// A one-line explanation when airlock (not the command) ended the run.
    pub fn message(&self) -> Option<String> {
        if self.timed_out {
            let limit = self
                .timeout
                .map(|t| format!(" (--timeout {}s)", t.as_secs_f64()))
                .unwrap_or_default();
            return Some(format!("airlock: killed: time limit{limit} exceeded"));
        }
        if self.oom_killed {
            let limit = self
                .memory_limit
                .map(|m| format!(" (--memory {})", human_bytes(m)))
                .unwrap_or_default();
            return Some(format!("airlock: killed: memory limit{limit} exceeded"));
        }
        None
    }
}

/// 67108864 -> "64M"; keeps exact values readable without rounding lies.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (size, unit) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: ExitKind, timed_out: bool, oom_killed: bool) -> Outcome {
        Outcome {
            status,
            timed_out,
            oom_killed,
            memory_limit: Some(64 << 20),
            timeout: None,
        }
    }

    #[test]
    fn exit_codes_follow_shell_conventions() {
        assert_eq!(outcome(ExitKind::Exited(3), false, false).exit_code(), 3);
        assert_eq!(
            outcome(ExitKind::Signaled(15), false, false).exit_code(),
            143
        );
        assert_eq!(outcome(ExitKind::Signaled(9), true, false).exit_code(), 124);
        let oom = outcome(ExitKind::Signaled(9), false, true);
        assert_eq!(oom.exit_code(), 137);
        assert_eq!(
            oom.message().as_deref(),
            Some("airlock: killed: memory limit (--memory 64M) exceeded")
        );
        assert_eq!(outcome(ExitKind::Exited(0), false, false).message(), None);
    }
}
