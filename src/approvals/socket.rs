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
        let id = random_id()?;
        // Bound and made private under a name no client lists, then renamed
        // into place: a client that finds a `.sock` that refuses it removes
        // it as its airlock's leftover, and between bind(2) and listen(2),
        // or before the chmod, a fresh socket would look like one.
        let binding = dir.join(format!("{id}.binding"));
        let listener = tokio::net::UnixListener::bind(&binding)
            .with_context(|| format!("binding the approvals socket {}", binding.display()))?;
        let placed = std::fs::set_permissions(&binding, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("making {} private", binding.display()))
            .and_then(|()| {
                let path = dir.join(format!("{id}.sock"));
                std::fs::rename(&binding, &path)
                    .with_context(|| format!("placing the approvals socket {}", path.display()))
                    .map(|()| path)
            });
        let path = placed.inspect_err(|_| {
            let _ = std::fs::remove_file(&binding);
        })?;
        let socket = Self { path };
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use airlock_proxy::approvals::ApprovalsConfig;

    use super::*;

    /// A client listing the sockets removes each one that refuses it (its
    /// airlock was killed). A socket that is still being opened must never
    /// look like one: CI once saw a session fail to start, and a live
    /// session can lose the socket its approvers reach it by.
    #[tokio::test(flavor = "multi_thread", worker_threads = 3)]
    async fn a_socket_being_opened_is_never_taken_for_a_leftover() {
        let listing = Arc::new(AtomicBool::new(true));
        let listers: Vec<_> = (0..2)
            .map(|_| {
                let listing = listing.clone();
                tokio::spawn(async move {
                    while listing.load(Ordering::Relaxed) {
                        super::super::client::list().await.unwrap();
                    }
                })
            })
            .collect();
        let mut failures = Vec::new();
        for n in 0..2000 {
            let approvals = Approvals::new(ApprovalsConfig {
                session: format!("opening-{n}"),
                owner_uid: 0,
                cap: 1,
                webhook: None,
                find_sender: None,
            });
            match ApprovalSocket::serve(approvals) {
                Ok(socket) if socket.path.exists() => {}
                Ok(_) => failures.push(format!("socket {n} was removed while live")),
                Err(e) => failures.push(format!("socket {n}: {e:#}")),
            }
        }
        listing.store(false, Ordering::Relaxed);
        for lister in listers {
            lister.await.unwrap();
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }
}
