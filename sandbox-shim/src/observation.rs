//! What the observer reports: every exec, every exit, every file change made
//! by the sandboxed command, as the kernel saw them. How, what it decides
//! and what it cannot see: docs/architecture.md ("The record") and
//! docs/threat-model.md; the code is in `observer/`.

use std::time::SystemTime;

use crate::step::StepId;

/// Observation settings; `SandboxSpec::observe = None` turns observation off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObserveSpec {
    /// Files up to this size are captured with their content (larger ones
    /// keep size and sha256 only). Default 1 MiB (`--audit-max-file`).
    pub max_file_bytes: u64,
}

impl Default for ObserveSpec {
    fn default() -> Self {
        Self {
            max_file_bytes: 1 << 20,
        }
    }
}

/// One program execution inside a sandbox: its sequence number, unique per
/// sandbox, starting at 1. (Not the auditor's `ExecId`, which is text the
/// producer chooses: airlock's `observe::exec_id` makes one from this.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecSeq(pub u64);

impl std::fmt::Display for ExecSeq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exec#{}", self.0)
    }
}

/// What happened to a file, as the observer saw it. (The auditor's `FileOp`
/// is its stored counterpart: airlock's `observe` module maps one to the other.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileChange {
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
    /// chmod(2) family: `mode` holds the mode the file has after it.
    Chmod,
    /// An extended attribute set or removed (setxattr(2), removexattr(2)
    /// and their l-, f- and -at forms): `xattr` says which; `size`,
    /// `sha256` and `content` are the attribute's value after the call.
    /// For a POSIX ACL, `mode` holds the mode the file has after it.
    Xattr,
    /// The bytes of an executed image that has no path on disk (memfd,
    /// deleted file): `path` is the exec's, `content` the image.
    Image,
    /// What a file that existed before the session held before its first
    /// change in the session, taken at the seccomp stop of the call about to
    /// change it: content (up to the cap), size, SHA-256, and in `mode` its
    /// whole `st_mode` (file type and permission bits). A directory's path
    /// ends in '/', a symlink's content is its target. No mode: the
    /// original was missed (see `observer/originals.rs`).
    Original,
}

impl FileChange {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Modify => "modify",
            Self::Truncate => "truncate",
            Self::Rename => "rename",
            Self::Delete => "delete",
            Self::Chmod => "chmod",
            Self::Xattr => "xattr",
            Self::Image => "image",
            Self::Original => "original",
        }
    }
}

/// Which extended attribute an `Xattr` file change is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XattrChange {
    /// Its name, e.g. `user.payload` or `system.posix_acl_access`: bytes,
    /// as the kernel has it.
    pub name: Vec<u8>,
    /// The file has no such attribute after the call: it was removed, or
    /// the kernel folded an ACL that the mode expresses into the mode.
    pub removed: bool,
    /// A POSIX ACL's entries, readable ("user::rwx, user:1000:rwx, ...").
    pub acl: Option<String>,
}

/// Where an executed image came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// A file with a path.
    File,
    /// A memfd_create(2) file.
    Memfd,
    /// A file deleted before or while it ran.
    Deleted,
}

impl ImageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Memfd => "memfd",
            Self::Deleted => "deleted",
        }
    }
}

/// A file an exec involved besides its image, resolved as the process saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    pub path: Vec<u8>,
    pub sha256: Option<String>,
}

/// What was executed, beyond its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecImage {
    pub kind: ImageKind,
    /// SHA-256 of the image (/proc/PID/exe).
    pub sha256: Option<String>,
    /// For `#!` scripts: the script the interpreter (the image) was given.
    pub script: Option<FileRef>,
    /// When the image is the dynamic loader run directly: the program it loads.
    pub loaded: Option<FileRef>,
}

/// One record of the observer.
///
/// Paths, arguments, environment entries and names are bytes, exactly as
/// the kernel has them: they are nearly always UTF-8, but a hostile program
/// chooses them, and a lossy conversion would make two names one.
///
/// pids are the ones the command sees (inside the sandbox PID namespace, from
/// the last NSpid field of /proc/<pid>/status); uid is the host uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    Exec {
        exec_id: ExecSeq,
        /// The exec of the parent process, or for an exec that replaces an
        /// already exec'd image of the same process, that previous exec.
        parent: Option<ExecSeq>,
        pid: i32,
        ppid: i32,
        uid: u32,
        /// The image the kernel executed: readlink(/proc/PID/exe) after the
        /// exec succeeded.
        path: Vec<u8>,
        image: ExecImage,
        /// As the new image received it (/proc/PID/cmdline).
        argv: Vec<Vec<u8>>,
        cwd: Vec<u8>,
        env_names: Vec<Vec<u8>>,
        /// Values of the variables whose names do not look secret.
        env_values_nonsecret: Vec<(Vec<u8>, Vec<u8>)>,
        /// The session step this exec belongs to (see [`crate::StepControl`]);
        /// None outside session mode.
        step: Option<StepId>,
        ts: SystemTime,
    },
    Exit {
        exec_id: ExecSeq,
        /// exit_group(2) status (0..=255).
        status: Option<i32>,
        /// Terminating signal, when one was seen.
        signal: Option<i32>,
        ts: SystemTime,
    },
    File {
        /// None when the writer could not be tied to an exec, and for the
        /// end-of-session reconcile.
        exec_id: Option<ExecSeq>,
        /// Absolute path inside the sandbox: the kernel's name for the file.
        path: Vec<u8>,
        /// The inode (device, number) when known.
        inode: Option<(u64, u64)>,
        /// Every name the inode had in this session, when more than one.
        names: Vec<Vec<u8>>,
        /// Made by the end-of-session reconcile, not by an observed syscall.
        reconciled: bool,
        op: FileChange,
        size: Option<u64>,
        sha256: Option<String>,
        /// Only for regular files no larger than `ObserveSpec::max_file_bytes`.
        content: Option<Vec<u8>>,
        rename_to: Option<Vec<u8>>,
        mode: Option<u32>,
        /// For `FileChange::Xattr`: the attribute.
        xattr: Option<XattrChange>,
        ts: SystemTime,
    },
    /// A task in the sandbox that the observer did not trace, found by the
    /// backstop and killed (SIGKILL to its whole process): nothing it ran is
    /// on record, so the record says that it existed.
    UntracedKilled {
        /// Its pid (a thread's tid) inside the sandbox.
        pid: i32,
        /// Its parent's pid inside the sandbox; 0 when the parent is
        /// outside the sandbox's PID namespace.
        ppid: i32,
        /// Its name (/proc/PID/comm), as it set it.
        comm: Vec<u8>,
        /// Real uid as the host sees it.
        uid: u32,
        /// The exec responsible for it: its parent's (a thread: its own
        /// process's), when that one is traced.
        exec_id: Option<ExecSeq>,
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
pub fn is_secret_name(name: &[u8]) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKERS
        .iter()
        .any(|m| upper.windows(m.len()).any(|w| w == m.as_bytes()))
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
            assert!(super::is_secret_name(n.as_bytes()), "{n}");
        }
        for n in ["PATH", "HOME", "LANG", "TERM"] {
            assert!(!super::is_secret_name(n.as_bytes()), "{n}");
        }
    }
}
