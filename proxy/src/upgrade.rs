//! Whether a request may switch protocols, and whether the upstream's switch
//! is the one that was asked for.
//!
//! After `101 Switching Protocols` the connection is no longer HTTP, so no
//! per-request rule applies to what travels on it. Airlock therefore lets a
//! request upgrade only to a protocol an allow rule grants by name
//! (`upgrade = ["websocket"]`) and that it can keep inspecting: WebSocket,
//! which [`crate::websocket`] relays frame by frame. Everything else is
//! refused with 403 before anything goes upstream; an upstream that switches
//! unasked, or to another protocol, gets 502 and no tunnel.

use airlock_policy::{UpgradeProtocol, UpgradeToken};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Version};

use crate::header_list::list_elements;

/// `Sec-WebSocket-Key` (RFC 6455 §4.1), sent by the client.
const SEC_WEBSOCKET_KEY: HeaderName = HeaderName::from_static("sec-websocket-key");
/// `Sec-WebSocket-Accept` (RFC 6455 §4.2.2), sent back by the server.
const SEC_WEBSOCKET_ACCEPT: HeaderName = HeaderName::from_static("sec-websocket-accept");
/// `Sec-WebSocket-Extensions` (RFC 6455 §9.1).
const SEC_WEBSOCKET_EXTENSIONS: HeaderName = HeaderName::from_static("sec-websocket-extensions");
/// RFC 6455 §1.3: the GUID the accept key is derived with.
const WEBSOCKET_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// What a request asks for, as far as switching protocols goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpgradeAsk {
    /// No upgrade: any `Upgrade` header is dropped as hop-by-hop.
    None,
    /// One protocol a rule may grant; the policy decides.
    Grantable(UpgradeProtocol),
    /// Refused whatever the policy says.
    Refused(UpgradeRefusal),
}

/// Why an upgrade is refused before the policy is asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UpgradeRefusal {
    #[error("the request asks to upgrade to h2c, which Airlock never grants")]
    H2c,
    #[error("the request asks to upgrade to {0:?}, a protocol Airlock cannot inspect")]
    Unknown(String),
    #[error("the request asks to upgrade to several protocols ({0}); Airlock grants one")]
    Several(String),
    #[error("the request asks to upgrade but names no protocol")]
    Empty,
}

impl UpgradeRefusal {
    /// What the user can do about it (for the 403 body).
    pub(crate) fn advice(&self) -> String {
        match self {
            Self::H2c => {
                "Airlock speaks HTTP/2 with both sides itself (negotiated with ALPN over TLS); \
                 after an h2c switch the connection would carry requests the policy never sees, \
                 so no rule can grant it. Send the request without `Upgrade: h2c` \
                 (e.g. curl --http1.1, or an https:// URL, where HTTP/2 is negotiated with ALPN)."
                    .to_owned()
            }
            Self::Unknown(_) => format!(
                "Airlock relays only upgrades it can keep inspecting ({}), so no rule can grant this one. \
                 Send the request without the Upgrade header.",
                UpgradeProtocol::allowed_values()
            ),
            Self::Several(_) | Self::Empty => {
                "Name exactly one protocol, e.g. `Upgrade: websocket`, on a rule that grants it \
                 (upgrade = [\"websocket\"])."
                    .to_owned()
            }
        }
    }
}

