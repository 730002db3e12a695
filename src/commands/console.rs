//! `airlock audit serve`: the forensic console (the `airlock-console`
//! crate), given a read-only store, the trust anchor for its badges and the
//! policy crate's rule suggestions.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use airlock_auditor::Access;
use airlock_console::{Console, ConsoleConfig};
use airlock_policy::Policy;
use anyhow::Result;
use clap::Args;

use super::audit::{DbArg, db_path, is_central, trust_for};
use super::policy::request::Target;

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    db: DbArg,
    /// Where to listen. Loopback by default, on a free port; anything else
    /// shows the record to whoever can reach it and holds the token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0", value_parser = crate::cli::parse_addr)]
    listen: SocketAddr,
    /// Trusted key for the verification badges: the audit key file or a
    /// public key file [default: the local audit key, if it exists; on a
    /// central store, its enrolled node keys].
    #[arg(long, value_name = "FILE", env = "AIRLOCK_AUDIT_KEY")]
    audit_key: Option<PathBuf>,
}

pub(crate) fn serve(args: ServeArgs) -> Result<ExitCode> {
    let path = db_path(&args.db)?;
    let store = airlock_auditor::open_store(&path, Access::ReadOnly)?;
    let trust = trust_for(&path, args.audit_key)?;
    if matches!(trust, airlock_auditor::TrustAnchor::None) && !is_central(&path) {
        eprintln!(
            "warning: no trusted key (no --audit-key and no local audit key): badges check consistency only, a re-signed log would pass"
        );
    }
    if !args.listen.ip().is_loopback() {
        eprintln!(
            "warning: listening on {}, not loopback: anyone who can reach it and has the token sees every recorded session",
            args.listen
        );
    }
    let runtime = crate::serve::runtime("airlock-console")?;
    runtime.block_on(async {
        let console = Console::bind(ConsoleConfig {
            store: Box::new(store),
            trust,
            listen: args.listen,
            rule_to_add: Box::new(rule_to_add),
        })
        .await?;
        // stdout carries only the URL, so a script can read it.
        println!("Airlock console: {}  (Ctrl-C to stop)", console.url());
        console.serve(shutdown()).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The `[[allow]]` rule for a refused request, as the 403 suggested it.
fn rule_to_add(method: &str, url: &str) -> Option<String> {
    let target = Target::parse(url).ok()?;
    Some(Policy::suggest_rule(&target.info(method)))
}

async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // Without handlers the default actions still stop the process.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}
