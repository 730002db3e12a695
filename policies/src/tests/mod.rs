//! Unit tests, one module per concern. Helpers shared by all of them.

mod ask_tests;
mod body_reading_tests;
mod body_tests;
mod credential_tests;
mod decision_tests;
mod example_tests;
mod host_tests;
mod layer_tests;
mod lint_tests;
mod matcher_tests;
mod mcp_tests;
mod parse_tests;
mod path_tests;
mod review_tests;
mod upgrade_tests;

use crate::{BodyInput, Decision, Host, Policy, RequestInfo, Scheme};

pub(crate) fn policy(text: &str) -> Policy {
    match Policy::parse("policy.toml", text) {
        Ok(p) => p,
        Err(e) => panic!("policy should parse: {e}"),
    }
}

pub(crate) fn parse_error(text: &str) -> String {
    match Policy::parse("policy.toml", text) {
        Ok(_) => panic!("policy should be rejected:\n{text}"),
        Err(e) => e.to_string(),
    }
}

pub(crate) fn host(s: &str) -> Host {
    Host::parse(s).unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn request<'a>(host: &'a Host, method: &'a str, path: &'a str) -> RequestInfo<'a> {
    RequestInfo {
        scheme: Scheme::Https,
        host,
        port: 443,
        method,
        path_and_query: path,
    }
}

/// Evaluates a bodiless HTTPS request on port 443.
pub(crate) fn decide(policy: &Policy, host_name: &str, method: &str, path: &str) -> Decision {
    let h = host(host_name);
    policy.evaluate(&request(&h, method, path), None)
}

pub(crate) fn decide_json(policy: &Policy, host_name: &str, path: &str, json: &str) -> Decision {
    let h = host(host_name);
    let body = BodyInput {
        content_types: &["application/json"],
        bytes: json.as_bytes(),
        complete: true,
    };
    policy.evaluate(&request(&h, "POST", path), Some(&body))
}

pub(crate) fn allowed(d: &Decision) -> bool {
    d.is_allowed()
}
