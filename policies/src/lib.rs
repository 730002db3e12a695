//! Airlock's egress policy: the TOML model, its validation, the matcher the
//! proxy asks, and lint. This crate does no I/O of any kind.
//!
//! # Decision precedence (`Policy::evaluate`)
//! 1. The request path is normalised; an ambiguous path (dot segments,
//!    encoded `/` or `\`, control characters, double encoding, ...) is
//!    denied in every mode, even `default = "allow"`/`"report"`.
//! 2. A matching `[[deny]]` rule denies. Deny rules also match the path
//!    fully decoded, lower-cased and without `;params`, each also without
//!    a trailing `/`, and methods case-insensitively.
//! 3. The first HTTP `[[allow]]` rule (file order) matching host, port,
//!    method and path whose body constraints pass allows. If rules matched
//!    but all failed their body constraints, the first failure denies.
//! 4. Otherwise the default applies: `deny` denies with the most specific
//!    reason; `allow` allows with no rule.
//!
//! A request asking to upgrade (`Policy::evaluate_upgrade`) is decided the
//! same way, except that step 3 only tries rules whose `upgrade` list names
//! the protocol, and a request other rules would allow is denied
//! (`UpgradeNotGranted`) in `allow` mode too.
//!
//! `default = "report"` never blocks anything except ambiguous paths:
//! whatever deny mode would have denied (including deny rules and failed
//! body constraints) is allowed with `would_deny` set; DNS and connections
//! are never refused. That is the policy's view: the proxy still refuses
//! non-public upstream addresses and domain fronting in every mode.

#![forbid(unsafe_code)]
// Not in the workspace's lints yet: the shim's pty::RawMode has no Debug.
#![warn(missing_debug_implementations)]
// Crate-level, not in the workspace's lints: applying it to the shim and
// the binary is left for their owners.
#![warn(unreachable_pub)]

mod binding;
mod body;
mod compile;
mod credential;
mod decimal;
mod decision;
mod error;
mod form;
mod glob;
mod host;
mod json;
mod lint;
mod path;
mod policy;
mod raw;
mod rule;
mod suggest;
mod upgrade;

#[cfg(test)]
mod tests;

pub use credential::{Credential, SecretTemplate, SecretTemplateError, TemplatePart};
pub use decision::{
    Allowance, BodyInput, ConnectionDecision, Decision, DefaultAction, Denial, DenyReason,
    RequestInfo, Scheme,
};
pub use error::{Lint, PolicyError};
pub use host::{Host, HostError, HostPattern};
pub use policy::{MAX_BODY_BYTES, Policy};
pub use rule::{RuleKind, RuleRef};
pub use upgrade::{UpgradeProtocol, UpgradeToken};
