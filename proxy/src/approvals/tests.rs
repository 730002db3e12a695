use std::time::Duration;

use super::api::{ApprovalTokens, TokenFileError};
use super::*;

fn config(cap: usize) -> ApprovalsConfig {
    ApprovalsConfig {
        session: "s1".into(),
        owner_uid: 1000,
        cap,
        webhook: None,
        find_sender: None,
    }
}

fn request(path: &str, approvers: &[&str]) -> HoldRequest {
    HoldRequest {
        method: "POST".into(),
        url: format!("https://api.example.com{path}"),
        host: "api.example.com".into(),
        port: 443,
        path: path.into(),
        headers: vec![("content-type".into(), "application/json".into())],
        body: bytes::Bytes::from_static(b"{}"),
        redactor: shown::Redactor::none(),
        body_sha256: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a".into(),
        rule: "policy.toml:3".into(),
        rule_key: "ask-0123456789abcdef".into(),
        reason: Some("charges need a human".into()),
        timeout: Duration::from_secs(120),
        approvers: approvers.iter().map(|a| a.to_string()).collect(),
        client: "10.0.0.2:40000".into(),
        sender: None,
    }
}

/// Reserve and hold at once, as the proxy does around its record.
fn hold(approvals: &Approvals, request: HoldRequest) -> Result<Ticket, HoldError> {
    let id = approvals.reserve()?;
    Ok(approvals.hold(id, request))
}

fn owner() -> Decider {
    Decider::User {
        uid: 1000,
        name: Some("alice".into()),
    }
}

#[test]
fn a_request_is_decided_once_and_its_decision_reaches_it() {
    let approvals = Approvals::new(config(10));
    let mut ticket = hold(&approvals, request("/v1/charges", &[])).unwrap();
    assert_eq!(approvals.pending().len(), 1);
    let done = approvals
        .decide(
            &ticket.id,
            Choice::Approve(Scope::Once),
            &owner(),
            Some("ok".into()),
        )
        .unwrap();
    assert_eq!(done.outcome, "approved");
    assert_eq!(done.by.as_deref(), Some("alice (uid 1000)"));
    let resolution = ticket.decision.try_recv().unwrap();
    assert_eq!(resolution.choice, Choice::Approve(Scope::Once));
    assert!(approvals.pending().is_empty());
    let again = approvals.decide(&ticket.id, Choice::Deny, &owner(), None);
    assert_eq!(
        again,
        Err(DecideError::AlreadyDecided {
            id: ticket.id.clone(),
            outcome: "approved".into()
        })
    );
    assert_eq!(again.unwrap_err().status(), 409);
}

#[test]
fn only_the_owner_or_the_rules_approvers_decide() {
    let approvals = Approvals::new(config(10));
    let stranger = Decider::User {
        uid: 1001,
        name: Some("mallory".into()),
    };
    let ticket = hold(&approvals, request("/a", &[])).unwrap();
    let refused = approvals.decide(&ticket.id, Choice::Deny, &stranger, None);
    assert!(
        matches!(refused, Err(DecideError::NotTheOwner { .. })),
        "{refused:?}"
    );
    // Still waiting after a refused attempt.
    assert_eq!(approvals.pending().len(), 1);
    let token = Decider::Token { name: "bot".into() };
    assert!(
        approvals
            .decide(&ticket.id, Choice::Deny, &token, None)
            .is_ok()
    );

    let named = hold(&approvals, request("/b", &["bob"])).unwrap();
    let refused = approvals.decide(&named.id, Choice::Deny, &owner(), None);
    assert!(
        matches!(refused, Err(DecideError::NotAnApprover { .. })),
        "{refused:?}"
    );
    let bob = Decider::User {
        uid: 1002,
        name: Some("bob".into()),
    };
    assert!(
        approvals
            .decide(&named.id, Choice::Deny, &bob, None)
            .is_ok()
    );
}

#[test]
fn past_the_cap_new_requests_are_refused_at_once() {
    let approvals = Approvals::new(config(2));
    let first = hold(&approvals, request("/1", &[])).unwrap();
    let _second = hold(&approvals, request("/2", &[])).unwrap();
    assert_eq!(
        hold(&approvals, request("/3", &[])).unwrap_err(),
        HoldError::Full(2)
    );
    approvals.withdraw(&first.id, "abandoned").unwrap();
    assert!(hold(&approvals, request("/3", &[])).is_ok());
}

#[test]
fn a_reserved_place_counts_against_the_cap_until_given_back() {
    let approvals = Approvals::new(config(1));
    let _id = approvals.reserve().unwrap();
    assert_eq!(approvals.reserve().unwrap_err(), HoldError::Full(1));
    assert!(approvals.pending().is_empty(), "a reservation is not shown");
    approvals.cancel();
    assert!(approvals.reserve().is_ok());
}

