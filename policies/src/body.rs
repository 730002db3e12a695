// Why this file is long (~530 lines): compiling a body constraint and checking
// it against every reading of the body share the private Check/Literal/
// FieldValue types; the parsers themselves already live in json.rs and form.rs.
//! Body constraints: compile them from the file, check them against every
//! reading of the request a common server could make (the body as declared,
//! a JSON body read as a form, the query string; keys matched as the
//! binders in binding.rs match them). Anything that cannot be checked
//! exactly is a violation (fail closed).

use std::collections::BTreeMap;
use std::ops::Range;

use crate::binding::{FieldPath, Source};
use crate::decimal::Decimal;
use crate::decision::{BodyInput, DenyReason};
use crate::form::{self, Pair};
use crate::json::{self, Json};
use crate::raw::{RawConstraint, TableOnly};

/// Longest value excerpt quoted in a denial message.
const MAX_QUOTED: usize = 64;

/// All constraints of one rule, in field-name order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BodyConstraints {
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
            Self::Str(s) => write!(f, "{s:?}"),
            Self::Num(_, text) => f.write_str(text),
            Self::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// A compile error: where and what.
pub(crate) type SpanError = (Range<usize>, String);

/// A field value from either body format.
enum FieldValue<'a> {
    Json(&'a Json),
    Form(&'a str),
}

impl BodyConstraints {
    /// Validates the `[allow.body]` table.
    pub(crate) fn compile(
        table: &BTreeMap<String, toml::Spanned<TableOnly<RawConstraint>>>,
    ) -> Result<Self, SpanError> {
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
        Ok(Self { fields })
    }

    /// A canonical text of the constraints, for rule keys.
    pub(crate) fn canonical(&self) -> String {
        format!("{:?}", self.fields)
    }

    /// Checks a request on a rule with body constraints; Err is the reason
    /// to deny. `query` is the request target's query string (after `?`):
    /// servers that merge query and body parameters read it too.
    pub(crate) fn check(
        &self,
        query: Option<&str>,
        body: Option<&BodyInput<'_>>,
    ) -> Result<(), DenyReason> {
        self.check_for(Purpose::Allow, query, body)
    }

    /// Whether an `[[ask]]` rule with these constraints holds the request.
    /// Fails closed: only a clean violation, where every reading of the
    /// request is outside the constraints, lets the request go by. A body
    /// that is missing, too large, unparseable or ambiguous is held.
    pub(crate) fn holds_for_ask(&self, query: Option<&str>, body: Option<&BodyInput<'_>>) -> bool {
        !matches!(
            self.check_for(Purpose::Ask, query, body),
            Err(DenyReason::BodyConstraint { .. })
        )
    }

    /// Checks an MCP tool call's `params.arguments` (an object, already
    /// read strictly: duplicate keys refused). Every spelling of a field a
    /// case-insensitive binder would take counts, as in a JSON body.
    pub(crate) fn check_arguments(&self, arguments: &Json) -> Result<(), DenyReason> {
        let Json::Object(_) = arguments else {
            return Err(unparseable("the arguments are not an object".to_owned()));
        };
        let readings = Readings {
            declared: Source::JsonBody,
            json: Some(arguments.clone()),
            body_pairs: Vec::new(),
            query: Vec::new(),
        };
        for field in &self.fields {
            field.check(&readings, Purpose::Allow)?;
        }
        Ok(())
    }

    fn check_for(
        &self,
        purpose: Purpose,
        query: Option<&str>,
        body: Option<&BodyInput<'_>>,
    ) -> Result<(), DenyReason> {
        let Some(body) = body else {
            return Err(DenyReason::BodyMissing);
        };
        if !body.complete {
            return Err(DenyReason::BodyTooLarge);
        }
        if body.bytes.is_empty() {
            return Err(DenyReason::BodyMissing);
        }
        let format = BodyFormat::declared(body.content_types)?;
        let text = std::str::from_utf8(body.bytes)
            .map_err(|_| unparseable("the body is not valid UTF-8".to_owned()))?;
        let readings = Readings::read(format, text, query)?;
        for field in &self.fields {
            field.check(&readings, purpose)?;
        }
        Ok(())
    }
}

/// What a check is for: whether an allow rule allows, or an ask rule holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Allow,
    Ask,
}

