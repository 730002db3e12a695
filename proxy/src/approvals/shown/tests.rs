use super::body::BodyForm;
use super::*;

fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn view(method: &str, pairs: &[(&str, &str)], body: &[u8]) -> Shown {
    let headers = headers(pairs);
    let held = Held {
        method,
        url: "https://api.test/pay",
        headers: &headers,
        body,
    };
    Shown::new(held, &Redactor::none(), &Bound::LISTING)
}

fn json(body: &str) -> Shown {
    view(
        "POST",
        &[("content-type", "application/json")],
        body.as_bytes(),
    )
}

fn field<'a>(shown: &'a Shown, path: &str) -> Vec<&'a Field> {
    shown
        .body
        .fields
        .iter()
        .filter(|f| f.path == path)
        .collect()
}

fn warned(shown: &Shown, words: &str) -> bool {
    shown.warnings.iter().any(|w| w.contains(words))
}

#[test]
fn every_spelling_of_a_method_override_header_is_shown_and_warned_of() {
    for name in [
        "x-http-method-override",
        "X-HTTP-Method-Override",
        "x-http-method",
        "X-Method-Override",
        "x-http-verb",
    ] {
        let shown = view("POST", &[(name, "DELETE"), ("accept", "*/*")], b"");
        let header = shown.headers.iter().find(|h| h.name == name);
        assert_eq!(
            header.and_then(|h| h.note.as_deref()),
            Some("method override"),
            "{name}: {shown:#?}"
        );
        assert!(warned(&shown, "treat this POST as DELETE"), "{shown:#?}");
        assert_eq!(shown.inert_headers, ["accept"]);
    }
}

#[test]
fn a_method_field_in_a_form_the_query_or_json_is_warned_of() {
    let form = view(
        "POST",
        &[("content-type", "application/x-www-form-urlencoded")],
        b"a=1&_method=DELETE",
    );
    assert!(warned(&form, "_method = DELETE"), "{form:#?}");
    let body = json(r#"{"_METHOD": "PUT"}"#);
    assert!(warned(&body, "as PUT"), "{body:#?}");
    let headers = headers(&[]);
    let query = Shown::new(
        Held {
            method: "POST",
            url: "https://api.test/x?_method=DELETE",
            headers: &headers,
            body: b"",
        },
        &Redactor::none(),
        &Bound::LISTING,
    );
    assert!(warned(&query, "query's _method=DELETE"), "{query:#?}");
}

#[test]
fn inert_headers_are_folded_and_every_other_one_is_shown() {
    let shown = view(
        "POST",
        &[
            ("host", "api.test"),
            ("user-agent", "curl/8"),
            ("content-type", "application/json; charset=utf-8"),
            ("content-encoding", "gzip"),
            ("transfer-encoding", "chunked"),
            ("x-custom", "1"),
            ("connection", "x-custom"),
        ],
        b"",
    );
    let names: Vec<&str> = shown.headers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "content-type",
            "content-encoding",
            "transfer-encoding",
            "x-custom",
            "connection"
        ]
    );
    assert_eq!(shown.inert_headers, ["host", "user-agent"]);
}

#[test]
fn the_whole_view_lists_every_header() {
    let headers = headers(&[("accept", "*/*"), ("host", "api.test")]);
    let held = Held {
        method: "GET",
        url: "https://api.test/",
        headers: &headers,
        body: b"",
    };
    let shown = Shown::new(held, &Redactor::none(), &Bound::WHOLE);
    assert!(shown.whole);
    assert_eq!(shown.headers.len(), 2);
    assert!(shown.inert_headers.is_empty());
}

#[test]
fn a_repeated_header_is_shown_each_time_and_warned_of() {
    let shown = view(
        "POST",
        &[
            ("x-http-method-override", "GET"),
            ("X-HTTP-Method-Override", "DELETE"),
            ("content-type", "text/plain"),
            ("content-type", "application/json"),
        ],
        b"",
    );
    assert_eq!(shown.headers.len(), 4);
    assert!(warned(&shown, "as GET") && warned(&shown, "as DELETE"));
    assert!(warned(&shown, "content-type is sent 2 times"), "{shown:#?}");
    assert!(
        shown.headers[0]
            .note
            .as_deref()
            .unwrap()
            .contains("sent 2 times")
    );
}

