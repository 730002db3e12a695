//! Policy::parse on arbitrary text: never panics; a parsed policy can be
//! asked every question the proxy asks without panicking.
#![no_main]

use airlock_policy::{Host, Policy, RequestInfo, Scheme};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(policy) = Policy::parse("fuzz.toml", text) else {
        return;
    };
    let _ = policy.lint();
    let host = Host::parse("api.example.com").expect("a valid literal host");
    let _ = policy.resolvable(&host);
    let _ = policy.connection(&host, 443);
    let _ = policy.connection_summary(&host, 443);
    let req = RequestInfo {
        scheme: Scheme::Https,
        host: &host,
        port: 443,
        method: "POST",
        path_and_query: "/v1/x?y=1",
    };
    let _ = policy.needs_body(&req);
    let _ = policy.evaluate(&req, None);
});
