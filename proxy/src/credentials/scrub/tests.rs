use super::*;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

fn set(secrets: &[(&str, &str)]) -> Arc<ScrubSet> {
    Arc::new(ScrubSet::new(secrets.iter().copied()).unwrap().unwrap())
}

fn scrub_split(set: &Arc<ScrubSet>, data: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut s = Scrubber::with_set(Some(set.clone()));
    let mut out = Vec::new();
    let mut at = 0;
    for &cut in cuts {
        out.extend(s.push(&data[at..cut]));
        at = cut;
    }
    out.extend(s.push(&data[at..]));
    out.extend(s.finish());
    out
}

const SECRET: &str = "sk-live/4f9+Qx=z7Kp";

fn echoes() -> Vec<String> {
    vec![
        SECRET.to_owned(),
        SECRET.to_ascii_uppercase(),
        SECRET.to_ascii_lowercase(),
        "Sk-LiVe/4F9+qX=Z7kP".to_owned(),
        STANDARD.encode(SECRET),
        URL_SAFE_NO_PAD.encode(SECRET),
        STANDARD.encode(format!("user:{SECRET}")),
        "sk-live%2F4f9%2BQx%3Dz7Kp".to_owned(),
        "sk-live%2f4f9%2bqx%3dz7kp".to_owned(),
        r"sk-live\/4f9+Qx=z7Kp".to_owned(),
    ]
}

#[test]
fn every_form_is_scrubbed_at_every_split_point() {
    let set = set(&[(SECRET, "[secret:t]")]);
    for echo in echoes() {
        let body = format!("a {echo} b");
        for cut in 0..=body.len() {
            let out = scrub_split(&set, body.as_bytes(), &[cut]);
            let out = String::from_utf8(out).unwrap();
            assert!(
                out.starts_with("a ") && out.ends_with(" b"),
                "{echo} @{cut}: {out}"
            );
            assert!(out.contains("[secret:t]"), "{echo} @{cut}: {out}");
            assert!(!out.contains(&echo), "{echo} @{cut}: {out}");
        }
    }
}

#[test]
fn a_form_dripped_byte_by_byte_is_scrubbed() {
    let set = set(&[(SECRET, "[secret:t]")]);
    for echo in echoes() {
        let body = format!("<{echo}>");
        let cuts: Vec<usize> = (1..body.len()).collect();
        let out = scrub_split(&set, body.as_bytes(), &cuts);
        // base64 padding carries no secret and stays.
        let padding = &echo[echo.trim_end_matches('=').len()..];
        let out = String::from_utf8(out).unwrap();
        // A blob keeps its own bytes ("user:"), the secret's are gone.
        assert!(out.starts_with('<'), "{echo}: {out}");
        assert!(
            out.ends_with(&format!("[secret:t]{padding}>")),
            "{echo}: {out}"
        );
    }
}

#[test]
fn holds_back_only_a_possible_form_prefix() {
    let set = set(&[("SECRET123", "[secret:t]")]);
    let mut s = Scrubber::with_set(Some(set));
    assert_eq!(s.push(b"data: hello\n\n"), b"data: hello\n\n");
    assert_eq!(s.push(b"x SE"), b"x ");
    assert_eq!(s.finish(), b"SE");
}

#[test]
fn overlapping_secrets_leave_nothing_behind_at_any_split() {
    // "abcdefgh" (one credential) runs into "efghijkl" (another).
    let set = set(&[("abcdefgh", "[secret:a]"), ("efghijkl", "[secret:b]")]);
    let body = b"xxabcdefghijklyy";
    for cut in 0..=body.len() {
        let out = scrub_split(&set, body, &[cut]);
        assert_eq!(out, b"xx[secret:a]yy", "cut {cut}");
    }
    // Two cuts, so one secret ends in the middle chunk.
    for a in 0..=body.len() {
        for b in a..=body.len() {
            let out = scrub_split(&set, body, &[a, b]);
            assert_eq!(out, b"xx[secret:a]yy", "cuts {a},{b}");
        }
    }
    // And a complete secret whose tail could start another, then not.
    let out = scrub_split(&set, b"xxabcdefghiQ", &[10]);
    assert_eq!(out, b"xx[secret:a]iQ");
}

