//! Starting an audit session: the one place the binary opens the audit store.

use std::path::Path;

use airlock_auditor::{AuditStore, SessionInfo, SessionMode, SessionRecorder, SigningKeySource};
use airlock_policy::Policy;
use airlock_proxy::ResolvedCredential;
use anyhow::Context;

/// What every session records about itself.
pub fn session_info(policy: &Policy, mode: SessionMode, limits: serde_json::Value) -> SessionInfo {
    SessionInfo {
        command: std::env::args().collect(),
        policy_name: policy.source_name().to_owned(),
        policy_text: policy.text().to_owned(),
        limits,
        airlock_version: env!("CARGO_PKG_VERSION").to_owned(),
        host: nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default(),
        mode,
        ..SessionInfo::default()
    }
}

pub trait WithNote {
    fn with_note(self, note: &str) -> Self;
}

impl WithNote for SessionInfo {
    fn with_note(mut self, note: &str) -> Self {
        self.capabilities_note = Some(note.to_owned());
        self
    }
}

/// Open the store and begin a session. Every secret is registered with the
/// recorder's redactor as well, so that even a record the proxy got wrong
/// cannot carry one.
pub fn begin(
    db: &Path,
    key: Option<&Path>,
    info: SessionInfo,
    credentials: &[ResolvedCredential],
) -> anyhow::Result<SessionRecorder> {
    let key = match key {
        Some(k) => k.to_owned(),
        None => crate::paths::default_audit_key()?,
    };
    let store = AuditStore::open(db, SigningKeySource::KeyFile(key))
        .with_context(|| format!("opening the audit database {}", db.display()))?;
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
