//! The secrets airlock holds that never enter the sandbox, not even when
//! its caller asks for them (`--env`, `--pass-env`, a step's `--env`):
//! each credential's secrets, which the proxy adds on the way out, and the
//! central audit store's password, which only the shipper uses. With the
//! store's password a command could rewrite the fleet's record.

use airlock_proxy::credentials::{ResolvedCredential, Secret};
use anyhow::bail;

use crate::ship::ShipUrl;

/// Every secret a sandbox's environment must not carry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Withheld(Vec<WithheldSecret>);

#[derive(Debug, Clone)]
struct WithheldSecret {
    /// Whose secret it is, for the refusal.
    whose: String,
    /// What to do instead.
    instead: &'static str,
    secret: Secret,
}

impl Withheld {
    /// The secrets of `credentials` and, when the record is shipped to
    /// `ship`, the store's password.
    pub(crate) fn new(
        credentials: &[ResolvedCredential],
        ship: Option<&ShipUrl>,
    ) -> anyhow::Result<Self> {
        let mut held: Vec<WithheldSecret> = credentials
            .iter()
            .flat_map(|c| {
                c.secrets.iter().map(|secret| WithheldSecret {
                    whose: format!("the secret of credential {}", c.name),
                    instead: "use the credential's placeholder instead",
                    secret: secret.clone(),
                })
            })
            .collect();
        // `--audit-ship` refuses a URL with a password, so the
        // environment's is the one it connects with.
        if ship.is_some()
            && let Some(password) = airlock_auditor::postgres::password_from_environment()?
        {
            held.push(WithheldSecret {
                whose: "the central audit store's password".into(),
                instead: "only airlock's shipper uses it",
                secret: Secret::new(password),
            });
        }
        held.retain(|h| !h.secret.expose().is_empty());
        Ok(Self(held))
    }

    /// Refuses variable `key` when `value` carries a withheld secret.
    pub(crate) fn refuse_in(&self, key: &str, value: &str) -> anyhow::Result<()> {
        if let Some(held) = self.0.iter().find(|h| value.contains(h.secret.expose())) {
            bail!(
                "{key} carries {}; secrets never enter the sandbox ({})",
                held.whose,
                held.instead
            );
        }
        Ok(())
    }
}