#[test]
fn json_is_shown_whole_as_paths_and_values() {
    let shown = json(r#"{"amount": 5, "to": {"iban": "DE1", "tags": ["a", 2, null, true, {}]}}"#);
    assert_eq!(shown.body.form, BodyForm::Json);
    let pairs: Vec<(&str, &str)> = shown
        .body
        .fields
        .iter()
        .map(|f| (f.path.as_str(), f.value.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("amount", "5"),
            ("to.iban", "DE1"),
            ("to.tags[0]", "a"),
            ("to.tags[1]", "2"),
            ("to.tags[2]", "null"),
            ("to.tags[3]", "true"),
            ("to.tags[4]", "{}"),
        ]
    );
    assert_eq!(shown.body.fields[1].kind, ValueKind::String);
    assert_eq!(shown.body.fields[0].kind, ValueKind::Number);
    assert!(shown.body.hidden.is_none());
}

#[test]
fn a_json_key_sent_twice_is_shown_both_times_and_flagged() {
    let shown = json(r#"{"amount":5,"amount":999999,"Amount":7}"#);
    let values: Vec<&str> = shown.body.fields.iter().map(|f| f.value.as_str()).collect();
    assert_eq!(values, ["5", "999999", "7"]);
    assert!(shown.body.fields.iter().all(|f| f.duplicate));
    assert!(
        warned(&shown, "sends amount, Amount more than once"),
        "{shown:#?}"
    );
}

#[test]
fn a_form_key_sent_twice_is_shown_both_times_and_flagged() {
    let shown = view(
        "POST",
        &[("content-type", "application/x-www-form-urlencoded")],
        b"amount=5&note=hi+there%21&amount=999999",
    );
    assert_eq!(shown.body.form, BodyForm::Form);
    let amounts = field(&shown, "amount");
    assert_eq!(amounts.len(), 2);
    assert!(amounts.iter().all(|f| f.duplicate));
    assert_eq!(amounts[1].value, "999999");
    assert_eq!(field(&shown, "note")[0].value, "hi there!");
    assert!(warned(&shown, "form body sends amount more than once"));
}

#[test]
fn a_key_that_looks_like_a_path_cannot_pass_for_one() {
    let shown = json(r#"{"a.b": 1, "a": {"b": 2}, "": 3, "x[0]": 4}"#);
    let paths: Vec<&str> = shown.body.fields.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, [r#"["a.b"]"#, "a.b", r#"[""]"#, r#"["x[0]"]"#]);
}

#[test]
fn padding_cannot_hide_a_later_field() {
    let padding = "x".repeat(200_000);
    let shown = json(&format!(
        r#"{{"amount": 5, "pad": "{padding}", "amount2": 999999}}"#
    ));
    let pad = &field(&shown, "pad")[0];
    assert_eq!(pad.cut_chars, 200_000 - 4096);
    assert_eq!(field(&shown, "amount2")[0].value, "999999");
    assert!(shown.body.hidden.is_none());
}

#[test]
fn past_the_bound_the_view_says_how_much_it_does_not_show() {
    let many: Vec<String> = (0..2000).map(|i| format!("\"k{i}\": {i}")).collect();
    let shown = json(&format!("{{{}}}", many.join(",")));
    assert_eq!(shown.body.fields.len(), Bound::LISTING.items);
    let hidden = shown.body.hidden.as_ref().unwrap();
    assert_eq!(hidden.items, 1500);
    assert!(hidden.bytes > 1500 * 4);

    let text = format!("{}\namount=999999\n", "pad\n".repeat(1000));
    let shown = view("POST", &[("content-type", "text/plain")], text.as_bytes());
    assert_eq!(shown.body.form, BodyForm::Text);
    assert_eq!(shown.body.lines.len(), Bound::LISTING.items);
    let hidden = shown.body.hidden.as_ref().unwrap();
    assert_eq!(hidden.bytes as usize, text.len() - 500 * 4);
}

#[test]
fn one_long_line_is_shown_to_the_bound_and_the_rest_is_counted() {
    let text = format!("{}amount=999999", "p".repeat(100_000));
    let shown = view("POST", &[], text.as_bytes());
    assert_eq!(shown.body.lines.len(), 1);
    assert_eq!(shown.body.lines[0].len(), 64 * 1024);
    let hidden = shown.body.hidden.as_ref().unwrap();
    assert_eq!(hidden.bytes as usize, text.len() - 64 * 1024);
    // Whole, nothing is left out.
    let headers = headers(&[]);
    let held = Held {
        method: "POST",
        url: "https://api.test/",
        headers: &headers,
        body: text.as_bytes(),
    };
    let whole = Shown::new(held, &Redactor::none(), &Bound::WHOLE);
    assert_eq!(whole.body.lines, [text.as_str()]);
    assert!(whole.body.hidden.is_none());
}

#[test]
fn multibyte_text_cut_at_the_bound_does_not_panic() {
    let text = "é".repeat(70_000);
    let shown = view("POST", &[], text.as_bytes());
    let hidden = shown.body.hidden.as_ref().unwrap();
    assert_eq!(hidden.bytes as usize, (70_000 - 64 * 1024) * 2);
}

#[test]
fn json_content_type_with_a_body_that_is_not_json_is_shown_as_text_and_warned_of() {
    for body in [
        "{\"amount\":5}\0{\"amount\":999999}",
        "{\"amount\":5} {\"amount\":999999}",
        "amount=999999",
    ] {
        let shown = json(body);
        assert_eq!(shown.body.form, BodyForm::Text, "{body:?}");
        assert_eq!(shown.body.lines, [body]);
        assert!(warned(&shown, "but the body is not JSON"), "{shown:#?}");
    }
}

#[test]
fn a_body_that_is_not_utf8_is_shown_as_hex() {
    let shown = view("POST", &[], b"\xff\xfeamount=999999");
    assert_eq!(shown.body.form, BodyForm::Binary);
    assert!(
        shown.body.hex[0].starts_with("00000000  ff fe 61"),
        "{shown:#?}"
    );
    assert!(shown.body.hex[0].ends_with("..amount=999999"), "{shown:#?}");
}

#[test]
fn an_encoded_body_is_said_to_be_unreadable() {
    let shown = view(
        "POST",
        &[
            ("Content-Encoding", "gzip"),
            ("content-type", "application/json"),
        ],
        b"\x1f\x8b\x08\x00",
    );
    assert_eq!(shown.body.form, BodyForm::Encoded);
    assert!(warned(
        &shown,
        "gzip-encoded (4 bytes): Airlock does not decode it"
    ));
}

#[test]
fn an_unusual_charset_is_warned_of() {
    let shown = view(
        "POST",
        &[("content-type", "application/json; charset=utf-7")],
        br#"{"a": "+AGEAbQ-"}"#,
    );
    assert!(warned(&shown, "charset is utf-7"), "{shown:#?}");
}

#[test]
fn nesting_past_the_parsers_limit_is_shown_as_text() {
    let body = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
    let shown = json(&body);
    assert_eq!(shown.body.form, BodyForm::Text);
}

#[test]
fn secrets_are_shown_as_their_marker_even_when_escaped_in_json() {
    let redactor = Redactor::new(|t: &str| t.replace("tok123", "[secret:api]"));
    let headers = headers(&[("content-type", "application/json")]);
    for body in [
        &br#"{"t": "tok123"}"#[..],
        br#"{"t": "tok\u0031\u00323"}"#,
        b"\xfftok123",
    ] {
        let held = Held {
            method: "POST",
            url: "https://api.test/",
            headers: &headers,
            body,
        };
        let shown = Shown::new(held, &redactor, &Bound::WHOLE);
        let text = serde_json::to_string(&shown).unwrap();
        assert!(!text.contains("tok123"), "{text}");
        assert!(text.contains("[secret:api]"), "{text}");
    }
}

#[test]
fn a_body_of_many_keys_renders_in_linear_time() {
    // 1 MiB of keys, every one also sent in another case: each object's
    // keys are counted once, not compared pairwise.
    let keys: Vec<String> = (0..60_000)
        .map(|i| format!("\"k{i}\":1,\"K{i}\":2"))
        .collect();
    let body = format!("{{{}}}", keys.join(","));
    let form: Vec<String> = (0..100_000).map(|i| format!("k{i}=1&k{i}=2")).collect();
    let started = std::time::Instant::now();
    let shown = json(&body);
    assert_eq!(shown.body.fields.len(), Bound::LISTING.items);
    assert!(shown.body.fields.iter().all(|f| f.duplicate));
    assert!(
        warned(&shown, "and 119980 other keys more than once"),
        "{:?}",
        shown.warnings
    );
    let shown = view(
        "POST",
        &[("content-type", "application/x-www-form-urlencoded")],
        form.join("&").as_bytes(),
    );
    assert_eq!(shown.body.hidden.as_ref().unwrap().items, 200_000 - 500);
    // Quadratic, this took minutes; linear, well under a second in release.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}
