//! Body constraints hold for every reading a common server makes: keys
//! bound case-insensitively and in bracket or PHP spellings, the query
//! string, a body read as another type than declared, and Content-Type
//! headers that disagree.

use super::{host, policy, request};
use crate::binding::{FieldPath, fold};
use crate::{BodyInput, Decision, DenyReason, Policy};

const CHARGES: &str = r#"
version = 1
[[allow]]
host = "api.example.com"
methods = ["POST"]
paths = ["/v1/charges"]
[allow.body]
amount = { max = 1000 }
"customer.id" = { optional = true, max_length = 4 }
"#;

const JSON: &str = "application/json";
const FORM: &str = "application/x-www-form-urlencoded";

fn charges() -> Policy {
    policy(CHARGES)
}

/// Evaluates a POST with every Content-Type header given and a raw target.
fn post(p: &Policy, target: &str, content_types: &[&str], body: &str) -> Decision {
    let h = host("api.example.com");
    p.evaluate(
        &request(&h, "POST", target),
        Some(&BodyInput {
            content_types,
            bytes: body.as_bytes(),
            complete: true,
        }),
    )
}

fn ambiguity(d: &Decision) -> String {
    match d {
        Decision::Deny(denial) => match &denial.reason {
            DenyReason::AmbiguousBody { detail } => detail.clone(),
            other => panic!("expected an ambiguity, got {other:?}"),
        },
        Decision::Allow(_) | Decision::Ask(_) => panic!("expected an ambiguity, got {d:?}"),
    }
}

fn assert_ambiguous(p: &Policy, target: &str, content_types: &[&str], body: &str) -> String {
    let d = post(p, target, content_types, body);
    assert!(
        !d.is_allowed(),
        "{target} {content_types:?} {body}: allowed"
    );
    ambiguity(&d)
}

