//! Parse errors and lint warnings, positioned as "file:line:col".

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

/// A policy that cannot be used. Display: "file:line:col: message".
#[derive(Debug, Clone, thiserror::Error)]
#[error("{source_name}:{line}:{column}: {message}")]
pub struct PolicyError {
    pub line: u32,
    pub column: u32,
    message: String,
    source_name: Arc<str>,
}

impl PolicyError {
    /// The message without the position prefix.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// How serious a [`Lint`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The policy probably does not mean what its author thinks.
    Warning,
    /// The policy is enforceable, but says something it cannot do (a
    /// project allow rule that a base deny overrides): `policy check` fails.
    Error,
}

/// A finding about a usable policy. Display:
/// "file:line:col: warning: message" (or "error:").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lint {
    pub line: u32,
    pub column: u32,
    pub message: String,
    pub severity: Severity,
    source_name: Arc<str>,
}

impl Lint {
    /// The file the finding is about.
    pub fn source_name(&self) -> &str {
        &self.source_name
    }
}

impl fmt::Display for Lint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(
            f,
            "{}:{}:{}: {level}: {}",
            self.source_name, self.line, self.column, self.message
        )
    }
}

/// Maps byte offsets of the source text to 1-based line and column
/// (columns count characters).
#[derive(Debug, Clone)]
pub(crate) struct SourceMap {
    name: Arc<str>,
    text: Arc<str>,
}

impl SourceMap {
    pub(crate) fn new(name: Arc<str>, text: Arc<str>) -> Self {
        Self { name, text }
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub(crate) fn text(&self) -> &Arc<str> {
        &self.text
    }

    pub(crate) fn position(&self, offset: usize) -> (u32, u32) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        (
            u32::try_from(line).unwrap_or(u32::MAX),
            u32::try_from(column).unwrap_or(u32::MAX),
        )
    }

    pub(crate) fn line(&self, offset: usize) -> u32 {
        self.position(offset).0
    }

    pub(crate) fn error(&self, span: Range<usize>, message: impl Into<String>) -> PolicyError {
        let (line, column) = self.position(span.start);
        PolicyError {
            line,
            column,
            message: message.into(),
            source_name: self.name.clone(),
        }
    }

    pub(crate) fn lint(&self, span: Range<usize>, message: impl Into<String>) -> Lint {
        let (line, column) = self.position(span.start);
        Lint {
            line,
            column,
            message: message.into(),
            severity: Severity::Warning,
            source_name: self.name.clone(),
        }
    }

    pub(crate) fn lint_error(&self, span: Range<usize>, message: impl Into<String>) -> Lint {
        Lint {
            severity: Severity::Error,
            ..self.lint(span, message)
        }
    }

    /// Turns a TOML/serde error into a positioned one; unknown-field errors
    /// get the enclosing table and a "did you mean" suggestion.
    pub(crate) fn toml_error(&self, error: &toml::de::Error) -> PolicyError {
        let span = error.span().unwrap_or(0..0);
        let message = error.message().trim().to_owned();
        let message = self
            .explain_unknown_field(&message, span.start)
            .or_else(|| self.explain_missing_field(&message, span.start))
            .or_else(|| self.explain_constraint_type(&message, span.start))
            .or_else(|| self.explain_unknown_variant(&message, span.start))
            .or_else(|| explain_quoted_number(&message))
            .unwrap_or(message);
        self.error(span, friendly_types(&message))
    }

    fn explain_unknown_field(&self, message: &str, offset: usize) -> Option<String> {
        let rest = message.strip_prefix("unknown field `")?;
        let (field, expected) = rest.split_once('`')?;
        let valid: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        let table = self.enclosing_table(offset);
        let mut out = format!("unknown field `{field}` {table}");
        if let Some(best) = closest(field, &valid) {
            out.push_str(&format!("; did you mean `{best}`?"));
        }
        if !valid.is_empty() {
            out.push_str(&format!(" (valid fields: {})", valid.join(", ")));
        }
        Some(out)
    }

    /// "unknown variant `dney`, expected one of `deny`, `allow`, `report`":
    /// the key it was written for, and the same did-you-mean as for fields.
    fn explain_unknown_variant(&self, message: &str, offset: usize) -> Option<String> {
        let rest = message.strip_prefix("unknown variant `")?;
        let (value, expected) = rest.split_once('`')?;
        let valid: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        let key = self
            .key_before(offset)
            .map_or_else(String::new, |key| format!(" for `{key}`"));
        let mut out = format!("unknown value \"{value}\"{key}");
        if let Some(best) = closest(value, &valid).or_else(|| {
            // A different case is the same word: "Deny" means "deny".
            valid
                .iter()
                .find(|v| v.eq_ignore_ascii_case(value))
                .copied()
        }) {
            out.push_str(&format!("; did you mean \"{best}\"?"));
        }
        if !valid.is_empty() {
            out.push_str(&format!(" (one of: {})", valid.join(", ")));
        }
        Some(out)
    }

    fn explain_missing_field(&self, message: &str, offset: usize) -> Option<String> {
        message.strip_prefix("missing field `")?;
        let line_start = self.text.get(..offset)?.rfind('\n').map_or(0, |i| i + 1);
        let line = self.text.get(line_start..)?.lines().next()?.trim();
        if line.starts_with('[') {
            Some(format!("{message} in {line}"))
        } else {
            Some(message.to_owned())
        }
    }

