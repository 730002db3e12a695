//! Which headers an approver must see, and why.

use serde::{Deserialize, Serialize};

use super::Held;

/// A header as shown, with what it may do when that is not plain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShownHeader {
    pub name: String,
    pub value: String,
    /// E.g. "method override", "sent 2 times".
    pub note: Option<String>,
}

/// Headers that say nothing about what the request does to the server:
/// folded into their names in the listing. Short on purpose: anything else
/// (a custom header, a credential's, one the server reads) is shown.
const INERT: &[&str] = &[
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "cache-control",
    "connection",
    "content-length",
    "dnt",
    "host",
    "pragma",
    "user-agent",
];

/// Whether a header's name says it overrides the method: the
/// `X-HTTP-Method-Override` family in every spelling servers accept
/// (`X-HTTP-Method`, `X-Method-Override`, `X-HTTP-Verb`, ...). Matched
/// loosely on purpose: a false alarm costs a glance, a miss a DELETE.
fn overrides_method(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["method", "override", "verb"]
        .iter()
        .any(|word| name.contains(word))
}

/// A form or JSON field, or a query parameter, that frameworks read as the
/// method (Rails, Laravel, Symfony: `_method`).
pub(super) fn is_method_field(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "_method" || name == "x-http-method-override"
}

fn inert(name: &str, value: &str) -> bool {
    let name = name.to_ascii_lowercase();
    match name.as_str() {
        // A Connection header that names other headers strips them.
        "connection" => ["close", "keep-alive"]
            .iter()
            .any(|v| value.trim().eq_ignore_ascii_case(v)),
        _ => INERT.contains(&name.as_str()),
    }
}

/// The headers shown and the inert ones folded (none when `whole`), with
/// the warnings they call for.
pub(super) fn shown(
    held: Held<'_>,
    whole: bool,
    warnings: &mut Vec<String>,
) -> (Vec<ShownHeader>, Vec<String>) {
    let count = |name: &str| {
        held.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count()
    };
    let mut shown = Vec::new();
    let mut folded: Vec<String> = Vec::new();
    let mut repeated_warned: Vec<String> = Vec::new();
    for (name, value) in held.headers {
        let times = count(name);
        let lower = name.to_ascii_lowercase();
        let mut notes = Vec::new();
        if overrides_method(name) {
            notes.push("method override".to_owned());
            warnings.push(format!(
                "method override: the header {name}: {value} may make the server treat this {} as {}",
                held.method,
                value.trim()
            ));
        }
        if lower == "content-encoding" && !value.trim().eq_ignore_ascii_case("identity") {
            notes.push("the body is encoded".to_owned());
        }
        if lower == "transfer-encoding" && !value.trim().eq_ignore_ascii_case("chunked") {
            notes.push("unusual transfer encoding".to_owned());
            warnings.push(format!(
                "the header {name}: {value} is not plain chunked; servers and proxies may read the body differently"
            ));
        }
        if times > 1 {
            notes.push(format!("sent {times} times"));
            if !repeated_warned.contains(&lower) && !inert(name, value) {
                repeated_warned.push(lower.clone());
                warnings.push(format!(
                    "the header {name} is sent {times} times; servers differ on which one counts"
                ));
            }
        }
        if !whole && notes.is_empty() && inert(name, value) {
            if !folded.contains(&lower) {
                folded.push(lower);
            }
            continue;
        }
        shown.push(ShownHeader {
            name: name.clone(),
            value: value.clone(),
            note: (!notes.is_empty()).then(|| notes.join("; ")),
        });
    }
    (shown, folded)
}
