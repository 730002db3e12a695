//! The DNS responder on arbitrary packets: never panics; a name the policy
//! does not allow never gets an address; every answer fits a UDP reply.
#![no_main]

use std::sync::OnceLock;

use airlock_policy::Policy;
use airlock_proxy::dns::{SyntheticAddresses, answer_packet};
use libfuzzer_sys::fuzz_target;

const POLICY: &str = r#"
version = 1
[[allow]]
host = "api.example.com"
[[allow]]
host = "*.cdn.example.net"
"#;

fn policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| Policy::parse("fuzz.toml", POLICY).expect("the fixed policy parses"))
}

fuzz_target!(|data: &[u8]| {
    let synthetic = SyntheticAddresses::default();
    let Some(answered) = answer_packet(policy(), &synthetic, data) else {
        return;
    };
    if let Some(q) = &answered.query {
        if !q.allowed {
            assert!(
                q.answers.is_empty(),
                "denied name {:?} got an address",
                q.name
            );
        }
        let name = q.name.to_ascii_lowercase();
        if !q.answers.is_empty() {
            assert!(
                name == "api.example.com" || name.ends_with(".cdn.example.net"),
                "{name:?} got an address"
            );
        }
    }
    if let Some(reply) = &answered.reply {
        assert!(reply.len() <= 65535);
    }
});
