//! Body constraints: compile them from the file, check them against a
//! buffered JSON or form body. Anything that cannot be checked exactly is a
//! violation (fail closed).

use std::collections::BTreeMap;
use std::ops::Range;

use crate::decimal::Decimal;
use crate::decision::{BodyInput, DenyReason};
use crate::json::{self, Json};
use crate::raw::{RawConstraint, TableOnly};

/// Longest value excerpt quoted in a denial message.
const MAX_QUOTED: usize = 64;

/// All constraints of one rule, in field-name order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyConstraints {
    fields: Vec<FieldConstraint>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldConstraint {
    name: String,
    checks: Vec<Check>,
    optional: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    Max(Literal),
    Min(Literal),
    OneOf(Vec<Literal>),
    Equals(Literal),
    MaxLength(u64),
}

/// A constant from the policy file; numbers keep their text for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Literal {
    Str(String),
    Num(Decimal, String),
    Bool(bool),
}

impl std::fmt::Display for Literal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Literal::Str(s) => write!(f, "{s:?}"),
            Literal::Num(_, text) => f.write_str(text),
            Literal::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// A compile error: where and what.
pub type SpanError = (Range<usize>, String);

/// A field value from either body format.
enum FieldValue<'a> {
    Json(&'a Json),
    Form(&'a str),
}

impl BodyConstraints {
    /// Validates the `[allow.body]` table.
    pub fn compile(
        table: &BTreeMap<String, toml::Spanned<TableOnly<RawConstraint>>>,
    ) -> Result<BodyConstraints, SpanError> {
        let mut fields = Vec::new();
        for (name, raw) in table {
            let span = raw.span();
            if name.is_empty() || name.split('.').any(str::is_empty) {
                return Err((
                    span,
                    format!(
                        "body field name {name:?} has an empty part; write nested fields like \"customer.id\""
                    ),
                ));
            }
            let raw = &raw.get_ref().0;
            let mut checks = Vec::new();
            if let Some(max) = &raw.max {
                checks.push(Check::Max(number(max)?));
            }
            if let Some(min) = &raw.min {
                checks.push(Check::Min(number(min)?));
            }
            if let (Some(Check::Max(Literal::Num(max, _))), Some(Check::Min(Literal::Num(min, _)))) =
                (checks.first(), checks.get(1))
                && min > max
            {
                return Err((
                    span,
                    format!("body field `{name}`: min is greater than max"),
                ));
            }
            if let Some(one_of) = &raw.one_of {
                if one_of.get_ref().is_empty() {
                    return Err((
                        one_of.span(),
                        "one_of is empty, so nothing could match; list the allowed values"
                            .to_owned(),
                    ));
                }
                let values = one_of
                    .get_ref()
                    .iter()
                    .map(literal)
                    .collect::<Result<Vec<_>, _>>()?;
                checks.push(Check::OneOf(values));
            }
            if let Some(equals) = &raw.equals {
                checks.push(Check::Equals(literal(equals)?));
            }
            if let Some(max_length) = &raw.max_length {
                checks.push(Check::MaxLength(*max_length.get_ref()));
            }
            fields.push(FieldConstraint {
                name: name.clone(),
                checks,
                optional: raw.optional.unwrap_or(false),
            });
        }
        Ok(BodyConstraints { fields })
    }

    /// A canonical text of the constraints, for rule keys.
    pub fn canonical(&self) -> String {
        format!("{:?}", self.fields)
    }

    /// Checks a body; Err is the reason to deny.
    pub fn check(&self, body: Option<&BodyInput<'_>>) -> Result<(), DenyReason> {
        let Some(body) = body else {
            return Err(DenyReason::BodyMissing);
        };
        if !body.complete {
            return Err(DenyReason::BodyTooLarge);
        }
        if body.bytes.is_empty() {
            return Err(DenyReason::BodyMissing);
        }
        let unparseable = |detail: String| DenyReason::BodyUnparseable { detail };
        let text = std::str::from_utf8(body.bytes)
            .map_err(|_| unparseable("the body is not valid UTF-8".to_owned()))?;
        match BodyFormat::from_content_type(body.content_type).map_err(unparseable)? {
            BodyFormat::Json => {
                let doc =
                    json::parse(text).map_err(|e| unparseable(format!("invalid JSON: {e}")))?;
                let Json::Object(_) = doc else {
                    return Err(unparseable("the JSON body is not an object".to_owned()));
                };
                self.check_fields(|name| Ok(json_field(&doc, name).map(FieldValue::Json)))
            }
            BodyFormat::Form => {
                let form = parse_form(text).map_err(unparseable)?;
                self.check_fields(|name| form_field(&form, name).map(|v| v.map(FieldValue::Form)))
            }
        }
    }

    fn check_fields<'a>(
        &self,
        lookup: impl Fn(&str) -> Result<Option<FieldValue<'a>>, DenyReason>,
    ) -> Result<(), DenyReason> {
        for field in &self.fields {
            let violation = |detail: String| DenyReason::BodyConstraint {
                field: field.name.clone(),
                detail,
            };
            match lookup(&field.name)? {
                None if field.optional => {}
                None => return Err(violation("is missing".to_owned())),
                Some(value) => {
                    for check in &field.checks {
                        check.apply(&value).map_err(violation)?;
                    }
                }
            }
        }
        Ok(())
    }
}

