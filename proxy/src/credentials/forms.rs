//! The forms in which an upstream may echo a secret back, derived from the
//! secret itself so the scrubber can look for each of them.
//!
//! A careless or hostile upstream rarely reflects a credential byte for byte:
//! it upper-cases it, base64-encodes it into a token or cookie, percent-encodes
//! it into a redirect URL, or JSON-escapes it into an error body. Each such form
//! is a fixed string computed from the secret, so scrubbing them is as cheap as
//! scrubbing the literal. The scrubber matches every form ASCII-case-
//! insensitively, which also covers upper-, lower- and mixed-case echoes of the
//! literal and of its percent-encodings (`%2f` and `%2F`).
//!
//! The set (see docs/architecture.md, "Response scrubbing"):
//! - the literal;
//! - percent-encoded as RFC 3986 components are (everything but the unreserved
//!   `A-Z a-z 0-9 - . _ ~`), as Python's `quote` does (`/` kept), as
//!   JavaScript's `encodeURIComponent` does (`! ' ( ) *` kept), and as forms
//!   do (`application/x-www-form-urlencoded`, space as `+`);
//! - JSON string escapes (RFC 8259 section 7) as serde/`JSON.stringify` write
//!   them, with `\/` (PHP), with `\u003c \u003e \u0026` (Go's `encoding/json`),
//!   with non-ASCII as `\uXXXX` (Python's `ensure_ascii`), and all of these at once;
//! - base64, standard and URL-safe alphabets, padded or not: the whole
//!   encoding of the secret on its own, and for each of the three alignments
//!   that the secret can have inside a larger encoded blob (its offset mod 3)
//!   the characters that depend on the secret's bits alone; plus the
//!   percent-encoding of each standard-alphabet form (a base64 value in a URL).
//!
//! Not caught: compositions other than the one above (base64 of a JSON escape,
//! hex, double encodings), base64 of a case-changed secret, line-wrapped
//! (MIME) base64, compression and encryption, and the up to two base64
//! characters at each end of a secret embedded in a blob that it shares with
//! its neighbours' bits (they carry at most 4 bits of the secret each).

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// A derived form shorter than this is not scrubbed: it would match innocent
/// text far more often than it would catch an echo. The literal is always
/// scrubbed, however short.
pub const MIN_DERIVED_LEN: usize = 6;

/// RFC 3986 section 2.3: the unreserved characters, never encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');
/// Python's `urllib.parse.quote` default (`safe='/'`).
const PATH: &AsciiSet = &COMPONENT.remove(b'/');
/// ECMAScript `encodeURIComponent`.
const URI_COMPONENT: &AsciiSet = &COMPONENT
    .remove(b'!')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*');

/// Every form of `secret` to scrub, the literal first, without duplicates
/// (compared ASCII-case-insensitively, as the scrubber matches them).
pub fn forms(secret: &str) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    if secret.is_empty() {
        return out;
    }
    let mut add = |form: Vec<u8>, derived: bool| {
        if (derived && form.len() < MIN_DERIVED_LEN)
            || out.iter().any(|f| f.eq_ignore_ascii_case(&form))
        {
            return;
        }
        out.push(form);
    };
    add(secret.as_bytes().to_vec(), false);
    for form in percent_forms(secret) {
        add(form.into_bytes(), true);
    }
    for form in json_forms(secret) {
        add(form.into_bytes(), true);
    }
    for form in base64_forms(secret.as_bytes()) {
        for encoded in percent_forms(&form) {
            add(encoded.into_bytes(), true);
        }
        add(form.clone().into_bytes(), true);
        add(form.replace('+', "-").replace('/', "_").into_bytes(), true);
    }
    out
}

fn percent_forms(text: &str) -> Vec<String> {
    let component = utf8_percent_encode(text, COMPONENT).to_string();
    vec![
        component.replace("%20", "+"),
        utf8_percent_encode(text, PATH).to_string(),
        utf8_percent_encode(text, URI_COMPONENT).to_string(),
        component,
    ]
}

/// How a JSON encoder may write `text` inside a string literal.
fn json_forms(text: &str) -> Vec<String> {
    #[derive(Clone, Copy)]
    struct Style {
        slash: bool,
        html: bool,
        ascii: bool,
    }
    let styles = [
        (false, false, false),
        (true, false, false),
        (false, true, false),
        (false, false, true),
        (true, true, true),
    ];
    styles
        .into_iter()
        .map(|(slash, html, ascii)| {
            let style = Style { slash, html, ascii };
            let mut out = String::with_capacity(text.len());
            for c in text.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    '/' if style.slash => out.push_str("\\/"),
                    '<' | '>' | '&' if style.html => push_u_escape(&mut out, c),
                    c if (c as u32) < 0x20 => push_u_escape(&mut out, c),
                    c if style.ascii && !c.is_ascii() => push_u_escape(&mut out, c),
                    c => out.push(c),
                }
            }
            out
        })
        .collect()
}

