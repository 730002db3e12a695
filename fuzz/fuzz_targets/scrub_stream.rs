//! The response scrubber on arbitrary secrets, bodies and chunkings: never
//! panics, and whatever the chunk boundaries, no secret survives into what
//! the client receives (a secret straddling chunks is still caught).
#![no_main]

use std::sync::Arc;

use airlock_proxy::credentials::{ScrubSet, Scrubber};
use libfuzzer_sys::fuzz_target;

/// Secrets drawn from upper case and digits, so they can never occur inside
/// a `[secret:name]` marker (lower case): any hit in the output is a leak.
fn secret(raw: &[u8]) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    raw.iter()
        .take(24)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()])
        .collect()
}

fuzz_target!(|data: (Vec<Vec<u8>>, Vec<u8>, Vec<u8>)| {
    let (raw_secrets, body, cuts) = data;
    let secrets: Vec<String> = raw_secrets
        .iter()
        .take(4)
        .map(|r| secret(r))
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8(s).expect("ASCII"))
        .collect();
    let set = ScrubSet::new(secrets.iter().map(|s| (s.as_str(), "[secret:token]")))
        .expect("scrub set builds");
    let mut scrubber = Scrubber::with_set(set.map(Arc::new));
    let mut out = Vec::new();
    let mut rest = &body[..];
    for cut in cuts {
        let n = usize::from(cut).min(rest.len());
        let (chunk, tail) = rest.split_at(n);
        out.extend(scrubber.push(chunk));
        rest = tail;
    }
    out.extend(scrubber.push(rest));
    out.extend(scrubber.finish());
    for s in &secrets {
        assert!(
            memchr::memmem::find(&out, s.as_bytes()).is_none(),
            "secret {s:?} leaked through the scrubber"
        );
    }
});
