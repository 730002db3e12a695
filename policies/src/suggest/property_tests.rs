//! The suggester's guarantee as a property: for any recorded requests
//! (hostile ones included), every request the suggested policy allows,
//! parsed and evaluated as `airlock policy test` does, is a recorded
//! request up to identifier-like text (numbers, UUIDs, long hex, versions):
//! same host, port and method, and a path equal once those are replaced.

use proptest::prelude::*;

use super::{Draft, Tunnel, shown_by};
use crate::Policy;
use crate::decision::{ConnectionDecision, RequestInfo};
use crate::host::Host;

/// One recorded request: host, port, method, request target.
#[derive(Debug, Clone)]
struct Recorded {
    host: &'static str,
    port: u16,
    method: String,
    target: String,
}

const HOSTS: &[&str] = &["api.test", "b.api.test", "10.0.0.7"];
const PORTS: &[u16] = &[443, 8443, 80];

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("GET".to_owned()),
        Just("DELETE".to_owned()),
        Just("POST".to_owned()),
        Just("OPTIONS".to_owned()),
        Just("delete".to_owned()),
        Just("Get".to_owned()),
        Just("*".to_owned()),
        Just("X-CUSTOM".to_owned()),
        Just("GET /".to_owned()),
    ]
}

/// A segment a hostile program could send: glob and TOML characters,
/// escapes, dot segments, identifiers and versions.
fn segment() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("a"),
        Just("admin"),
        Just("users"),
        Just("x"),
        Just("*"),
        Just("**"),
        Just("?"),
        Just("\\"),
        Just("\""),
        Just("'"),
        Just("["),
        Just("]"),
        Just("{"),
        Just("}"),
        Just(","),
        Just(";"),
        Just("="),
        Just("."),
        Just(".."),
        Just("-"),
        Just("~"),
        Just("%2A"),
        Just("%2a"),
        Just("%3F"),
        Just("%41"),
        Just("%2E"),
        Just("%"),
        Just("%2F"),
        Just("%60"),
        Just("%7B"),
        Just("é"),
        Just("42"),
        Just("7"),
        Just("1.2.3"),
        Just("v2.0"),
        Just("3.0rc1"),
        Just("deadbeefdeadbeef"),
        Just("a1b2c3d"),
        Just("3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b"),
        Just("tar.gz"),
        Just(""),
    ];
    prop::collection::vec(piece, 0..4).prop_map(|p| p.concat())
}

fn target() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just("*".to_owned()),
        1 => Just("/**".to_owned()),
        12 => (
            prop::collection::vec(segment(), 0..5),
            prop::option::of(prop_oneof![Just("?q=1"), Just("?*"), Just("?/../admin")]),
        )
            .prop_map(|(segments, query)| {
                format!("/{}{}", segments.join("/"), query.unwrap_or_default())
            }),
    ]
}

fn recorded() -> impl Strategy<Value = Recorded> {
    (
        prop::sample::select(HOSTS),
        prop::sample::select(PORTS),
        method(),
        target(),
    )
        .prop_map(|(host, port, method, target)| Recorded {
            host,
            port,
            method,
            target,
        })
}

/// The probes asked of each suggested policy: each recorded request, and
/// it with another method, port, host or path.
fn probes(records: &[Recorded]) -> Vec<(&'static str, u16, String, String)> {
    let mut out = Vec::new();
    for r in records {
        let mut targets = vec![
            r.target.clone(),
            "/admin/users/all".to_owned(),
            "/".to_owned(),
            "*".to_owned(),
            format!("{}/x", r.target.split('?').next().unwrap_or("")),
            r.target.replace(['*', '?'], "x"),
            r.target.replace("%2A", "x"),
            r.target.replace("42", "admin"),
        ];
        if let Some((head, _)) = r.target.rsplit_once('/') {
            targets.push(format!("{head}/admin"));
        }
        for target in targets {
            for method in [r.method.as_str(), "GET", "DELETE", "OPTIONS", "delete"] {
                for (host, port) in [(r.host, r.port), (r.host, 9), ("evil.test", r.port)] {
                    out.push((host, port, method.to_owned(), target.clone()));
                }
            }
        }
    }
    out
}

proptest! {
    // No regression files: a failure prints its minimal input, which becomes
    // a unit test.
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_suggested_policy_allows_nothing_the_traffic_did_not_show(
        records in prop::collection::vec(recorded(), 1..6),
        tunnels in prop::collection::vec(any::<bool>(), 6),
    ) {
        let mut draft = Draft::new();
        for (r, tunnel) in records.iter().zip(&tunnels) {
            let host = Host::parse(r.host).unwrap();
            let url = format!("https://{}:{}{}", r.host, r.port, r.target);
            draft.request(&RequestInfo::https(&host, r.port, &r.method, &r.target), &url, false);
            // The same host and port also seen as a connection with no
            // request a rule could allow (the asterisk-form attack).
            if *tunnel {
                draft.tunnel(&host, r.port, Tunnel::Tcp);
            }
        }
        let text = draft.render();
        let policy = Policy::parse("suggested.toml", &text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        for (host, port, method, target) in probes(&records) {
            let h = Host::parse(host).unwrap();
            let tunnelled = matches!(
                policy.connection(&h, port),
                ConnectionDecision::Tunnel { .. } | ConnectionDecision::Passthrough { .. }
            );
            prop_assert!(!tunnelled, "{host}:{port} tunnelled\n{text}");
            if !policy
                .evaluate(&RequestInfo::https(&h, port, &method, &target), None)
                .is_allowed()
            {
                continue;
            }
            let probe = RequestInfo::https(&h, port, &method, &target);
            let shown = records.iter().any(|r| {
                let host = Host::parse(r.host).unwrap();
                shown_by(&RequestInfo::https(&host, r.port, &r.method, &r.target), &probe)
            });
            prop_assert!(shown, "{method} https://{host}:{port}{target} is allowed but was not recorded\n{records:#?}\n{text}");
        }
    }

    #[test]
    fn every_suggestable_recorded_request_is_allowed_by_the_suggestion(
        records in prop::collection::vec(recorded(), 1..6),
    ) {
        let mut draft = Draft::new();
        for r in &records {
            let host = Host::parse(r.host).unwrap();
            let url = format!("https://{}:{}{}", r.host, r.port, r.target);
            draft.request(&RequestInfo::https(&host, r.port, &r.method, &r.target), &url, false);
        }
        let text = draft.render();
        let policy = Policy::parse("suggested.toml", &text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        for r in &records {
            let host = Host::parse(r.host).unwrap();
            let req = RequestInfo::https(&host, r.port, &r.method, &r.target);
            if super::draft::suggestable(&req).is_ok() {
                prop_assert!(policy.evaluate(&req, None).is_allowed(), "{r:?}\n{text}");
            }
        }
    }
}
