//! Which keys of a request a server could bind to a constrained field.
//!
//! The policy names a field once (`amount`, `customer.id`); servers find it
//! under many spellings. Go's `encoding/json` and ASP.NET Core match keys
//! case-insensitively and the last match wins; PHP, Rails/Rack and
//! Express's `qs` read `customer[id]` as nested and `amount[]` or
//! `amount[0]` as a list; ASP.NET and Spring read `customer.id` as nested;
//! PHP turns `.` and spaces in a top-level name into `_`. Every key that any
//! of them could bind to the field is an occurrence, and every occurrence
//! must pass (see docs/policy.md, "Which occurrences count").

use crate::json::Json;

/// Where an occurrence was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The request target's query string.
    Query,
    /// A body declared as JSON.
    JsonBody,
    /// A body declared as a form.
    FormBody,
    /// A body declared as JSON, read as form pairs, as a server that ignores
    /// the `Content-Type` (or takes it from elsewhere) would.
    JsonBodyAsForm,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Query => "the query string",
            Self::JsonBody => "the JSON body",
            Self::FormBody => "the form body",
            Self::JsonBodyAsForm => "the JSON body read as a form",
        })
    }
}

/// A constrained field name, split on `.` and case-folded once.
#[derive(Debug, Clone)]
pub(crate) struct FieldPath {
    folded: Vec<String>,
    /// PHP's spelling of a dotted top-level name (`a.b` is `$_POST["a_b"]`).
    php_folded: String,
}

impl FieldPath {
    pub(crate) fn new(name: &str) -> Self {
        Self {
            folded: name.split('.').map(fold).collect(),
            php_folded: fold(&php_mangle(name)),
        }
    }

    /// Whether some common server binds this form or query key to the
    /// field: compared part by part after case folding, with `[]`/`[N]`
    /// list parts ignored, in bracket (`a[b]`), dotted (`a.b`) and PHP
    /// (`a_b`) spellings.
    pub(crate) fn matches_form_key(&self, key: &str) -> bool {
        let (base, brackets) = split_brackets(key);
        let nested: Vec<String> = base
            .split('.')
            .chain(brackets.iter().flat_map(|part| part.split('.')))
            .filter(|part| !is_list_index(part))
            .map(fold)
            .collect();
        if nested == self.folded {
            return true;
        }
        // PHP: the top-level name is mangled, brackets nest.
        let php: Vec<String> = std::iter::once(fold(&php_mangle(base)))
            .chain(
                brackets
                    .iter()
                    .filter(|part| !is_list_index(part))
                    .map(|part| fold(part)),
            )
            .collect();
        match php.as_slice() {
            [only] => *only == self.php_folded,
            parts => parts == self.folded.as_slice(),
        }
    }

    /// Every value in a JSON document that a case-insensitive binder would
    /// read as this field, with the keys as written, joined by `.`.
    pub(crate) fn json_occurrences<'a>(&self, doc: &'a Json) -> Vec<(String, &'a Json)> {
        let mut found = Vec::new();
        walk(doc, &self.folded, String::new(), &mut found);
        found
    }
}

fn walk<'a>(value: &'a Json, parts: &[String], written: String, out: &mut Vec<(String, &'a Json)>) {
    let Some((first, rest)) = parts.split_first() else {
        out.push((written, value));
        return;
    };
    let Json::Object(map) = value else {
        // Arrays are not walked: binding a struct field from an array fails
        // in the binders this models, so the field is absent there.
        return;
    };
    for (key, child) in map {
        if fold(key) == *first {
            let path = if written.is_empty() {
                key.clone()
            } else {
                format!("{written}.{key}")
            };
            walk(child, rest, path, out);
        }
    }
}

/// Unicode simple case folding, the comparison Go's `strings.EqualFold`
/// (which `encoding/json` uses) makes: each character is mapped through
/// lower, upper and lower case again where each step yields one character,
/// so the Kelvin sign `K` (U+212A) folds to `k`, the long s `ſ` (U+017F) to
/// `s` and final sigma `ς` to `σ`, as in Go. It also folds dotless `ı` to
/// `i` as .NET's `OrdinalIgnoreCase` does (Go does not): folding more keys
/// together only finds more occurrences, which is the safe direction.
pub(crate) fn fold(text: &str) -> String {
    text.chars().map(fold_char).collect()
}

fn fold_char(c: char) -> char {
    let lower = single(c.to_lowercase()).unwrap_or(c);
    let upper = single(lower.to_uppercase()).unwrap_or(lower);
    single(upper.to_lowercase()).unwrap_or(upper)
}

fn single(mut chars: impl Iterator<Item = char>) -> Option<char> {
    let first = chars.next()?;
    chars.next().is_none().then_some(first)
}

/// `a[b][c]` → (`a`, [`b`, `c`]). A key whose brackets do not close is all
/// base, as PHP and `qs` read it.
fn split_brackets(key: &str) -> (&str, Vec<&str>) {
    let Some(open) = key.find('[') else {
        return (key, Vec::new());
    };
    if open == 0 {
        return (key, Vec::new());
    }
    let (base, mut rest) = key.split_at(open);
    let mut parts = Vec::new();
    while let Some(inner) = rest.strip_prefix('[') {
        let Some(close) = inner.find(']') else {
            break;
        };
        parts.push(&inner[..close]);
        rest = &inner[close + 1..];
    }
    if parts.is_empty() {
        return (key, Vec::new());
    }
    (base, parts)
}

/// `[]` and `[0]` make a list in PHP, Rails and `qs`; the list's element
/// is still the field's value to a handler that takes the first or
/// coerces a one-element list (`Number(["5"])` is 5 in JavaScript).
fn is_list_index(part: &str) -> bool {
    part.bytes().all(|b| b.is_ascii_digit())
}

/// PHP's `$_GET`/`$_POST` names: `.`, space and an unclosed `[` in the
/// top-level name become `_` (php-src main/php_variables.c).
fn php_mangle(name: &str) -> String {
    name.chars()
        .map(|c| if matches!(c, '.' | ' ' | '[') { '_' } else { c })
        .collect()
}
