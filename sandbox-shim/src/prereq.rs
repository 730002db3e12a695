//! Start-up checks: for unprivileged users, user namespaces.

use std::path::Path;

use crate::error::ShimError;

fn sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(Path::new(path))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Unprivileged sandboxes need user namespaces (see user_namespaces(7)).
pub(crate) fn check_userns() -> Result<(), ShimError> {
    if sysctl("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return Err(ShimError::UserNamespacesDisabled(
            "kernel.unprivileged_userns_clone=0".into(),
        ));
    }
    if sysctl("/proc/sys/user/max_user_namespaces") == Some(0) {
        return Err(ShimError::UserNamespacesDisabled(
            "user.max_user_namespaces=0".into(),
        ));
    }
    if sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        return Err(ShimError::UserNamespacesDisabled(
            "kernel.apparmor_restrict_unprivileged_userns=1".into(),
        ));
    }
    Ok(())
}

/// Everything `airlock run` needs from the host, checked up front.
pub fn check_prerequisites() -> Result<(), ShimError> {
    if !nix::unistd::geteuid().is_root() {
        check_userns()?;
    }
    Ok(())
}
