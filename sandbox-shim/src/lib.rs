//! airlock-shim: run one command in fresh Linux namespaces with a read-only
//! system, private /tmp, writable workspace, no capabilities, a seccomp filter,
//! cgroup (or rlimit) limits, and a network namespace whose only way out is the
//! proxy (via sockets handed to the caller).
//!
//! Works as root and as an unprivileged user (through a user namespace).
//!
//! The process roles form a tree: each role's module names only the roles
//! it starts, and what two roles share lives below them (`idmap`, `stdio`,
//! `step_command`, `plan`, `channel`, `sys`):
//!
//! ```text
//! sandbox            airlock's side: spawns the supervisor, reads the channel
//! └── child          the supervisor, then init (PID 1 of the sandbox)
//!     ├── command    `airlock run`'s command: identity, seccomp, exec
//!     └── launcher   init in session mode: one holder per step
//!         └── holder one step: forks its command, reaps what it leaves
//!             └── command
//! ```
#![deny(unsafe_code)]
#![warn(missing_debug_implementations)]

mod aliases;
mod attribution;
mod capture;
pub mod capture_rules;
mod cgroup;
mod channel;
mod child;
mod command;
mod error;
mod holder;
mod idmap;
mod launcher;
mod mounts;
mod netlink;
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
mod stdio;
mod step;
mod step_command;
#[allow(unsafe_code)]
mod sys;

pub use aliases::{FileId, hidden_aliases};
pub use attribution::Attributor;
pub use error::ShimError;
pub use observation::{ExecSeq, FileOp, ImageKind, ObserveSpec, is_secret_name};
pub use outcome::{ExitKind, Outcome};
pub use plan::default_hides;
pub use prereq::check_prerequisites;
pub use sandbox::{NetworkHandles, Sandbox, Starting};
pub use spec::{CA_BUNDLE_PATH, DNS_ADDR, Limits, SandboxSpec, TRANSPARENT_ADDR, UserSpec};
pub use step::{StepControl, StepError, StepEvent, StepId, StepRequest, StepStdio};

/// A descriptor that becomes readable when `pid` exits (pidfd_open(2)): a
/// process watched without the pid-reuse race of polling its number.
pub fn pidfd_open(pid: nix::unistd::Pid) -> std::io::Result<std::os::fd::OwnedFd> {
    sys::pidfd_open(pid)
}

#[cfg(test)]
mod role_tree {
    use std::collections::BTreeSet;

    /// Each process role, its source, and the roles it starts: the only
    /// ones it may name.
    const ROLES: [(&str, &str, &[&str]); 5] = [
        ("sandbox", include_str!("sandbox.rs"), &["child"]),
        ("child", include_str!("child.rs"), &["command", "launcher"]),
        ("launcher", include_str!("launcher.rs"), &["holder"]),
        ("holder", include_str!("holder.rs"), &["command"]),
        ("command", include_str!("command.rs"), &[]),
    ];

    /// The crate's modules a source names: `crate::x`, and each name of a
    /// `crate::{x, y::z}` group.
    fn named(source: &str) -> BTreeSet<&str> {
        let ident = |s: &str| {
            s.len()
                - s.trim_start_matches(|c: char| c == '_' || c.is_ascii_alphanumeric())
                    .len()
        };
        let mut names = BTreeSet::new();
        for (at, _) in source.match_indices("crate::") {
            let rest = &source[at + "crate::".len()..];
            match rest.strip_prefix('{') {
                Some(group) => {
                    let group = &group[..group.find('}').unwrap_or(group.len())];
                    for part in group.split(',') {
                        let part = part.trim();
                        names.insert(&part[..ident(part)]);
                    }
                }
                None => {
                    names.insert(&rest[..ident(rest)]);
                }
            }
        }
        names
    }

    #[test]
    fn each_process_role_names_only_the_roles_it_starts() {
        let roles: BTreeSet<&str> = ROLES.iter().map(|(role, _, _)| *role).collect();
        for (role, source, starts) in ROLES {
            let reached: BTreeSet<&str> = named(source).intersection(&roles).copied().collect();
            let allowed: BTreeSet<&str> = starts.iter().copied().collect();
            assert!(
                reached.is_subset(&allowed),
                "{role} names {:?}, but starts only {allowed:?}: move what they share into a module below both",
                reached.difference(&allowed).collect::<Vec<_>>()
            );
        }
    }
}