/// Reads the request's upgrade ask: HTTP/1.1 with an `upgrade` connection
/// option and an `Upgrade` header (RFC 9110 §7.8). Both are compared
/// case-insensitively, across every field line (`Connection: keep-alive,
/// Upgrade`, two `Upgrade` lines). An `Upgrade` without the connection
/// option, or on HTTP/1.0, is no upgrade: servers must ignore it, and the
/// proxy drops it as hop-by-hop.
pub(crate) fn asked(headers: &HeaderMap, version: Version) -> UpgradeAsk {
    let option = list_elements(headers, &header::CONNECTION)
        .iter()
        .any(|t| t.eq_ignore_ascii_case("upgrade"));
    if version != Version::HTTP_11 || !option || !headers.contains_key(header::UPGRADE) {
        return UpgradeAsk::None;
    }
    let offered = list_elements(headers, &header::UPGRADE);
    match offered.as_slice() {
        [] => UpgradeAsk::Refused(UpgradeRefusal::Empty),
        [one] => match UpgradeProtocol::classify(one) {
            UpgradeToken::Grantable(protocol) => UpgradeAsk::Grantable(protocol),
            UpgradeToken::H2c => UpgradeAsk::Refused(UpgradeRefusal::H2c),
            UpgradeToken::Unknown(text) => UpgradeAsk::Refused(UpgradeRefusal::Unknown(text)),
        },
        several => UpgradeAsk::Refused(UpgradeRefusal::Several(several.join(", "))),
    }
}

/// The upgrade headers as they go upstream: exactly `Connection: upgrade`
/// and `Upgrade: <protocol>` (whatever case the client used), and no
/// `Sec-WebSocket-Extensions`: a compressed message (permessage-deflate,
/// RFC 7692) could not be scrubbed or recorded, so none is negotiated.
pub(crate) fn prepare_request(headers: &mut HeaderMap, protocol: UpgradeProtocol) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static(protocol.token()));
    headers.remove(SEC_WEBSOCKET_EXTENSIONS);
}

/// Why an upstream's `101 Switching Protocols` opens no tunnel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SwitchRefusal {
    #[error(
        "the upstream switched protocols (101) although the request did not ask to; no tunnel is opened"
    )]
    Unasked,
    #[error(
        "the upstream switched to {answered:?} although the request asked for {asked}; no tunnel is opened"
    )]
    OtherProtocol {
        answered: String,
        asked: UpgradeProtocol,
    },
    #[error(
        "the upstream negotiated the WebSocket extension {0:?}, which Airlock did not offer (compressed messages cannot be scrubbed); no tunnel is opened"
    )]
    WebSocketExtension(String),
    #[error(
        "the request has no Sec-WebSocket-Key, so the upstream's switch cannot be checked; no tunnel is opened"
    )]
    NoWebSocketKey,
    #[error(
        "the upstream's Sec-WebSocket-Accept does not answer the request's key (RFC 6455 §4.2.2); no tunnel is opened"
    )]
    WrongWebSocketAccept,
}

/// Checks a response to a request that went upstream: Err(why) when the
/// upstream switched protocols in a way that must not become a tunnel.
/// `granted` is the protocol the request asked for and was granted (None:
/// the request asked for no upgrade); `request` its headers as sent.
pub(crate) fn check_switch(
    status: StatusCode,
    response: &HeaderMap,
    granted: Option<UpgradeProtocol>,
    request: &HeaderMap,
) -> Result<(), SwitchRefusal> {
    if status != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(());
    }
    let Some(protocol) = granted else {
        return Err(SwitchRefusal::Unasked);
    };
    let answered = list_elements(response, &header::UPGRADE);
    if !matches!(answered.as_slice(), [one] if one.eq_ignore_ascii_case(protocol.token())) {
        return Err(SwitchRefusal::OtherProtocol {
            answered: answered.join(", "),
            asked: protocol,
        });
    }
    match protocol {
        UpgradeProtocol::WebSocket => check_websocket_accept(response, request),
    }
}

/// RFC 6455 §4.1 (client steps 4–6): the server must prove it read the key,
/// and may not switch on an extension the client did not offer (Airlock
/// offered none).
fn check_websocket_accept(response: &HeaderMap, request: &HeaderMap) -> Result<(), SwitchRefusal> {
    if let Some(extensions) = response.get(SEC_WEBSOCKET_EXTENSIONS) {
        return Err(SwitchRefusal::WebSocketExtension(
            String::from_utf8_lossy(extensions.as_bytes()).into_owned(),
        ));
    }
    let expected = request
        .get(SEC_WEBSOCKET_KEY)
        .map(|k| accept_key(k.as_bytes()));
    let got = response
        .get(SEC_WEBSOCKET_ACCEPT)
        .map(HeaderValue::as_bytes);
    match (expected, got) {
        (Some(expected), Some(got)) if expected.as_bytes() == got => Ok(()),
        (None, _) => Err(SwitchRefusal::NoWebSocketKey),
        _ => Err(SwitchRefusal::WrongWebSocketAccept),
    }
}

