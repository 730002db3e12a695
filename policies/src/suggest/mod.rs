//! Suggesting policy: the `[[allow]]` snippet a 403 suggests for a denied
//! request, and (`draft`) a whole policy written from what sessions did.

mod collapse;
mod draft;
mod mcp;
#[cfg(test)]
mod property_tests;
mod shown;

pub use collapse::{Piece, collapse_path, segment_pieces};
pub use draft::{Draft, NotSuggested, Tunnel};
pub use shown::shown_by;

use crate::decision::RequestInfo;
use crate::upgrade::UpgradeProtocol;

/// Builds a rule that allows this host, port, method and path, and
/// nothing else: glob characters in the path are escaped, and a request no
/// rule can allow that narrowly (the asterisk form, a lower-case or
/// invalid method, an ambiguous path) gets a comment saying why instead.
pub(crate) fn suggest_rule(req: &RequestInfo<'_>) -> String {
    let path = match draft::suggestable(req) {
        Ok(path) => path,
        Err(why) => {
            return format!("# no rule is suggested for this request: {why}\n");
        }
    };
    let mut out = String::from("[[allow]]\n");
    out.push_str(&format!("host = {}\n", toml_string(req.host.as_str())));
    if !matches!(req.port, 80 | 443) {
        out.push_str(&format!("ports = [{}]\n", req.port));
    }
    out.push_str(&format!("methods = [{}]\n", toml_string(req.method)));
    out.push_str(&format!(
        "paths = [{}]\n",
        toml_string(&collapse::escape_glob(&path))
    ));
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
