//! What `airlock session` is asked to do, as plain values. The command line
//! (`src/commands/session.rs`) builds them from its arguments; nothing in
//! `session` reads the command line's argument structs.

use std::ffi::OsString;
use std::time::Duration;

use crate::launch::Plan;

/// The session a detached server keeps (`airlock session serve`).
pub(crate) struct ServeOptions {
    /// The id `start` chose, and prints once the session is ready.
    pub id: String,
    /// A name to find the session by (`--name`).
    pub name: Option<String>,
    /// Stop after this long without a command running; None: never.
    pub idle_timeout: Option<Duration>,
    /// Stop when this process ends (`--stop-with-pid`).
    pub stop_with_pid: Option<nix::unistd::Pid>,
    /// How `session ls` names the policy: its path, or `deny-all`.
    pub policy: String,
    /// The sandbox, planned: every path, grant, secret and limit resolved.
    pub sandbox: Plan,
}

/// One step to run in a live session (`airlock session exec`).
pub(crate) struct ExecOptions {
    /// The session: its id, a unique prefix of it, or its name.
    pub session: String,
    /// Kill the step after this long; the session lives on.
    pub timeout: Option<Duration>,
    /// Variables set for this step.
    pub env: Vec<(String, String)>,
    /// Working directory inside the sandbox; None: the workspace.
    pub cwd: Option<String>,
    /// Recorded with the step.
    pub label: Option<String>,
    /// Run the step on a pseudo-terminal.
    pub tty: bool,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}