/// `\uXXXX`, as UTF-16 code units (a surrogate pair beyond the BMP).
fn push_u_escape(out: &mut String, c: char) {
    let mut units = [0u16; 2];
    for unit in c.encode_utf16(&mut units) {
        out.push_str(&format!("\\u{unit:04x}"));
    }
}

/// Standard-alphabet base64 forms: the whole encoding of `secret` alone
/// (unpadded: padding carries no secret), and for each alignment `k` of the
/// secret inside a larger encoded blob, the characters that depend on the
/// secret's bits alone (base64 character `i` covers bits `6i..6i+6`).
fn base64_forms(secret: &[u8]) -> Vec<String> {
    let mut out = vec![STANDARD_NO_PAD.encode(secret)];
    for k in 0..3 {
        let mut data = vec![0u8; k];
        data.extend_from_slice(secret);
        let encoded = STANDARD_NO_PAD.encode(&data);
        let first = (8 * k).div_ceil(6);
        let end = (8 * (k + secret.len())) / 6;
        if end > first {
            out.push(encoded[first..end].to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};

    fn has(forms: &[Vec<u8>], form: &str) -> bool {
        forms
            .iter()
            .any(|f| f.eq_ignore_ascii_case(form.as_bytes()))
    }

    /// Some form occurs, case-insensitively, inside `haystack`.
    fn caught(forms: &[Vec<u8>], haystack: &str) -> bool {
        let hay = haystack.to_ascii_lowercase();
        forms
            .iter()
            .any(|f| hay.contains(&String::from_utf8_lossy(f).to_ascii_lowercase()))
    }

    const SECRET: &str = "sk-live/4f9+Qx=z~7 \"a\"<b>&é";

    #[test]
    fn the_literal_comes_first_and_nothing_repeats() {
        let forms = forms(SECRET);
        assert_eq!(forms[0], SECRET.as_bytes());
        for (i, a) in forms.iter().enumerate() {
            for b in &forms[i + 1..] {
                assert!(!a.eq_ignore_ascii_case(b));
            }
        }
    }

    #[test]
    fn percent_encodings_of_every_common_encoder_are_forms() {
        let forms = forms(SECRET);
        assert!(has(
            &forms,
            "sk-live%2F4f9%2BQx%3Dz~7%20%22a%22%3Cb%3E%26%C3%A9"
        ));
        assert!(has(
            &forms,
            "sk-live/4f9%2BQx%3Dz~7%20%22a%22%3Cb%3E%26%C3%A9"
        ));
        assert!(has(
            &forms,
            "sk-live%2F4f9%2BQx%3Dz~7+%22a%22%3Cb%3E%26%C3%A9"
        ));
    }

    #[test]
    fn json_escapes_of_every_common_encoder_are_forms() {
        let forms = forms(SECRET);
        let serde = serde_json::to_string(SECRET).unwrap();
        assert!(has(&forms, &serde[1..serde.len() - 1]));
        assert!(has(&forms, r#"sk-live\/4f9+Qx=z~7 \"a\"<b>&é"#));
        assert!(has(
            &forms,
            r#"sk-live/4f9+Qx=z~7 \"a\"\u003cb\u003e\u0026é"#
        ));
        assert!(has(&forms, r#"sk-live/4f9+Qx=z~7 \"a\"<b>&\u00e9"#));
    }

    #[test]
    fn base64_of_the_secret_alone_is_caught_in_every_alphabet_and_padding() {
        let forms = forms(SECRET);
        for encoded in [
            STANDARD.encode(SECRET),
            STANDARD_NO_PAD.encode(SECRET),
            URL_SAFE.encode(SECRET),
            URL_SAFE_NO_PAD.encode(SECRET),
        ] {
            assert!(caught(&forms, &encoded), "{encoded}");
        }
    }

    #[test]
    fn base64_of_the_secret_inside_a_larger_blob_is_caught_at_every_offset() {
        let forms = forms(SECRET);
        for before in 0..6 {
            for after in 0..4 {
                let mut blob = b"{\"user\":\"x\",\"t\":\""[..before + 10].to_vec();
                blob.extend_from_slice(SECRET.as_bytes());
                blob.extend_from_slice(&b"\"}zz"[..after]);
                for encoded in [STANDARD.encode(&blob), URL_SAFE_NO_PAD.encode(&blob)] {
                    assert!(caught(&forms, &encoded), "{before}/{after}: {encoded}");
                }
            }
        }
    }

    #[test]
    fn a_base64_value_in_a_url_is_caught() {
        let forms = forms(SECRET);
        let in_url = utf8_percent_encode(&STANDARD.encode(SECRET), COMPONENT).to_string();
        assert!(caught(&forms, &in_url), "{in_url}");
    }

    #[test]
    fn short_derived_forms_are_left_out_but_the_literal_stays() {
        assert_eq!(forms("ab"), vec![b"ab".to_vec()]);
        assert!(forms("").is_empty());
    }
}
