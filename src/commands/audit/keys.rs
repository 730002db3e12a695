//! `airlock audit keys add|list|revoke`: the node keys a central store
//! trusts. Sessions signed by a key that is not enrolled, or was revoked,
//! verify there as unverified.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use airlock_auditor::postgres::{CentralError, PgStore, is_postgres_url};
use airlock_auditor::{NodeKey, humanize, load_public_key, parse_public_key};
use anyhow::{Result, anyhow};
use clap::{Args, Subcommand};

use super::{DbArg, db_path, usage};

#[derive(Debug, Args)]
pub(super) struct KeysArgs {
    #[command(subcommand)]
    cmd: KeysCommand,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Enroll a node's public key: its audit key file, the public key file
    /// (`airlock-audit-ed25519-public-v1 …`) or that line itself.
    Add {
        /// Key file, or the public key's text.
        key: String,
        /// The node's name, shown beside its key.
        #[arg(long, value_name = "NODE")]
        name: Option<String>,
        #[command(flatten)]
        db: DbArg,
    },
    /// List the enrolled node keys.
    List {
        #[command(flatten)]
        db: DbArg,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke an enrolled key: the sessions it signed verify as unverified.
    Revoke {
        /// The key's fingerprint, as `keys list` shows it (SHA256:…).
        fingerprint: String,
        #[command(flatten)]
        db: DbArg,
    },
}

pub(super) fn run(args: KeysArgs) -> Result<ExitCode> {
    match args.cmd {
        KeysCommand::Add { key, name, db } => {
            let key = match parse_key(&key) {
                Ok(k) => k,
                Err(e) => return Ok(usage(e)),
            };
            let store = open(&db)?;
            let enrolled = store.enroll(&key, name.as_deref())?;
            println!("enrolled {}", describe(&enrolled));
            Ok(ExitCode::SUCCESS)
        }
        KeysCommand::List { db, json } => list(&open(&db)?, json),
        KeysCommand::Revoke { fingerprint, db } => {
            let store = open(&db)?;
            match store.revoke(&fingerprint) {
                Ok(key) => {
                    println!(
                        "revoked {}: the sessions it signed now verify as unverified",
                        describe(&key)
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(airlock_auditor::AuditError::Central(e @ CentralError::UnknownKey(_))) => {
                    Ok(usage(e))
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// The central store named by --audit-db: keys are enrolled nowhere else.
fn open(db: &DbArg) -> Result<PgStore> {
    let location = db_path(db)?;
    match location.to_str().filter(|l| is_postgres_url(l)) {
        Some(url) => Ok(PgStore::open(url)?),
        None => Err(anyhow!(
            "audit keys enrolls node keys in a central store: pass --audit-db postgres://USER@HOST/DATABASE (a local record trusts its own --audit-key)"
        )),
    }
}

fn parse_key(given: &str) -> Result<airlock_auditor::VerifyingKey> {
    let path = Path::new(given);
    if path.exists() {
        return Ok(load_public_key(path)?);
    }
    parse_public_key(given).ok_or_else(|| CentralError::BadKey(format!("{given:?}")).into())
}

fn describe(key: &NodeKey) -> String {
    match &key.name {
        Some(name) => format!("{} ({name})", key.fingerprint),
        None => key.fingerprint.to_string(),
    }
}

fn list(store: &PgStore, json: bool) -> Result<ExitCode> {
    let keys = store.node_keys()?;
    let mut out = std::io::stdout().lock();
    if json {
        let items: Vec<serde_json::Value> = keys
            .iter()
            .map(|k| {
                serde_json::json!({
                    "fingerprint": k.fingerprint.0,
                    "name": k.name,
                    "public_key": airlock_auditor::public_key_text(&k.key).trim_end(),
                    "added": humanize::rfc3339(k.added_us),
                    "revoked": k.revoked_us.map(humanize::rfc3339),
                })
            })
            .collect();
        serde_json::to_writer_pretty(&mut out, &items)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if keys.is_empty() {
        writeln!(
            out,
            "no node keys enrolled; enroll one with `airlock audit keys add KEYFILE --name NODE`"
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{:<42}  {:<20}  {:<20}  STATUS",
        "FINGERPRINT", "NODE", "ADDED"
    )?;
    for k in &keys {
        let status = match k.revoked_us {
            Some(at) => format!("revoked {}", humanize::rfc3339(at)),
            None => "enrolled".to_string(),
        };
        writeln!(
            out,
            "{:<42}  {:<20}  {:<20}  {status}",
            k.fingerprint.0,
            airlock_auditor::escape::text(k.name.as_deref().unwrap_or("-")),
            humanize::rfc3339(k.added_us),
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
