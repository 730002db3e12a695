//! Policy::evaluate with arbitrary methods and request targets against a
//! fixed policy with path allow and deny rules: never panics, and the
//! protected paths are never allowed however they are spelled.
#![no_main]

use std::sync::OnceLock;

use airlock_policy::{Decision, Host, Policy, RequestInfo, Scheme};
use libfuzzer_sys::fuzz_target;

const POLICY: &str = r#"
version = 1
default = "allow"

[[deny]]
host = "api.example.com"
paths = ["/admin", "/admin/**", "/v1/secret", "/v1/secret/**"]

[[allow]]
host = "api.example.com"
methods = ["GET"]
paths = ["/public/**"]
max_requests = 1000000
"#;

fn policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| Policy::parse("fuzz.toml", POLICY).expect("the fixed policy parses"))
}

/// What a server could plausibly map the path to: decoded, lower-cased,
/// `;params` stripped, slashes collapsed, dot segments resolved.
fn server_view(path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or("");
    let mut bytes = Vec::new();
    let raw = path.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%'
            && i + 2 < raw.len()
            && let Ok(v) =
                u8::from_str_radix(std::str::from_utf8(&raw[i + 1..i + 3]).unwrap_or("zz"), 16)
        {
            bytes.push(v);
            i += 3;
            continue;
        }
        bytes.push(raw[i]);
        i += 1;
    }
    let decoded = String::from_utf8_lossy(&bytes)
        .to_lowercase()
        .replace('\\', "/");
    let mut out: Vec<&str> = Vec::new();
    for seg in decoded.split('/') {
        let seg = seg.split(';').next().unwrap_or("");
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

fuzz_target!(|data: (&str, &str)| {
    let (method, target) = data;
    let host = Host::parse("api.example.com").expect("valid");
    let req = RequestInfo {
        scheme: Scheme::Https,
        host: &host,
        port: 443,
        method,
        path_and_query: target,
    };
    let _ = policy().needs_body(&req);
    let decision = policy().evaluate(&req, None);
    if let Decision::Allow(_) = decision {
        let view = server_view(target);
        assert!(
            !(view == "/admin"
                || view.starts_with("/admin/")
                || view == "/v1/secret"
                || view.starts_with("/v1/secret/")),
            "{method} {target:?} reaches protected {view:?} but was allowed"
        );
    }
});