#[test]
fn a_session_approval_covers_the_same_rule_method_host_port_and_path_only() {
    let approvals = Approvals::new(config(10));
    let held = request("/v1/charges", &[]);
    let ticket = hold(&approvals, held.clone()).unwrap();
    assert_eq!(approvals.granted_for_session(&held), None);
    approvals
        .decide(&ticket.id, Choice::Approve(Scope::Session), &owner(), None)
        .unwrap();
    assert_eq!(
        approvals.granted_for_session(&held).as_deref(),
        Some("alice (uid 1000)")
    );
    assert_eq!(
        approvals.granted_for_session(&request("/v1/refunds", &[])),
        None
    );
    let mut other_method = held.clone();
    other_method.method = "DELETE".into();
    assert_eq!(approvals.granted_for_session(&other_method), None);
    let mut other_port = held.clone();
    other_port.port = 8443;
    assert_eq!(approvals.granted_for_session(&other_port), None);
}

#[test]
fn a_withdrawn_request_cannot_be_decided() {
    let approvals = Approvals::new(config(10));
    let ticket = hold(&approvals, request("/x", &[])).unwrap();
    assert!(approvals.withdraw(&ticket.id, "expired").is_some());
    assert!(approvals.withdraw(&ticket.id, "expired").is_none());
    let late = approvals.decide(&ticket.id, Choice::Approve(Scope::Once), &owner(), None);
    assert!(
        matches!(&late, Err(DecideError::AlreadyDecided { outcome, .. }) if outcome == "expired"),
        "{late:?}"
    );
    let unknown = ApprovalId::parse("aaaaaaaaaa").unwrap();
    assert_eq!(
        approvals.decide(&unknown, Choice::Deny, &owner(), None),
        Err(DecideError::Unknown(unknown))
    );
}

#[test]
fn ids_are_typed_back_exactly() {
    let id = ApprovalId::random();
    assert_eq!(ApprovalId::parse(id.as_str()), Some(id));
    for bad in ["", "short", "AAAAAAAAAA", "aaaaaaaaa/", "aaaaaaaaaaa"] {
        assert_eq!(ApprovalId::parse(bad), None, "{bad}");
    }
}

#[test]
fn token_files_name_their_tokens_and_bad_lines_say_how_to_fix_them() {
    let tokens = ApprovalTokens::parse("# comment\n\nci-bot:0123456789abcdef0123\n").unwrap();
    let good = http::HeaderValue::from_static("Bearer 0123456789abcdef0123");
    assert_eq!(
        tokens.authenticate(Some(&good)),
        Ok(Decider::Token {
            name: "ci-bot".into()
        })
    );
    let wrong = http::HeaderValue::from_static("Bearer 0123456789abcdef0124");
    assert!(tokens.authenticate(Some(&wrong)).is_err());
    assert!(tokens.authenticate(None).is_err());
    assert!(
        !format!("{tokens:?}").contains("0123456789"),
        "Debug shows no token"
    );
    assert_eq!(
        ApprovalTokens::parse("bot:short").unwrap_err(),
        TokenFileError::BadLine(1)
    );
    assert_eq!(
        ApprovalTokens::parse("a:0123456789abcdef\na:0123456789abcdeg").unwrap_err(),
        TokenFileError::DuplicateName(2, "a".into())
    );
    assert_eq!(
        ApprovalTokens::parse("\n# none\n").unwrap_err(),
        TokenFileError::Empty
    );
}

#[test]
fn a_whole_lookup_of_a_decided_or_unknown_request_answers_and_leaves_the_lock_free() {
    let approvals = Approvals::new(config(10));
    let ticket = hold(&approvals, request("/v1/charges", &[])).unwrap();
    let whole = approvals.lookup_whole(&ticket.id).unwrap().unwrap();
    assert!(whole.shown.whole);
    approvals
        .decide(&ticket.id, Choice::Deny, &owner(), None)
        .unwrap();
    // Run where a deadlock shows as a timeout, not a hung test.
    let (done, finished) = std::sync::mpsc::channel();
    let shared = approvals.clone();
    let id = ticket.id.clone();
    std::thread::spawn(move || {
        let decided = shared.lookup_whole(&id);
        let unknown = shared.lookup_whole(&ApprovalId::parse("zzzzzzzzzz").unwrap());
        let _ = done.send((decided, unknown, shared.pending().len()));
    });
    let (decided, unknown, pending) = finished
        .recv_timeout(Duration::from_secs(5))
        .expect("lookup_whole returned (no deadlock)");
    assert_eq!(decided.unwrap().unwrap_err().outcome, "denied");
    assert!(unknown.is_none());
    assert_eq!(pending, 0);
}
