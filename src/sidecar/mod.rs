//! `airlock sidecar`'s own machinery: joining the app's network namespace,
//! the nftables capture rules, and the readiness client for init ordering.
//! The command itself is `commands::sidecar`.

pub mod netns;
pub mod rules;
pub mod wait_ready;