fn unparseable(detail: String) -> DenyReason {
    DenyReason::BodyUnparseable { detail }
}

fn ambiguous(detail: String) -> DenyReason {
    DenyReason::AmbiguousBody { detail }
}

/// Every reading of one request that a common server could make.
struct Readings {
    /// The body as its `Content-Type` says.
    declared: Source,
    json: Option<Json>,
    /// Pairs of a form body, or of a JSON body read as a form.
    body_pairs: Vec<Pair>,
    query: Vec<Pair>,
}

impl Readings {
    fn read(format: BodyFormat, text: &str, query: Option<&str>) -> Result<Self, DenyReason> {
        let query = query.map(form::parse_lenient).unwrap_or_default();
        match format {
            BodyFormat::Json => {
                let doc =
                    json::parse(text).map_err(|e| unparseable(format!("invalid JSON: {e}")))?;
                let Json::Object(_) = doc else {
                    return Err(unparseable("the JSON body is not an object".to_owned()));
                };
                Ok(Self {
                    declared: Source::JsonBody,
                    json: Some(doc),
                    body_pairs: form::parse_lenient(text),
                    query,
                })
            }
            BodyFormat::Form => {
                if json::parse(text).is_ok() {
                    return Err(ambiguous(
                        "the Content-Type is application/x-www-form-urlencoded but the body is \
                         JSON, which servers that decode JSON whatever the Content-Type read \
                         differently: send Content-Type: application/json"
                            .to_owned(),
                    ));
                }
                Ok(Self {
                    declared: Source::FormBody,
                    json: None,
                    body_pairs: form::parse_strict(text).map_err(|e| unparseable(e.to_string()))?,
                    query,
                })
            }
        }
    }

    /// Every occurrence of a field, the declared body's first.
    fn occurrences(&self, field: &FieldPath) -> Vec<Occurrence<'_>> {
        let mut found: Vec<Occurrence<'_>> = Vec::new();
        if let Some(doc) = &self.json {
            found.extend(
                field
                    .json_occurrences(doc)
                    .into_iter()
                    .map(|(key, value)| Occurrence {
                        source: Source::JsonBody,
                        key,
                        value: FieldValue::Json(value),
                    }),
            );
        }
        let pair_source = match self.declared {
            Source::FormBody => Source::FormBody,
            _ => Source::JsonBodyAsForm,
        };
        for (pairs, source) in [
            (&self.body_pairs, pair_source),
            (&self.query, Source::Query),
        ] {
            found.extend(
                pairs
                    .iter()
                    .filter(|(key, _)| field.matches_form_key(key))
                    .map(|(key, value)| Occurrence {
                        source,
                        key: key.clone(),
                        value: FieldValue::Form(value),
                    }),
            );
        }
        found
    }
}

/// One place a server could read a constrained field from.
struct Occurrence<'a> {
    source: Source,
    /// The key as sent (nested JSON keys joined by `.`).
    key: String,
    value: FieldValue<'a>,
}

