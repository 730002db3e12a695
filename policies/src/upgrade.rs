//! HTTP/1.1 protocol upgrades (RFC 9110 §7.8) that an allow rule can grant.
//!
//! After a `101 Switching Protocols` the connection stops being HTTP, so the
//! policy's per-request checks no longer apply to what travels on it. An
//! upgrade is therefore something a rule grants by name, and only for a
//! protocol the proxy can still inspect after the switch.

use serde::Serialize;

/// A protocol an `upgrade = [...]` list may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UpgradeProtocol {
    /// RFC 6455; the proxy relays it frame by frame, recorded and scrubbed.
    #[serde(rename = "websocket")]
    WebSocket,
}

/// What one `Upgrade` protocol token names, as far as Airlock is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeToken {
    /// A protocol a rule may grant.
    Grantable(UpgradeProtocol),
    /// HTTP/2 over cleartext (RFC 7540 §3.2): never granted, because the
    /// proxy already speaks HTTP/2 with both sides itself, and after the
    /// switch the stream would carry requests the policy never saw.
    H2c,
    /// Anything else, as the client wrote it.
    Unknown(String),
}

impl UpgradeProtocol {
    /// Every grantable protocol, for messages that list the allowed values.
    pub const ALL: [Self; 1] = [Self::WebSocket];

    /// The lower-case token a policy and an `Upgrade` header use.
    pub fn token(self) -> &'static str {
        match self {
            Self::WebSocket => "websocket",
        }
    }

    /// Classifies one protocol from an `Upgrade` header or an `upgrade`
    /// list. Protocol names compare case-insensitively (RFC 9110 §7.8,
    /// RFC 6455 §4.2.1). A version suffix (`websocket/13`) is not a form
    /// WebSocket uses, so it is unknown rather than guessed at.
    pub fn classify(token: &str) -> UpgradeToken {
        let token = token.trim();
        if token.eq_ignore_ascii_case("h2c") {
            return UpgradeToken::H2c;
        }
        Self::ALL
            .into_iter()
            .find(|p| p.token().eq_ignore_ascii_case(token))
            .map_or_else(
                || UpgradeToken::Unknown(token.to_owned()),
                UpgradeToken::Grantable,
            )
    }

    /// `"websocket"` (quoted, comma-separated) for messages.
    pub fn allowed_values() -> String {
        Self::ALL
            .iter()
            .map(|p| format!("\"{}\"", p.token()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::fmt::Display for UpgradeProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.token())
    }
}
