//! The DNS responder on arbitrary packets: never panics; every address it
//! hands out is synthetic; a name the policy does not allow is never
//! recorded as allowed; every answer fits a UDP reply.
#![no_main]

use std::sync::OnceLock;

use airlock_policy::Policy;
use airlock_proxy::dns::answer_packet;
use airlock_proxy::synthetic::SyntheticAddresses;
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
        // Every name may get an address, but only a synthetic one (nothing
        // is forwarded), and the record says whether the policy allows it.
        for ip in &q.answers {
            assert!(SyntheticAddresses::in_range(*ip), "{ip} is not synthetic");
        }
        let name = q.name.to_ascii_lowercase();
        let allowed_by_policy = name == "api.example.com" || name.ends_with(".cdn.example.net");
        if q.allowed {
            assert!(allowed_by_policy, "{name:?} recorded as allowed");
        } else {
            assert!(q.reason.is_some(), "{name:?} denied without a reason");
        }
    }
    if let Some(reply) = &answered.reply {
        assert!(reply.len() <= 65535);
    }
});
