//! The ClientHello peek must never panic, and must be monotone: a prefix of a
//! complete hello is never judged a *different* hello.
#![no_main]

use airlock_proxy::{Peek, peek_client_hello};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = peek_client_hello(data);
    if let Peek::Hello(hello) = &whole {
        // Any SNI we accept must be a name Host::parse can judge (no panic).
        if let Some(sni) = &hello.sni {
            let _ = airlock_policy::Host::parse(sni);
        }
    }
    // Feeding the same bytes in two steps must agree with feeding them at once.
    let cut = data.len() / 2;
    if let Peek::Hello(h) = peek_client_hello(&data[..cut]) {
        assert_eq!(
            whole,
            Peek::Hello(h),
            "a prefix parsed as a hello but the whole did not agree"
        );
    }
});