#[test]
fn a_case_variant_json_key_that_breaks_the_constraint_is_refused_naming_both_spellings() {
    let p = charges();
    for body in [
        r#"{"amount":5,"AMOUNT":50000}"#,
        r#"{"amount":5,"Amount":50000}"#,
        r#"{"AMOUNT":50000,"amount":5}"#,
        r#"{"amount":5,"aMoUnT":"50000"}"#,
        // JSON escapes are decoded before keys are compared.
        r#"{"amount":5,"\u0041MOUNT":50000}"#,
    ] {
        let detail = assert_ambiguous(&p, "/v1/charges", &[JSON], body);
        assert!(
            detail.starts_with("body field `amount` appears 2 times ("),
            "{detail}"
        );
        assert!(detail.contains("case-insensitively"), "{detail}");
        assert!(detail.ends_with("send it once, in the body"), "{detail}");
    }
    let detail = assert_ambiguous(&p, "/v1/charges", &[JSON], r#"{"amount":5,"AMOUNT":50000}"#);
    assert_eq!(
        detail,
        "body field `amount` appears 2 times (`AMOUNT` in the JSON body, `amount` in the JSON body), \
         and `AMOUNT` in the JSON body = 50000 exceeds max 1000; servers that match keys \
         case-insensitively (Go encoding/json, ASP.NET Core) or read `a[]` and `a[b]` keys \
         (PHP, Rails, Express) bind each spelling, and the last one wins: send it once, in the body"
    );
}

#[test]
fn case_variants_that_all_pass_are_allowed_because_every_reading_is_within_the_limit() {
    let p = charges();
    assert!(post(&p, "/v1/charges", &[JSON], r#"{"amount":5,"AMOUNT":900}"#).is_allowed());
    assert!(post(&p, "/v1/charges", &[FORM], "amount=5&Amount=7").is_allowed());
}

#[test]
fn a_case_variant_alone_is_the_field_and_is_checked() {
    let p = charges();
    // Only "AMOUNT": Go binds it to Amount, so it is the field.
    let d = post(&p, "/v1/charges", &[JSON], r#"{"AMOUNT":50000}"#);
    assert!(
        matches!(
            &d,
            Decision::Deny(denial) if denial.reason == DenyReason::BodyConstraint {
                field: "amount".into(),
                detail: "= 50000 exceeds max 1000".into()
            }
        ),
        "{d:?}"
    );
    assert!(post(&p, "/v1/charges", &[JSON], r#"{"AMOUNT":50}"#).is_allowed());
}

#[test]
fn nested_fields_are_matched_case_insensitively_at_every_level() {
    let p = charges();
    for body in [
        r#"{"amount":1,"customer":{"id":"c1"},"Customer":{"ID":"toolong"}}"#,
        r#"{"amount":1,"customer":{"id":"c1","Id":"toolong"}}"#,
        r#"{"amount":1,"CUSTOMER":{"iD":"toolong"},"customer":{"id":"c1"}}"#,
    ] {
        let detail = assert_ambiguous(&p, "/v1/charges", &[JSON], body);
        assert!(
            detail.starts_with("body field `customer.id` appears 2 times"),
            "{detail}"
        );
        assert!(detail.contains("is longer than 4 characters"), "{detail}");
    }
    let d = post(
        &p,
        "/v1/charges",
        &[JSON],
        r#"{"amount":1,"Customer":{"ID":"toolong"}}"#,
    );
    assert!(!d.is_allowed(), "{d:?}");
    assert!(
        post(
            &p,
            "/v1/charges",
            &[JSON],
            r#"{"amount":1,"Customer":{"ID":"c1"}}"#
        )
        .is_allowed()
    );
}

#[test]
fn keys_are_folded_as_go_folds_them_including_kelvin_and_long_s() {
    // Go's strings.EqualFold: K (U+212A) is k, ſ (U+017F) is s, ς is σ.
    assert_eq!(fold("\u{212A}ey"), fold("key"));
    assert_eq!(fold("\u{17F}um"), fold("sum"));
    assert_eq!(fold("ΣΑΣ"), fold("σας"));
    assert_eq!(fold("AMOUNT"), "amount");
    assert_ne!(fold("amount"), fold("amounts"));
    let p = policy(
        r#"
version = 1
[[allow]]
host = "api.example.com"
methods = ["POST"]
[allow.body]
key = { equals = "a" }
sum = { max = 10 }
"#,
    );
    let detail = assert_ambiguous(
        &p,
        "/",
        &[JSON],
        "{\"key\":\"a\",\"\u{212A}ey\":\"b\",\"sum\":1}",
    );
    assert!(
        detail.contains("body field `key` appears 2 times"),
        "{detail}"
    );
    let detail = assert_ambiguous(
        &p,
        "/",
        &[JSON],
        "{\"key\":\"a\",\"sum\":1,\"\u{17F}um\":99}",
    );
    assert!(
        detail.contains("body field `sum` appears 2 times"),
        "{detail}"
    );
    let detail = assert_ambiguous(&p, "/", &[FORM], "key=a&sum=1&%E2%84%AAEY=b");
    assert!(
        detail.contains("body field `key` appears 2 times"),
        "{detail}"
    );
}

#[test]
fn exact_duplicate_json_keys_are_still_refused_outright() {
    let p = charges();
    for body in [
        r#"{"amount":5,"amount":6}"#,
        r#"{"amount":5,"customer":{"id":"a","id":"b"}}"#,
        r#"{"amount":5,"note":1,"note":2}"#,
    ] {
        let d = post(&p, "/v1/charges", &[JSON], body);
        assert!(
            matches!(&d, Decision::Deny(denial) if matches!(denial.reason, DenyReason::BodyUnparseable { .. })),
            "{body}: {d:?}"
        );
    }
}

#[test]
fn a_query_parameter_of_a_constrained_field_must_pass_too() {
    let p = charges();
    for target in [
        "/v1/charges?amount=50000",
        "/v1/charges?AMOUNT=50000",
        "/v1/charges?x=1&amount=5%300000",
        "/v1/charges?x=1;amount=50000",
        "/v1/charges?amount[]=50000",
        "/v1/charges?amount=50000&amount=5",
        "/v1/charges?am%6Funt=50000",
    ] {
        for (ct, body) in [(JSON, r#"{"amount":5}"#), (FORM, "amount=5")] {
            let detail = assert_ambiguous(&p, target, &[ct], body);
            assert!(detail.contains("in the query string"), "{target}: {detail}");
            assert!(
                detail.contains("Java Servlet, Spring"),
                "{target}: {detail}"
            );
        }
    }
    let detail = assert_ambiguous(&p, "/v1/charges?amount=50000", &[JSON], r#"{"amount":5}"#);
    assert!(
        detail.contains("and `amount` in the query string = \"50000\" exceeds max 1000"),
        "{detail}"
    );
    let detail = assert_ambiguous(
        &p,
        "/v1/charges?customer[ID]=toolong",
        &[JSON],
        r#"{"amount":5}"#,
    );
    assert!(
        detail.starts_with("body field `customer.id` appears once, outside the body"),
        "{detail}"
    );
    // The same value, or one that passes, in the query is fine; other
    // query parameters are not the policy's business.
    for target in [
        "/v1/charges?amount=5",
        "/v1/charges?amount=999",
        "/v1/charges?page=2&amounts=50000",
        "/v1/charges?",
    ] {
        assert!(
            post(&p, target, &[JSON], r#"{"amount":5}"#).is_allowed(),
            "{target}"
        );
    }
    // A field only in the query is still missing from the body.
    let d = post(&p, "/v1/charges?amount=5", &[JSON], r#"{"other":1}"#);
    assert!(
        matches!(&d, Decision::Deny(denial) if matches!(&denial.reason, DenyReason::BodyConstraint { detail, .. } if detail == "is missing")),
        "{d:?}"
    );
}

#[test]
fn form_keys_in_list_bracket_dotted_and_php_spellings_are_the_field() {
    let p = charges();
    for body in [
        "amount=5&amount[]=50000",
        "amount=5&amount[0]=50000",
        "amount[]=5&amount[]=50000",
        "amount=5&AMOUNT%5B%5D=50000",
        "amount=5&customer[id]=c&customer.ID=toolong",
        "amount=5&Customer[0][id]=toolong&customer[id]=c",
    ] {
        let d = post(&p, "/v1/charges", &[FORM], body);
        assert!(!d.is_allowed(), "{body}: {d:?}");
        ambiguity(&d);
    }
    // `amount[]` alone is the field (PHP, Rails and qs make it a list).
    assert!(!post(&p, "/v1/charges", &[FORM], "amount[]=50000").is_allowed());
    assert!(post(&p, "/v1/charges", &[FORM], "amount[]=50").is_allowed());
    // PHP reads "customer.id" and "customer id" as $_POST["customer_id"].
    let php = policy(
        r#"
version = 1
[[allow]]
host = "api.example.com"
methods = ["POST"]
[allow.body]
customer_id = { max_length = 4 }
"#,
    );
    for body in [
        "customer_id=c&customer.id=toolong",
        "customer_id=c&customer+id=toolong",
        "customer_id=c&CUSTOMER.ID=toolong",
    ] {
        let d = post(&php, "/", &[FORM], body);
        assert!(!d.is_allowed(), "{body}: {d:?}");
        ambiguity(&d);
    }
    assert!(post(&php, "/", &[FORM], "customer_id=c&customer[id]=toolong").is_allowed());
}

#[test]
fn form_key_matching_covers_each_binder_spelling() {
    let amount = FieldPath::new("amount");
    for key in [
        "amount",
        "AMOUNT",
        "amount[]",
        "amount[0]",
        "amount[1][]",
        "Amount[12]",
    ] {
        assert!(amount.matches_form_key(key), "{key}");
    }
    for key in [
        "amounts",
        "amount_",
        "x[amount]",
        "[amount]",
        "amount[x]",
        "am ount",
    ] {
        assert!(!amount.matches_form_key(key), "{key}");
    }
    let nested = FieldPath::new("customer.id");
    for key in [
        "customer.id",
        "customer[id]",
        "Customer[ID]",
        "customer[0][id]",
        "customer[id][]",
        "customer_id",
    ] {
        assert!(nested.matches_form_key(key), "{key}");
    }
    for key in ["customer", "customer[name]", "id", "customer[id][name]"] {
        assert!(!nested.matches_form_key(key), "{key}");
    }
}

#[test]
fn a_form_declared_body_that_is_json_is_refused() {
    let p = charges();
    for body in [
        r#"{"amount":50000}"#,
        r#"{"amount":5}"#,
        r#"[{"amount":5}]"#,
        r#""amount=5""#,
    ] {
        let detail = assert_ambiguous(&p, "/v1/charges", &[FORM], body);
        assert!(
            detail.starts_with(
                "the Content-Type is application/x-www-form-urlencoded but the body is JSON"
            ),
            "{detail}"
        );
    }
}

#[test]
fn a_json_body_that_also_reads_as_a_form_must_pass_as_a_form() {
    let p = charges();
    for body in [
        r#"{"amount":5,"note":"x&amount=50000"}"#,
        r#"{"amount":5,"note":"x;AMOUNT=50000&"}"#,
        r#"{"amount":5,"note":"&amount[]=50000&"}"#,
    ] {
        let detail = assert_ambiguous(&p, "/v1/charges", &[JSON], body);
        assert!(
            detail.contains("in the JSON body read as a form"),
            "{detail}"
        );
        assert!(detail.contains("whatever its Content-Type"), "{detail}");
    }
    assert!(post(&p, "/v1/charges", &[JSON], r#"{"amount":5,"note":"a&b=c"}"#).is_allowed());
}

#[test]
fn a_json_declared_body_that_is_not_json_is_refused() {
    let p = charges();
    for body in ["amount=5", "amount=50000", "{amount:5}"] {
        let d = post(&p, "/v1/charges", &[JSON], body);
        assert!(
            matches!(&d, Decision::Deny(denial) if matches!(denial.reason, DenyReason::BodyUnparseable { .. })),
            "{body}: {d:?}"
        );
    }
}

#[test]
fn two_content_types_or_a_list_in_one_are_refused() {
    let p = charges();
    for content_types in [
        &[JSON, FORM][..],
        &[JSON, JSON],
        &[FORM, JSON],
        &["application/json, application/x-www-form-urlencoded"],
        &[JSON, ""],
    ] {
        let body = if content_types[0] == FORM {
            "amount=5"
        } else {
            r#"{"amount":5}"#
        };
        let detail = assert_ambiguous(&p, "/v1/charges", content_types, body);
        assert!(detail.contains("Content-Type values"), "{detail}");
        assert!(detail.ends_with("send exactly one"), "{detail}");
    }
    let detail = assert_ambiguous(&p, "/v1/charges", &[JSON, FORM], r#"{"amount":5}"#);
    assert_eq!(
        detail,
        "2 Content-Type values (\"application/json\", \"application/x-www-form-urlencoded\"); \
         servers disagree on which one counts: send exactly one"
    );
}

#[test]
fn charset_parameters_must_name_utf8_once() {
    let p = charges();
    for ct in [
        "application/json; charset=utf-8",
        "application/json;charset=\"UTF-8\"",
        "Application/JSON; Charset=utf8",
        "application/json; charset=us-ascii",
    ] {
        assert!(
            post(&p, "/v1/charges", &[ct], r#"{"amount":5}"#).is_allowed(),
            "{ct}"
        );
    }
    for ct in [
        "application/json; charset=utf-16",
        "application/json; charset=latin1",
        "application/json; charset=utf-8; charset=utf-7",
        "application/x-www-form-urlencoded; charset=iso-8859-1",
    ] {
        let d = post(&p, "/v1/charges", &[ct], r#"{"amount":5}"#);
        assert!(
            matches!(&d, Decision::Deny(denial) if matches!(denial.reason, DenyReason::BodyUnparseable { .. })),
            "{ct}: {d:?}"
        );
    }
}

#[test]
fn rules_without_body_constraints_ignore_query_and_content_type() {
    let p = policy(
        r#"
version = 1
[[allow]]
host = "api.example.com"
methods = ["POST"]
"#,
    );
    assert!(post(&p, "/x?amount=50000", &[JSON, FORM], "{}").is_allowed());
}
