//! The response scrubber on arbitrary secrets, bodies and chunkings: never
//! panics, and whatever the chunk boundaries, no secret survives into what
//! the client receives (a secret straddling chunks is still caught).
#![no_main]

use airlock_proxy::credentials::{Injected, Scrubber};
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
    let mut scrub: Vec<(Vec<u8>, Vec<u8>)> = raw_secrets
        .iter()
        .take(4)
        .map(|r| secret(r))
        .filter(|s| !s.is_empty())
        .map(|s| (s, b"[secret:token]".to_vec()))
        .collect();
    // The proxy sorts longest first (Credentials::inject); do the same.
    scrub.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
    let injected = Injected {
        names: vec!["token".into()],
        scrub: scrub.clone(),
    };
    let mut scrubber = Scrubber::new(&injected);
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
    for (s, _) in &scrub {
        assert!(
            memchr::memmem::find(&out, s).is_none(),
            "secret {:?} leaked through the scrubber",
            String::from_utf8_lossy(s)
        );
    }
});
