//! Layered policies: `extends`, merged with the base's denies winning.

use std::collections::HashMap;

use super::decide;
use crate::{Decision, DefaultAction, LoadError, Loaded, Policy, Severity};

/// Files by name; an `extends` entry is looked up as written.
fn files(list: &[(&str, &str)]) -> HashMap<String, String> {
    list.iter()
        .map(|(name, text)| ((*name).to_owned(), (*text).to_owned()))
        .collect()
}

fn parse(top: &str, all: &[(&str, &str)]) -> Result<Policy, String> {
    let all = files(all);
    let text = all[top].clone();
    Policy::parse_layered(top, &text, |_from, entry| -> Result<Loaded, LoadError> {
        let text = all
            .get(entry)
            .cloned()
            .ok_or_else(|| LoadError::from("No such file or directory"))?;
        Ok(Loaded {
            name: entry.to_owned(),
            text,
        })
    })
    .map_err(|e| e.to_string())
}

fn layered(top: &str, all: &[(&str, &str)]) -> Policy {
    parse(top, all).unwrap_or_else(|e| panic!("should parse: {e}"))
}

const BASE: &str = "version = 1\n\
[[deny]]\n\
host = \"api.test\"\n\
paths = [\"/admin/**\"]\n\
\n\
[[allow]]\n\
host = \"pypi.org\"\n\
\n\
[[credential]]\n\
name = \"gh\"\n\
host = \"api.github.com\"\n\
header = \"Authorization\"\n\
value = \"Bearer ${env:GH}\"\n";

const PROJECT: &str = "version = 1\n\
extends = [\"base.toml\"]\n\
\n\
[[allow]]\n\
host = \"api.test\"\n\
paths = [\"/v1/**\"]\n";

fn rule_of(decision: &Decision) -> String {
    match decision {
        Decision::Allow(a) => a.rule.as_ref().map_or("-".into(), ToString::to_string),
        Decision::Deny(d) => d.rule.as_ref().map_or("-".into(), ToString::to_string),
        Decision::Ask(a) => a.rule.to_string(),
    }
}

#[test]
fn rules_of_every_layer_apply_and_name_their_own_file_and_line() {
    let p = layered(
        "project.toml",
        &[("project.toml", PROJECT), ("base.toml", BASE)],
    );
    let d = decide(&p, "api.test", "GET", "/admin/users");
    assert!(!d.is_allowed());
    assert_eq!(rule_of(&d), "base.toml:2");
    let d = decide(&p, "api.test", "GET", "/v1/items");
    assert!(d.is_allowed());
    assert_eq!(rule_of(&d), "project.toml:4");
    let d = decide(&p, "pypi.org", "GET", "/simple/");
    assert_eq!(rule_of(&d), "base.toml:6");
    assert_eq!(p.credentials().len(), 1, "the base's credential applies");
    assert_eq!(p.files(), vec!["base.toml", "project.toml"]);
    assert_eq!(p.source_name(), "project.toml");
    assert_eq!(p.text(), PROJECT);
    let denial = decide(&p, "api.test", "GET", "/admin/x");
    let Decision::Deny(denial) = denial else {
        panic!("denied")
    };
    let rule = denial.rule.expect("a rule");
    assert_eq!(p.rule_description(&rule), None);
}

#[test]
fn a_base_deny_wins_over_a_project_allow_and_ask() {
    let project = "version = 1\nextends = [\"base.toml\"]\n\
[[allow]]\nhost = \"api.test\"\n\
[[ask]]\nhost = \"api.test\"\nmethods = [\"DELETE\"]\n";
    let p = layered(
        "project.toml",
        &[("project.toml", project), ("base.toml", BASE)],
    );
    for method in ["GET", "DELETE"] {
        let d = decide(&p, "api.test", method, "/admin/keys");
        assert!(matches!(d, Decision::Deny(_)), "{method}: {d:?}");
        assert_eq!(rule_of(&d), "base.toml:2");
    }
    assert!(matches!(
        decide(&p, "api.test", "DELETE", "/v1/x"),
        Decision::Ask(_)
    ));
    assert!(decide(&p, "api.test", "GET", "/v1/x").is_allowed());
}

