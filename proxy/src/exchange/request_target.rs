//! Which host a request is for, checked against its connection: the Host
//! header, `:authority` and an absolute-form URL must all name the
//! connection's destination (no domain fronting).

use airlock_policy::Scheme;
use http::header;
use http::request::Parts;
use http::{Method, Uri};

use crate::engine::ConnInfo;
use crate::refusal::Refusal;
use crate::target::{Target, default_port, names, parse_authority};

/// The target and scheme a request is for, after checking it against its connection.
pub(super) fn request_target(conn: &ConnInfo, req: &Parts) -> Result<(Scheme, Target), Refusal> {
    if let Some(refusal) = &conn.refusal {
        return Err(refusal.clone());
    }
    if req.method == Method::CONNECT {
        return Err(Refusal::NestedConnect);
    }
    let host_header = req
        .headers
        .get(header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
    match &conn.bound {
        Some(bound) => {
            let scheme = conn.scheme;
            let mismatch = |named: &str| Refusal::HostMismatch {
                named: named.to_owned(),
                connection: bound.to_string(),
            };
            if let Some(authority) = req.uri.authority()
                && !names(authority.as_str(), bound, scheme)
            {
                return Err(mismatch(authority.as_str()));
            }
            if let Some(uri_scheme) = req.uri.scheme_str()
                && uri_scheme != crate::target::scheme_str(scheme)
            {
                return Err(mismatch(&format!("{uri_scheme}://")));
            }
            if let Some(h) = &host_header
                && !names(h, bound, scheme)
            {
                return Err(mismatch(h));
            }
            Ok((scheme, bound.clone()))
        }
        None => {
            // The explicit proxy's plain-HTTP front: absolute-form URLs name the target.
            let uri = &req.uri;
            match uri.scheme_str() {
                Some("http") => {}
                Some("https") => {
                    return Err(Refusal::BadRequest(
                        "https:// URLs must be tunnelled with CONNECT".into(),
                    ));
                }
                _ => {
                    return Err(Refusal::BadRequest(
                        "a proxy request needs an absolute URL (http://host/path)".into(),
                    ));
                }
            }
            let authority = uri
                .authority()
                .ok_or_else(|| Refusal::BadRequest("URL without a host".into()))?;
            let target = parse_authority(authority.as_str(), default_port(Scheme::Http))
                .map_err(|e| Refusal::BadRequest(e.to_string()))?;
            if let Some(h) = &host_header
                && !names(h, &target, Scheme::Http)
            {
                return Err(Refusal::HostMismatch {
                    named: h.clone(),
                    connection: target.to_string(),
                });
            }
            Ok((Scheme::Http, target))
        }
    }
}

pub(super) fn display_url(conn: &ConnInfo, uri: &Uri) -> String {
    match (&conn.bound, uri.scheme()) {
        (Some(t), None) => t.url(
            conn.scheme,
            uri.path_and_query().map_or("/", |p| p.as_str()),
        ),
        _ => uri.to_string(),
    }
}
