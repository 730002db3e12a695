//! Where Airlock keeps its per-user state: `$XDG_DATA_HOME/airlock`, else
//! `~/.local/share/airlock` (the CA, the audit database and its signing key).

use std::path::PathBuf;

use anyhow::bail;

pub fn data_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("airlock"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/airlock")),
        None => {
            bail!("neither XDG_DATA_HOME nor HOME is set; set one, or pass the path explicitly")
        }
    }
}

/// The default persistent CA directory.
pub fn default_ca_dir() -> anyhow::Result<PathBuf> {
    Ok(data_dir()?.join("ca"))
}
