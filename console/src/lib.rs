//! Airlock's forensic console: `airlock audit serve`.
//!
//! A local web UI over the audit store, for the responder who would rather
//! look than read. It is read-only (the store is opened read-only and no
//! handler writes), local (loopback by default, and requests naming any
//! other host are refused, so a DNS-rebinding page cannot use it) and
//! guarded by a random token (see [`auth`]). Every asset is compiled in
//! ([`assets`]), the page runs under a strict Content-Security-Policy
//! ([`respond`]), and recorded data reaches the page only as JSON that the
//! script renders as text.
//!
//! - [`auth`]: the token, the cookie and the Host check.
//! - [`router`]: which handler serves which path.
//! - [`api`]: the JSON API (docs/console.md lists it), one module a page.
//! - [`render`]: recorded bytes as something a person can read.
//! - [`verification`]: the badge, recomputed whenever the database changed.
#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

mod api;
mod assets;
mod auth;
mod error;
mod render;
mod respond;
mod router;
mod server;
mod verification;

pub use error::ConsoleError;
pub use server::{Console, ConsoleConfig, RuleAdvisor};
