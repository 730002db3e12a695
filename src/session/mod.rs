//! Live sessions (`airlock session`): one sandbox that an agent keeps across
//! many steps, with the same namespaces, policy, proxy and one record in
//! which every step is labelled.
//!
//! - `options`: what a session or a step is asked to do, as plain values;
//! - `registry`: where sessions are found (control sockets, names);
//! - `protocol`: what is said over a control socket (docs/sessions.md);
//! - `server`: the detached process that keeps one session (`start` forks it);
//! - `live`: what every step of a live session shares;
//! - `runner`: where steps run (the namespace sandbox, or runsc exec under gVisor);
//! - `steps`: one step inside a live session, from request to exit report;
//! - `denials`: what the policy refused, attributed to steps, for their callers;
//! - `kills`: the running steps a `kill` request can end;
//! - `kill_reasons`: why a step was killed (its timeout, the memory limit, a signal);
//! - `client`: `start`, `exec`, `ls` and `stop` from the caller's side;
//! - `io`: non-blocking pipe and pty ends on the runtime.

pub(crate) mod client;
mod denials;
pub(crate) mod holds;
mod io;
mod kill_reasons;
mod kills;
mod live;
mod options;
pub(crate) mod protocol;
pub(crate) mod registry;
mod runner;
pub(crate) mod server;
mod steps;

pub(crate) use options::{ExecOptions, ServeOptions};
