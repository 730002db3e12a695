//! The options every sandbox takes, and their parsers.

use std::path::PathBuf;
use std::time::Duration;

use airlock_auditor::Isolation;
use airlock_shim::UserSpec;

use crate::approvals::ApprovalOptions;
use crate::cli::{AuditOptions, UpstreamOptions, parse_duration};

/// Everything that shapes a sandbox and its proxy: shared by `airlock run`
/// and `airlock session start`.
#[derive(clap::Args)]
pub(crate) struct SandboxArgs {
    /// The kernel boundary: namespaces (Linux namespaces and seccomp on the
    /// host's kernel) or gvisor (gVisor's runsc, a second, user-space kernel).
    #[arg(long, value_name = "namespaces|gvisor", default_value = "namespaces", value_parser = parse_isolation)]
    pub isolation: Isolation,
    /// The policy (TOML). Default: deny all network access.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Read-write directory, mounted at the same path and used as the working directory [default: .].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Also make PATH visible read-only. Repeatable.
    #[arg(long = "ro", value_name = "PATH")]
    pub ro: Vec<PathBuf>,
    /// Also make PATH visible read-write. Repeatable.
    #[arg(long = "rw", value_name = "PATH")]
    pub rw: Vec<PathBuf>,
    /// Hide PATH inside the sandbox. Repeatable.
    #[arg(long = "hide", value_name = "PATH")]
    pub hide: Vec<PathBuf>,
    /// Memory limit, e.g. 512M or 2G.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory: Option<u64>,
    /// Maximum number of processes.
    #[arg(long, value_name = "N", value_parser = crate::cli::parse_pids)]
    pub pids: Option<u64>,
    /// CPU limit in cores, e.g. 0.5 or 2.
    #[arg(long, value_name = "N", value_parser = crate::cli::parse_cpus)]
    pub cpus: Option<f64>,
    /// Kill the whole sandbox after this long, e.g. 30s or 5m (exit status 124).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Size of the private /tmp [default: 512M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub tmp_size: Option<u64>,
    /// Set KEY=VALUE in the sandbox's environment. Repeatable.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Pass KEY from airlock's environment. Repeatable.
    #[arg(long = "pass-env", value_name = "KEY")]
    pub pass_env: Vec<String>,
    /// Let the command create AF_UNIX sockets. Off by default: a host daemon's
    /// socket file is reachable through the read-only filesystem, bypassing the
    /// proxy. socketpair(2) always works.
    #[arg(long)]
    pub allow_unix_sockets: bool,
    /// Run as UID[:GID] (root only).
    #[arg(long, value_name = "UID[:GID]", value_parser = parse_user)]
    pub user: Option<UserSpec>,
    #[command(flatten)]
    pub upstream: UpstreamOptions,
    #[command(flatten)]
    pub approvals: ApprovalOptions,
    /// Use this persistent CA instead of a fresh one for the session.
    #[arg(long, value_name = "DIR")]
    pub ca_dir: Option<PathBuf>,
    #[command(flatten)]
    pub audit: AuditOptions,
    /// Record written files up to this size with their content (larger ones by hash) [default: 1M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub audit_max_file: Option<u64>,
    /// Do not record the session (say so explicitly; never the default).
    #[arg(long, conflicts_with_all = ["audit_db", "audit_key", "audit_sync", "audit_max_file", "audit_max_session", "labels", "audit_ship", "audit_ship_required"])]
    pub no_audit: bool,
}

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let err =
        || format!("invalid size {s:?}: use a number with an optional K, M or G suffix, e.g. 512M");
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number.parse().map_err(|_| err())?;
    let scale = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1u64,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(err()),
    };
    let bytes = number * scale as f64;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(err());
    }
    Ok(bytes as u64)
}

pub(crate) fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains('\0') && !v.contains('\0') => {
            Ok((k.to_owned(), v.to_owned()))
        }
        _ => Err(format!("invalid --env {s:?}: expected KEY=VALUE")),
    }
}

fn parse_isolation(s: &str) -> Result<Isolation, String> {
    match s {
        "namespaces" => Ok(Isolation::Namespaces),
        "gvisor" => Ok(Isolation::Gvisor),
        _ => Err(format!(
            "unknown isolation {s:?}: use namespaces (the default) or gvisor"
        )),
    }
}

fn parse_user(s: &str) -> Result<UserSpec, String> {
    let err = || format!("invalid --user {s:?}: expected UID or UID:GID (numbers)");
    let (uid, gid) = match s.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (s, None),
    };
    let uid: u32 = uid.parse().map_err(|_| err())?;
    let gid: u32 = match gid {
        Some(g) => g.parse().map_err(|_| err())?,
        None => uid,
    };
    Ok(UserSpec { uid, gid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_durations_and_users_parse() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("soon").is_err());
        assert_eq!(
            parse_user("1000"),
            Ok(UserSpec {
                uid: 1000,
                gid: 1000
            })
        );
        assert_eq!(parse_user("1000:50"), Ok(UserSpec { uid: 1000, gid: 50 }));
        assert!(parse_user("bob").is_err());
    }
}
