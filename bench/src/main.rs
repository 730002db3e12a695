//! `airlock-bench`: the load generator and helpers behind `bench/run`.
//!
//! The same client code measures every contender (direct, airlock explicit
//! proxy, and later others), so differences in the figures come from what sits
//! between the client and nginx, never from the client.

#![allow(clippy::print_stdout, clippy::print_stderr)] // it reports by printing
#![forbid(unsafe_code)]
// Crate-level, not in the workspace's lints: applying it to the shim and
// the binary is left for their owners.
#![warn(unreachable_pub)]

mod cases;
mod connect;
mod machine;
mod pki;
mod report;
mod rss;
mod stats;
mod timing;
mod tls;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "airlock-bench",
    about = "Benchmark harness for the airlock proxy (see bench/run)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a test CA and a server certificate for the given names into DIR
    /// (ca.pem, server.pem, server-key.pem).
    Pki {
        dir: PathBuf,
        /// DNS names on the server certificate.
        #[arg(long = "name", default_value = "bench.test")]
        names: Vec<String>,
    },
    /// Run one benchmark case once and print one JSON sample on stdout.
    Load(cases::LoadArgs),
    /// Print one JSON sample with VmRSS and VmHWM of a process (from /proc/PID/status).
    Rss {
        pid: u32,
        /// Contender the process belongs to (e.g. airlock-explicit).
        #[arg(long)]
        contender: String,
        /// When the reading was taken (e.g. idle, after-all-cases).
        #[arg(long)]
        phase: String,
    },
    /// Print a free TCP port on 127.0.0.1 (bound then released).
    FreePort,
    /// Time a command N times (start-up, audited workload): one JSON sample per run.
    Time(timing::TimeArgs),
    /// Print one JSON sample from figures measured elsewhere (wrk, h2load), or a note.
    Sample(timing::SampleArgs),
    /// Aggregate raw samples (JSON lines) into the Markdown and JSON results.
    Report(report::ReportArgs),
}

fn main() -> ExitCode {
    // One line naming the problem (and its causes), whatever RUST_BACKTRACE says.
    match dispatch(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("airlock-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Pki { dir, names } => pki::write(&dir, &names),
        Command::Load(args) => cases::run(args),
        Command::Rss {
            pid,
            contender,
            phase,
        } => rss::print_sample(pid, &contender, &phase),
        Command::FreePort => {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            println!("{}", listener.local_addr()?.port());
            Ok(())
        }
        Command::Report(args) => report::run(args),
        Command::Time(args) => timing::run(args),
        Command::Sample(args) => timing::print_sample(args),
    }
}
