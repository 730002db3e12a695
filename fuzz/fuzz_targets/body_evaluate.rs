//! Body constraints on arbitrary JSON and form bodies: never panic, and an
//! allowed body really satisfies the constraint as a plain JSON reader sees it.
#![no_main]

use std::sync::OnceLock;

use airlock_policy::{BodyInput, Decision, Host, Policy, RequestInfo, Scheme};
use libfuzzer_sys::fuzz_target;

const POLICY: &str = r#"
version = 1

[[allow]]
host = "api.example.com"
methods = ["POST"]
paths = ["/v1/charges"]
[allow.body]
amount = { max = 5000, min = 0 }
currency = { one_of = ["usd", "eur"] }
"customer.id" = { max_length = 8 }
note = { optional = true, max_length = 3 }
"#;

fn policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| Policy::parse("fuzz.toml", POLICY).expect("the fixed policy parses"))
}

fuzz_target!(|data: (bool, bool, &[u8])| {
    let (json, complete, bytes) = data;
    let host = Host::parse("api.example.com").expect("valid");
    let req = RequestInfo {
        scheme: Scheme::Https,
        host: &host,
        port: 443,
        method: "POST",
        path_and_query: "/v1/charges",
    };
    let content_type = if json {
        "application/json"
    } else {
        "application/x-www-form-urlencoded"
    };
    let body = BodyInput {
        content_types: &[content_type],
        bytes,
        complete,
    };
    let decision = policy().evaluate(&req, Some(&body));
    if decision.is_allowed() {
        assert!(complete, "a truncated body was allowed");
        if json {
            // Whatever our parser accepted, an ordinary JSON reader must
            // agree that the amount is within bounds (no parser differential).
            let std: serde_json::Value =
                serde_json::from_slice(bytes).expect("allowed JSON is valid JSON");
            let amount = &std["amount"];
            let n = amount.as_f64().expect("allowed amount is a number");
            assert!((0.0..=5000.0).contains(&n), "amount {amount} allowed");
            let cur = std["currency"].as_str().expect("currency is a string");
            assert!(cur == "usd" || cur == "eur", "currency {cur:?} allowed");
        }
    }
    let _ = matches!(decision, Decision::Deny(_));
});
