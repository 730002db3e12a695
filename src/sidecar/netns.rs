//! Joining the network namespace of the app the sidecar guards.
//!
//! setns(2) with CLONE_NEWNET changes the namespace of the calling thread
//! only, and threads created afterwards inherit it; so this runs on the main
//! thread before the async runtime (or anything else) starts a thread, and the
//! whole process — listeners, upstream connections, the capture rules' netlink socket — then
//! lives in the app's namespace, like any sidecar container in a pod. See
//! setns(2), network_namespaces(7). Needs CAP_SYS_ADMIN.

use std::fs::File;
use std::path::PathBuf;

use anyhow::Context;
use nix::sched::{CloneFlags, setns};

/// Which namespace to join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A bind-mounted namespace, e.g. `/run/netns/NAME` from `ip netns add`.
    Path(PathBuf),
    /// The namespace of a running process (`/proc/PID/ns/net`).
    Pid(u32),
}

impl Target {
    pub(crate) fn path(&self) -> PathBuf {
        match self {
            Self::Path(p) => p.clone(),
            Self::Pid(pid) => PathBuf::from(format!("/proc/{pid}/ns/net")),
        }
    }
}

/// Move this (still single-threaded) process into `target`'s network namespace.
pub(crate) fn join(target: &Target) -> anyhow::Result<()> {
    let path = target.path();
    let file = File::open(&path).with_context(|| {
        format!(
            "opening network namespace {}: does it exist (for --pid, is the process running)?",
            path.display()
        )
    })?;
    setns(&file, CloneFlags::CLONE_NEWNET).with_context(|| {
        format!(
            "joining network namespace {}: needs CAP_SYS_ADMIN (run as root or grant the capability)",
            path.display()
        )
    })
}
