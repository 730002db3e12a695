//! `airlock policy test FILE --cases CASES.toml`: a table of requests and
//! the decision each should get, run like a test suite.

use std::path::Path;
use std::process::ExitCode;

use airlock_policy::{BodyInput, Case, Expect, Policy, RuleRef, parse_cases};
use anyhow::{Context, anyhow};

use super::request::{Decided, Outcome, Target, decide, rule_text};
use crate::policy_file;

/// A case whose URL has been taken apart, ready to run.
struct Prepared {
    case: Case,
    target: Target,
}

pub(super) fn run(file: &Path, cases_file: &Path) -> anyhow::Result<ExitCode> {
    let policy = policy_file::load(file)?;
    let text = std::fs::read_to_string(cases_file)
        .with_context(|| format!("reading cases {}", cases_file.display()))?;
    let name = cases_file.display().to_string();
    let cases = parse_cases(&name, &text).map_err(|e| anyhow!("{e}"))?;
    // Every URL is checked before any case runs: bad input is exit 2, not
    // a half-printed run.
    let prepared = cases
        .into_iter()
        .map(|case| match Target::parse(&case.url) {
            Ok(target) => Ok(Prepared { case, target }),
            Err(e) => Err(anyhow!(
                "{name}:{}: {}; fix the url of this [[case]]",
                case.line,
                crate::one_line(&anyhow::Error::new(e))
            )),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut failed = 0usize;
    for p in &prepared {
        let (line, ok) = run_case(&policy, p, &name);
        println!("{line}");
        failed += usize::from(!ok);
    }
    println!("{} passed, {failed} failed", prepared.len() - failed);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::REFUSED)
    })
}

/// The case's report line, and whether it passed.
fn run_case(policy: &Policy, p: &Prepared, cases_name: &str) -> (String, bool) {
    let case = &p.case;
    let content_type = case.content_type.as_deref().unwrap_or("application/json");
    let content_types = [content_type];
    let body = case.body.as_ref().map(|b| BodyInput {
        content_types: &content_types,
        bytes: b.as_bytes(),
        complete: true,
    });
    let decided = decide(policy, &p.target, &case.method, body.as_ref(), None);
    let got = judged(&decided);
    let by = rule_text(policy, decided.rule.as_ref());
    // Report mode allows everything; a case states what the policy means,
    // so it is judged by what enforcing it (deny mode) would do.
    let note = if decided.outcome == Outcome::Report {
        " (report mode: allowed until enforced)"
    } else {
        ""
    };
    let rule_ok = case
        .rule
        .as_deref()
        .is_none_or(|want| rule_matches(policy, decided.rule.as_ref(), want));
    if expected(case.expect) == got && rule_ok {
        let line = format!(
            "ok   {}: {} {} → {} by {by}{note}",
            case.name,
            case.method,
            case.url,
            got.as_str()
        );
        return (line, true);
    }
    let want = match &case.rule {
        Some(rule) => format!("{} by {rule}", case.expect.as_str()),
        None => case.expect.as_str().to_owned(),
    };
    let reason = decided
        .reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    let line = format!(
        "FAIL {}: expected {want}, got {} by {by}{reason}{note} (case at {cases_name}:{})",
        case.name,
        got.as_str(),
        case.line
    );
    (line, false)
}

/// The outcome a case is compared with: report mode counts as enforced.
fn judged(decided: &Decided) -> Outcome {
    match decided.outcome {
        Outcome::Report => decided.enforced.unwrap_or(Outcome::Deny),
        other => other,
    }
}

fn expected(expect: Expect) -> Outcome {
    match expect {
        Expect::Allow => Outcome::Allow,
        Expect::Deny => Outcome::Deny,
        Expect::Ask => Outcome::Ask,
    }
}

/// Whether `want` names the deciding rule: its "file:line" (the file as
/// given or any trailing part of its path), its `description`, or
/// "default" for the policy's default.
fn rule_matches(policy: &Policy, rule: Option<&RuleRef>, want: &str) -> bool {
    let Some(rule) = rule else {
        return want == "default";
    };
    let at = rule.to_string();
    at == want || at.ends_with(&format!("/{want}")) || policy.rule_description(rule) == Some(want)
}
