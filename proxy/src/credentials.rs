//! Credential injection and secret scrubbing.
//!
//! Secrets are resolved by the binary (from the environment or files) and live
//! only in the proxy's memory. On a request to one of a credential's hosts the
//! proxy sets its header and swaps its placeholder for the real secret; on
//! every other host nothing changes, so a placeholder stays a placeholder.
//! Whatever an upstream echoes back is scrubbed before it reaches the client,
//! and records show `[secret:NAME]` instead of the value.

use airlock_policy::{Host, HostPattern};
use http::{HeaderMap, HeaderName, HeaderValue};
use memchr::memmem;

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
pub struct Credentials(Vec<ResolvedCredential>);

/// What was injected into one request, so its response can be scrubbed.
#[derive(Debug, Clone, Default)]
pub struct Injected {
    pub names: Vec<String>,
    /// (secret, marker) pairs, longest secret first so that overlaps scrub fully.
    pub scrub: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Injected {
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

impl Credentials {
    pub fn new(list: Vec<ResolvedCredential>) -> Self {
        Self(list)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ResolvedCredential> {
        self.0.iter()
    }

    /// Set headers and swap placeholders for every credential bound to `host`.
    pub fn inject(&self, host: &Host, headers: &mut HeaderMap) -> Injected {
        let mut injected = Injected::default();
        for cred in self.0.iter().filter(|c| c.applies_to(host)) {
            if let Some(ph) = &cred.placeholder {
                swap_in_headers(headers, &ph.dummy, ph.secret.expose());
            }
            if let Ok(value) = HeaderValue::from_str(cred.value.expose()) {
                let mut value = value;
                value.set_sensitive(true);
                headers.insert(cred.header.clone(), value);
            }
            injected.names.push(cred.name.clone());
            for s in &cred.secrets {
                injected
                    .scrub
                    .push((s.expose().as_bytes().to_vec(), cred.marker().into_bytes()));
            }
        }
        injected
            .scrub
            .sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
        injected
    }

    /// Replace every secret value in `text` by its marker (for records).
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for cred in &self.0 {
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

/// Replaces secrets in a byte stream, chunk by chunk.
///
/// A secret may straddle two chunks, so the scrubber holds back the longest
/// tail of a chunk that is the beginning of some secret — and nothing else, so
/// a streamed response (server-sent events) is not delayed.
#[derive(Debug)]
pub struct Scrubber {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    pending: Vec<u8>,
}

impl Scrubber {
    pub fn new(injected: &Injected) -> Self {
        Self {
            pairs: injected
                .scrub
                .iter()
                .filter(|(s, _)| !s.is_empty())
                .cloned()
                .collect(),
            pending: Vec::new(),
        }
    }

    /// Scrub the next chunk; returns the bytes safe to send now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let data = std::mem::take(&mut self.pending);
        let replaced = self.replace_all(&data);
        let keep = self.partial_suffix(&replaced);
        let cut = replaced.len() - keep;
        self.pending = replaced[cut..].to_vec();
        replaced[..cut].to_vec()
    }

    /// The held-back tail at end of stream (it is not a whole secret).
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }

    fn replace_all(&self, data: &[u8]) -> Vec<u8> {
        let mut current = data.to_vec();
        for (secret, marker) in &self.pairs {
            if memmem::find(&current, secret).is_none() {
                continue;
            }
            let mut out = Vec::with_capacity(current.len());
            let mut rest = &current[..];
            while let Some(i) = memmem::find(rest, secret) {
                out.extend_from_slice(&rest[..i]);
                out.extend_from_slice(marker);
                rest = &rest[i + secret.len()..];
            }
            out.extend_from_slice(rest);
            current = out;
        }
        current
    }

    /// Length of the longest suffix of `data` that is a proper prefix of a secret.
    fn partial_suffix(&self, data: &[u8]) -> usize {
        let mut best = 0;
        for (secret, _) in &self.pairs {
            let max = (secret.len() - 1).min(data.len());
            for len in (best + 1..=max).rev() {
                if data.ends_with(&secret[..len]) {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}

/// Scrub secrets from response header values.
pub fn scrub_headers(headers: &mut HeaderMap, injected: &Injected) {
    for value in headers.values_mut() {
        let bytes = value.as_bytes();
        if injected
            .scrub
            .iter()
            .any(|(s, _)| !s.is_empty() && memmem::find(bytes, s).is_some())
        {
            let mut scrubber = Scrubber::new(injected);
            let mut clean = scrubber.push(bytes);
            clean.extend(scrubber.finish());
            if let Ok(v) = HeaderValue::from_bytes(&clean) {
                *value = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn injected(secret: &str) -> Injected {
        Injected {
            names: vec!["t".into()],
            scrub: vec![(secret.as_bytes().to_vec(), b"[secret:t]".to_vec())],
        }
    }

    #[test]
    fn scrubs_a_secret_split_across_chunks() {
        let mut s = Scrubber::new(&injected("SECRET123"));
        let mut out = s.push(b"token=SEC");
        out.extend(s.push(b"RET123; done"));
        out.extend(s.finish());
        assert_eq!(out, b"token=[secret:t]; done");
    }

    #[test]
    fn holds_back_only_a_possible_secret_prefix() {
        let mut s = Scrubber::new(&injected("SECRET123"));
        assert_eq!(s.push(b"data: hello\n\n"), b"data: hello\n\n");
        assert_eq!(s.push(b"x SE"), b"x ");
        assert_eq!(s.finish(), b"SE");
    }

    #[test]
    fn every_split_point_is_scrubbed() {
        let body = b"aaSECRETbbSECRETcc";
        for cut in 0..body.len() {
            let mut s = Scrubber::new(&injected("SECRET"));
            let mut out = s.push(&body[..cut]);
            out.extend(s.push(&body[cut..]));
            out.extend(s.finish());
            assert_eq!(out, b"aa[secret:t]bb[secret:t]cc", "cut {cut}");
        }
    }
}
