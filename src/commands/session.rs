//! `airlock session`: live sessions, one sandbox kept across many steps
//! (the work happens in `crate::session`).

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::parse_duration;
use crate::launch::{Plan, Purpose, SandboxArgs, parse_env};
use crate::session::{ExecOptions, ServeOptions, client, server};

/// Default `--idle-timeout`.
const DEFAULT_IDLE: Duration = Duration::from_secs(30 * 60);

#[derive(clap::Subcommand)]
pub(crate) enum SessionCommand {
    /// Bring a sandbox up and keep it for many steps; prints the session's id.
    Start(StartArgs),
    /// Run a command inside a live session.
    Exec(ExecArgs),
    /// List the live sessions.
    Ls(LsArgs),
    /// Stop a session: end every process in it and close its record.
    Stop(StopArgs),
    /// The detached process that serves a session (started by `start`).
    #[command(hide = true)]
    Serve(ServeArgs),
}

#[derive(clap::Args)]
pub(crate) struct StartArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// A name to find the session by (unique among your live sessions).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Stop the session after this long without a command running, e.g. 10m;
    /// 0 = never [default: 30m].
    #[arg(long, value_name = "DURATION", value_parser = parse_idle)]
    pub idle_timeout: Option<IdleTimeout>,
    /// Stop the session when this process ends: `airlock mcp` passes its
    /// own, so that a session never outlives the connection it serves.
    #[arg(long, value_name = "PID", value_parser = parse_pid, hide = true)]
    pub stop_with_pid: Option<nix::unistd::Pid>,
}

fn parse_pid(s: &str) -> Result<nix::unistd::Pid, String> {
    match s.parse::<i32>() {
        Ok(pid) if pid > 0 => Ok(nix::unistd::Pid::from_raw(pid)),
        _ => Err(format!("{s:?} is not a process id")),
    }
}

impl StartArgs {
    /// The session's options, its sandbox planned.
    fn options(self, id: String) -> anyhow::Result<ServeOptions> {
        let policy = self
            .sandbox
            .policy
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "deny-all".into());
        Ok(ServeOptions {
            id,
            name: self.name,
            idle_timeout: match self.idle_timeout {
                None => Some(DEFAULT_IDLE),
                Some(IdleTimeout(d)) => d,
            },
            stop_with_pid: self.stop_with_pid,
            policy,
            sandbox: Plan::new(&self.sandbox, Purpose::Session)?,
        })
    }
}

/// `--idle-timeout`: a duration, or 0 for never.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdleTimeout(Option<Duration>);

fn parse_idle(s: &str) -> Result<IdleTimeout, String> {
    if s.trim().trim_end_matches(['s', 'm', 'h']) == "0" {
        return Ok(IdleTimeout(None));
    }
    parse_duration(s).map(|d| IdleTimeout(Some(d)))
}

#[derive(clap::Args)]
#[command(trailing_var_arg = true)]
pub(crate) struct ExecArgs {
    /// The session: its id, a unique prefix of it, or its name.
    pub session: String,
    /// Kill this command (and everything it started) after this long, e.g.
    /// 30s (exit status 124); the session lives on.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Set KEY=VALUE for this command. Repeatable.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Working directory inside the sandbox [default: the workspace].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Recorded with the step: put an agent's tool-call id or turn here.
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// Run the command on a pseudo-terminal.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// The command and its arguments.
    #[arg(required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl From<ExecArgs> for ExecOptions {
    fn from(args: ExecArgs) -> Self {
        Self {
            session: args.session,
            timeout: args.timeout,
            env: args.env,
            cwd: args.cwd,
            label: args.label,
            tty: args.tty,
            command: args.command,
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct LsArgs {
    /// One JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub(crate) struct StopArgs {
    /// The session: its id, a unique prefix of it, or its name.
    pub session: String,
}

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    #[arg(long)]
    pub id: String,
    #[command(flatten)]
    pub start: StartArgs,
}

pub(crate) fn run(command: SessionCommand) -> anyhow::Result<ExitCode> {
    Ok(match command {
        SessionCommand::Start(_) => client::start(),
        SessionCommand::Exec(args) => client::exec(args.into()),
        SessionCommand::Ls(args) => client::ls(args.json),
        SessionCommand::Stop(args) => client::stop(&args.session),
        // Planned before the server starts; a plan that fails is said as
        // the server says its own failures (`start` relays them).
        SessionCommand::Serve(args) => match args.start.options(args.id) {
            Ok(options) => server::serve(options),
            Err(e) => server::could_not_serve(&e),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_timeout_zero_means_never() {
        assert!(parse_idle("0").unwrap().0.is_none());
        assert!(parse_idle("0s").unwrap().0.is_none());
        assert_eq!(parse_idle("10m").unwrap().0, Some(Duration::from_secs(600)));
        assert!(parse_idle("soon").is_err());
    }
}
