use super::{host, parse_error, policy};
use crate::{SecretTemplate, TemplatePart};

#[test]
fn templates() {
    let t = SecretTemplate::parse("Bearer ${env:GITHUB_TOKEN}").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        t.parts,
        vec![
            TemplatePart::Literal("Bearer ".into()),
            TemplatePart::Env("GITHUB_TOKEN".into())
        ]
    );
    let t = SecretTemplate::parse("${file:/run/secrets/a}:${env:B}$5")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        t.parts,
        vec![
            TemplatePart::File("/run/secrets/a".into()),
            TemplatePart::Literal(":".into()),
            TemplatePart::Env("B".into()),
            TemplatePart::Literal("$5".into()),
        ]
    );
    for bad in [
        "${env:}",
        "${env:1X}",
        "${file:relative}",
        "${vault:x}",
        "${env:A",
        "x ${",
        "${}",
    ] {
        assert!(SecretTemplate::parse(bad).is_err(), "{bad:?}");
    }
}

const CRED: &str = "version = 1\n[[allow]]\nhost = \"api.github.com\"\n[[credential]]\nname = \"github\"\nhosts = [\"api.github.com\"]\nheader = \"Authorization\"\n";

#[test]
fn credentials_parse() {
    let p = policy(&format!(
        "{CRED}value = \"Bearer ${{env:GITHUB_TOKEN}}\"\nplaceholder = \"GITHUB_TOKEN\"\n"
    ));
    let [c] = p.credentials() else {
        panic!("one credential")
    };
    assert_eq!(c.name, "github");
    assert_eq!(c.header, "Authorization");
    assert_eq!(c.placeholder.as_deref(), Some("GITHUB_TOKEN"));
    assert_eq!(c.line, 4);
    assert!(c.applies_to(&host("API.github.com")));
    assert!(!c.applies_to(&host("github.com")));
    assert!(p.lint().is_empty(), "{:?}", p.lint());
}

#[test]
fn credential_errors() {
    let err = parse_error(&format!(
        "{CRED}value = \"${{env:A}}${{env:B}}\"\nplaceholder = \"X\"\n"
    ));
    assert!(err.starts_with("policy.toml:9:15: a placeholder stands for exactly one ${...} secret, but the value has 2"), "{err}");
    let err = parse_error(&format!("{CRED}value = \"literal\"\nplaceholder = \"X\"\n"));
    assert!(err.contains("but the value has 0"), "{err}");
    let err = parse_error(&format!("{CRED}value = \"${{nope:A}}\"\n"));
    assert!(
        err.starts_with("policy.toml:8:9: unknown reference ${nope:A}"),
        "{err}"
    );
    let err = parse_error(&format!("{CRED}value = \"Bearer ${{env:A\"\n"));
    assert!(err.contains("unterminated \"${\""), "{err}");
    let err = parse_error(
        "[[credential]]\nname = \"x\"\nhosts = [\"*\"]\nheader = \"A\"\nvalue = \"${env:A}\"\n",
    );
    assert!(err.contains("every host"), "{err}");
    let err = parse_error(
        "[[credential]]\nname = \"x\"\nhosts = [\"a.com\"]\nheader = \"Bad Header\"\nvalue = \"${env:A}\"\n",
    );
    assert!(err.contains("not a valid header name"), "{err}");
    let err = parse_error(
        "[[credential]]\nname = \"x\"\nhosts = [\"a.com\"]\nheader = \"A\"\nvalue = \"a\\nb ${env:A}\"\n",
    );
    assert!(err.contains("control characters"), "{err}");
    let twice =
        "[[credential]]\nname = \"x\"\nhosts = [\"a.com\"]\nheader = \"A\"\nvalue = \"${env:A}\"\n";
    let err = parse_error(&format!("{twice}{twice}"));
    assert!(err.contains("duplicate credential name"), "{err}");
}
