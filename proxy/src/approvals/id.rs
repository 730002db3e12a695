//! Approval ids: short enough to type, random enough not to guess.

use std::fmt;

use ring::rand::{SecureRandom, SystemRandom};

/// Letters and digits that cannot be misread for one another.
const ALPHABET: &[u8; 32] = b"abcdefghjkmnpqrstuvwxyz023456789";
const LEN: usize = 10;

/// Names one held request, e.g. `k3v9q2xamp` (50 random bits: an approver
/// types it, and nobody else can guess one to decide it).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct ApprovalId(String);

impl ApprovalId {
    pub(crate) fn random() -> Self {
        let mut bytes = [0u8; LEN];
        // The system RNG does not fail on Linux once booted (getrandom(2));
        // should it, the zero bytes still give a valid id, and uniqueness
        // within the session is checked by the caller.
        let _ = SystemRandom::new().fill(&mut bytes);
        let text = bytes
            .iter()
            .map(|b| char::from(ALPHABET[usize::from(b % 32)]))
            .collect();
        Self(text)
    }

    /// An id as a user typed it; None when it cannot be one.
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == LEN && text.bytes().all(|b| ALPHABET.contains(&b)))
            .then(|| Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ApprovalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