#[test]
fn allow_rules_are_tried_base_first() {
    let base = "version = 1\n[[allow]]\nhost = \"api.test\"\nmax_requests = 5\n";
    let project = "version = 1\nextends = [\"base.toml\"]\n[[allow]]\nhost = \"api.test\"\n";
    let p = layered(
        "project.toml",
        &[("project.toml", project), ("base.toml", base)],
    );
    let d = decide(&p, "api.test", "GET", "/");
    assert_eq!(rule_of(&d), "base.toml:2");
    let Decision::Allow(a) = d else { panic!() };
    assert_eq!(a.max_requests, Some(5));
}

#[test]
fn default_is_the_projects_else_the_nearest_bases_else_deny() {
    let base = "version = 1\ndefault = \"report\"\n";
    let mid = "version = 1\nextends = [\"base.toml\"]\ndefault = \"allow\"\n[[deny]]\nhost = \"x.test\"\n";
    let own = "version = 1\nextends = [\"mid.toml\"]\ndefault = \"deny\"\n";
    let none = "version = 1\nextends = [\"mid.toml\"]\n";
    let all = [
        ("base.toml", base),
        ("mid.toml", mid),
        ("own.toml", own),
        ("none.toml", none),
        ("bare.toml", "version = 1\nextends = [\"empty.toml\"]\n"),
        ("empty.toml", "version = 1\n"),
    ];
    assert_eq!(
        layered("own.toml", &all).default_action(),
        DefaultAction::Deny
    );
    assert_eq!(
        layered("none.toml", &all).default_action(),
        DefaultAction::Allow
    );
    assert_eq!(
        layered("base.toml", &all).default_action(),
        DefaultAction::Report
    );
    assert_eq!(
        layered("bare.toml", &all).default_action(),
        DefaultAction::Deny
    );
}

#[test]
fn a_cycle_is_an_error_at_the_extends_entry_that_closes_it() {
    let a = "version = 1\nextends = [\"b.toml\"]\n";
    let b = "version = 1\n\nextends = [\"a.toml\"]\n";
    let e = parse("a.toml", &[("a.toml", a), ("b.toml", b)]).unwrap_err();
    assert!(
        e.starts_with("b.toml:3:12: `extends` cycle: a.toml -> b.toml -> a.toml"),
        "{e}"
    );
    let own = "version = 1\nextends = [\"self.toml\"]\n";
    let e = parse("self.toml", &[("self.toml", own)]).unwrap_err();
    assert!(e.starts_with("self.toml:2:12: `extends` cycle"), "{e}");
}

#[test]
fn a_shared_base_is_not_a_cycle() {
    let top = "version = 1\nextends = [\"a.toml\", \"b.toml\"]\n";
    let a = "version = 1\nextends = [\"base.toml\"]\n";
    let b = "version = 1\nextends = [\"base.toml\"]\n";
    let p = layered(
        "top.toml",
        &[
            ("top.toml", top),
            ("a.toml", a),
            ("b.toml", b),
            ("base.toml", BASE),
        ],
    );
    assert_eq!(p.files(), vec!["base.toml", "a.toml", "b.toml", "top.toml"]);
    assert_eq!(p.credentials().len(), 1, "the shared base is read once");
}

#[test]
fn a_missing_base_is_an_error_at_its_extends_entry() {
    let top = "version = 1\nextends = [\n  \"org.toml\",\n  \"gone.toml\",\n]\n";
    let e = parse(
        "top.toml",
        &[("top.toml", top), ("org.toml", "version = 1\n")],
    )
    .unwrap_err();
    assert!(
        e.starts_with(
            "top.toml:4:3: cannot read base policy \"gone.toml\": No such file or directory"
        ),
        "{e}"
    );
}

