//! Policy tests as data: the `[[case]]` tables `airlock policy test --cases`
//! runs. Parsing only; running a case needs a URL parser, which lives with
//! the binary.

use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{PolicyError, SourceMap};

/// What a case expects the policy to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    Allow,
    Deny,
    Ask,
}

impl Expect {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Ask => "ask",
        }
    }
}

/// One `[[case]]` of a cases file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// The case's `name`, or "case N" (1-based, file order).
    pub name: String,
    pub method: String,
    pub url: String,
    /// The request body, as written (TOML strings are UTF-8).
    pub body: Option<String>,
    pub content_type: Option<String>,
    pub expect: Expect,
    /// The deciding rule expected: "file:line", the rule's `description`,
    /// or "default" for the policy's default.
    pub rule: Option<String>,
    /// Line of the case's `[[case]]` header, for messages about it.
    pub line: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCases {
    #[serde(default)]
    case: Vec<Spanned<RawCase>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: Option<String>,
    method: Spanned<String>,
    url: Spanned<String>,
    body: Option<String>,
    content_type: Option<String>,
    expect: Expect,
    rule: Option<Spanned<String>>,
}

/// Parses a cases file. Errors read "cases.toml:7:10: message" and, like a
/// policy's, name the enclosing table and the fix.
pub fn parse_cases(source_name: &str, text: &str) -> Result<Vec<Case>, PolicyError> {
    let text: Arc<str> = text.into();
    let map = SourceMap::new(source_name.into(), text.clone());
    let raw: RawCases = toml::from_str(&text).map_err(|e| map.toml_error(&e))?;
    if raw.case.is_empty() {
        return Err(map.error(
            0..0,
            "no [[case]] tables; add one with method, url and expect (see docs/policy.md, `policy test --cases`)",
        ));
    }
    raw.case
        .into_iter()
        .enumerate()
        .map(|(i, case)| to_case(&map, i, case))
        .collect()
}

fn to_case(map: &SourceMap, index: usize, case: Spanned<RawCase>) -> Result<Case, PolicyError> {
    let line = map.line(case.span().start);
    let case = case.into_inner();
    let non_empty = |field: &Spanned<String>, what: &str| {
        if field.get_ref().trim().is_empty() {
            Err(map.error(
                field.span(),
                format!("`{what}` is empty; give e.g. {what} = {}", example(what)),
            ))
        } else {
            Ok(field.get_ref().clone())
        }
    };
    let method = non_empty(&case.method, "method")?;
    let url = non_empty(&case.url, "url")?;
    let rule = match case.rule {
        Some(rule) => Some(non_empty(&rule, "rule")?),
        None => None,
    };
    Ok(Case {
        name: case.name.unwrap_or_else(|| format!("case {}", index + 1)),
        method,
        url,
        body: case.body,
        content_type: case.content_type,
        expect: case.expect,
        rule,
        line,
    })
}

fn example(field: &str) -> &'static str {
    match field {
        "method" => "\"GET\"",
        "url" => "\"https://api.example.com/path\"",
        _ => "\"policy.toml:12\"",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[[case]]
name = "read a repo"
method = "GET"
url = "https://api.github.com/repos/a/b"
expect = "allow"
rule = "policy.toml:4"

[[case]]
method = "POST"
url = "https://api.stripe.com/v1/charges"
body = '{"amount": 100}'
content_type = "application/json"
expect = "deny"
"#;

    #[test]
    fn cases_keep_their_fields_line_and_a_default_name() {
        let cases = parse_cases("cases.toml", GOOD).unwrap();
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].name, "read a repo");
        assert_eq!(cases[0].line, 2);
        assert_eq!(cases[0].expect, Expect::Allow);
        assert_eq!(cases[0].rule.as_deref(), Some("policy.toml:4"));
        assert_eq!(cases[1].name, "case 2");
        assert_eq!(cases[1].line, 9);
        assert_eq!(cases[1].body.as_deref(), Some(r#"{"amount": 100}"#));
        assert_eq!(cases[1].content_type.as_deref(), Some("application/json"));
    }

    #[test]
    fn an_unknown_expectation_names_file_line_and_the_choices() {
        let text = "[[case]]\nmethod = \"GET\"\nurl = \"https://a.test/\"\nexpect = \"alow\"\n";
        let err = parse_cases("cases.toml", text).unwrap_err().to_string();
        assert!(err.starts_with("cases.toml:4:"), "{err}");
        assert!(err.contains("allow"), "{err}");
    }

    #[test]
    fn a_misspelt_key_gets_a_suggestion() {
        let text = "[[case]]\nmethod = \"GET\"\nurl = \"https://a.test/\"\nexpect = \"allow\"\nrulle = \"x\"\n";
        let err = parse_cases("cases.toml", text).unwrap_err().to_string();
        assert!(err.starts_with("cases.toml:5:1:"), "{err}");
        assert!(err.contains("did you mean `rule`?"), "{err}");
    }

    #[test]
    fn a_missing_expectation_is_an_error_at_the_case() {
        let text = "[[case]]\nmethod = \"GET\"\nurl = \"https://a.test/\"\n";
        let err = parse_cases("cases.toml", text).unwrap_err().to_string();
        assert!(err.starts_with("cases.toml:"), "{err}");
        assert!(err.contains("missing field `expect`"), "{err}");
    }

    #[test]
    fn an_empty_file_or_empty_url_is_refused() {
        let err = parse_cases("c.toml", "").unwrap_err().to_string();
        assert!(err.contains("no [[case]] tables"), "{err}");
        let text = "[[case]]\nmethod = \"GET\"\nurl = \" \"\nexpect = \"deny\"\n";
        let err = parse_cases("c.toml", text).unwrap_err().to_string();
        assert!(err.starts_with("c.toml:3:7:"), "{err}");
    }
}
