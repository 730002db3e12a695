//! The policy and the credentials in force, swapped together on reload.
//!
//! Each connection and request loads the current [`Rules`] once, so a reload
//! (SIGHUP) applies to new decisions while running connections keep going.

use airlock_policy::Policy;

use crate::credentials::Credentials;

#[derive(Debug, Clone)]
pub struct Rules {
    pub policy: Policy,
    pub credentials: Credentials,
}