impl FieldConstraint {
    fn check(&self, readings: &Readings, purpose: Purpose) -> Result<(), DenyReason> {
        let occurrences = readings.occurrences(&FieldPath::new(&self.name));
        let violation = |detail: String| DenyReason::BodyConstraint {
            field: self.name.clone(),
            detail,
        };
        let in_body = occurrences
            .iter()
            .filter(|o| o.source == readings.declared)
            .count();
        if in_body == 0 && !self.optional {
            // Missing from the body is a clean violation only if no server
            // finds the field anywhere: a server that merges the query (or
            // reads a JSON body as a form) would act on the value found
            // there, which an ask rule must see before letting it go by.
            if purpose == Purpose::Ask && !occurrences.is_empty() {
                return Err(ambiguous(format!(
                    "body field `{}` is not in the body but appears in {}, which servers that merge parameters read: send it in the body",
                    self.name, occurrences[0].source
                )));
            }
            return Err(violation("is missing".to_owned()));
        }
        if let [only] = occurrences.as_slice()
            && only.source == readings.declared
        {
            return self
                .apply(&only.value)
                .map_err(|failure| violation(failure.to_string()));
        }
        for occurrence in &occurrences {
            if let Err(detail) = self.apply(&occurrence.value) {
                return Err(ambiguous(self.describe_conflict(
                    &occurrences,
                    occurrence,
                    &detail,
                )));
            }
        }
        Ok(())
    }

    fn apply(&self, value: &FieldValue<'_>) -> Result<(), CheckFailure> {
        self.checks.iter().try_for_each(|check| check.apply(value))
    }

