use super::{decide_json, host, policy, request};
use crate::{BodyInput, Decision, DenyReason, Policy};

const STRIPE: &str = r#"
version = 1
[[allow]]
host = "api.stripe.com"
methods = ["POST"]
paths = ["/v1/charges"]
max_requests = 10
[allow.body]
amount = { max = 10000, min = 1 }
currency = { one_of = ["usd", "eur"] }
"customer.id" = { max_length = 8 }
"metadata.note" = { optional = true, equals = "ok" }
"#;

fn reason(d: &Decision) -> Option<&DenyReason> {
    match d {
        Decision::Deny(denial) => Some(&denial.reason),
        Decision::Allow(_) | Decision::Ask(_) => None,
    }
}

fn stripe() -> Policy {
    policy(STRIPE)
}

#[test]
fn json_body_within_limits_is_allowed_with_quota() {
    let d = decide_json(
        &stripe(),
        "api.stripe.com",
        "/v1/charges",
        r#"{"amount": 500, "currency": "usd", "customer": {"id": "cus_1"}}"#,
    );
    match d {
        Decision::Allow(a) => assert_eq!(a.max_requests, Some(10)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn json_violations_name_field_and_limit() {
    let p = stripe();
    let d = decide_json(
        &p,
        "api.stripe.com",
        "/v1/charges",
        r#"{"amount": 20000, "currency": "usd", "customer": {"id": "c"}}"#,
    );
    let Decision::Deny(denial) = &d else {
        panic!("{d:?}")
    };
    assert_eq!(
        denial.reason.to_string(),
        "body field `amount` = 20000 exceeds max 10000"
    );
    assert_eq!(denial.rule.as_ref().map(|r| r.line), Some(3));
    let cases = [
        (
            r#"{"amount": 0, "currency": "usd", "customer": {"id": "c"}}"#,
            "amount",
            "= 0 is below min 1",
        ),
        (
            r#"{"amount": 5, "currency": "gbp", "customer": {"id": "c"}}"#,
            "currency",
            "= \"gbp\" is not one of [\"usd\", \"eur\"]",
        ),
        (
            r#"{"amount": 5, "currency": "usd", "customer": {"id": "cus_123456789"}}"#,
            "customer.id",
            "is longer than 8 characters",
        ),
        (
            r#"{"amount": 5, "currency": "usd"}"#,
            "customer.id",
            "is missing",
        ),
        (
            r#"{"amount": "5", "currency": "usd", "customer": {"id": "c"}}"#,
            "amount",
            "= \"5\" is not a number",
        ),
        (
            r#"{"amount": 5, "currency": "usd", "customer": {"id": "c"}, "metadata": {"note": "no"}}"#,
            "metadata.note",
            "= \"no\" does not equal \"ok\"",
        ),
        // Exactly compared: more precision than f64 has must not round down to the limit.
        (
            r#"{"amount": 10000.0000000000000001, "currency": "usd", "customer": {"id": "c"}}"#,
            "amount",
            "= 10000.0000000000000001 exceeds max 10000",
        ),
        (
            r#"{"amount": 123456789012345678901234567890, "currency": "usd", "customer": {"id": "c"}}"#,
            "amount",
            "= 123456789012345678901234567890 exceeds max 10000",
        ),
        (
            r#"{"amount": 1e5, "currency": "usd", "customer": {"id": "c"}}"#,
            "amount",
            "= 1e5 exceeds max 10000",
        ),
    ];
    for (json, field, detail) in cases {
        let d = decide_json(&p, "api.stripe.com", "/v1/charges", json);
        assert_eq!(
            reason(&d),
            Some(&DenyReason::BodyConstraint {
                field: field.to_owned(),
                detail: detail.to_owned()
            }),
            "{json}"
        );
    }
    for ok in [
        r#"{"amount": 10000.000, "currency": "eur", "customer": {"id": "c"}}"#,
        r#"{"amount": 1E4, "currency": "eur", "customer": {"id": "c"}}"#,
        r#"{"amount": 1, "currency": "eur", "customer": {"id": "c"}, "metadata": {"note": "ok"}}"#,
    ] {
        assert!(
            decide_json(&p, "api.stripe.com", "/v1/charges", ok).is_allowed(),
            "{ok}"
        );
    }
}

#[test]
fn duplicate_keys_and_non_objects_are_unparseable() {
    let p = stripe();
    for json in [
        r#"{"amount": 5, "amount": 99999, "currency": "usd", "customer": {"id": "c"}}"#,
        r#"{"amount": 5, "currency": "usd", "customer": {"id": "c", "id": "d"}}"#,
        r#"[{"amount": 5}]"#,
        r#"{"amount": 5,"#,
        r#"{"amount": 5} x"#,
        r#"{"amount": 05, "currency": "usd", "customer": {"id": "c"}}"#,
        r#"{"a": "\ud800"}"#,
    ] {
        let d = decide_json(&p, "api.stripe.com", "/v1/charges", json);
        assert!(
            matches!(reason(&d), Some(DenyReason::BodyUnparseable { .. })),
            "{json}: {d:?}"
        );
    }
}

fn with_body(p: &Policy, content_type: Option<&str>, bytes: &[u8], complete: bool) -> Decision {
    let h = host("api.stripe.com");
    let req = request(&h, "POST", "/v1/charges");
    let content_types: Vec<&str> = content_type.into_iter().collect();
    p.evaluate(
        &req,
        Some(&BodyInput {
            content_types: &content_types,
            bytes,
            complete,
        }),
    )
}

#[test]
fn form_bodies() {
    let p = stripe();
    let form = "application/x-www-form-urlencoded";
    assert!(
        with_body(
            &p,
            Some(form),
            b"amount=500&currency=usd&customer[id]=cus+1",
            true
        )
        .is_allowed()
    );
    assert!(
        with_body(
            &p,
            Some(form),
            b"amount=500&currency=usd&customer%5Bid%5D=c",
            true
        )
        .is_allowed()
    );
    assert!(
        with_body(
            &p,
            Some("application/x-www-form-urlencoded; charset=utf-8"),
            b"amount=500&currency=eur&customer.id=c",
            true
        )
        .is_allowed()
    );
    let d = with_body(
        &p,
        Some(form),
        b"amount=50000&currency=usd&customer[id]=c",
        true,
    );
    assert_eq!(
        reason(&d).map(ToString::to_string).as_deref(),
        Some("body field `amount` = \"50000\" exceeds max 10000")
    );
    let d = with_body(
        &p,
        Some(form),
        b"amount=ten&currency=usd&customer[id]=c",
        true,
    );
    assert!(
        matches!(reason(&d), Some(DenyReason::BodyConstraint { field, .. }) if field == "amount")
    );
    for bad in [
        &b"amount=5&amount=99999&currency=usd&customer[id]=c"[..],
        b"amount=5;currency=usd",
        b"amount=%zz&currency=usd",
    ] {
        let d = with_body(&p, Some(form), bad, true);
        assert!(
            matches!(reason(&d), Some(DenyReason::BodyUnparseable { .. })),
            "{:?}: {d:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn content_type_truncation_and_missing_body() {
    let p = stripe();
    let json = br#"{"amount": 5, "currency": "usd", "customer": {"id": "c"}}"#;
    assert!(with_body(&p, Some("application/vnd.api+json"), json, true).is_allowed());
    assert!(with_body(&p, Some("Application/JSON; charset=UTF-8"), json, true).is_allowed());
    for ct in [
        None,
        Some("text/plain"),
        Some("multipart/form-data; boundary=x"),
        Some("application/json; charset=latin1"),
    ] {
        assert!(
            matches!(
                reason(&with_body(&p, ct, json, true)),
                Some(DenyReason::BodyUnparseable { .. })
            ),
            "{ct:?}"
        );
    }
    assert_eq!(
        reason(&with_body(&p, Some("application/json"), json, false)),
        Some(&DenyReason::BodyTooLarge)
    );
    assert_eq!(
        reason(&with_body(&p, Some("application/json"), b"", true)),
        Some(&DenyReason::BodyMissing)
    );
    let h = host("api.stripe.com");
    assert_eq!(
        reason(&p.evaluate(&request(&h, "POST", "/v1/charges"), None)),
        Some(&DenyReason::BodyMissing)
    );
    assert_eq!(
        p.needs_body(&request(&h, "POST", "/v1/charges")),
        Some(crate::MAX_BODY_BYTES)
    );
    assert_eq!(p.needs_body(&request(&h, "POST", "/v1/other")), None);
}

#[test]
fn first_passing_candidate_wins_and_first_failure_is_reported() {
    let p = policy(
        r#"
version = 1
[[allow]]
host = "api.example.com"
methods = ["POST"]
max_requests = 1
[allow.body]
tier = { equals = "small" }

[[allow]]
host = "api.example.com"
methods = ["POST"]
max_requests = 2
[allow.body]
tier = { one_of = ["large", 3, true] }
"#,
    );
    let allow_quota = |json: &str| match decide_json(&p, "api.example.com", "/x", json) {
        Decision::Allow(a) => a.max_requests,
        other => panic!("{json}: {other:?}"),
    };
    assert_eq!(allow_quota(r#"{"tier": "small"}"#), Some(1));
    assert_eq!(allow_quota(r#"{"tier": "large"}"#), Some(2));
    assert_eq!(allow_quota(r#"{"tier": 3.0}"#), Some(2));
    assert_eq!(allow_quota(r#"{"tier": true}"#), Some(2));
    let d = decide_json(&p, "api.example.com", "/x", r#"{"tier": "huge"}"#);
    let Decision::Deny(denial) = d else { panic!() };
    assert_eq!(denial.rule.map(|r| r.index), Some(0));
    assert_eq!(
        denial.reason.to_string(),
        "body field `tier` = \"huge\" does not equal \"small\""
    );
    // The string "3" is not the number 3 in JSON.
    assert!(!decide_json(&p, "api.example.com", "/x", r#"{"tier": "3"}"#).is_allowed());
}
