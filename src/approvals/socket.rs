//! The approvals socket: every sandbox, live session, proxy and sidecar
//! serves the approvals API (docs/approvals.md) on
//! `paths::session_dir()/approvals/<id>.sock`, mode 0600 in a 0700
//! directory, so only its owner (and root) can connect, and the peer's
//! credentials say who decides. Every sandbox hides the session directory,
//! so sandboxed code never reaches one.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;

use airlock_proxy::Approvals;
use anyhow::Context;

use crate::random_id::random_id;

/// The socket file, removed when dropped.
#[derive(Debug)]
pub(crate) struct ApprovalSocket {
    path: PathBuf,
}

impl ApprovalSocket {
    /// Bind a fresh socket and serve the API on it. Needs a Tokio runtime
    /// entered.
    pub(crate) fn serve(approvals: Arc<Approvals>) -> anyhow::Result<Self> {
        let dir = super::client::socket_dir()?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{}.sock", random_id()?));
        let listener = tokio::net::UnixListener::bind(&path)
            .with_context(|| format!("binding the approvals socket {}", path.display()))?;
        let socket = Self { path };
        std::fs::set_permissions(&socket.path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("making {} private", socket.path.display()))?;
        tokio::spawn(airlock_proxy::approvals::api::serve_unix(
            listener, approvals,
        ));
        Ok(socket)
    }
}

impl Drop for ApprovalSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