#[test]
fn a_form_inside_another_is_replaced_once() {
    // The header value contains the token: one marker for the whole.
    let set = set(&[
        ("Bearer tok3nValue", "[secret:t]"),
        ("tok3nValue", "[secret:t]"),
    ]);
    for cut in 0..=24 {
        let out = scrub_split(&set, b"auth: Bearer tok3nValue!", &[cut]);
        assert_eq!(out, b"auth: [secret:t]!", "cut {cut}");
    }
}

#[test]
fn every_split_point_of_repeated_secrets_is_scrubbed() {
    let set = set(&[("SECRETX", "[secret:t]")]);
    let body = b"aaSECRETXbbSECRETXcc";
    for cut in 0..=body.len() {
        assert_eq!(
            scrub_split(&set, body, &[cut]),
            b"aa[secret:t]bb[secret:t]cc",
            "cut {cut}"
        );
    }
}

#[test]
fn headers_lose_secret_names_and_values() {
    let set = set(&[(SECRET, "[secret:t]")]);
    let mut h = HeaderMap::new();
    h.insert("x-ok", HeaderValue::from_static("fine"));
    h.append(
        "x-leak",
        HeaderValue::from_str(&SECRET.to_uppercase()).unwrap(),
    );
    h.append("x-leak", HeaderValue::from_static("second"));
    let name = format!("x-{}", URL_SAFE_NO_PAD.encode(SECRET)).to_ascii_lowercase();
    h.insert(
        http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
        HeaderValue::from_static("1"),
    );
    set.scrub_headers(&mut h);
    assert_eq!(h.len(), 3);
    assert_eq!(h["x-ok"], "fine");
    let leak: Vec<_> = h.get_all("x-leak").iter().collect();
    assert_eq!(leak, ["[secret:t]", "second"]);
}

#[test]
fn the_reason_phrase_is_scrubbed() {
    let set = set(&[(SECRET, "[secret:t]")]);
    let scrub = ResponseScrub { set };
    let (mut parts, ()) = http::Response::new(()).into_parts();
    let reason = format!("OK {SECRET}");
    parts
        .extensions
        .insert(hyper::ext::ReasonPhrase::try_from(reason).unwrap());
    scrub.head(&mut parts);
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>().unwrap();
    assert_eq!(reason.as_bytes(), b"OK [secret:t]");
}

#[test]
fn streamed_scrubbing_equals_whole_scrubbing_for_any_chunking() {
    // Secrets over a two-letter alphabet overlap and contain one another
    // all the time; bodies over it are full of partial occurrences.
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let word = |len: u64, next: &mut dyn FnMut(u64) -> u64| -> String {
        (0..len)
            .map(|_| if next(2) == 0 { 'a' } else { 'B' })
            .collect()
    };
    for _ in 0..300 {
        let secrets: Vec<String> = (0..1 + next(3))
            .map(|_| {
                let len = 3 + next(5);
                word(len, &mut next)
            })
            .collect();
        let pairs: Vec<(&str, &str)> = secrets
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), ["[secret:x]", "[secret:y]", "[secret:z]"][i]))
            .collect();
        let set = set(&pairs);
        let len = next(60);
        let body = word(len, &mut next);
        let whole = set.scrub(body.as_bytes()).into_owned();
        let mut cuts: Vec<usize> = (0..next(6)).map(|_| next(len + 1) as usize).collect();
        cuts.sort();
        let streamed = scrub_split(&set, body.as_bytes(), &cuts);
        assert_eq!(streamed, whole, "{secrets:?} {body} {cuts:?}");
        let text = String::from_utf8(streamed).unwrap().to_ascii_lowercase();
        for s in &secrets {
            assert!(!text.contains(&s.to_ascii_lowercase()), "{s} in {text}");
        }
    }
}

#[test]
fn a_scrubber_without_secrets_passes_chunks_untouched() {
    let mut s = Scrubber::with_set(None);
    let chunk = Bytes::from_static(b"anything");
    assert_eq!(s.push_bytes(chunk.clone()), chunk);
    assert!(s.finish().is_empty());
}
