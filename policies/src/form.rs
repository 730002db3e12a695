//! `application/x-www-form-urlencoded` pairs, read two ways: strictly for a
//! body declared as a form (anything two servers could split differently is
//! refused), and leniently for every other text a server might read as
//! pairs (the query string, a JSON body), where refusing is not an option
//! but nothing a server could find may be missed.
//!
//! The format: WHATWG URL Standard §5.1 "application/x-www-form-urlencoded
//! parsing" (split on `&`, then on the first `=`, `+` is a space, then
//! percent-decode).

use std::convert::Infallible;

/// Why a form body was refused by [`parse_strict`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FormError {
    #[error("raw ';' in a form body is a separator to some servers")]
    RawSemicolon,
    #[error("duplicate form key {key:?}")]
    DuplicateKey { key: String },
    #[error("invalid percent-encoding in form body")]
    InvalidPercentEncoding,
    #[error("form field is not UTF-8 after decoding")]
    NotUtf8,
}

/// One decoded `key=value` pair, in the order sent.
pub(crate) type Pair = (String, String);

/// Parses a form body strictly: invalid escapes, bytes that are not UTF-8
/// after decoding, a raw `;` (a pair separator to Python before 3.9.2 and
/// Go before 1.17) and a key repeated byte for byte (servers keep the first,
/// the last, or all) are refused with the reason; `a[]` may repeat.
pub(crate) fn parse_strict(text: &str) -> Result<Vec<Pair>, FormError> {
    let mut pairs: Vec<Pair> = Vec::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        if pair.contains(';') {
            return Err(FormError::RawSemicolon);
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode_strict(key)?;
        let value = decode_strict(value)?;
        // `a[]` is the list spelling of PHP, Rails and qs: repeating it
        // appends, it does not overwrite (each value is still checked).
        if !key.ends_with("[]") && pairs.iter().any(|(k, _)| *k == key) {
            return Err(FormError::DuplicateKey { key });
        }
        pairs.push((key, value));
    }
    Ok(pairs)
}

/// Reads pairs the way the most permissive common server would, never
/// failing: `&` and `;` both separate, an invalid escape stays literal (as
/// in PHP and Werkzeug), and bytes that are not UTF-8 become U+FFFD.
pub(crate) fn parse_lenient(text: &str) -> Vec<Pair> {
    text.split(['&', ';'])
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode_lenient(key), decode_lenient(value))
        })
        .collect()
}

fn decode_strict(text: &str) -> Result<String, FormError> {
    let bytes = decode(text, || Err(FormError::InvalidPercentEncoding))?;
    String::from_utf8(bytes).map_err(|_| FormError::NotUtf8)
}

fn decode_lenient(text: &str) -> String {
    // An invalid escape is kept as written; this decode cannot fail.
    let bytes = match decode(text, || Ok::<(), Infallible>(())) {
        Ok(bytes) => bytes,
        Err(never) => match never {},
    };
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `+` to space and `%XX` to its byte. On an invalid escape, `invalid`
/// either fails the whole decode or (Ok) keeps the `%` literally.
fn decode<E>(text: &str, invalid: impl Fn() -> Result<(), E>) -> Result<Vec<u8>, E> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match hex_pair(bytes.get(i + 1..i + 3)) {
                Some(byte) => {
                    out.push(byte);
                    i += 2;
                }
                None => {
                    invalid()?;
                    out.push(b'%');
                }
            },
            b => out.push(b),
        }
        i += 1;
    }
    Ok(out)
}

fn hex_pair(pair: Option<&[u8]>) -> Option<u8> {
    let pair = std::str::from_utf8(pair?).ok()?;
    if pair.len() != 2 || !pair.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u8::from_str_radix(pair, 16).ok()
}