#[test]
fn an_error_in_a_base_names_the_base() {
    let top = "version = 1\nextends = [\"base.toml\"]\n";
    let e = parse(
        "top.toml",
        &[
            ("top.toml", top),
            ("base.toml", "version = 1\n[[allow]]\nhots = \"a\"\n"),
        ],
    )
    .unwrap_err();
    assert!(e.starts_with("base.toml:3:1: unknown field `hots`"), "{e}");
}

#[test]
fn a_credential_name_defined_in_two_layers_is_an_error_at_the_second() {
    let project = "version = 1\nextends = [\"base.toml\"]\n\n[[credential]]\nname = \"gh\"\nhost = \"api.github.com\"\nheader = \"X-Token\"\nvalue = \"${env:T}\"\n";
    let e = parse(
        "project.toml",
        &[("project.toml", project), ("base.toml", BASE)],
    )
    .unwrap_err();
    assert!(
        e.starts_with("project.toml:4:1: credential \"gh\" is already defined at base.toml:9"),
        "{e}"
    );
}

#[test]
fn a_project_rule_a_base_deny_overrides_is_a_lint_error_naming_both() {
    let project = "version = 1\nextends = [\"base.toml\"]\n\n\
[[allow]]\nhost = \"api.test\"\npaths = [\"/admin/users\"]\n\n\
[[allow]]\nhost = \"api.test\"\n\n\
[[ask]]\nhost = \"*.test\"\npaths = [\"/admin/**\"]\n\n\
[[allow]]\nhost = \"api.test\"\npaths = [\"/v1/**\"]\n";
    let p = layered(
        "project.toml",
        &[("project.toml", project), ("base.toml", BASE)],
    );
    let errors: Vec<String> = p
        .lint()
        .iter()
        .filter(|l| l.severity == Severity::Error)
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        vec![
            "project.toml:4:1: error: this allow rule cannot override the base policy's deny rule at base.toml:2, which denies every request it matches; a project can only add rules a base does not deny: narrow this rule or remove it",
            "project.toml:8:1: error: this allow rule cannot override the base policy's deny rule at base.toml:2, which denies some requests it matches; a project can only add rules a base does not deny: narrow this rule or remove it",
            "project.toml:11:1: error: this ask rule cannot override the base policy's deny rule at base.toml:2, which denies some requests it matches; a project can only add rules a base does not deny: narrow this rule or remove it",
        ]
    );
    // A project deny narrowing a base allow is what layering is for.
    let project = "version = 1\nextends = [\"base.toml\"]\n[[deny]]\nhost = \"pypi.org\"\npaths = [\"/admin/**\"]\n";
    let p = layered(
        "project.toml",
        &[("project.toml", project), ("base.toml", BASE)],
    );
    assert!(
        p.lint().iter().all(|l| l.severity == Severity::Warning),
        "{:?}",
        p.lint()
    );
}

#[test]
fn a_base_credential_is_used_when_a_project_allows_its_host() {
    let project = "version = 1\nextends = [\"base.toml\"]\n[[allow]]\nhost = \"api.github.com\"\n";
    let p = layered(
        "project.toml",
        &[("project.toml", project), ("base.toml", BASE)],
    );
    assert_eq!(p.lint(), Vec::new());
    let p = layered(
        "project.toml",
        &[("project.toml", PROJECT), ("base.toml", BASE)],
    );
    let lints: Vec<String> = p.lint().iter().map(ToString::to_string).collect();
    assert!(
        lints
            .iter()
            .any(|l| l.starts_with("base.toml:9:1: warning: credential \"gh\" is never used")),
        "{lints:?}"
    );
}

#[test]
fn plain_parse_refuses_extends() {
    let e = Policy::parse("p.toml", PROJECT).unwrap_err().to_string();
    assert!(
        e.starts_with("p.toml:2:11: `extends` names other files"),
        "{e}"
    );
}

#[test]
fn the_schema_knows_extends() {
    assert!(Policy::json_schema().contains("\"extends\""));
}