    /// A body constraint that is not a table (the error points at the
    /// value). Names the field, and if it is really a rule key written
    /// after `[allow.body]` or `[ask.body]`, says that TOML put it in the
    /// body table.
    fn explain_constraint_type(&self, message: &str, offset: usize) -> Option<String> {
        let found = message
            .strip_prefix("invalid type: ")?
            .strip_suffix(", expected struct RawConstraint")?;
        // TOML calls serde's "sequence" an array.
        let found = if found == "sequence" {
            "an array"
        } else {
            found
        };
        let key = self.key_before(offset);
        let table = self.enclosing_table(offset);
        let rule_keys: &[&str] = match table.as_str() {
            "in [allow.body]" => &ALLOW_KEYS,
            "in [ask.body]" => &ASK_KEYS,
            _ => &[],
        };
        if let Some(key) = &key
            && rule_keys.contains(&key.as_str())
        {
            let body = table.trim_start_matches("in ");
            return Some(format!(
                "`{key}` is written after {body}, so it belongs to the body table (keys after {body} are body fields); move rule keys like `{key}` above {body}"
            ));
        }
        let field = key.map_or_else(String::new, |key| format!(" for `{key}`"));
        Some(format!(
            "body constraint{field} must be a table like {{ max = 100 }}, not {found}"
        ))
    }

    /// The key of `key = value` when `offset` is the value's start, on the
    /// same line: "amount" for `amount = [1]`, `{ amount = 5 }`, `body.amount = 5`
    /// or `"amount" = 5`. None if that text does not look like a key.
    fn key_before(&self, offset: usize) -> Option<String> {
        let before = self.text.get(..offset)?;
        let line = &before[before.rfind('\n').map_or(0, |i| i + 1)..];
        let lhs = line.trim_end().strip_suffix('=')?.trim_end();
        let lhs = lhs[lhs.rfind(['{', ',']).map_or(0, |i| i + 1)..].trim();
        let key = if let Some(quoted) = lhs
            .strip_prefix('"')
            .and_then(|k| k.strip_suffix('"'))
            .or_else(|| lhs.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')))
        {
            quoted
        } else {
            lhs.rsplit('.').next().unwrap_or(lhs).trim()
        };
        let plausible = !key.is_empty() && !key.contains(['"', '\'', '[', ']', '=']);
        plausible.then(|| key.to_owned())
    }

    /// "in [[allow]]" for the last table header on a line before `offset`'s
    /// line (an error on a header line itself is about the top level).
    fn enclosing_table(&self, offset: usize) -> String {
        let end = offset.min(self.text.len());
        let before = self.text.get(..end).unwrap_or("");
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        before[..line_start]
            .lines()
            .map(str::trim)
            .rfind(|line| line.starts_with('['))
            .map_or_else(
                || "at top level".to_owned(),
                |line| {
                    let close = if line.starts_with("[[") { "]]" } else { "]" };
                    let end = line.find(close).map_or(line.len(), |i| i + close.len());
                    format!("in {}", &line[..end])
                },
            )
    }
}

/// The keys of an `[[allow]]` rule, for spotting one misplaced into its
/// `[allow.body]` table.
const ALLOW_KEYS: [&str; 11] = [
    "host",
    "hosts",
    "port",
    "ports",
    "methods",
    "paths",
    "max_requests",
    "body",
    "protocol",
    "tls",
    "description",
];

/// The keys of an `[[ask]]` rule, for spotting one misplaced into its
/// `[ask.body]` table.
const ASK_KEYS: [&str; 11] = [
    "host",
    "hosts",
    "port",
    "ports",
    "methods",
    "paths",
    "body",
    "reason",
    "timeout",
    "approvers",
    "description",
];

/// A number written as a string: `ports = ["443"]` is refused by serde as
/// `invalid type: string "443", expected u16`.
fn explain_quoted_number(message: &str) -> Option<String> {
    let rest = message.strip_prefix("invalid type: string \"")?;
    let (text, expected) = rest.split_once("\", expected ")?;
    let numeric = matches!(
        expected,
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "f32" | "f64"
    ) || expected.contains("number")
        || expected.contains("integer");
    if !numeric || text.trim().parse::<f64>().is_err() {
        return None;
    }
    Some(format!(
        "\"{text}\" is a string, and a number is expected here: write {} without quotes",
        text.trim()
    ))
}

/// Replaces serde's internal type names with what the user should write.
fn friendly_types(message: &str) -> String {
    let mut out = message
        .replace(
            "struct RawConstraint",
            "a constraint table like { max = 10000 }",
        )
        .replace("struct RawAllow", "an [[allow]] table")
        .replace("struct RawDeny", "a [[deny]] table")
        .replace("struct RawAsk", "an [[ask]] table")
        .replace("struct RawCredential", "a [[credential]] table");
    if out.starts_with("invalid type: map, expected a sequence") {
        out.push_str("; rules are lists of tables: write [[allow]], [[deny]], [[ask]], [[credential]] with double brackets");
    } else if out.ends_with("expected a sequence") {
        out.push_str(", i.e. a list like [\"GET\"] or [443]");
    }
    out
}

/// The candidate with the smallest edit distance, if it is plausibly a typo.
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Optimal-string-alignment distance: like Levenshtein, but a swap of two
/// adjacent characters ("hots" for "host") counts as one typo.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}