enum BodyFormat {
    Json,
    Form,
}

impl BodyFormat {
    fn from_content_type(content_type: Option<&str>) -> Result<BodyFormat, String> {
        let Some(content_type) = content_type else {
            return Err(
                "no Content-Type; send application/json or application/x-www-form-urlencoded"
                    .to_owned(),
            );
        };
        let mut parts = content_type.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        for param in parts {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            if key.trim().eq_ignore_ascii_case("charset") {
                let charset = value.trim().trim_matches('"').to_ascii_lowercase();
                if charset != "utf-8" && charset != "utf8" && charset != "us-ascii" {
                    return Err(format!("charset {charset:?} is not UTF-8"));
                }
            }
        }
        if media == "application/json"
            || (media.starts_with("application/") && media.ends_with("+json"))
        {
            Ok(BodyFormat::Json)
        } else if media == "application/x-www-form-urlencoded" {
            Ok(BodyFormat::Form)
        } else {
            Err(format!(
                "Content-Type {media:?} is neither JSON nor application/x-www-form-urlencoded"
            ))
        }
    }
}

/// Follows a dotted name through nested objects.
fn json_field<'a>(doc: &'a Json, name: &str) -> Option<&'a Json> {
    name.split('.').try_fold(doc, |current, key| match current {
        Json::Object(map) => map.get(key),
        _ => None,
    })
}

/// Looks a dotted name up literally and in bracket form
/// ("customer.id" and "customer[id]"); both present is ambiguous.
fn form_field<'a>(
    form: &'a BTreeMap<String, String>,
    name: &str,
) -> Result<Option<&'a str>, DenyReason> {
    let mut parts = name.split('.');
    let first = parts.next().unwrap_or(name);
    let bracketed: String = parts.fold(first.to_owned(), |acc, part| format!("{acc}[{part}]"));
    let literal = form.get(name);
    let nested = if bracketed == name {
        None
    } else {
        form.get(&bracketed)
    };
    match (literal, nested) {
        (Some(_), Some(_)) => Err(DenyReason::BodyUnparseable {
            detail: format!("both {name:?} and {bracketed:?} are present"),
        }),
        (Some(v), None) | (None, Some(v)) => Ok(Some(v.as_str())),
        (None, None) => Ok(None),
    }
}

/// Parses application/x-www-form-urlencoded strictly: invalid escapes,
/// raw ';' (a separator to some servers) and repeated keys are refused.
fn parse_form(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut form = BTreeMap::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        if pair.contains(';') {
            return Err("raw ';' in a form body is a separator to some servers".to_owned());
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = form_decode(key)?;
        let value = form_decode(value)?;
        if form.contains_key(&key) {
            return Err(format!("duplicate form key {key:?}"));
        }
        form.insert(key, value);
    }
    Ok(form)
}

fn form_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let byte = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| "invalid percent-encoding in form body".to_owned())?;
                out.push(byte);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "form field is not UTF-8 after decoding".to_owned())
}

