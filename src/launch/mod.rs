//! Bringing a sandbox up with its proxy and record, for `airlock run` and
//! for `airlock session start`: the steps of docs/architecture.md's
//! "`airlock run`" list up to the release of the command. What happens after
//! differs: `commands::run` releases one command and waits for it,
//! `session::server` takes steps until it is told to stop.
//!
//! Order matters: the sandbox is created first (its network namespace, with
//! the proxy's listening sockets inside), then the proxy starts serving those
//! sockets from the host's namespace and the audit session begins, and only
//! then is anything released to run. A connection the sandbox makes can
//! therefore never race past the proxy: it waits in the listener's backlog.

mod args;
mod gvisor;
mod plan;
mod wire;
mod withheld;
mod writable;

pub(crate) use args::{SandboxArgs, parse_env, parse_size};
pub(crate) use gvisor::{GvisorRun, GvisorSession, Recorded};
pub(crate) use plan::{Plan, Purpose};
pub(crate) use wire::{StepLabels, Stop, Wired, store_failure};
pub(crate) use withheld::Withheld;
