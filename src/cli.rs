//! Command-line pieces shared by several subcommands: value parsers and the
//! option groups that `run`, `proxy` and `sidecar` flatten into their own.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use airlock_proxy::PinnedHost;
use rustls::pki_types::CertificateDer;

use crate::launch::parse_size;
use crate::ship::ShipUrl;
use crate::{certs, paths};

/// How airlock reaches upstream servers: extra trust and pinned addresses.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct UpstreamOptions {
    /// Also trust this CA (PEM) for upstream servers. Repeatable.
    #[arg(long = "upstream-ca", value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,
    /// Resolve HOST to IP instead of asking DNS, like curl's --resolve (IP may be private). Repeatable.
    #[arg(long = "resolve", value_name = "HOST:IP")]
    pub resolve: Vec<PinnedHost>,
}

impl UpstreamOptions {
    /// The certificates of every `--upstream-ca` file.
    pub(crate) fn roots(&self) -> anyhow::Result<Vec<CertificateDer<'static>>> {
        let mut roots = Vec::new();
        for path in &self.upstream_ca {
            roots.extend(certs::load_pem_certs(path)?);
        }
        Ok(roots)
    }
}

/// Where a session is recorded, and how durably.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct AuditOptions {
    /// The audit database [default: ~/.local/share/airlock/audit.db].
    #[arg(long, value_name = "FILE", env = "AIRLOCK_AUDIT_DB")]
    pub audit_db: Option<PathBuf>,
    /// The audit signing key [default: ~/.local/share/airlock/audit.key, created on first use].
    #[arg(long, value_name = "FILE")]
    pub audit_key: Option<PathBuf>,
    /// Make each decision durable before the request is forwarded.
    #[arg(long)]
    pub audit_sync: bool,
    /// Keep at most this much content per session (file versions, bodies, output); past it, hashes and sizes only [default: 256M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub audit_max_session: Option<u64>,
    /// Record this label with the session (repeatable), e.g. pod=agent-7: what a fleet's search and console filter on.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<Label>,
    /// Ship the record, as it is written, to this central store (postgres://USER@HOST/DB); the local database stays the spool.
    #[arg(long, value_name = "URL")]
    pub audit_ship: Option<ShipUrl>,
    /// Hold each network decision until its event is in the central store, and refuse it when it cannot get there.
    #[arg(long, requires = "audit_ship")]
    pub audit_ship_required: bool,
}

/// One `--label KEY=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Label {
    pub key: String,
    pub value: String,
}

/// `--label`: a key of letters, digits and `._/-` (as Kubernetes label
/// keys are), `=`, and a value of printable text.
pub(crate) fn parse_label(s: &str) -> Result<Label, String> {
    let Some((key, value)) = s.split_once('=') else {
        return Err(format!(
            "{s:?} has no '='; write KEY=VALUE, e.g. pod=agent-7"
        ));
    };
    let key_ok = |c: char| c.is_ascii_alphanumeric() || "._/-".contains(c);
    if key.is_empty() || key.len() > 253 || !key.chars().all(key_ok) {
        return Err(format!(
            "label key {key:?} is not a name; use letters, digits and . _ / - (at most 253), e.g. pod=agent-7"
        ));
    }
    if value.len() > 1024 || value.chars().any(char::is_control) {
        return Err(format!(
            "the value of label {key:?} has control characters or is longer than 1024 bytes; use printable text"
        ));
    }
    Ok(Label {
        key: key.to_owned(),
        value: value.to_owned(),
    })
}

impl AuditOptions {
    /// `--audit-db`, else the per-user default. A central store's URL is
    /// refused here, before it is taken for a path (and shown, password
    /// and all): sessions record locally and ship there.
    pub(crate) fn db(&self) -> anyhow::Result<PathBuf> {
        match &self.audit_db {
            Some(db)
                if db
                    .to_str()
                    .is_some_and(airlock_auditor::postgres::is_postgres_url) =>
            {
                Err(airlock_auditor::postgres::CentralError::RecordsLocally {
                    url: airlock_auditor::postgres::redact_url(&db.to_string_lossy()),
                }
                .into())
            }
            Some(db) => Ok(db.clone()),
            None => paths::default_audit_db(),
        }
    }

    /// `--audit-max-session`, else the default record budget.
    pub(crate) fn max_session_bytes(&self) -> u64 {
        self.audit_max_session
            .unwrap_or(airlock_auditor::DEFAULT_MAX_SESSION_BYTES)
    }

