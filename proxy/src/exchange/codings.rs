//! Which response codings the scrubber cannot see through: a response to a
//! request that carried a credential must be readable to be scrubbed.

use http::header::{self, HeaderMap};

use crate::header_list::list_elements;

/// The first content or transfer coding in `headers` that the scrubber cannot
/// see through (anything but identity, and chunked for Transfer-Encoding).
pub(super) fn unscrubbable_coding(headers: &HeaderMap) -> Option<String> {
    let codings = |name| {
        list_elements(headers, &name)
            .into_iter()
            .map(|c| c.to_ascii_lowercase())
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
    use crate::header_list::headers;

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
