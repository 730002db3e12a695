//! Why a step was killed, said the way `airlock run` says it: its timeout,
//! the session's memory limit (the kernel's OOM killer, seen in the
//! sandbox's cgroup), or a signal. A step's caller reads the reason in its
//! exit report instead of guessing from `137`.

use std::path::PathBuf;
use std::time::Duration;

use airlock_shim::ExitKind;

/// SIGKILL, as the OOM killer sends it, and as a shell reports a child it
/// killed (128 + 9).
const SIGKILL: i32 = 9;
const KILLED_STATUS: i32 = 128 + SIGKILL;

/// The session's limits that can kill a step, and where the sandbox's
/// cgroup counts its OOM kills.
#[derive(Debug, Default)]
pub(super) struct KillReasons {
    /// `memory.events` (cgroup v2) or `memory.oom_control` (v1): both have
    /// an `oom_kill N` line.
    oom_counter: Option<PathBuf>,
    /// `--memory` as the user wrote it back ("128M").
    memory_limit: Option<String>,
}

/// The OOM kills counted when a step began.
#[derive(Debug, Clone, Copy)]
pub(super) struct OomKills(u64);

impl KillReasons {
    pub(super) fn new(cgroup_dirs: &[PathBuf], memory_limit: Option<String>) -> Self {
        let oom_counter = cgroup_dirs
            .iter()
            .flat_map(|dir| [dir.join("memory.events"), dir.join("memory.oom_control")])
            .find(|file| file.exists());
        Self {
            oom_counter,
            memory_limit,
        }
    }

    /// The count now, to compare with when the step ends.
    pub(super) fn oom_kills(&self) -> OomKills {
        let count = self
            .oom_counter
            .as_ref()
            .and_then(|file| std::fs::read_to_string(file).ok())
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0);
        OomKills(count)
    }

    /// Why the step ended, when something other than the command ended it.
    /// An OOM kill in the sandbox while the step ran is the step's when its
    /// command died of SIGKILL, or its shell says a child did (137): the
    /// cgroup is the session's, shared by steps running at once.
    pub(super) fn reason(
        &self,
        before: OomKills,
        status: ExitKind,
        timeout: Option<Duration>,
    ) -> Option<String> {
        if let Some(timeout) = timeout {
            return Some(format!(
                "killed: time limit (--timeout {}s) exceeded",
                timeout.as_secs_f64()
            ));
        }
        let sigkilled = matches!(
            status,
            ExitKind::Signaled(SIGKILL) | ExitKind::Exited(KILLED_STATUS)
        );
        if sigkilled && self.oom_kills().0 > before.0 {
            let limit = self
                .memory_limit
                .as_ref()
                .map(|m| format!(" (--memory {m})"))
                .unwrap_or_default();
            return Some(format!("killed: memory limit{limit} exceeded"));
        }
        match status {
            ExitKind::Signaled(sig) => {
                Some(format!("killed by signal {sig} ({})", signal_name(sig)))
            }
            ExitKind::Exited(_) => None,
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str())
        .unwrap_or("unknown signal")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reasons(dir: &std::path::Path, kills: u64) -> KillReasons {
        std::fs::write(
            dir.join("memory.events"),
            format!("low 0\nhigh 0\nmax 3\noom 1\noom_kill {kills}\n"),
        )
        .unwrap();
        KillReasons::new(&[dir.to_path_buf()], Some("128M".into()))
    }

    #[test]
    fn a_kill_names_the_limit_that_did_it() {
        let dir = tempfile::tempdir().unwrap();
        let limits = reasons(dir.path(), 2);
        let before = limits.oom_kills();
        // No OOM kill during the step: a SIGKILL is just a signal.
        assert_eq!(
            limits
                .reason(before, ExitKind::Signaled(9), None)
                .as_deref(),
            Some("killed by signal 9 (SIGKILL)")
        );
        let limits = reasons(dir.path(), 3);
        for status in [ExitKind::Signaled(9), ExitKind::Exited(137)] {
            assert_eq!(
                limits.reason(before, status, None).as_deref(),
                Some("killed: memory limit (--memory 128M) exceeded")
            );
        }
        // An OOM kill elsewhere in the session does not explain a clean exit.
        assert_eq!(limits.reason(before, ExitKind::Exited(0), None), None);
        assert_eq!(
            limits
                .reason(
                    before,
                    ExitKind::Signaled(9),
                    Some(Duration::from_millis(1500))
                )
                .as_deref(),
            Some("killed: time limit (--timeout 1.5s) exceeded")
        );
        assert_eq!(
            KillReasons::default()
                .reason(before, ExitKind::Signaled(15), None)
                .as_deref(),
            Some("killed by signal 15 (SIGTERM)")
        );
    }
}
