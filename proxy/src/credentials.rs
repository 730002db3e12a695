//! Credential injection and secret scrubbing.
//!
//! Secrets are resolved by the binary (from the environment or files) and live
//! only in the proxy's memory. On a request to one of a credential's hosts the
//! proxy sets its header and swaps its placeholder for the real secret; on
//! every other host nothing changes, so a placeholder stays a placeholder.
//! Whatever an upstream echoes back, in any of the forms of
//! [`forms`], is scrubbed ([`scrub`]) before it reaches the
//! client, and records show `[secret:NAME]` instead of the value.

use airlock_policy::{Host, HostPattern};
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};

pub mod forms;
pub mod scrub;

pub use scrub::{ResponseScrub, ScrubSet, Scrubber};

/// A secret value. Its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A credential with its secret resolved.
#[derive(Debug, Clone)]
pub struct ResolvedCredential {
    pub name: String,
    pub hosts: Vec<HostPattern>,
    pub header: HeaderName,
    /// The full header value, e.g. `Bearer <token>`.
    pub value: Secret,
    /// The secret the placeholder stands for (the one `${...}` reference), and
    /// the dummy the sandbox sees instead.
    pub placeholder: Option<Placeholder>,
    /// Every secret string to scrub: the header value and each reference it expands.
    pub secrets: Vec<Secret>,
}

#[derive(Debug, Clone)]
pub struct Placeholder {
    /// The environment variable the sandbox gets.
    pub variable: String,
    /// Its dummy value inside the sandbox.
    pub dummy: String,
    pub secret: Secret,
}

impl ResolvedCredential {
    pub fn applies_to(&self, host: &Host) -> bool {
        self.hosts.iter().any(|p| p.matches(host))
    }

    /// The marker recorded wherever this credential's value would appear.
    pub fn marker(&self) -> String {
        format!("[secret:{}]", self.name)
    }
}

/// The set of credentials in force.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    list: Vec<ResolvedCredential>,
    /// Every form of every credential's secrets, compiled once. A response
    /// to a request that carried any credential is scrubbed of all of them:
    /// none of them is the sandbox's to see.
    scrub_set: Option<Arc<ScrubSet>>,
    /// The scrubber could not be built, so no credential is injected (fail
    /// closed: a secret that could not be scrubbed is never sent).
    unscrubbable: bool,
}

/// What was injected into one request, so its response can be scrubbed.
#[derive(Debug, Clone, Default)]
pub struct Injected {
    pub names: Vec<String>,
    /// The forms to scrub from the response; `Some` whenever `names` isn't empty.
    pub scrub_set: Option<Arc<ScrubSet>>,
}

impl Injected {
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

impl Credentials {
    pub fn new(list: Vec<ResolvedCredential>) -> Self {
        let markers: Vec<String> = list.iter().map(ResolvedCredential::marker).collect();
        let secrets = list.iter().zip(&markers).flat_map(|(cred, marker)| {
            cred.secrets
                .iter()
                .map(move |s| (s.expose(), marker.as_str()))
        });
        let (scrub_set, unscrubbable) = match ScrubSet::new(secrets) {
            Ok(set) => (set.map(Arc::new), false),
            Err(e) => {
                tracing::error!("{e}; no credential will be injected");
                (None, true)
            }
        };
        Self {
            list,
            scrub_set,
            unscrubbable,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &ResolvedCredential> {
        self.list.iter()
    }

    /// Every form of every credential's secret, for a record of bytes the
    /// sandbox sent (a refused request's body); None when there are none.
    pub fn scrub_set(&self) -> Option<&Arc<ScrubSet>> {
        self.scrub_set.as_ref()
    }

    /// Set headers and swap placeholders for every credential bound to `host`.
    pub fn inject(&self, host: &Host, headers: &mut HeaderMap) -> Injected {
        let mut injected = Injected::default();
        if self.unscrubbable {
            return injected;
        }
        for cred in self.list.iter().filter(|c| c.applies_to(host)) {
            if let Some(ph) = &cred.placeholder {
                swap_in_headers(headers, &ph.dummy, ph.secret.expose());
            }
            if let Ok(value) = HeaderValue::from_str(cred.value.expose()) {
                let mut value = value;
                value.set_sensitive(true);
                headers.insert(cred.header.clone(), value);
            }
            injected.names.push(cred.name.clone());
            injected.scrub_set = self.scrub_set.clone();
        }
        injected
    }

    /// Replace every secret value in `text` by its marker (for records).
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for cred in &self.list {
            for s in &cred.secrets {
                if !s.expose().is_empty() && out.contains(s.expose()) {
                    out = out.replace(s.expose(), &cred.marker());
                }
            }
        }
        out
    }
}

fn swap_in_headers(headers: &mut HeaderMap, dummy: &str, secret: &str) {
    for value in headers.values_mut() {
        if let Ok(text) = value.to_str()
            && text.contains(dummy)
            && let Ok(mut swapped) = HeaderValue::from_str(&text.replace(dummy, secret))
        {
            swapped.set_sensitive(true);
            *value = swapped;
        }
    }
}

/// Scrub secrets (every form) from response header values.
pub fn scrub_headers(headers: &mut HeaderMap, injected: &Injected) {
    if let Some(set) = &injected.scrub_set {
        set.scrub_headers(headers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(name: &str, host: &str, token: &str) -> ResolvedCredential {
        ResolvedCredential {
            name: name.into(),
            hosts: vec![host.parse().unwrap()],
            header: HeaderName::from_static("authorization"),
            value: Secret::new(format!("Bearer {token}")),
            placeholder: None,
            secrets: vec![
                Secret::new(format!("Bearer {token}")),
                Secret::new(token.into()),
            ],
        }
    }

    #[test]
    fn a_response_to_a_request_with_a_credential_is_scrubbed_of_every_credential() {
        let creds = Credentials::new(vec![
            credential("a", "a.test", "tokenAAAA1"),
            credential("b", "b.test", "tokenBBBB2"),
        ]);
        let mut headers = HeaderMap::new();
        let injected = creds.inject(&"a.test".parse().unwrap(), &mut headers);
        assert_eq!(injected.names, ["a"]);
        assert_eq!(headers["authorization"], "Bearer tokenAAAA1");
        let mut s = Scrubber::new(&injected);
        let mut out = s.push(b"TOKENAAAA1 tokenBBBB2");
        out.extend(s.finish());
        assert_eq!(out, b"[secret:a] [secret:b]");
    }

    #[test]
    fn no_credential_means_no_scrubbing() {
        let creds = Credentials::new(vec![credential("a", "a.test", "tokenAAAA1")]);
        let injected = creds.inject(&"c.test".parse().unwrap(), &mut HeaderMap::new());
        assert!(injected.is_empty());
        assert!(ResponseScrub::new(&injected).is_none());
    }
}
