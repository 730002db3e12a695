//! Where Airlock keeps its per-user state: `$XDG_DATA_HOME/airlock`, else
//! `~/.local/share/airlock` (the CA, the audit database and its signing key),
//! and the live sessions' control sockets (`session_dir`). The only place that chooses these paths: the libraries (the auditor
//! included) take the paths they are given.

use std::path::PathBuf;

use anyhow::Context;

/// The audit database's file name in the data directory.
const AUDIT_DB: &str = "audit.db";
/// The audit signing key's file name in the data directory.
const AUDIT_KEY: &str = "audit.key";
/// The persistent CA's directory name in the data directory.
const CA_DIR: &str = "ca";

/// `$XDG_DATA_HOME/airlock` (when absolute, as the XDG Base Directory
/// specification requires; a relative one is ignored), else
/// `$HOME/.local/share/airlock`; None when neither is set.
fn user_data_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(x);
        if p.is_absolute() {
            return Some(p.join("airlock"));
        }
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty())?;
    Some(PathBuf::from(home).join(".local/share/airlock"))
}

pub(crate) fn data_dir() -> anyhow::Result<PathBuf> {
    user_data_dir()
        .context("neither XDG_DATA_HOME nor HOME is set; set one, or pass the path explicitly")
}

/// The default persistent CA directory.
pub(crate) fn default_ca_dir() -> anyhow::Result<PathBuf> {
    Ok(data_dir()?.join(CA_DIR))
}

pub(crate) fn default_audit_db() -> anyhow::Result<PathBuf> {
    Ok(data_dir()?.join(AUDIT_DB))
}

pub(crate) fn default_audit_key() -> anyhow::Result<PathBuf> {
    Ok(data_dir()?.join(AUDIT_KEY))
}

/// Where this user's sessions live, without making it: every sandbox
/// hides it (`launch`), whether or not a session ever ran.
pub(crate) fn session_dir_location() -> PathBuf {
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        PathBuf::from("/run/airlock")
    } else {
        match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
            Some(runtime) if runtime.is_absolute() => runtime.join("airlock"),
            _ => PathBuf::from(format!("/tmp/airlock-{uid}")),
        }
    }
}

/// Where live sessions keep their control sockets: `/run/airlock` for root,
/// else `$XDG_RUNTIME_DIR/airlock` (when absolute), else
/// `/tmp/airlock-<uid>`. Created with mode 0700 and checked to be owned by
/// this user: anyone who can reach a control socket can run code in its
/// session.
pub(crate) fn session_dir() -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let uid = nix::unistd::geteuid();
    let dir = session_dir_location();
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir);
    let meta = std::fs::symlink_metadata(&dir)
        .with_context(|| format!("creating the session directory {}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid.as_raw() {
        anyhow::bail!(
            "the session directory {} is not a directory owned by uid {uid}: remove it, or set XDG_RUNTIME_DIR to a directory of your own",
            dir.display()
        );
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private (mode 0700)", dir.display()))?;
    }
    Ok(dir)
}
