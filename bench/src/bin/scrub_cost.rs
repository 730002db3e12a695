//! What scrubbing a credential-bearing response costs per MB.
//!
//! Scrubs 64 MiB of JSON-ish text (the shape of an API response, with the
//! letters, digits and `+/=` that base64 forms start with) in 16 KiB chunks,
//! as the proxy's body tap does, with 1 and 3 credentials bound (each
//! scrubs its header value `Bearer <token>` and the token), three ways:
//! - `literal`: the scrubber before issue 21 (one memmem pass per secret,
//!   literal bytes only), copied here for the comparison;
//! - `forms`: the proxy's scrubber (every derived form, ASCII-case-
//!   insensitively: a lower-cased copy searched by a SIMD packed searcher,
//!   the automaton only where something was found);
//! - `forms-memmem`: the same forms found with one memmem pass per form over a
//!   lower-cased copy: the alternative to a multi-pattern search;
//! - `forms-ac-ci`: the search alone of one ASCII-case-insensitive
//!   Aho-Corasick DFA over the raw data (the first design; no SIMD prefilter).
//!
//! Prints the median of 5 runs in MB/s (10^6 bytes). Build with `--release`.
//! Usage: `scrub_cost [MiB] [text|binary]` (`binary`: random bytes, like a
//! compressed download, instead of text).

#![allow(clippy::print_stdout, clippy::print_stderr)] // it reports by printing
use std::sync::Arc;
use std::time::Instant;

use airlock_proxy::credentials::ScrubSet;
use airlock_proxy::credentials::Scrubber;
use airlock_proxy::credentials::forms::forms;
use bytes::Bytes;
use memchr::memmem;

const CHUNK: usize = 16 * 1024;
const RUNS: usize = 5;

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let binary = std::env::args().nth(2).is_some_and(|a| a == "binary");
    let data = if binary {
        random_bytes(mib << 20)
    } else {
        corpus(mib << 20)
    };
    let tokens = [
        "sk-live-4f9Qx7KpZq9XkT3vW7pL2mN8",
        "ghp_R2d2C3poBb8Lk0Qw9Er7Ty6Ui5Op4As",
        "xoxb-1234567890-abcdefGHIJKLmnop",
    ];
    println!(
        "scrubbing {mib} MiB of {} in {} KiB chunks, median of {RUNS} runs",
        if binary {
            "random bytes"
        } else {
            "JSON-ish text"
        },
        CHUNK / 1024
    );
    println!(
        "{:<14} {:>6} {:>7} {:>10}",
        "scrubber", "creds", "forms", "MB/s"
    );
    for creds in [1, 3] {
        let secrets: Vec<(String, String)> = tokens[..creds]
            .iter()
            .enumerate()
            .flat_map(|(i, t)| {
                let marker = format!("[secret:c{i}]");
                [
                    (format!("Bearer {t}"), marker.clone()),
                    ((*t).to_owned(), marker),
                ]
            })
            .collect();
        let set = Arc::new(
            ScrubSet::new(secrets.iter().map(|(s, m)| (s.as_str(), m.as_str())))
                .expect("scrub set")
                .expect("some secrets"),
        );
        let literal = {
            let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = secrets
                .iter()
                .map(|(s, m)| (s.as_bytes().to_vec(), m.as_bytes().to_vec()))
                .collect();
            pairs.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
            pairs
        };
        let lowered: Vec<(Vec<u8>, Vec<u8>)> = secrets
            .iter()
            .flat_map(|(s, m)| {
                forms(s)
                    .into_iter()
                    .map(|f| (f.to_ascii_lowercase(), m.as_bytes().to_vec()))
            })
            .collect();
        report("literal", creds, literal.len(), &data, || {
            let mut s = OldScrubber::new(literal.clone());
            Box::new(move |c: &[u8]| s.push(c).len())
        });
        report("forms", creds, set.len(), &data, || {
            let mut s = Scrubber::with_set(Some(set.clone()));
            Box::new(move |c: &[u8]| s.push_bytes(Bytes::copy_from_slice(c)).len())
        });
        // The first design: one case-insensitive automaton over the raw data
        // (aho-corasick then has no SIMD prefilter): the search alone.
        let pats: Vec<&[u8]> = lowered.iter().map(|(p, _)| &p[..]).collect();
        let automaton = aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .build(&pats)
            .expect("automaton");
        report("forms-ac-ci", creds, pats.len(), &data, || {
            let automaton = automaton.clone();
            Box::new(move |c: &[u8]| c.len() + automaton.find_overlapping_iter(c).count())
        });
        report("forms-memmem", creds, lowered.len(), &data, || {
            let mut s = OldScrubber::new(lowered.clone());
            Box::new(move |c: &[u8]| s.push(&c.to_ascii_lowercase()).len())
        });
    }
}

type Push = Box<dyn FnMut(&[u8]) -> usize>;

fn report(name: &str, creds: usize, patterns: usize, data: &[u8], make: impl Fn() -> Push) {
    let mut rates: Vec<f64> = (0..RUNS)
        .map(|_| {
            let mut push = make();
            let started = Instant::now();
            let mut out = 0;
            for chunk in data.chunks(CHUNK) {
                out += push(chunk);
            }
            let secs = started.elapsed().as_secs_f64();
            assert!(out + 4096 >= data.len(), "{name} lost data");
            data.len() as f64 / 1e6 / secs
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    println!(
        "{name:<14} {creds:>6} {patterns:>7} {:>10.0}",
        rates[RUNS / 2]
    );
}

/// JSON-ish records of pseudo-random base64-alphabet values (xorshift, fixed seed).
fn corpus(len: usize) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_";
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::with_capacity(len + 128);
    while out.len() < len {
        out.extend_from_slice(b"{\"id\":\"");
        for _ in 0..(next() % 40 + 8) {
            out.push(ALPHABET[(next() % ALPHABET.len() as u64) as usize]);
        }
        out.extend_from_slice(b"\",\"note\":\"some ordinary words here\"},\n");
    }
    out.truncate(len);
    out
}

/// Uniformly random bytes (xorshift, fixed seed).
fn random_bytes(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The scrubber as it was before issue 21 (proxy/src/credentials.rs at
/// 6461692): literal secrets, one memmem pass each, replaced in turn.
struct OldScrubber {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    pending: Vec<u8>,
}

impl OldScrubber {
    fn new(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        Self {
            pairs,
            pending: Vec::new(),
        }
    }

    fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let data = std::mem::take(&mut self.pending);
        let replaced = self.replace_all(&data);
        let keep = self.partial_suffix(&replaced);
        let cut = replaced.len() - keep;
        self.pending = replaced[cut..].to_vec();
        replaced[..cut].to_vec()
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
