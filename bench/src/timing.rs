//! Wall time of whole commands: sandbox start-up (`airlock run -- /bin/true`
//! next to bwrap and the bare command) and the audited mixed workload.

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};

#[derive(clap::Args)]
pub(crate) struct TimeArgs {
    /// Case label in the samples (e.g. startup, audit-workload).
    #[arg(long)]
    case: String,
    /// Contender label (e.g. bare, bwrap, airlock-no-audit).
    #[arg(long)]
    contender: String,
    /// Timed runs; one sample per run.
    #[arg(long, default_value_t = 50)]
    runs: u32,
    /// Untimed runs first (page cache, lazy binds).
    #[arg(long, default_value_t = 2)]
    warmup: u32,
    /// Number of the first timed run in the samples (so interleaved calls
    /// with --runs 1 still number their runs 1..N).
    #[arg(long, default_value_t = 1)]
    first_run: u32,
    /// The command and its arguments.
    #[arg(required = true, last = true)]
    command: Vec<String>,
}

/// Spawns the command `warmup + runs` times, waiting for each; prints one JSON
/// sample per timed run with its wall time in milliseconds.
pub(crate) fn run(args: TimeArgs) -> anyhow::Result<()> {
    let (program, rest) = args
        .command
        .split_first()
        .context("no command given after --")?;
    for i in 0..args.warmup + args.runs {
        let began = Instant::now();
        let output = Command::new(program)
            .args(rest)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("starting {program}: is it installed?"))?;
        let ms = began.elapsed().as_secs_f64() * 1e3;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr.lines().last().unwrap_or("(no stderr)");
            bail!(
                "{} exited with {}: {last}",
                args.command.join(" "),
                output.status
            );
        }
        if i < args.warmup {
            continue;
        }
        let sample = serde_json::json!({
            "case": args.case,
            "contender": args.contender,
            "run": args.first_run + i - args.warmup,
            "params": { "command": args.command.join(" ") },
            "metrics": { "wall_ms": ms },
        });
        println!("{sample}");
    }
    Ok(())
}

#[derive(clap::Args)]
pub(crate) struct SampleArgs {
    #[arg(long)]
    case: String,
    #[arg(long)]
    contender: String,
    #[arg(long, default_value_t = 1)]
    run: u32,
    /// A figure, NAME=NUMBER. Repeatable.
    #[arg(long = "metric", value_parser = parse_metric)]
    metrics: Vec<(String, f64)>,
    /// Why the contender has no figure here (the row is shown as n/a with this note).
    #[arg(long)]
    note: Option<String>,
    /// A parameter, NAME=VALUE. Repeatable.
    #[arg(long = "param", value_parser = parse_param)]
    params: Vec<(String, String)>,
}

fn parse_metric(s: &str) -> Result<(String, f64), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=NUMBER, got {s:?}"))?;
    let v: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("{k}: {v:?} is not a number"))?;
    Ok((k.to_owned(), v))
}

fn parse_param(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected NAME=VALUE, got {s:?}"))
}

/// One sample from figures measured by another tool (wrk, h2load, the ingest
/// example) or a note saying why a contender could not be measured.
pub(crate) fn print_sample(args: SampleArgs) -> anyhow::Result<()> {
    let mut params: serde_json::Map<String, serde_json::Value> = args
        .params
        .into_iter()
        .map(|(k, v)| (k, v.into()))
        .collect();
    if let Some(note) = args.note {
        params.insert("note".into(), note.into());
    }
    let metrics: serde_json::Map<String, serde_json::Value> = args
        .metrics
        .into_iter()
        .map(|(k, v)| (k, v.into()))
        .collect();
    let sample = serde_json::json!({
        "case": args.case,
        "contender": args.contender,
        "run": args.run,
        "params": params,
        "metrics": metrics,
    });
    println!("{sample}");
    Ok(())
}
