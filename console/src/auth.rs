//! Who may use the console: a browser holding the random token it printed,
//! on a page whose address is this machine.
//!
//! The token arrives once in the printed URL (`/?token=…`); the console
//! answers with a cookie (`HttpOnly`, `SameSite=Strict`) and a redirect
//! that drops the token from the address bar and from history. Scripts send
//! `Authorization: Bearer TOKEN` instead.
//!
//! The Host check is what stops DNS rebinding: a page on
//! `attacker.example` that re-points its name at 127.0.0.1 sends
//! `Host: attacker.example`, so only a literal address or `localhost` is
//! accepted, and only with the console's own port.

use std::net::IpAddr;

use http::HeaderMap;
use http::header::{AUTHORIZATION, COOKIE, HOST};

use crate::ConsoleError;

/// The console's access token: 32 random bytes, hex.
pub(crate) struct Token(String);

impl Token {
    pub(crate) fn random() -> Result<Self, ConsoleError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| ConsoleError::Token(e.to_string()))?;
        Ok(Self(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// Compared in constant time, so the answer's timing says nothing about
    /// how much of a guess was right.
    fn matches(&self, presented: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), presented.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// How a request proved it holds the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Cookie,
    Bearer,
    /// In the URL's query: the first visit, answered with the cookie.
    Query,
}

/// Why a request is turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The Host header is not this console's address.
    ForeignHost,
    NoToken,
}

/// The cookie's name carries the port: cookies are not kept apart by port,
/// and two consoles on one machine must not overwrite each other's.
pub(crate) fn cookie_name(port: u16) -> String {
    format!("airlock_console_{port}")
}

/// The `Set-Cookie` value that holds the token for later requests.
pub(crate) fn set_cookie(token: &Token, port: u16) -> String {
    format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/",
        cookie_name(port),
        token.as_str()
    )
}

pub(crate) fn check(
    token: &Token,
    port: u16,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Access, Refused> {
    if !host_is_local(headers, port) {
        return Err(Refused::ForeignHost);
    }
    let cookie = cookie_name(port);
    let from_cookie = headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .any(|(name, value)| name == cookie && token.matches(value));
    if from_cookie {
        return Ok(Access::Cookie);
    }
    let from_bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| token.matches(t.trim()));
    if from_bearer {
        return Ok(Access::Bearer);
    }
    let from_query = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .any(|(name, value)| name == "token" && token.matches(value));
    if from_query {
        return Ok(Access::Query);
    }
    Err(Refused::NoToken)
}

/// `Host` is `localhost:PORT` or an IP literal with this console's port.
fn host_is_local(headers: &HeaderMap, port: u16) -> bool {
    let Some(host) = headers.get(HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let Some((name, given_port)) = host.rsplit_once(':') else {
        return false;
    };
    if given_port.parse::<u16>().ok() != Some(port) {
        return false;
    }
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(http::header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        h
    }

    #[test]
    fn every_way_in_needs_the_token_and_a_local_host() {
        let token = Token::random().unwrap();
        let t = token.as_str().to_owned();
        let local = (HOST, "127.0.0.1:8080");
        let cookie = format!("other=1; airlock_console_8080={t}");
        let bearer = format!("Bearer {t}");
        let query = format!("x=1&token={t}");
        assert_eq!(
            check(
                &token,
                8080,
                &headers(&[local.clone(), (COOKIE, &cookie)]),
                None
            ),
            Ok(Access::Cookie)
        );
        assert_eq!(
            check(
                &token,
                8080,
                &headers(&[local.clone(), (AUTHORIZATION, &bearer)]),
                None
            ),
            Ok(Access::Bearer)
        );
        assert_eq!(
            check(
                &token,
                8080,
                &headers(std::slice::from_ref(&local)),
                Some(&query)
            ),
            Ok(Access::Query)
        );
        assert_eq!(
            check(
                &token,
                8080,
                &headers(std::slice::from_ref(&local)),
                Some("token=nope")
            ),
            Err(Refused::NoToken)
        );
        // Another console's cookie (another port) is not this one's.
        let other = format!("airlock_console_9090={t}");
        assert_eq!(
            check(&token, 8080, &headers(&[local, (COOKIE, &other)]), None),
            Err(Refused::NoToken)
        );
        for host in [
            "attacker.example:8080",
            "127.0.0.1:9090",
            "127.0.0.1",
            "[::1]",
        ] {
            assert_eq!(
                check(
                    &token,
                    8080,
                    &headers(&[(HOST, host), (COOKIE, &cookie)]),
                    None
                ),
                Err(Refused::ForeignHost),
                "{host}"
            );
        }
        for host in ["localhost:8080", "[::1]:8080", "10.0.0.5:8080"] {
            assert!(host_is_local(&headers(&[(HOST, host)]), 8080), "{host}");
        }
    }

    #[test]
    fn a_guess_of_another_length_or_content_is_refused() {
        let token = Token::random().unwrap();
        assert!(token.matches(token.as_str()));
        assert!(!token.matches(""));
        assert!(!token.matches(&token.as_str()[1..]));
        assert!(!token.matches(&format!("{}0", token.as_str())));
    }
}
