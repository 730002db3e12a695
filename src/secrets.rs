//! Resolving credential values from the environment and files, and the
//! approval tokens of `--approval-token-file`.
//!
//! This is the only place secrets are read. They go to the proxy and nowhere
//! else: never into the sandbox's environment (it gets placeholders), never
//! into logs or records.

use airlock_policy::{Credential, TemplatePart};
use airlock_proxy::approvals::api::ApprovalTokens;
use airlock_proxy::credentials::{Placeholder, ResolvedCredential, Secret};
use anyhow::{Context, bail};
use http::HeaderName;
use std::sync::OnceLock;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// Resolve every credential of a policy. A missing variable or file is an
/// error: starting without a credential the policy promises would fail later,
/// and more confusingly.
pub(crate) fn resolve_all(credentials: &[Credential]) -> anyhow::Result<Vec<ResolvedCredential>> {
    credentials.iter().map(resolve).collect()
}

/// The bearer tokens of `--approval-token-file`: one `NAME:TOKEN` per line.
/// Its tokens let their holders decide on held requests, so the file must
/// be private to its owner.
pub(crate) fn approval_tokens(path: &std::path::Path) -> anyhow::Result<ApprovalTokens> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .with_context(|| format!("--approval-token-file {shown}: cannot read it"))?;
    if meta.permissions().mode() & 0o077 != 0 {
        bail!("--approval-token-file {shown}: others can read it; run `chmod 600 {shown}`");
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--approval-token-file {shown}: cannot read it"))?;
    ApprovalTokens::parse(&text).with_context(|| format!("--approval-token-file {shown}"))
}

fn resolve(cred: &Credential) -> anyhow::Result<ResolvedCredential> {
    let header = HeaderName::from_bytes(cred.header.as_bytes()).with_context(|| {
        format!(
            "credential {}: invalid header name {:?}",
            cred.name, cred.header
        )
    })?;
    let mut value = String::new();
    let mut references = Vec::new();
    for part in &cred.value.parts {
        match part {
            TemplatePart::Literal(text) => value.push_str(text),
            TemplatePart::Env(var) => {
                let secret = std::env::var(var).map_err(|_| {
                    anyhow::anyhow!(
                        "credential {}: environment variable {var} is not set; export it before starting airlock",
                        cred.name
                    )
                })?;
                value.push_str(&secret);
                references.push(secret);
            }
            TemplatePart::File(path) => {
                let secret = std::fs::read_to_string(path)
                    .with_context(|| format!("credential {}: reading {path}", cred.name))?;
                let secret = secret.trim_end_matches(['\n', '\r']).to_owned();
                value.push_str(&secret);
                references.push(secret);
            }
        }
    }
    if references.iter().any(String::is_empty) {
        bail!(
            "credential {}: its secret is empty; set a non-empty value",
            cred.name
        );
    }
    if http::HeaderValue::from_str(&value).is_err() {
        bail!(
            "credential {}: the value is not a valid HTTP header value (control characters or non-ASCII)",
            cred.name
        );
    }
    let placeholder = match (&cred.placeholder, references.first()) {
        (Some(variable), Some(secret)) => Some(Placeholder {
            variable: variable.clone(),
            dummy: dummy_for(variable),
            secret: Secret::new(secret.clone()),
        }),
        _ => None,
    };
    let mut secrets: Vec<Secret> = references.into_iter().map(Secret::new).collect();
    secrets.push(Secret::new(value.clone()));
    Ok(ResolvedCredential {
        name: cred.name.clone(),
        hosts: cred.hosts.clone(),
        header,
        value: Secret::new(value),
        placeholder,
        secrets,
    })
}

/// A dummy that looks like a token, unique per session, and obviously Airlock's.
/// It is derived from a per-process random key so that a policy reload gives
/// the same variable the same dummy: clients holding it keep working.
fn dummy_for(variable: &str) -> String {
    static SESSION_KEY: OnceLock<hmac::Key> = OnceLock::new();
    let key = SESSION_KEY.get_or_init(|| {
        let mut bytes = [0u8; 32];
        let _ = SystemRandom::new().fill(&mut bytes);
        hmac::Key::new(hmac::HMAC_SHA256, &bytes)
    });
    let tag = hmac::sign(key, variable.as_bytes());
    let hex: String = tag.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!(
        "airlock-placeholder-{}-{hex}",
        variable.to_ascii_lowercase()
    )
}

#[cfg(test)]
mod tests {
    use super::dummy_for;

    #[test]
    fn dummies_are_stable_per_variable_and_distinct_between_variables() {
        assert_eq!(dummy_for("GITHUB_TOKEN"), dummy_for("GITHUB_TOKEN"));
        assert_ne!(dummy_for("GITHUB_TOKEN"), dummy_for("OPENAI_API_KEY"));
        assert!(dummy_for("GITHUB_TOKEN").starts_with("airlock-placeholder-github_token-"));
    }
}
