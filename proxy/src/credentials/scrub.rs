//! Scrubbing secrets from everything a credential-bearing upstream sends.
//!
//! On an exchange where a credential was injected, every part of the response
//! passes one [`ResponseScrub`]: the head (reason phrase, header names and
//! values, also of a `101`), each body chunk, and the trailers. Each secret is
//! looked for in all of its derived forms ([`super::forms`]) at once, by
//! one Aho-Corasick automaton (ASCII-case-insensitive), and every occurrence
//! becomes the credential's marker `[secret:NAME]`.
//!
//! Speed: the data is lower-cased into a scratch buffer and searched by a
//! SIMD "packed" (Teddy) searcher, the fast path for a chunk with no form in
//! it (nearly all of them); only a chunk with an occurrence goes through the
//! automaton for every overlapping occurrence. aho-corasick's own prefilter
//! cannot be used: it has no SIMD search under case-insensitivity, and on
//! text made of the same letters as base64 forms its byte prefilters thrash
//! (`bench/src/bin/scrub_cost.rs` measures each choice).
//!
//! Where forms overlap (one secret's form running into another's, or one form
//! containing another), the union of the overlapping occurrences is replaced
//! as a whole, so no byte of any of them is left behind.

use std::borrow::Cow;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, Input, MatchKind, packed};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};

use super::forms::forms;

/// Every form of every secret, compiled once when the credentials are loaded.
pub struct ScrubSet {
    /// Finds the leftmost occurrence in lower-cased data, fast; `None` when
    /// the packed searcher is unavailable (too many forms, or no SIMD), and
    /// then the automaton does all the work.
    detector: Option<packed::Searcher>,
    /// Every occurrence, overlapping ones too, in lower-cased data.
    matcher: AhoCorasick,
    /// Lower-cased forms, by pattern id: for the hold-back at a chunk's end.
    patterns: Vec<Vec<u8>>,
    /// The marker index of each pattern.
    marker_of: Vec<usize>,
    markers: Vec<Vec<u8>>,
    /// `starts[b]`: some form begins with byte `b` (either case).
    starts: [bool; 256],
    longest: usize,
}

// Never print the forms: they are the secrets.
impl std::fmt::Debug for ScrubSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScrubSet({} forms)", self.patterns.len())
    }
}

/// Why a scrub set could not be compiled (never expected: the forms are short).
#[derive(Debug, thiserror::Error)]
#[error("cannot compile the secret scrubber: {0}")]
pub struct ScrubBuildError(#[from] aho_corasick::BuildError);

/// One occurrence (or a union of overlapping ones) to replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
    marker: usize,
}

impl ScrubSet {
    /// `secrets` are (secret, marker) pairs; empty secrets are ignored.
    /// `None` when there is nothing to scrub.
    pub fn new<'a>(
        secrets: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Option<Self>, ScrubBuildError> {
        let mut markers: Vec<Vec<u8>> = Vec::new();
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut marker_of = Vec::new();
        for (secret, marker) in secrets {
            let index = match markers.iter().position(|m| m == marker.as_bytes()) {
                Some(i) => i,
                None => {
                    markers.push(marker.as_bytes().to_vec());
                    markers.len() - 1
                }
            };
            for form in forms(secret) {
                let form = form.to_ascii_lowercase();
                if !patterns.contains(&form) {
                    patterns.push(form);
                    marker_of.push(index);
                }
            }
        }
        if patterns.is_empty() {
            return Ok(None);
        }
        // A DFA: a few hundred KiB at most for these sizes; Standard semantics
        // so overlapping occurrences are all seen. It runs only where the
        // detector found something, so its own prefilter would only cost.
        let matcher = AhoCorasickBuilder::new()
            .match_kind(MatchKind::Standard)
            .kind(Some(AhoCorasickKind::DFA))
            .prefilter(false)
            .build(&patterns)?;
        let detector = packed::Config::new()
            .match_kind(packed::MatchKind::LeftmostFirst)
            .builder()
            .extend(&patterns)
            .build();
        let mut starts = [false; 256];
        for p in &patterns {
            starts[usize::from(p[0].to_ascii_lowercase())] = true;
            starts[usize::from(p[0].to_ascii_uppercase())] = true;
        }
        let longest = patterns.iter().map(Vec::len).max().unwrap_or(0);
        Ok(Some(Self {
            detector,
            matcher,
            patterns,
            marker_of,
            markers,
            starts,
            longest,
        }))
    }

