//! `airlock audit ship --from DB|DIR --to URL [--follow]`: copies local
//! records into a central store. Once, for existing databases; or
//! following them, as a node agent does for a directory of sidecars'
//! records (new databases in it are picked up as they appear).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use airlock_auditor::ship::{ShipProgress, ShipReport, Shipper};
use airlock_auditor::sqlite::SqliteStore;
use anyhow::{Context, Result};
use clap::Args;

use crate::ship::{ShipUrl, ShipUrlParser};

/// How often `--follow` looks for new databases in a directory.
const RESCAN: Duration = Duration::from_secs(1);
/// How long a stopped `--follow` keeps shipping what is left.
const STOP_WITHIN: Duration = Duration::from_secs(10);

#[derive(Debug, Args)]
pub(super) struct ShipArgs {
    /// A local audit database, or a directory whose `*.db` files are all shipped.
    #[arg(long, value_name = "DB|DIR")]
    from: PathBuf,
    /// The central store: postgres://USER@HOST[:PORT]/DATABASE (the password from PGPASSWORD or the file named by AIRLOCK_AUDIT_DB_PASSWORD_FILE).
    #[arg(long, value_name = "URL", value_parser = ShipUrlParser)]
    to: ShipUrl,
    /// Keep shipping as the records grow (and as new databases appear in DIR), until SIGTERM or SIGINT.
    #[arg(long)]
    follow: bool,
}

pub(super) fn run(args: ShipArgs) -> Result<ExitCode> {
    match args.follow {
        false => once(&args),
        true => follow(&args),
    }
}

/// Ships everything there is now; a failure stops it with what was
/// shipped kept (running it again resumes).
fn once(args: &ShipArgs) -> Result<ExitCode> {
    let mut total = ShipReport::default();
    for db in databases(&args.from)? {
        let shipper = shipper(&db, &args.to, Arc::default())?;
        let report = shipper
            .drain()
            .with_context(|| format!("shipping {} to {}", db.display(), args.to))?;
        total.sessions += report.sessions;
        total.events += report.events;
    }
    eprintln!(
        "airlock: shipped {} events of {} sessions to {}",
        total.events, total.sessions, args.to
    );
    Ok(ExitCode::SUCCESS)
}

/// One shipper per database, each following it, until a signal.
fn follow(args: &ShipArgs) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal handler")?;
    let mut running: BTreeMap<PathBuf, (Arc<ShipProgress>, JoinHandle<ShipReport>)> =
        BTreeMap::new();
    let stop = runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        loop {
            for db in databases(&args.from)? {
                if running.contains_key(&db) {
                    continue;
                }
                let progress = Arc::new(ShipProgress::default());
                let shipper = shipper(&db, &args.to, progress.clone())?;
                let thread = std::thread::Builder::new()
                    .name("audit-ship".into())
                    .spawn(move || shipper.follow())
                    .context("starting a shipper")?;
                eprintln!("airlock: shipping {} to {}", db.display(), args.to);
                running.insert(db, (progress, thread));
            }
            tokio::select! {
                _ = term.recv() => return anyhow::Ok("SIGTERM"),
                _ = int.recv() => return anyhow::Ok("SIGINT"),
                () = tokio::time::sleep(RESCAN) => {}
            }
        }
    })?;
    let deadline = Instant::now() + STOP_WITHIN;
    for (progress, _) in running.values() {
        progress.stop(deadline);
    }
    let mut left = 0;
    for (db, (progress, thread)) in running {
        let _ = thread.join();
        let pending = progress.status().pending_events;
        if pending > 0 {
            eprintln!(
                "airlock: {} still has {pending} events to ship; they wait there",
                db.display()
            );
            left += pending;
        }
    }
    eprintln!("airlock: stopped by {stop}");
    Ok(match left {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}

fn shipper(db: &Path, to: &ShipUrl, progress: Arc<ShipProgress>) -> Result<Shipper> {
    let local = SqliteStore::open_for_shipping(db)
        .with_context(|| format!("opening {} to ship it", db.display()))?;
    Ok(Shipper::new(local, to.connect(), progress))
}

/// The database `from` names, or every `*.db` file in the directory it
/// names, in name order.
fn databases(from: &Path) -> Result<Vec<PathBuf>> {
    if !from.is_dir() {
        return Ok(vec![from.to_path_buf()]);
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(from)
        .with_context(|| format!("--from {}: cannot list it", from.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "db") && path.is_file() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}
