//! Host and HostPattern parsing and matching: never panic; parsing is
//! idempotent (a parsed host re-parses to itself), so the proxy and the
//! policy always compare the same canonical form.
#![no_main]

use airlock_policy::{Host, HostPattern};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: (&str, &str)| {
    let (a, b) = data;
    let host = Host::parse(a);
    if let Ok(h) = &host {
        let again = Host::parse(h.as_str()).expect("a canonical host re-parses");
        assert_eq!(&again, h, "Host::parse is not idempotent for {a:?}");
        let _ = h.ip();
    }
    if let Ok(p) = HostPattern::parse(b) {
        if let Ok(h) = &host {
            let _ = p.matches(h);
        }
        let _ = p.is_any();
        if let Ok(q) = HostPattern::parse(a) {
            let _ = p.covers(&q);
            let _ = p.overlaps(&q);
        }
    }
});
