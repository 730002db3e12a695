//! What the observer reports: every exec, every exit, every file change made
//! by the sandboxed command, as the kernel saw them. How, what it decides
//! and what it cannot see: docs/architecture.md ("The record") and
//! docs/threat-model.md; the code is in `observer/`.

use airlock_record::ExecId;

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
/// sandbox, starting at 1. The record names it by [`ExecSeq::id`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecSeq(pub u64);

impl ExecSeq {
    /// The record's id of this exec: its number, as text ("7").
    pub fn id(self) -> ExecId {
        ExecId::new(self.0.to_string())
    }
}

impl std::fmt::Display for ExecSeq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exec#{}", self.0)
    }
}

/// What happened to a file: the record's own op (see `airlock_record::FileOp`).
pub use airlock_record::FileOp;

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