    /// "body field `amount` appears 2 times (`amount` in the JSON body,
    /// `AMOUNT` in the JSON body), and `AMOUNT` in the JSON body = 50000
    /// exceeds max 1000; servers that ...: send it once".
    fn describe_conflict(
        &self,
        all: &[Occurrence<'_>],
        failing: &Occurrence<'_>,
        detail: &CheckFailure,
    ) -> String {
        const LISTED: usize = 4;
        let mut listed: Vec<String> = all
            .iter()
            .take(LISTED)
            .map(|o| format!("`{}` in {}", shorten(&o.key), o.source))
            .collect();
        if all.len() > LISTED {
            listed.push("…".to_owned());
        }
        let times = match all.len() {
            1 => "once, outside the body".to_owned(),
            n => format!("{n} times"),
        };
        let mut why = Vec::new();
        let in_one_source = |source: Source| all.iter().filter(|o| o.source == source).count();
        if [Source::JsonBody, Source::FormBody, Source::Query]
            .into_iter()
            .any(|source| in_one_source(source) > 1)
        {
            why.push(
                "servers that match keys case-insensitively (Go encoding/json, ASP.NET Core) or \
                 read `a[]` and `a[b]` keys (PHP, Rails, Express) bind each spelling, and the last one wins",
            );
        }
        if all.iter().any(|o| o.source == Source::Query) {
            why.push("Java Servlet, Spring, Flask's request.values and PHP's $_REQUEST read the query string as well as the body");
        }
        if all.iter().any(|o| o.source == Source::JsonBodyAsForm) {
            why.push(
                "a server that reads the body as a form whatever its Content-Type finds it there",
            );
        }
        format!(
            "body field `{name}` appears {times} ({list}), and `{key}` in {source} {detail}; {why}: send it once, in the body",
            name = self.name,
            list = listed.join(", "),
            key = shorten(&failing.key),
            source = failing.source,
            why = why.join("; "),
        )
    }
}

fn shorten(text: &str) -> String {
    if text.chars().count() > MAX_QUOTED {
        let short: String = text.chars().take(MAX_QUOTED).collect();
        format!("{short}…")
    } else {
        text.to_owned()
    }
}

enum BodyFormat {
    Json,
    Form,
}

/// A declared body format the constraints cannot be checked against.
#[derive(Debug, thiserror::Error)]
enum UncheckableType {
    #[error("charset {0:?} is not UTF-8")]
    Charset(String),
    #[error("the Content-Type names a charset twice")]
    TwoCharsets,
    #[error("Content-Type {0:?} is neither JSON nor application/x-www-form-urlencoded")]
    Media(String),
}

impl BodyFormat {
    /// The format every `Content-Type` header declares. None, an unknown
    /// type or a charset other than UTF-8 cannot be checked; two headers,
    /// or one listing several values, are ambiguous (RFC 9110 §8.3 allows
    /// one media type; servers take the first, the last, or both).
    fn declared(content_types: &[&str]) -> Result<Self, DenyReason> {
        match content_types {
            [] => Err(unparseable(
                "no Content-Type; send application/json or application/x-www-form-urlencoded"
                    .to_owned(),
            )),
            [one] if !one.contains(',') => {
                Self::from_content_type(one).map_err(|e| unparseable(e.to_string()))
            }
            several => Err(ambiguous(format!(
                "{} Content-Type values ({}); servers disagree on which one counts: send exactly one",
                several.iter().map(|v| v.split(',').count()).sum::<usize>(),
                several
                    .iter()
                    .map(|v| format!("{:?}", shorten(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    fn from_content_type(content_type: &str) -> Result<Self, UncheckableType> {
        let mut parts = content_type.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut charsets = 0;
        for param in parts {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            if key.trim().eq_ignore_ascii_case("charset") {
                charsets += 1;
                let charset = value.trim().trim_matches('"').to_ascii_lowercase();
                if charset != "utf-8" && charset != "utf8" && charset != "us-ascii" {
                    return Err(UncheckableType::Charset(charset));
                }
            }
        }
        if charsets > 1 {
            return Err(UncheckableType::TwoCharsets);
        }
        if media == "application/json"
            || (media.starts_with("application/") && media.ends_with("+json"))
        {
            Ok(Self::Json)
        } else if media == "application/x-www-form-urlencoded" {
            Ok(Self::Form)
        } else {
            Err(UncheckableType::Media(media))
        }
    }
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
    shorten(&text)
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

/// Why a value fails one check: the detail of a
/// [`DenyReason::BodyConstraint`], after the field's name.
#[derive(Debug, thiserror::Error)]
enum CheckFailure {
    #[error("= {0} is not a number")]
    NotANumber(String),
    #[error("= {shown} exceeds max {limit}")]
    AboveMax { shown: String, limit: String },
    #[error("= {shown} is below min {limit}")]
    BelowMin { shown: String, limit: String },
    #[error("has a non-numeric limit")]
    NonNumericLimit,
    #[error("= {shown} is not one of [{}]", .options.join(", "))]
    NotOneOf { shown: String, options: Vec<String> },
    #[error("= {shown} does not equal {expected}")]
    NotEqual { shown: String, expected: String },
    #[error("is longer than {0} characters")]
    TooLong(u64),
    #[error("= {0} is not a string")]
    NotAString(String),
}

impl Check {
    fn apply(&self, value: &FieldValue<'_>) -> Result<(), CheckFailure> {
        let shown = quote(value);
        match self {
            Self::Max(Literal::Num(max, text)) | Self::Min(Literal::Num(max, text)) => {
                let Some(number) = value.as_number() else {
                    return Err(CheckFailure::NotANumber(shown));
                };
                let limit = text.clone();
                match self {
                    Self::Max(_) if number > *max => Err(CheckFailure::AboveMax { shown, limit }),
                    Self::Min(_) if number < *max => Err(CheckFailure::BelowMin { shown, limit }),
                    _ => Ok(()),
                }
            }
            Self::Max(_) | Self::Min(_) => Err(CheckFailure::NonNumericLimit),
            Self::OneOf(options) => {
                if options.iter().any(|o| value.equals(o)) {
                    Ok(())
                } else {
                    let options = options.iter().map(ToString::to_string).collect();
                    Err(CheckFailure::NotOneOf { shown, options })
                }
            }
            Self::Equals(expected) => {
                if value.equals(expected) {
                    Ok(())
                } else {
                    let expected = expected.to_string();
                    Err(CheckFailure::NotEqual { shown, expected })
                }
            }
            Self::MaxLength(max) => match value.as_str() {
                Some(s) if s.chars().count() as u64 <= *max => Ok(()),
                Some(_) => Err(CheckFailure::TooLong(*max)),
                None => Err(CheckFailure::NotAString(shown)),
            },
        }
    }
}