/// base64(SHA-1(key + GUID)), RFC 6455 §4.2.2 step 5.4.
fn accept_key(key: &[u8]) -> String {
    use base64::Engine as _;
    let mut input = key.to_vec();
    input.extend_from_slice(WEBSOCKET_GUID.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header_list::headers;

    #[test]
    fn every_connection_and_upgrade_line_counts_in_any_case() {
        let ask = |pairs: &[(&str, &str)]| asked(&headers(pairs), Version::HTTP_11);
        let ws = UpgradeAsk::Grantable(UpgradeProtocol::WebSocket);
        assert_eq!(
            ask(&[("connection", "Upgrade"), ("upgrade", "WebSocket")]),
            ws
        );
        assert_eq!(
            ask(&[
                ("connection", "keep-alive, UPGRADE"),
                ("upgrade", "websocket")
            ]),
            ws
        );
        assert_eq!(
            ask(&[
                ("connection", "keep-alive"),
                ("connection", "upgrade"),
                ("upgrade", "websocket")
            ]),
            ws
        );
        assert_eq!(
            ask(&[
                ("connection", "upgrade"),
                ("upgrade", "websocket"),
                ("upgrade", "h2c")
            ]),
            UpgradeAsk::Refused(UpgradeRefusal::Several("websocket, h2c".into()))
        );
        assert_eq!(
            ask(&[("connection", "upgrade"), ("upgrade", "H2C")]),
            UpgradeAsk::Refused(UpgradeRefusal::H2c)
        );
        assert_eq!(
            ask(&[("connection", "upgrade"), ("upgrade", "tls/1.3")]),
            UpgradeAsk::Refused(UpgradeRefusal::Unknown("tls/1.3".into()))
        );
        assert_eq!(
            ask(&[("connection", "upgrade"), ("upgrade", " , ")]),
            UpgradeAsk::Refused(UpgradeRefusal::Empty)
        );
        // Without the connection option, or on HTTP/1.0, it is no upgrade.
        assert_eq!(ask(&[("upgrade", "h2c")]), UpgradeAsk::None);
        assert_eq!(
            asked(
                &headers(&[("connection", "upgrade"), ("upgrade", "h2c")]),
                Version::HTTP_10
            ),
            UpgradeAsk::None
        );
    }

    #[test]
    fn the_accept_key_is_the_rfc_6455_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn a_switch_must_be_asked_for_and_be_the_one_asked_for() {
        let request = headers(&[("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")]);
        let ok = headers(&[
            ("upgrade", "WebSocket"),
            ("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        ]);
        let ws = Some(UpgradeProtocol::WebSocket);
        let switching = StatusCode::SWITCHING_PROTOCOLS;
        assert!(check_switch(switching, &ok, ws, &request).is_ok());
        assert!(check_switch(StatusCode::OK, &ok, None, &request).is_ok());
        assert!(check_switch(switching, &ok, None, &request).is_err());
        let other = headers(&[("upgrade", "h2c")]);
        assert!(check_switch(switching, &other, ws, &request).is_err());
        let wrong_key = headers(&[("upgrade", "websocket"), ("sec-websocket-accept", "x")]);
        assert!(check_switch(switching, &wrong_key, ws, &request).is_err());
        let mut deflate = ok.clone();
        deflate.insert(
            SEC_WEBSOCKET_EXTENSIONS,
            HeaderValue::from_static("permessage-deflate"),
        );
        assert!(check_switch(switching, &deflate, ws, &request).is_err());
    }
}