    /// How many distinct forms are scrubbed.
    pub fn len(&self) -> usize {
        self.patterns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The length of the longest form: a cut made this far past the end of
    /// what is kept cannot split a form that reaches into it.
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// Whether any form occurs in `data`.
    pub fn finds(&self, data: &[u8]) -> bool {
        let lower = data.to_ascii_lowercase();
        match &self.detector {
            Some(detector) => detector.find(&lower).is_some(),
            None => self.matcher.is_match(&lower),
        }
    }

    /// `data` with every occurrence replaced (for heads and trailers, which
    /// arrive whole).
    pub fn scrub<'d>(&self, data: &'d [u8]) -> Cow<'d, [u8]> {
        let spans = self.spans(data, &mut Vec::new());
        if spans.is_empty() {
            return Cow::Borrowed(data);
        }
        let mut out = Vec::with_capacity(data.len());
        self.replace(data, &spans, &mut out);
        Cow::Owned(out)
    }

    /// Occurrences in `data`, overlapping ones merged, in order. `lower` is
    /// scratch space for the lower-cased copy.
    fn spans(&self, data: &[u8], lower: &mut Vec<u8>) -> Vec<Span> {
        lower.clear();
        lower.extend(data.iter().map(u8::to_ascii_lowercase));
        let from = match &self.detector {
            // No occurrence starts before the leftmost one.
            Some(detector) => match detector.find(&lower[..]) {
                Some(m) => m.start(),
                None => return Vec::new(),
            },
            None => 0,
        };
        let mut found: Vec<Span> = self
            .matcher
            .find_overlapping_iter(Input::new(&lower[..]).range(from..))
            .map(|m| Span {
                start: m.start(),
                end: m.end(),
                marker: self.marker_of[m.pattern().as_usize()],
            })
            .collect();
        if found.len() < 2 {
            return found;
        }
        found.sort_by_key(|s| (s.start, std::cmp::Reverse(s.end)));
        let mut merged: Vec<Span> = Vec::with_capacity(found.len());
        for span in found {
            match merged.last_mut() {
                Some(last) if span.start < last.end => last.end = last.end.max(span.end),
                _ => merged.push(span),
            }
        }
        merged
    }

    /// Append `data` to `out` with each span (all within `data`) replaced by its marker.
    fn replace(&self, data: &[u8], spans: &[Span], out: &mut Vec<u8>) {
        let mut at = 0;
        for span in spans {
            out.extend_from_slice(&data[at..span.start]);
            out.extend_from_slice(&self.markers[span.marker]);
            at = span.end;
        }
        out.extend_from_slice(&data[at..]);
    }

    /// Length of the longest suffix of `data` that is a proper prefix of some
    /// form: what must wait for the next chunk.
    fn partial_suffix(&self, data: &[u8]) -> usize {
        let from = data.len().saturating_sub(self.longest.saturating_sub(1));
        for p in from..data.len() {
            if !self.starts[usize::from(data[p])] {
                continue;
            }
            let tail = &data[p..];
            if self
                .patterns
                .iter()
                .any(|f| f.len() > tail.len() && f[..tail.len()].eq_ignore_ascii_case(tail))
            {
                return tail.len();
            }
        }
        0
    }

    /// Scrub header values and drop headers whose name carries a form (a
    /// marker is not a valid header name). Values that the marker would make
    /// invalid are dropped too.
    pub fn scrub_headers(&self, headers: &mut HeaderMap) {
        // One search over all of them: no form contains a line feed (JSON and
        // percent forms encode it; a header cannot carry one).
        let mut all = Vec::with_capacity(512);
        for (k, v) in headers.iter() {
            all.extend_from_slice(k.as_str().as_bytes());
            all.push(b'\n');
            all.extend_from_slice(v.as_bytes());
            all.push(b'\n');
        }
        if !self.finds(&all) {
            return;
        }
        let old = std::mem::take(headers);
        let mut name = None;
        for (k, v) in old {
            // `HeaderMap::into_iter` gives a name only for a name's first value.
            if let Some(k) = k {
                name = Some(k);
            }
            let Some(k) = &name else { continue };
            if self.finds(k.as_str().as_bytes()) {
                continue;
            }
            match self.scrub(v.as_bytes()) {
                Cow::Borrowed(_) => {
                    headers.append(k.clone(), v);
                }
                Cow::Owned(clean) => {
                    if let Ok(v) = HeaderValue::from_bytes(&clean) {
                        headers.append(k.clone(), v);
                    }
                }
            }
        }
    }
}

