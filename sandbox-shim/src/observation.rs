//! What the observer reports: every exec, every exit, every file change made
//! by the sandboxed command, in the order they happened.
//!
//! How: the command's seccomp filter sends execve/execveat, exit_group and
//! the file-changing syscalls (open* only with write/create/truncate flags)
//! to a listener served by a thread in airlock (seccomp_unotify(2)); paths
//! and argv are read from /proc/<pid>/mem before the syscall continues.
//!
//! Decisions:
//! - an exec replacing an already exec'd image of the same process (`exec
//!   foo`, or a shell running its last command in place) gets that previous
//!   exec as parent, so `sh -c "sh -c 'python3 ...'"` is a chain of three;
//!   all execs of a process end (Exit) together, with the process's status;
//! - execve of a path that is not an executable file at notification time is
//!   not recorded (shells probe every PATH entry);
//! - writes are recorded once per (exec, path) and captured when the writing
//!   exec's process exits, or when the command ends (before the sandbox's
//!   mounts go away), whichever comes first; but a version about to be
//!   destroyed is captured first, while its syscall waits: before a delete,
//!   an `O_TRUNC` open or truncate(2) of the path, and both ends of a rename
//!   (a shell's `> f` is the shell's write, and the shell may live for hours);
//!   rename/delete/chmod/mkdir/symlink are reported at once (for symlinks
//!   `content` holds the link target); a `RENAME_NOREPLACE` rename onto an
//!   existing name is not reported (it fails; `mv` then renames for real);
//! - only writable places count: the workspace, rw grants, /tmp, /dev/shm.
//!
//! Limits (what this does not see or cannot be sure of):
//! - syscalls are observed at entry: a rename/delete/chmod that then fails is
//!   still reported; argv/paths could be changed by another thread of the
//!   process between our read and the kernel's (seccomp_unotify(2), "Design
//!   goals"): this is a record, not an enforcement point;
//! - writes through an fd opened before the command started, through mmap of
//!   an already open file, or through fds passed over unix sockets are seen
//!   only if the open itself was; io_uring is refused by the filter anyway;
//! - content is what the file holds when captured, not each intermediate
//!   version; files written by processes still running when the command ends
//!   are captured then; later writes by such stragglers are not;
//! - a process killed by a signal gets `signal` only if the kernel tells us
//!   in time (pidfd PIDFD_INFO_EXIT or the zombie's /proc stat); otherwise
//!   both status and signal are None.

use std::time::SystemTime;

/// Observation settings; `SandboxSpec::observe = None` turns observation off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObserveSpec {
    /// Files up to this size are captured with their content (larger ones
    /// keep size and sha256 only). Default 1 MiB (`--audit-max-file`).
    pub max_file_bytes: u64,
}

impl Default for ObserveSpec {
    fn default() -> Self {
        ObserveSpec {
            max_file_bytes: 1 << 20,
        }
    }
}

/// One program execution inside a sandbox; unique per sandbox, starting at 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecId(pub u64);

impl std::fmt::Display for ExecId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exec#{}", self.0)
    }
}

/// What happened to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileOp {
    /// A new file, directory (path ends in '/'), hard link or symlink.
    Create,
    /// An existing file opened for writing.
    Modify,
    /// truncate(2)/ftruncate(2).
    Truncate,
    /// rename(2): `path` is the old name, `rename_to` the new one.
    Rename,
    /// unlink(2)/rmdir(2) (directories end in '/').
    Delete,
    /// chmod(2) family: `mode` holds the requested mode.
    Chmod,
}

impl FileOp {
    pub fn as_str(self) -> &'static str {
        match self {
            FileOp::Create => "create",
            FileOp::Modify => "modify",
            FileOp::Truncate => "truncate",
            FileOp::Rename => "rename",
            FileOp::Delete => "delete",
            FileOp::Chmod => "chmod",
        }
    }
}

/// One record of the observer.
///
/// pids are the ones the command sees (inside the sandbox PID namespace, from
/// the last NSpid field of /proc/<pid>/status); uid is the host uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    Exec {
        exec_id: ExecId,
        /// The exec of the parent process, or for an exec that replaces an
        /// already exec'd image of the same process, that previous exec.
        parent: Option<ExecId>,
        pid: i32,
        ppid: i32,
        uid: u32,
        /// The executable as passed to execve, made absolute against the cwd.
        path: String,
        argv: Vec<String>,
        cwd: String,
        env_names: Vec<String>,
        /// Values of the variables whose names do not look secret.
        env_values_nonsecret: Vec<(String, String)>,
        ts: SystemTime,
    },
    Exit {
        exec_id: ExecId,
        /// exit_group(2) status (0..=255).
        status: Option<i32>,
        /// Terminating signal, when one was seen.
        signal: Option<i32>,
        ts: SystemTime,
    },
    File {
        /// None when the writer could not be tied to an exec.
        exec_id: Option<ExecId>,
        /// Absolute path inside the sandbox.
        path: String,
        op: FileOp,
        size: Option<u64>,
        sha256: Option<String>,
        /// Only for regular files no larger than `ObserveSpec::max_file_bytes`.
        content: Option<Vec<u8>>,
        rename_to: Option<String>,
        mode: Option<u32>,
        ts: SystemTime,
    },
}

/// Environment variable names whose values are never recorded (case-insensitive substrings).
const SECRET_MARKERS: [&str; 10] = [
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "KEY",
    "AUTH",
    "CREDENTIAL",
    "COOKIE",
    "SESSION",
    "PRIVATE",
];

/// Does this variable name look like it holds a secret?
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|m| upper.contains(m))
}

#[cfg(test)]
mod tests {
    #[test]
    fn secret_like_names_are_recognised() {
        for n in [
            "GITHUB_TOKEN",
            "aws_secret_access_key",
            "DB_Password",
            "Cookie_jar",
            "SSH_AUTH_SOCK",
        ] {
            assert!(super::is_secret_name(n), "{n}");
        }
        for n in ["PATH", "HOME", "LANG", "TERM"] {
            assert!(!super::is_secret_name(n), "{n}");
        }
    }
}
