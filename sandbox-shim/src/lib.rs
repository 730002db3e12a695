//! airlock-shim: run one command in fresh Linux namespaces with a read-only
//! system, private /tmp, writable workspace, no capabilities, a seccomp filter,
//! cgroup (or rlimit) limits, and a network namespace whose only way out is the
//! proxy (via sockets handed to the caller).
//!
//! Works as root and as an unprivileged user (through a user namespace).
#![deny(unsafe_code)]
#![warn(missing_debug_implementations)]
#![warn(unreachable_pub)]

mod attribution;
mod capture;
pub mod capture_rules;
mod cgroup;
mod channel;
mod child;
mod command;
mod error;
mod holder;
mod launcher;
mod mounts;
mod netns;
mod observation;
mod observer;
mod outcome;
mod plan;
mod prereq;
mod procfs;
pub mod pty;
mod route;
mod sandbox;
mod seccomp;
mod spec;
mod step;
#[allow(unsafe_code)]
mod sys;

pub use attribution::Attributor;
pub use error::ShimError;
pub use observation::{ExecSeq, FileOp, ImageKind, ObserveSpec, is_secret_name};
pub use outcome::{ExitKind, Outcome};
pub use prereq::check_prerequisites;
pub use sandbox::{NetworkHandles, Sandbox};
pub use spec::{CA_BUNDLE_PATH, DNS_ADDR, Limits, SandboxSpec, TRANSPARENT_ADDR, UserSpec};
pub use step::{StepControl, StepError, StepEvent, StepId, StepRequest, StepStdio};

/// A descriptor that becomes readable when `pid` exits (pidfd_open(2)): a
/// process watched without the pid-reuse race of polling its number.
pub fn pidfd_open(pid: nix::unistd::Pid) -> std::io::Result<std::os::fd::OwnedFd> {
    sys::pidfd_open(pid)
}