/// Replaces secrets in a byte stream, chunk by chunk.
///
/// A form may straddle two chunks, so the scrubber holds back the longest
/// tail of a chunk that is the beginning of some form — and nothing else, so
/// a streamed response (server-sent events) is not delayed. An occurrence
/// whose end could still grow into a longer overlapping one is held back with
/// that tail, so the union is replaced whole.
#[derive(Debug)]
pub struct Scrubber {
    set: Option<Arc<ScrubSet>>,
    /// Raw (not yet scrubbed) bytes held back from the last chunk.
    pending: Vec<u8>,
    /// Reused for each chunk's lower-cased copy.
    lower: Vec<u8>,
}

impl Scrubber {
    pub fn new(injected: &crate::credentials::Injected) -> Self {
        Self::with_set(injected.scrub_set.clone())
    }

    pub fn with_set(set: Option<Arc<ScrubSet>>) -> Self {
        Self {
            set,
            pending: Vec::new(),
            lower: Vec::new(),
        }
    }

    /// Scrub the next chunk; returns the bytes safe to send now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.push_bytes(Bytes::copy_from_slice(chunk)).into()
    }

    /// [`push`](Self::push) without a copy when the chunk is clean.
    pub fn push_bytes(&mut self, chunk: Bytes) -> Bytes {
        let Some(set) = &self.set else { return chunk };
        let data: Cow<'_, [u8]> = if self.pending.is_empty() {
            Cow::Borrowed(&chunk[..])
        } else {
            let mut data = std::mem::take(&mut self.pending);
            data.extend_from_slice(&chunk);
            Cow::Owned(data)
        };
        let spans = set.spans(&data, &mut self.lower);
        let mut cut = data.len() - set.partial_suffix(&data);
        // Spans are disjoint and sorted: at most one straddles the cut.
        if let Some(s) = spans.iter().find(|s| s.start < cut && s.end > cut) {
            cut = s.start;
        }
        let done: Vec<Span> = spans.into_iter().filter(|s| s.end <= cut).collect();
        let out = if done.is_empty() && cut == data.len() {
            match data {
                Cow::Borrowed(_) => return chunk,
                Cow::Owned(data) => return Bytes::from(data),
            }
        } else {
            let mut out = Vec::with_capacity(cut + 32);
            set.replace(&data[..cut], &done, &mut out);
            out
        };
        self.pending = data[cut..].to_vec();
        Bytes::from(out)
    }

    /// Whatever is held back, at end of stream (or before trailers): complete
    /// occurrences in it are replaced; an unfinished beginning of a form is not
    /// a secret and goes out as it is.
    pub fn finish(&mut self) -> Vec<u8> {
        let pending = std::mem::take(&mut self.pending);
        match &self.set {
            Some(set) => set.scrub(&pending).into_owned(),
            None => pending,
        }
    }

    /// The trailers, scrubbed like headers.
    pub fn trailers(&self, trailers: &mut HeaderMap) {
        if let Some(set) = &self.set {
            set.scrub_headers(trailers);
        }
    }
}

/// Scrubs every part of one response whose request carried a credential.
#[derive(Debug, Clone)]
pub struct ResponseScrub {
    set: Arc<ScrubSet>,
}

impl ResponseScrub {
    /// `None` when no credential was injected: that response passes untouched.
    pub fn new(injected: &crate::credentials::Injected) -> Option<Self> {
        injected
            .scrub_set
            .clone()
            .filter(|_| !injected.is_empty())
            .map(|set| Self { set })
    }

    /// The status line and headers, of a final, `101` or any other response.
    /// The reason phrase (HTTP/1.1; hyper keeps a non-canonical one in the
    /// extensions and writes it back out) is scrubbed, or dropped (the
    /// canonical reason goes out) if the scrubbed text is not a valid one.
    pub fn head(&self, parts: &mut http::response::Parts) {
        self.set.scrub_headers(&mut parts.headers);
        if let Some(reason) = parts.extensions.get::<hyper::ext::ReasonPhrase>()
            && let Cow::Owned(clean) = self.set.scrub(reason.as_bytes())
        {
            match hyper::ext::ReasonPhrase::try_from(clean) {
                Ok(clean) => {
                    parts.extensions.insert(clean);
                }
                Err(_) => {
                    parts.extensions.remove::<hyper::ext::ReasonPhrase>();
                }
            }
        }
    }

    /// A streaming scrubber for the body (and its trailers).
    pub fn body(&self) -> Scrubber {
        Scrubber::with_set(Some(self.set.clone()))
    }
}

#[cfg(test)]
mod tests;
