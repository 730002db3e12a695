//! Comma-separated header lists (RFC 9110 §5.6.1): the elements of every
//! field line of one header, trimmed, empty elements dropped. The one reader
//! of `Connection`, `Upgrade` and the coding headers, so a value that one
//! check reads is read the same way by the others.

use http::header::{HeaderMap, HeaderName};

/// The elements of every `name` line, in order. Bytes that are not UTF-8
/// are kept as U+FFFD rather than dropping the line, so a hostile line
/// cannot hide its ASCII elements from a check.
pub(crate) fn list_elements(headers: &HeaderMap, name: &HeaderName) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|t| t.trim().to_owned())
                .collect::<Vec<_>>()
        })
        .filter(|t| !t.is_empty())
        .collect()
}

/// A header map from name/value pairs, for unit tests.
#[cfg(test)]
pub(crate) fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{self, HeaderValue};

    #[test]
    fn every_line_counts_and_non_utf8_bytes_do_not_hide_a_line() {
        let mut h = HeaderMap::new();
        h.append(header::CONNECTION, HeaderValue::from_static("keep-alive, "));
        h.append(
            header::CONNECTION,
            HeaderValue::from_bytes(b"\xff, Upgrade").unwrap(),
        );
        assert_eq!(
            list_elements(&h, &header::CONNECTION),
            ["keep-alive", "\u{fffd}", "Upgrade"]
        );
    }
}
