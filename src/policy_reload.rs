//! Reloading a running proxy's policy (`airlock proxy`, `airlock sidecar`:
//! on SIGHUP, or when a file of the policy changes, as a ConfigMap update's
//! symlink swap does): re-read it, put on record which policy now decides,
//! and only then swap it in.

use std::path::Path;

use airlock_auditor::{AuditEvent, Note, PolicyInForce, PolicySource, SessionRecorder};
use airlock_policy::Policy;
use airlock_proxy::Proxy;

use crate::{one_line, policy_file, secrets};

/// What a reload touches: the proxy whose rules it swaps, the file it
/// re-reads, and the session it is recorded in (none with `--no-audit`
/// or without an audit database).
pub(crate) struct Reloader<'a> {
    pub proxy: &'a Proxy,
    pub path: &'a Path,
    pub record: Option<&'a SessionRecorder>,
}

impl Reloader<'_> {
    /// Re-reads the policy; on any error keeps the one in force and says
    /// why. Returns whether the new policy is now in force.
    pub(crate) fn reload(&self) -> bool {
        let ok = match self.swap() {
            Ok(()) => {
                eprintln!("airlock: reloaded policy {}", self.path.display());
                true
            }
            Err(e) => {
                eprintln!(
                    "airlock: policy reload failed, keeping the previous policy: {}",
                    one_line(&e)
                );
                false
            }
        };
        self.proxy.metrics().policy_reloaded(ok);
        ok
    }

    fn swap(&self) -> anyhow::Result<()> {
        let policy = policy_file::load(self.path)?;
        let credentials = secrets::resolve_all(policy.credentials())?;
        // On record before it decides anything: every decision the new
        // policy makes comes after this note in the session's chain.
        if let Some(record) = self.record {
            record
                .record(AuditEvent::Note(note(&policy)))
                .map_err(|e| anyhow::anyhow!("the reload could not be recorded ({e})"))?;
        }
        self.proxy.reload(policy, credentials);
        Ok(())
    }
}

/// The reload's note: which policy decides from here on, by name and
/// SHA-256, with its text and every file it was read from.
fn note(policy: &Policy) -> Note {
    let sha256 = airlock_auditor::sha256_hex(policy.text().as_bytes());
    let files: Vec<PolicySource> = policy
        .sources()
        .into_iter()
        .map(|(name, text)| PolicySource {
            name: name.to_owned(),
            sha256: airlock_auditor::sha256_hex(text.as_bytes()),
        })
        .collect();
    let bases = files.len().saturating_sub(1);
    let text = match bases {
        0 => format!("policy reloaded: {} sha256 {sha256}", policy.source_name()),
        n => format!(
            "policy reloaded: {} sha256 {sha256} (and the {n} file(s) it extends)",
            policy.source_name()
        ),
    };
    Note {
        text,
        policy: Some(PolicyInForce {
            name: policy.source_name().to_owned(),
            sha256,
            text: policy.text().to_owned(),
            files,
        }),
    }
}
