//! `airlock`: run untrusted code where it can only do what someone allowed,
//! with everything it did on record.

// The command line's job is to print: the libraries' lint stops at the binary.
#![allow(clippy::print_stdout, clippy::print_stderr)]
#![forbid(unsafe_code)]

/// See Cargo.toml: measured against glibc's allocator in BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod approvals;
mod audit;
mod audit_sink;
mod certs;
mod cli;
mod commands;
mod exit;
mod finish;
mod launch;
mod mcp;
mod notices;
mod observe;
mod paths;
mod policy_file;
mod policy_reload;
mod policy_watch;
mod random_id;
mod secrets;
mod serve;
mod session;
mod ship;
mod sidecar;
mod terminal;
mod usage_error;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "airlock",
    version,
    about = "Run untrusted, AI-generated code where it can only do what someone allowed, with everything on record.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command in a sandbox whose only way out is the proxy, with everything recorded.
    Run(commands::run::RunArgs),
    /// Run the egress proxy (explicit forward proxy, optional transparent listener and DNS).
    Proxy(commands::proxy::ProxyArgs),
    /// Guard an existing network namespace (a container's or pod's) like a service-mesh sidecar.
    Sidecar(commands::sidecar::SidecarArgs),
    /// Manage the certificate authority used to intercept TLS.
    #[command(subcommand)]
    Ca(commands::ca::CaCommand),
    /// Check, test and describe policy files.
    #[command(subcommand)]
    Policy(commands::policy::PolicyCommand),
    /// Read back, export, restore and verify recorded sessions.
    Audit(commands::audit::AuditArgs),
    /// Live sessions: one sandbox kept across many commands (start, exec, ls, stop).
    #[command(subcommand)]
    Session(commands::session::SessionCommand),
    /// Serve the Model Context Protocol on stdio: tools for a model that run in one live session per connection.
    Mcp(commands::mcp::McpArgs),
    /// List the requests [[ask]] rules hold for a person's decision, in every running session.
    Approvals(commands::approvals::ListArgs),
    /// Approve a held request: once, or for the rest of its session.
    Approve(commands::approvals::ApproveArgs),
    /// Deny a held request; the client gets a 403 with your note.
    Deny(commands::approvals::DenyArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        // `airlock` or `airlock policy` alone: the help, as clap prints it.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(exit::USAGE);
        }
        Err(e) => {
            let args: Vec<_> = std::env::args_os().collect();
            eprintln!(
                "{}",
                usage_error::one_line(&e, &<Cli as clap::CommandFactory>::command(), &args)
            );
            let run = std::env::args_os()
                .nth(1)
                .is_some_and(|a| a == "run" || a == "session" || a == "mcp");
            return ExitCode::from(if run { exit::RUN_FAILED } else { exit::USAGE });
        }
    };
    init_tracing();
    let result = match cli.command {
        Command::Run(args) => commands::run::run(args),
        Command::Proxy(args) => commands::proxy::run(args),
        Command::Sidecar(args) => commands::sidecar::run(args),
        Command::Ca(cmd) => commands::ca::run(cmd),
        Command::Policy(cmd) => commands::policy::run(cmd),
        Command::Audit(args) => commands::audit::run(args),
        Command::Session(cmd) => commands::session::run(cmd),
        Command::Mcp(args) => commands::mcp::run(args),
        Command::Approvals(args) => commands::approvals::list(args),
        Command::Approve(args) => commands::approvals::approve(args),
        Command::Deny(args) => commands::approvals::deny(args),
    };
    match result {
        Ok(code) => code,
        // `airlock audit export | head`: the reader has what it wanted.
        Err(e) if stdout_reader_gone(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("airlock: {}", one_line(&e));
            ExitCode::from(exit::USAGE)
        }
    }
}

/// Whether `e` is a write to a pipe whose reader is gone, and that pipe is
/// our standard output (a broken pipe elsewhere, such as a control socket,
/// is a failure to report).
fn stdout_reader_gone(e: &anyhow::Error) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let pipe = Some(std::io::ErrorKind::BrokenPipe);
    let broken = e.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().map(|io| io.kind()) == pipe
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == pipe
    });
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(
        std::os::fd::AsFd::as_fd(&stdout),
        PollFlags::POLLOUT,
    )];
    // The write end of a pipe with no reader polls as an error.
    broken
        && poll(&mut fds, PollTimeout::ZERO).is_ok()
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLERR))
}

/// An error and its causes on one line.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        // A message that names its cause (`…: {source}; the fix`) has
        // said it already.
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AIRLOCK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_cause_the_message_already_names_is_said_once() {
        let cause = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let named = anyhow::Error::new(cause()).context(format!(
            "cannot read the file f: {}; check the path",
            cause()
        ));
        assert_eq!(
            one_line(&named),
            "cannot read the file f: entity not found; check the path"
        );
        let plain = anyhow::Error::new(cause()).context("opening f");
        assert_eq!(one_line(&plain), "opening f: entity not found");
    }
}
