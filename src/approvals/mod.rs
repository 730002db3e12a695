//! Human approval, the binary's side: the options every mode takes, the
//! approvals socket each session serves the API on (`socket`), and the
//! client `airlock approvals|approve|deny` use (`client`). The held
//! requests themselves live in the proxy (`airlock_proxy::approvals`).

pub(crate) mod client;
mod socket;

use airlock_proxy::ApprovalsConfig;
use airlock_proxy::approvals::{DEFAULT_PENDING_CAP, Webhook};
use rustls::pki_types::CertificateDer;

pub(crate) use socket::ApprovalSocket;

/// How held requests reach a person; shared by `run`, `session start`,
/// `proxy` and `sidecar`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ApprovalOptions {
    /// POST each request an [[ask]] rule holds, as JSON, to this URL (a few tries; never delays the proxy).
    #[arg(long, value_name = "URL")]
    pub approval_webhook: Option<String>,
    /// At most this many requests wait for approval at once; past it, new ones are refused at once.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PENDING_CAP, value_parser = at_least_one)]
    pub approval_cap: usize,
}

impl ApprovalOptions {
    /// The proxy's approvals settings (the session's label is set once it
    /// is known). `roots`: `--upstream-ca`, trusted for the webhook too;
    /// `mark`: the sidecar's socket mark, for the webhook's connections.
    pub(crate) fn config(
        &self,
        roots: &[CertificateDer<'static>],
        mark: Option<u32>,
    ) -> anyhow::Result<ApprovalsConfig> {
        let webhook = match &self.approval_webhook {
            Some(url) => Some(Webhook::new(url, roots, mark)?),
            None => None,
        };
        Ok(ApprovalsConfig {
            cap: self.approval_cap,
            webhook,
            ..ApprovalsConfig::default()
        })
    }
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "invalid --approval-cap {s:?}: give a whole number of at least 1"
        )),
    }
}
