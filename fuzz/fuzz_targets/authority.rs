//! The proxy's authority parser (CONNECT targets, Host headers, absolute
//! URLs): never panics; whatever it accepts round-trips through its own
//! printed form, so the destination the policy judged is the one dialled.
#![no_main]

use airlock_proxy::target::parse_authority;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: (&str, u16)| {
    let (s, default) = data;
    let Ok(target) = parse_authority(s, default.max(1)) else {
        return;
    };
    assert_ne!(target.port, 0, "port 0 accepted from {s:?}");
    let printed = target.authority();
    let again = parse_authority(&printed, 1).expect("a printed authority re-parses");
    assert_eq!(again, target, "{s:?} -> {printed:?} does not round-trip");
});