fn number(value: &toml::Spanned<toml::Value>) -> Result<Literal, SpanError> {
    match literal(value)? {
        number @ Literal::Num(..) => Ok(number),
        _ => Err((
            value.span(),
            "expected a number, like 10000 or 2.5".to_owned(),
        )),
    }
}

fn literal(value: &toml::Spanned<toml::Value>) -> Result<Literal, SpanError> {
    match value.get_ref() {
        toml::Value::String(s) => Ok(Literal::Str(s.clone())),
        toml::Value::Boolean(b) => Ok(Literal::Bool(*b)),
        toml::Value::Integer(i) => Ok(Literal::Num(Decimal::from_i64(*i), i.to_string())),
        toml::Value::Float(f) => Decimal::from_f64(*f)
            .map(|d| Literal::Num(d, format!("{f}")))
            .ok_or_else(|| (value.span(), "numbers must be finite".to_owned())),
        _ => Err((
            value.span(),
            "expected a string, number or boolean".to_owned(),
        )),
    }
}

fn quote(value: &FieldValue<'_>) -> String {
    let text = match value {
        FieldValue::Json(Json::Number(n)) => n.clone(),
        FieldValue::Json(Json::String(s)) => format!("{s:?}"),
        FieldValue::Form(s) => format!("{s:?}"),
        FieldValue::Json(Json::Bool(b)) => b.to_string(),
        FieldValue::Json(Json::Null) => "null".to_owned(),
        FieldValue::Json(Json::Array(_)) => "an array".to_owned(),
        FieldValue::Json(Json::Object(_)) => "an object".to_owned(),
    };
    if text.chars().count() > MAX_QUOTED {
        let short: String = text.chars().take(MAX_QUOTED).collect();
        format!("{short}…")
    } else {
        text
    }
}

impl FieldValue<'_> {
    fn as_number(&self) -> Option<Decimal> {
        match self {
            FieldValue::Json(Json::Number(n)) => Decimal::parse(n),
            FieldValue::Form(s) => Decimal::parse(s),
            FieldValue::Json(_) => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::Json(Json::String(s)) => Some(s),
            FieldValue::Form(s) => Some(s),
            FieldValue::Json(_) => None,
        }
    }

    /// JSON is typed: "10" and 10 differ. Form values are text, so numbers
    /// and booleans are compared by parsing them.
    fn equals(&self, literal: &Literal) -> bool {
        match (literal, self) {
            (Literal::Str(s), value) => value.as_str() == Some(s.as_str()),
            (Literal::Num(n, _), value) => value.as_number().as_ref() == Some(n),
            (Literal::Bool(b), FieldValue::Json(Json::Bool(v))) => b == v,
            (Literal::Bool(b), FieldValue::Form(v)) => *v == if *b { "true" } else { "false" },
            (Literal::Bool(_), FieldValue::Json(_)) => false,
        }
    }
}

impl Check {
    fn apply(&self, value: &FieldValue<'_>) -> Result<(), String> {
        let shown = quote(value);
        match self {
            Check::Max(Literal::Num(max, text)) | Check::Min(Literal::Num(max, text)) => {
                let Some(number) = value.as_number() else {
                    return Err(format!("= {shown} is not a number"));
                };
                match self {
                    Check::Max(_) if number > *max => Err(format!("= {shown} exceeds max {text}")),
                    Check::Min(_) if number < *max => Err(format!("= {shown} is below min {text}")),
                    _ => Ok(()),
                }
            }
            Check::Max(_) | Check::Min(_) => Err("has a non-numeric limit".to_owned()),
            Check::OneOf(options) => {
                if options.iter().any(|o| value.equals(o)) {
                    Ok(())
                } else {
                    let list: Vec<String> = options.iter().map(ToString::to_string).collect();
                    Err(format!("= {shown} is not one of [{}]", list.join(", ")))
                }
            }
            Check::Equals(expected) => {
                if value.equals(expected) {
                    Ok(())
                } else {
                    Err(format!("= {shown} does not equal {expected}"))
                }
            }
            Check::MaxLength(max) => match value.as_str() {
                Some(s) if s.chars().count() as u64 <= *max => Ok(()),
                Some(_) => Err(format!("is longer than {max} characters")),
                None => Err(format!("= {shown} is not a string")),
            },
        }
    }
}