    /// Whether each decision waits for its record: durable here
    /// (`--audit-sync`), and in the central store too
    /// (`--audit-ship-required`).
    pub(crate) fn decisions_wait(&self) -> bool {
        self.audit_sync || self.audit_ship_required
    }

    /// The session's labels; a key given twice is refused, since which
    /// value was meant cannot be known.
    pub(crate) fn labels(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let mut labels = BTreeMap::new();
        for Label { key, value } in &self.labels {
            if labels.insert(key.clone(), value.clone()).is_some() {
                anyhow::bail!("--label {key} is given twice; give each key once");
            }
        }
        Ok(labels)
    }

    /// `--audit-key`, else the per-user default.
    pub(crate) fn key(&self) -> anyhow::Result<PathBuf> {
        match &self.audit_key {
            Some(key) => Ok(key.clone()),
            None => paths::default_audit_key(),
        }
    }
}

/// A value Rust would parse with its own words ("invalid float literal",
/// "invalid digit found in string"), refused instead by saying what the
/// option wants and showing one.
fn value<T: std::str::FromStr>(s: &str, what: &str, example: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("not {what}; write one like {example}"))
}

/// `--cpus`: a positive number of cores, fractions allowed.
pub(crate) fn parse_cpus(s: &str) -> Result<f64, String> {
    let what = "a number of CPU cores above zero";
    match value::<f64>(s, what, "0.5 or 2")? {
        cpus if cpus.is_finite() && cpus > 0.0 && cpus <= 65536.0 => Ok(cpus),
        _ => Err(format!("not {what}; write one like 0.5 or 2")),
    }
}

/// `--pids`: a whole number of processes, at least one.
pub(crate) fn parse_pids(s: &str) -> Result<u64, String> {
    let what = "a whole number of processes above zero";
    match value::<u64>(s, what, "64")? {
        0 => Err(format!("not {what}; write one like 64")),
        n => Ok(n),
    }
}

/// A TCP or UDP port.
pub(crate) fn parse_port(s: &str) -> Result<u16, String> {
    value(s, "a port number (0 to 65535)", "15001")
}

/// A process id (a container's main process).
pub(crate) fn parse_pid(s: &str) -> Result<u32, String> {
    value(
        s,
        "a process id",
        "$(podman inspect -f '{{.State.Pid}}' CONTAINER)",
    )
}

/// An address to listen on or to reach: IP and port.
pub(crate) fn parse_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    value(s, "an IP address and port", "127.0.0.1:8080 or [::1]:8080")
}

/// What every duration option accepts, for its error message.
const DURATION_FORMS: &str = "use seconds (1.5) or a number with a unit (500ms, 1.5s, 2m, 1h30m)";

/// A duration as every option spells it: a bare number is seconds (`1.5`),
/// otherwise a number with a unit, compound allowed (`500ms`, `1.5s`, `2m`,
/// `1h30m`). Zero is refused: no option means "no time at all".
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let parsed = match t.parse::<f64>() {
        Ok(secs) if secs.is_finite() => Duration::try_from_secs_f64(secs).ok(),
        Ok(_) => None,
        Err(_) => humantime::parse_duration(t).ok(),
    };
    match parsed {
        Some(d) if !d.is_zero() => Ok(d),
        Some(_) => Err(format!(
            "invalid duration {s:?}: it must be longer than zero; {DURATION_FORMS}"
        )),
        None => Err(format!("invalid duration {s:?}: {DURATION_FORMS}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_mean_the_same_in_every_spelling() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("1.5"), Ok(ms(1500)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("1500ms"), Ok(ms(1500)));
        assert_eq!(parse_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_duration("0.5"), Ok(ms(500)));
        assert_eq!(parse_duration("2m"), Ok(ms(120_000)));
        assert_eq!(parse_duration("120"), Ok(ms(120_000)));
        assert_eq!(parse_duration("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("30s"), Ok(ms(30_000)));
    }

    #[test]
    fn bad_durations_say_what_is_wrong_and_how_to_write_one() {
        for bad in [
            "0", "0s", "0ms", "-1", "soon", "", "1.5x", "NaN", "inf", "1e30",
        ] {
            let e = parse_duration(bad).expect_err(bad);
            assert!(!e.contains('\n'), "{e}");
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            assert!(e.contains("500ms"), "{e}");
        }
        assert!(
            parse_duration("0")
                .unwrap_err()
                .contains("longer than zero")
        );
    }
}
