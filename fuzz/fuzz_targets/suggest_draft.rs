//! `policy suggest`'s Draft fed arbitrary recorded requests (any method,
//! any request target, tunnels on the same host and port): the suggested
//! policy always parses, never tunnels a host and port that carried HTTP,
//! and allows no request that some recorded one does not show up to
//! identifier-like text (`airlock_policy::shown_by`).
#![no_main]

use airlock_policy::{
    ConnectionDecision, Draft, Host, Policy, RequestInfo, Tunnel, shown_by,
};
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

const HOSTS: [&str; 3] = ["api.example.com", "b.example.com", "10.0.0.7"];
const PORTS: [u16; 3] = [443, 8443, 80];

#[derive(Debug, Arbitrary)]
struct Record {
    host: u8,
    port: u8,
    method: String,
    target: String,
    tunnel: bool,
}

#[derive(Debug, Arbitrary)]
struct Input {
    records: Vec<Record>,
    /// More requests to ask the suggested policy about.
    probes: Vec<(u8, String, String)>,
}


fuzz_target!(|input: Input| {
    let hosts: Vec<Host> = HOSTS.iter().map(|h| Host::parse(h).expect("valid")).collect();
    let records: Vec<(&Host, u16, &str, &str)> = input
        .records
        .iter()
        .take(16)
        .map(|r| {
            (
                &hosts[usize::from(r.host) % hosts.len()],
                PORTS[usize::from(r.port) % PORTS.len()],
                r.method.as_str(),
                r.target.as_str(),
            )
        })
        .collect();
    let mut draft = Draft::new();
    for (r, (host, port, method, target)) in input.records.iter().zip(&records) {
        let url = format!("https://{host}:{port}{target}");
        draft.request(&RequestInfo::https(host, *port, method, target), &url, false);
        if r.tunnel {
            draft.tunnel(host, *port, Tunnel::Tcp);
        }
    }
    let text = draft.render();
    let policy = match Policy::parse("suggested.toml", &text) {
        Ok(p) => p,
        Err(e) => panic!("a suggestion does not parse: {e}\n{text}"),
    };
    let mut probes: Vec<(&Host, u16, &str, &str)> = Vec::new();
    for (host, port, method, target) in &records {
        for m in [*method, "GET", "DELETE", "OPTIONS"] {
            for t in [*target, "/admin/users/all", "/", "*"] {
                probes.push((host, *port, m, t));
            }
        }
    }
    for (port, method, target) in &input.probes {
        for host in &hosts {
            probes.push((host, PORTS[usize::from(*port) % PORTS.len()], method, target));
        }
    }
    for (host, port, method, target) in probes {
        let tunnelled = matches!(
            policy.connection(host, port),
            ConnectionDecision::Tunnel { .. } | ConnectionDecision::Passthrough { .. }
        );
        assert!(!tunnelled, "{host}:{port} carried HTTP but is tunnelled\n{text}");
        let probe = RequestInfo::https(host, port, method, target);
        if policy.evaluate(&probe, None).is_allowed() {
            assert!(
                records
                    .iter()
                    .any(|(h, p, m, t)| shown_by(&RequestInfo::https(h, *p, m, t), &probe)),
                "{method} https://{host}:{port}{target} is allowed but no recorded request shows it\n{text}"
            );
        }
    }
});
