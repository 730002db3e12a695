//! The values the proxy decides and the record keeps: verdicts and the rule
//! that decided.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What the policy did with a query, connection or request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny,
    /// Allowed because the policy's default is `report`; deny would have
    /// blocked it.
    Report,
}

impl Verdict {
    /// The serialized name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Report => "report",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Verdict {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Verdict {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The policy rule that decided, as the policy's author finds it:
/// "policy.toml:12".
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RuleRef(String);

impl RuleRef {
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for RuleRef {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl From<String> for RuleRef {
    fn from(text: String) -> Self {
        Self(text)
    }
}

/// Text that names no verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown verdict {0:?}: expected allow, deny or report")]
pub struct UnknownVerdict(pub String);

impl std::str::FromStr for Verdict {
    type Err = UnknownVerdict;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        [Self::Allow, Self::Deny, Self::Report]
            .into_iter()
            .find(|v| v.as_str() == text)
            .ok_or_else(|| UnknownVerdict(text.to_owned()))
    }
}
