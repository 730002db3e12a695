//! `airlock sidecar`'s own machinery: joining the app's network namespace,
//! the nftables capture rules, and the readiness client for init ordering.
//! The command itself is `commands::sidecar`.

pub(crate) mod netns;
pub(crate) mod rules;
pub(crate) mod wait_ready;
