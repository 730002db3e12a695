//! What changed on disk: file operations and the inode they were about.

use serde::{Deserialize, Serialize};

use crate::codec::opt_b64;
use crate::{ExecId, OsText};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileChange {
    #[serde(default)]
    pub exec_id: Option<ExecId>,
    /// Absolute path as seen inside the sandbox.
    pub path: OsText,
    pub op: FileOp,
    #[serde(default)]
    pub size: Option<u64>,
    /// SHA-256 (hex) of the file's content after the operation, as
    /// observed by the producer. Computed from `content` when absent.
    #[serde(default)]
    pub sha256: Option<String>,
    /// The content after the operation, if the producer captured it. The
    /// store moves it to a deduplicated content table (so it is `None` in
    /// events read back) and drops it when larger than the session's
    /// `max_file_bytes`.
    #[serde(default, with = "opt_b64", skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<u8>>,
    #[serde(default)]
    pub rename_to: Option<OsText>,
    #[serde(default)]
    pub mode: Option<u32>,
    /// Set by the store: SHA-256 of the stored content blob. Differs from
    /// `sha256` only when redaction had to change the bytes.
    #[serde(default)]
    pub stored_content: Option<String>,
    /// Set by the store: content was captured but exceeded the cap, so
    /// only its hash is kept.
    #[serde(default)]
    pub content_over_cap: bool,
    /// Set by the store: the session's record budget
    /// (`SessionInfo::max_session_bytes`) was spent, so only the hash and
    /// size are kept. Left out when false, so older records verify
    /// unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub content_over_budget: bool,
    /// Which file the kernel wrote, and how the record learnt of it.
    #[serde(default, flatten)]
    pub identity: FileIdentity,
    /// For op `xattr`: which extended attribute. `size`, `sha256` and
    /// the content are then the attribute's value (kept like file
    /// content: the same cap, budget and store), and `mode`, for a
    /// POSIX ACL, the mode the file had after it. Left out otherwise,
    /// so older records verify unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xattr: Option<Xattr>,
}

/// An extended attribute that a file operation set or removed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Xattr {
    /// e.g. `user.payload`, `system.posix_acl_access`: bytes, as the
    /// kernel has it (see [`OsText`]).
    pub name: OsText,
    /// The file has no such attribute after the operation: removed, or an
    /// ACL that the mode expresses, which the kernel keeps as the mode.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
    /// A POSIX ACL's entries, readable: "user::rwx, user:1000:rwx,
    /// group::---, mask::rwx, other::---".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<String>,
}

impl Xattr {
    /// Is this a POSIX ACL (a permission change)?
    pub fn is_acl(&self) -> bool {
        self.name == "system.posix_acl_access" || self.name == "system.posix_acl_default"
    }
}

/// Which inode a file record is about and how it was learnt.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FileIdentity {
    /// Device and inode number of the file the kernel wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ino: Option<u64>,
    /// Every name the inode had in the session, when more than one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<OsText>,
    /// Made by the end-of-session reconcile of the writable mounts (a change
    /// no observed syscall explains), not by an observed syscall.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reconciled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileOp {
    Create,
    Modify,
    Truncate,
    Rename,
    Delete,
    Chmod,
    /// An extended attribute set or removed (see `AuditEvent::File::xattr`).
    Xattr,
    /// The bytes of an executed image with no path on disk (memfd, deleted).
    Image,
    /// What a file that existed before the session held before its first
    /// change in the session, recorded before that change ran: content (up
    /// to the cap), SHA-256 and size, and in `mode` its whole `st_mode`
    /// (file type and permission bits). A directory's path ends in '/', a
    /// symlink's content is its target. Without a mode it was missed: what
    /// the file held is not known.
    Original,
}

impl FileOp {
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

    /// Does a record with this op carry a file's content?
    pub fn carries_content(self) -> bool {
        matches!(
            self,
            Self::Create | Self::Modify | Self::Truncate | Self::Original
        )
    }
}

impl FileChange {
    /// An operation `op` on `path`, with nothing else known yet.
    pub fn new(path: OsText, op: FileOp) -> Self {
        Self {
            exec_id: None,
            path,
            op,
            size: None,
            sha256: None,
            content: None,
            rename_to: None,
            mode: None,
            stored_content: None,
            content_over_cap: false,
            content_over_budget: false,
            identity: FileIdentity::default(),
            xattr: None,
        }
    }
}
