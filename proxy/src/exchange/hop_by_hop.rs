//! Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection and are
//! never forwarded: those named by `Connection`, and the fixed set below.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::header_list::list_elements;

/// Remove hop-by-hop headers (RFC 9110 §7.6.1), keeping the upgrade pair when upgrading.
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    let named: Vec<HeaderName> = list_elements(headers, &header::CONNECTION)
        .into_iter()
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    for name in named {
        if !(keep_upgrade && name == header::UPGRADE) {
            headers.remove(name);
        }
    }
    let te_trailers = headers
        .get(header::TE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    for name in [
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
    ] {
        headers.remove(name);
    }
    for name in ["keep-alive", "proxy-connection"] {
        headers.remove(name);
    }
    if keep_upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::CONNECTION);
        headers.remove(header::UPGRADE);
    }
    if te_trailers {
        // gRPC needs `te: trailers` end to end; it is the one TE value HTTP/2 allows.
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}
