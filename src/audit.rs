//! Starting an audit session: the one place the binary opens the audit store.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use airlock_auditor::{
    Access, OsText, SessionInfo, SessionMode, SessionRecorder, SigningKeySource, humanize,
};
use airlock_policy::Policy;
use airlock_proxy::ResolvedCredential;
use anyhow::Context;

/// What every session records about itself.
pub(crate) fn session_info(
    policy: &Policy,
    mode: SessionMode,
    limits: serde_json::Value,
    labels: BTreeMap<String, String>,
) -> SessionInfo {
    SessionInfo {
        command: recorded_command_line(std::env::args_os()),
        policy_name: policy.source_name().to_owned(),
        policy_text: policy.text().to_owned(),
        limits,
        airlock_version: env!("CARGO_PKG_VERSION").to_owned(),
        host: nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default(),
        mode,
        labels,
        ..SessionInfo::default()
    }
}

/// Airlock's own command line as the record keeps it, with what could be
/// a secret taken out: the value of an `--env KEY=VALUE` whose KEY looks
/// secret (as for the environment of every exec), and all of an
/// `--approval-webhook` URL but its host (a receiver's URL is often its
/// credential).
fn recorded_command_line(args: impl Iterator<Item = OsString>) -> Vec<OsText> {
    type Redact = fn(&[u8]) -> OsText;
    /// Options whose value is recorded redacted, each with its redaction.
    const REDACTED: [(&[u8], Redact); 2] = [
        (b"--env", redact_env),
        (b"--approval-webhook", redact_webhook),
    ];
    let mut out: Vec<OsText> = Vec::new();
    let mut value_next: Option<Redact> = None;
    for arg in args {
        let arg = arg.into_vec();
        if let Some(redact) = value_next.take() {
            out.push(redact(&arg));
            continue;
        }
        // Only airlock's own options: after `--` comes the command.
        let own = !out.iter().any(|a| a == "--");
        let mut recorded = OsText::from(arg.as_slice());
        for &(name, redact) in REDACTED.iter().filter(|_| own) {
            if arg == name {
                value_next = Some(redact);
            } else if let Some(value) = arg.strip_prefix(name).and_then(|v| v.strip_prefix(b"=")) {
                recorded = OsText::from([name, b"=", redact(value).as_bytes()].concat());
            }
        }
        out.push(recorded);
    }
    out
}

fn redact_env(assignment: &[u8]) -> OsText {
    match assignment.iter().position(|&b| b == b'=') {
        Some(i) if airlock_shim::is_secret_name(&assignment[..i]) => {
            OsText::from([&assignment[..i], b"=[redacted]"].concat())
        }
        _ => OsText::from(assignment),
    }
}

fn redact_webhook(url: &[u8]) -> OsText {
    OsText::from(airlock_proxy::approvals::shown_url(&String::from_utf8_lossy(url)).as_bytes())
}

pub(crate) trait WithNote {
    fn with_note(self, note: &str) -> Self;
    /// The session's record budget (`--audit-max-session`).
    fn with_budget(self, max_session_bytes: u64) -> Self;
}

impl WithNote for SessionInfo {
    fn with_note(mut self, note: &str) -> Self {
        self.capabilities_note = Some(note.to_owned());
        self
    }

    fn with_budget(mut self, max_session_bytes: u64) -> Self {
        self.max_session_bytes = Some(max_session_bytes);
        self
    }
}

/// The least free space the audit database's filesystem must have for a
/// session to start: room for its first events' metadata, checkpoints and
/// SQLite's journal. Fixed rather than the record budget: the budget bounds
/// what a session keeps, and a disk that fills later still stops the session
/// (fail closed); this refuses the disk that is already full.
const FREE_SPACE_FLOOR: u64 = 512 << 10;

/// Refuses to start a session on a filesystem that is (nearly) full: it
/// would stop at its first events.
/// Measured before the store is opened, on the database or, when it does
/// not exist yet, the directory it will be created in.
fn check_free_space(db: &Path) -> anyhow::Result<()> {
    let existing = db
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("."));
    let st = nix::sys::statvfs::statvfs(existing).with_context(|| {
        format!(
            "cannot measure the free space of the audit database {}",
            db.display()
        )
    })?;
    let free = st.blocks_available().saturating_mul(st.fragment_size());
    if free < FREE_SPACE_FLOOR {
        anyhow::bail!(
            "the audit database {} has {} free on its filesystem, below the floor of {}; \
             free some space there or choose another --audit-db",
            db.display(),
            humanize::size(free),
            humanize::size(FREE_SPACE_FLOOR),
        );
    }
    Ok(())
}

/// Open the store and begin a session. Every secret is registered with the
/// recorder's redactor as well, so that even a record the proxy got wrong
/// cannot carry one.
pub(crate) fn begin(
    db: &Path,
    key: Option<&Path>,
    info: SessionInfo,
    credentials: &[ResolvedCredential],
) -> anyhow::Result<SessionRecorder> {
    let key = match key {
        Some(k) => k.to_owned(),
        None => crate::paths::default_audit_key()?,
    };
    check_free_space(db)?;
    // Every error of opening names the file it concerns.
    let store = airlock_auditor::open_store(db, Access::Record(SigningKeySource::KeyFile(key)))?;
    for cred in credentials {
        for secret in &cred.secrets {
            store
                .redactor()
                .add(&cred.name, secret.expose())
                .with_context(|| format!("registering credential {} for redaction", cred.name))?;
        }
    }
    store
        .begin_session(info)
        .context("starting the audit session")
}

#[cfg(test)]
mod tests {
    use super::recorded_command_line;

    #[test]
    fn secret_looking_env_values_and_webhook_urls_are_redacted_from_the_command_line() {
        let args = [
            "airlock",
            "run",
            "--env",
            "API_TOKEN=t0k",
            "--env=DB_PASSWORD=pw",
            "--env",
            "PLAIN=ok",
            "--approval-webhook",
            "https://hooks.slack.com/services/T0/B0/SECRET",
            "--approval-webhook=https://bot.example/h?token=SECRET",
            "--",
            "sh",
            "--env",
            "GITHUB_TOKEN=kept-as-typed",
            "--approval-webhook",
            "kept",
        ]
        .map(std::ffi::OsString::from);
        assert_eq!(
            recorded_command_line(args.into_iter()),
            [
                "airlock",
                "run",
                "--env",
                "API_TOKEN=[redacted]",
                "--env=DB_PASSWORD=[redacted]",
                "--env",
                "PLAIN=ok",
                "--approval-webhook",
                "https://hooks.slack.com/***",
                "--approval-webhook=https://bot.example/***",
                "--",
                "sh",
                "--env",
                "GITHUB_TOKEN=kept-as-typed",
                "--approval-webhook",
                "kept",
            ]
            .map(airlock_auditor::OsText::from)
        );
    }

    #[test]
    fn a_command_line_that_is_not_utf8_is_kept_byte_for_byte() {
        use std::os::unix::ffi::OsStringExt;
        let args = [
            &b"airlock"[..],
            b"run",
            b"--env",
            b"K\xff=v",
            b"--",
            b"echo",
            b"a\xffb",
        ]
        .map(|a| std::ffi::OsString::from_vec(a.to_vec()));
        let recorded = recorded_command_line(args.into_iter());
        assert_eq!(recorded[3].as_bytes(), b"K\xff=v");
        assert_eq!(recorded[6].as_bytes(), b"a\xffb");
    }
}
