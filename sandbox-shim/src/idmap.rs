//! The user namespace's id maps (user_namespaces(7)): written by init for
//! the sandbox (as root inside) and by the command when it runs as another
//! user, so both roles share this rather than one importing the other.

/// A write to /proc/self/{setgroups,uid_map,gid_map} failed (user_namespaces(7)).
#[derive(Debug, thiserror::Error)]
#[error("write {file}: {source}")]
pub(crate) struct IdMapError {
    file: &'static str,
    #[source]
    source: std::io::Error,
}

pub(crate) fn write_id_maps(
    uid_map: &str,
    gid_map: &str,
    deny_setgroups: bool,
) -> Result<(), IdMapError> {
    let write = |file: &'static str, content: &str| {
        std::fs::write(file, content).map_err(|source| IdMapError { file, source })
    };
    if deny_setgroups {
        write("/proc/self/setgroups", "deny")?;
    }
    write("/proc/self/uid_map", uid_map)?;
    write("/proc/self/gid_map", gid_map)
}
