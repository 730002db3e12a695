//! Credentials the proxy injects. Parsed only: resolving `${env:..}` and
//! `${file:..}` is I/O and belongs to the binary.

use crate::host::{Host, HostPattern};

/// One `[[credential]]` (built only by the parser, so a new key in the file
/// format does not break the crates that read it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Credential {
    pub name: String,
    pub hosts: Vec<HostPattern>,
    /// Header name as written, e.g. "Authorization".
    pub header: String,
    pub value: SecretTemplate,
    /// A dummy the sandbox sees; it stands for the value's one `${...}` secret.
    pub placeholder: Option<String>,
    pub line: u32,
}

impl Credential {
    /// Whether the credential is injected for requests to `host`.
    pub fn applies_to(&self, host: &Host) -> bool {
        self.hosts.iter().any(|p| p.matches(host))
    }
}

/// A header value with secret references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretTemplate {
    pub parts: Vec<TemplatePart>,
}

/// One piece of a [`SecretTemplate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart {
    Literal(String),
    /// `${env:NAME}`: an environment variable of the airlock process.
    Env(String),
    /// `${file:/path}`: the contents of a file (trailing newline trimmed by the resolver).
    File(String),
}

/// Why a header value's `${...}` references were refused; Display names the
/// fix and is shown to the policy's author.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
// More reference kinds may come; a new refusal must not break callers.
#[non_exhaustive]
pub enum SecretTemplateError {
    #[error("unterminated \"${{\"; references look like ${{env:NAME}} or ${{file:/path}}")]
    Unterminated,
    #[error(
        "invalid environment variable name {name:?} in ${{env:..}}; use letters, digits and '_'"
    )]
    InvalidEnvName { name: String },
    #[error("${{file:{path}}} needs an absolute path, like ${{file:/run/secrets/token}}")]
    RelativeFile { path: String },
    #[error("unknown reference ${{{reference}}}; use ${{env:NAME}} or ${{file:/path}}")]
    UnknownReference { reference: String },
}

impl SecretTemplate {
    /// Parses "Bearer ${env:TOKEN}". `$` not followed by `{` is literal.
    pub fn parse(text: &str) -> Result<Self, SecretTemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            literal.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find('}').ok_or(SecretTemplateError::Unterminated)?;
            let reference = &after[..end];
            let part = match reference.split_once(':') {
                Some(("env", name)) if valid_env_name(name) => TemplatePart::Env(name.to_owned()),
                Some(("env", name)) => {
                    return Err(SecretTemplateError::InvalidEnvName {
                        name: name.to_owned(),
                    });
                }
                Some(("file", path)) if path.starts_with('/') => {
                    TemplatePart::File(path.to_owned())
                }
                Some(("file", path)) => {
                    return Err(SecretTemplateError::RelativeFile {
                        path: path.to_owned(),
                    });
                }
                _ => {
                    return Err(SecretTemplateError::UnknownReference {
                        reference: reference.to_owned(),
                    });
                }
            };
            if !literal.is_empty() {
                parts.push(TemplatePart::Literal(std::mem::take(&mut literal)));
            }
            parts.push(part);
            rest = &after[end + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(TemplatePart::Literal(literal));
        }
        Ok(Self { parts })
    }

    /// How many `${...}` references the template has.
    pub fn reference_count(&self) -> usize {
        self.parts
            .iter()
            .filter(|p| !matches!(p, TemplatePart::Literal(_)))
            .count()
    }
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// RFC 9110 §5.6.2 token characters (header names, methods).
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}
