//! Scratch host for the binary's `src/audit_cli.rs` until the lead wires it
//! into `airlock`: `audit_cli audit <subcommand> ...` behaves like
//! `airlock audit <subcommand> ...`. Also used by tests/cli.rs.

#[path = "../../src/audit_cli.rs"]
mod audit_cli;

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// Read back, export, restore and verify audit sessions.
    Audit(audit_cli::AuditArgs),
}

fn main() -> ExitCode {
    let Cmd::Audit(args) = Cli::parse().cmd;
    match audit_cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
