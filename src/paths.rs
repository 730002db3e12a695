//! Where Airlock keeps its per-user state: `$XDG_DATA_HOME/airlock`, else
//! `~/.local/share/airlock` (the CA, the audit database and its signing key).

use std::path::PathBuf;

use anyhow::Context;

pub fn data_dir() -> anyhow::Result<PathBuf> {
    airlock_auditor::default_data_dir()
        .context("neither XDG_DATA_HOME nor HOME is set; set one, or pass the path explicitly")
}

/// The default persistent CA directory.
pub fn default_ca_dir() -> anyhow::Result<PathBuf> {
    Ok(data_dir()?.join("ca"))
}

pub fn default_audit_db() -> anyhow::Result<PathBuf> {
    Ok(data_dir()?.join("audit.db"))
}

pub fn default_audit_key() -> anyhow::Result<PathBuf> {
    Ok(data_dir()?.join("audit.key"))
}
