//! Which response codings the scrubber cannot see through: a response to a
//! request that carried a credential must be readable to be scrubbed.

use http::header::{self, HeaderMap};

/// The first content or transfer coding in `headers` that the scrubber cannot
/// see through (anything but identity, and chunked for Transfer-Encoding).
pub(super) fn unscrubbable_coding(headers: &HeaderMap) -> Option<String> {
    let codings = |name| {
        headers
            .get_all(name)
            .iter()
            .flat_map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .filter(|c| !c.is_empty())
            .collect::<Vec<_>>()
    };
    let content = codings(header::CONTENT_ENCODING)
        .into_iter()
        .find(|c| c != "identity");
    content.or_else(|| {
        codings(header::TRANSFER_ENCODING)
            .into_iter()
            .find(|c| c != "identity" && c != "chunked")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn every_coding_header_is_checked() {
        assert_eq!(unscrubbable_coding(&headers(&[])), None);
        assert_eq!(
            unscrubbable_coding(&headers(&[("content-encoding", "identity")])),
            None
        );
        assert_eq!(
            unscrubbable_coding(&headers(&[("transfer-encoding", "chunked")])),
            None
        );
        // A second header behind an innocent first one (found by
        // tests/adversarial.rs: only the first was checked before).
        assert_eq!(
            unscrubbable_coding(&headers(&[
                ("content-encoding", "identity"),
                ("content-encoding", "gzip")
            ])),
            Some("gzip".into())
        );
        assert_eq!(
            unscrubbable_coding(&headers(&[("content-encoding", "identity, BR")])),
            Some("br".into())
        );
        assert_eq!(
            unscrubbable_coding(&headers(&[("transfer-encoding", "gzip, chunked")])),
            Some("gzip".into())
        );
    }
}
