//! What an approver is shown of a held request's headers and body: one
//! model, built here, that `airlock approvals` prints, the API and the
//! webhook carry as JSON, and `airlock approvals show ID` prints whole.
//!
//! The person deciding approves what they read, so nothing that changes a
//! request's meaning may be left out or hidden behind a cut: every header
//! that can change what the request does is listed (only a short list of
//! inert ones is folded into names), the body is rendered whole as fields
//! or lines within a generous bound, and past the bound the view says how
//! much it does not show. What a hostile program would use to mislead
//! (a method override, a key sent twice, a body that is not what its
//! Content-Type says, an encoded body) becomes a warning, shown first.
//!
//! Text here is not yet escaped for a terminal: the printer does that (JSON
//! escaping covers the API and the webhook).

mod body;
mod headers;
mod json;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use body::{BodyForm, Bound, Field, Hidden, ShownBody, ValueKind};
pub use headers::ShownHeader;

/// Replaces each secret in text with its `[secret:NAME]` marker, as the
/// record does.
#[derive(Clone)]
pub struct Redactor(Arc<dyn Fn(&str) -> String + Send + Sync>);

impl Redactor {
    pub fn new(redact: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        Self(Arc::new(redact))
    }

    /// Nothing to redact.
    pub fn none() -> Self {
        Self::new(str::to_owned)
    }

    pub(crate) fn text(&self, text: &str) -> String {
        (self.0)(text)
    }

    /// Secrets in raw bytes: each byte read as the character of the same
    /// number (so an ASCII secret matches wherever its bytes appear), then
    /// back. Markers are ASCII.
    pub(crate) fn bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let latin1: String = bytes.iter().map(|&b| char::from(b)).collect();
        self.text(&latin1)
            .chars()
            .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
            .collect()
    }
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redactor(..)")
    }
}

/// A held request as its approver reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shown {
    /// What changes the request's meaning, one sentence each.
    pub warnings: Vec<String>,
    /// The headers that can change what the request does, as sent (in the
    /// whole view, every header).
    pub headers: Vec<ShownHeader>,
    /// The inert headers not in `headers`, by name.
    pub inert_headers: Vec<String>,
    pub body: ShownBody,
    /// Everything, unbounded (`airlock approvals show ID`), or the view
    /// within [`Bound::LISTING`].
    pub whole: bool,
}

/// What the view is built from: the request as the sandbox sent it.
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    pub method: &'a str,
    pub url: &'a str,
    /// Already redacted.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

impl Shown {
    /// The view within `bound`; `whole` lists every header too.
    pub fn new(held: Held<'_>, redactor: &Redactor, bound: &Bound) -> Self {
        let whole = bound.is_whole();
        let mut warnings = Vec::new();
        let (headers, inert_headers) = headers::shown(held, whole, &mut warnings);
        query_override(held, &mut warnings);
        let body = body::shown(held, redactor, bound, &mut warnings);
        Self {
            warnings,
            headers,
            inert_headers,
            body,
            whole,
        }
    }
}

/// `?_method=DELETE`, which some frameworks take as the method.
fn query_override(held: Held<'_>, warnings: &mut Vec<String>) {
    let Some((_, query)) = held.url.split_once('?') else {
        return;
    };
    for (key, value) in body::form_pairs(query.as_bytes()) {
        if headers::is_method_field(&key) {
            warnings.push(format!(
                "method override: the query's {key}={value} may make the server treat this {} as {value}",
                held.method
            ));
        }
    }
}

#[cfg(test)]
mod tests;
