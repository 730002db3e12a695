//! Suggesting policy: the `[[allow]]` snippet a 403 suggests for a denied
//! request, and (`draft`) a whole policy written from what sessions did.

mod collapse;
mod draft;

pub use collapse::collapse_path;
pub use draft::{Draft, Tunnel};

use crate::credential::is_token;
use crate::decision::RequestInfo;
use crate::path::normalize;
use crate::upgrade::UpgradeProtocol;

/// Builds a rule that allows this host, port, method and path. A literal
/// `*` in the path stays a glob character (it also matches itself).
pub(crate) fn suggest_rule(req: &RequestInfo<'_>) -> String {
    let path = match normalize(req.path_and_query) {
        Ok(path) => path.exact,
        Err(_) => {
            return "# this request's path is ambiguous (see the denial); no rule can allow it\n"
                .to_owned();
        }
    };
    let mut out = String::from("[[allow]]\n");
    out.push_str(&format!("host = {}\n", toml_string(req.host.as_str())));
    if !matches!(req.port, 80 | 443) {
        out.push_str(&format!("ports = [{}]\n", req.port));
    }
    if is_token(req.method) {
        out.push_str(&format!("methods = [{}]\n", toml_string(req.method)));
    }
    if path != "*" {
        out.push_str(&format!("paths = [{}]\n", toml_string(&path)));
    }
    out
}

/// As [`suggest_rule`], granting the upgrade to `protocol` as well. A rule
/// that already allows the request without it stays as it is: rules with
/// `upgrade` are the only ones asked about upgrade requests, so this one
/// does not need to come first.
pub(crate) fn suggest_upgrade_rule(req: &RequestInfo<'_>, protocol: UpgradeProtocol) -> String {
    let mut out = suggest_rule(req);
    if out.starts_with("[[allow]]") {
        out.push_str(&format!("upgrade = [{}]\n", toml_string(protocol.token())));
    }
    out
}

pub(crate) fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}
