//! Held requests (`[[ask]]` rules): the `approval_requested` and
//! `approval_decided` records go through the real store, are covered by the
//! chain like any other event, and read back in the timeline, the HAR and
//! the JSONL the way a responder needs them.

use airlock_auditor::export::{har, jsonl};
use airlock_auditor::{ApprovalDecided, ApprovalRequested, ExchangeId, Exec, StepStart};
use airlock_auditor::{
    AuditEvent, AuditStore, EventKind, ExecId, SessionEnd, SessionId, SessionInfo, SessionMode,
    StepNo, TrustAnchor, VerifyOutcome, escape, timeline,
};
use airlock_test_support::audit_store::*;

const BODY_SHA: &str = "3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b";

fn requested(id: &str, exchange: u64, url: &str, reason: Option<&str>) -> AuditEvent {
    AuditEvent::ApprovalRequested(ApprovalRequested {
        approval: id.into(),
        exec_id: Some(ExecId::new("e2")),
        exchange: Some(ExchangeId(exchange)),
        method: "POST".into(),
        url: url.into(),
        request_headers: vec![
            ("content-type".into(), "application/json".into()),
            ("authorization".into(), "[secret:STRIPE_KEY]".into()),
        ],
        body_bytes: 42,
        body_sha256: BODY_SHA.into(),
        rule: "policy.toml:12".into(),
        reason: reason.map(str::to_string),
        timeout_ms: 120_000,
        approvers: vec![],
    })
}

fn decided(
    id: &str,
    exchange: u64,
    url: &str,
    outcome: &str,
    by: Option<&str>,
    note: Option<&str>,
    waited_ms: u64,
) -> AuditEvent {
    AuditEvent::ApprovalDecided(ApprovalDecided {
        approval: id.into(),
        exec_id: Some(ExecId::new("e2")),
        exchange: Some(ExchangeId(exchange)),
        outcome: outcome.into(),
        scope: (outcome == "approved").then(|| "once".to_string()),
        by: by.map(str::to_string),
        note: note.map(str::to_string),
        waited_ms,
        body_sha256: BODY_SHA.into(),
        method: "POST".into(),
        url: url.into(),
    })
}

/// The proxy's record of exchange `exchange`: forwarded (200) or refused
/// after the wait (403, decision deny).
fn http(exchange: u64, url: &str, status: u16, decision: &str) -> AuditEvent {
    http_exchange(
        exchange,
        "POST",
        url,
        Some(status),
        decision.parse().unwrap(),
    )
}

const CHARGES: &str = "https://api.stripe.com/v1/charges";
const REFUNDS: &str = "https://api.stripe.com/v1/refunds";

/// What the session did, in order: one request allowed outright, one held
/// and approved, one held and denied, one held until it expired, and one
/// still waiting when the session ended (no HTTP record of it).
fn events() -> Vec<AuditEvent> {
    vec![
        exec("e1", None, &["sh", "-c", "python3 pay.py"]),
        exec("e2", Some("e1"), &["python3", "pay.py"]),
        http(1, "https://api.stripe.com/v1/balance", 200, "allow"),
        requested("k3v9q2xa", 2, CHARGES, Some("charges need a human")),
        decided(
            "k3v9q2xa",
            2,
            CHARGES,
            "approved",
            Some("alice (uid 1000)"),
            Some("looks fine"),
            4200,
        ),
        http(2, CHARGES, 200, "allow"),
        requested("p8m2c4rt", 3, REFUNDS, None),
        decided(
            "p8m2c4rt",
            3,
            REFUNDS,
            "denied",
            Some("token ci-bot"),
            Some("no refunds on Fridays"),
            900,
        ),
        http(3, REFUNDS, 403, "deny"),
        requested("x7q1w5zn", 4, CHARGES, Some("charges need a human")),
        decided("x7q1w5zn", 4, CHARGES, "expired", None, None, 120_000),
        http(4, CHARGES, 403, "deny"),
        requested("z9z9z9z9", 5, REFUNDS, None),
    ]
}

fn record(store: &AuditStore, info: SessionInfo, events: Vec<AuditEvent>) -> SessionId {
    let rec = store.begin_session(info).unwrap();
    for ev in events {
        rec.record(ev).unwrap();
    }
    let id = rec.session_id().clone();
    rec.finish(SessionEnd {
        exit_status: Some(0),
        ..SessionEnd::default()
    })
    .unwrap();
    id
}

fn verify(e: &Env, id: &SessionId) -> airlock_auditor::VerifyReport {
    AuditStore::open_readonly(&e.db)
        .unwrap()
        .verify(id, &TrustAnchor::KeyFile(e.key.clone()))
        .unwrap()
}

#[test]
fn approval_records_read_back_as_recorded_and_the_session_verifies_intact() {
    let e = env();
    let store = e.store();
    let id = record(&store, info(&["sh"]), events());
    let back = store.events(&id, None).unwrap();
    let recorded = events();
    assert_eq!(back.len(), recorded.len());
    for (stored, original) in back.iter().zip(&recorded) {
        assert_eq!(&stored.event, original);
        assert_eq!(stored.kind, original.kind());
        assert_eq!(stored.exec_id.as_ref(), original.exec_id());
    }
    assert_eq!(back[3].kind, EventKind::ApprovalRequested);
    assert_eq!(back[4].kind, EventKind::ApprovalDecided);
    assert_eq!(
        back[3].exec_id,
        Some(ExecId::new("e2")),
        "the exec column is filled, so the chain covers it"
    );
    let r = verify(&e, &id);
    assert_eq!(r.outcome, VerifyOutcome::Intact, "{r:#?}");
    assert_eq!(r.events, 13);
}

#[test]
fn a_rewritten_decider_fails_verification_at_the_decisions_seq() {
    let e = env();
    let id = record(&e.store(), info(&["sh"]), events());
    let changed = e
        .raw()
        .execute(
            "UPDATE events SET payload = replace(payload, 'token ci-bot', 'alice (uid 1000)')
             WHERE kind = 'approval_decided'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 3, "every decision row was rewritten");
    let r = verify(&e, &id);
    assert_eq!(r.outcome, VerifyOutcome::Tampered, "{r:#?}");
    // The first decision row does not mention ci-bot and is untouched; the
    // denial (seq 8) is the first that changed.
    assert_eq!(r.first_bad_seq.map(|s| s.get()), Some(8), "{r:#?}");
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains("seq 8 (approval_decided)")),
        "{r:#?}"
    );
}

#[test]
fn a_moved_approval_kind_fails_verification() {
    // The kind column is chained too: relabelling a decision as a request
    // (to hide it from a `--kind approval_decided` reader) is detected.
    let e = env();
    let id = record(&e.store(), info(&["sh"]), events());
    e.raw()
        .execute(
            "UPDATE events SET kind = 'approval_requested' WHERE seq = 5",
            [],
        )
        .unwrap();
    let r = verify(&e, &id);
    assert_eq!(r.outcome, VerifyOutcome::Tampered, "{r:#?}");
    assert_eq!(r.first_bad_seq.map(|s| s.get()), Some(5), "{r:#?}");
}

#[test]
fn the_timeline_shows_each_held_request_and_how_its_wait_ended() {
    let e = env();
    let store = e.store();
    let id = record(&store, info(&["sh"]), events());
    let summary = store.session(&id).unwrap();
    let back = store.events(&id, None).unwrap();
    let text = timeline::render_text(&summary, &back, None);
    // Under exec e2 (depth 2), like its HTTP records.
    for line in [
        "    ask   approval k3v9q2xa requested: POST https://api.stripe.com/v1/charges (rule policy.toml:12: \"charges need a human\") — waits up to 2m00s\n",
        "    ask   approval k3v9q2xa approved once by alice (uid 1000) after 4.2s: \"looks fine\"\n",
        "    ask   approval p8m2c4rt requested: POST https://api.stripe.com/v1/refunds (rule policy.toml:12) — waits up to 2m00s\n",
        "    ask   approval p8m2c4rt denied by token ci-bot after 900ms: \"no refunds on Fridays\"\n",
        "    ask   approval x7q1w5zn expired after 2m00s: nobody decided\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    let only = [EventKind::ApprovalRequested, EventKind::ApprovalDecided];
    let filtered = timeline::render_text(&summary, &back, Some(&only));
    // Four held requests, three of them decided.
    assert_eq!(
        filtered.matches(" ask   approval ").count(),
        7,
        "{filtered}"
    );
    assert!(!filtered.contains("http  "), "{filtered}");
    let json = timeline::render_json(&summary, &back, Some(&only));
    let items = json["events"].as_array().unwrap();
    assert_eq!(items.len(), 7);
    assert_eq!(items[0]["kind"], "approval_requested");
    assert_eq!(items[0]["depth"], 2);
    assert_eq!(items[1]["by"], "alice (uid 1000)");
}

/// What a hostile program (the URL) or a hostile approver (the note, the
/// name) would write: erase the line, retitle the window, return to column
/// 0, reverse the text, and end the quote to forge more of the line.
const EVIL: &str = "x\x1b[2K\x1b]0;t\x07\r\u{202e}\u{2066}\"\ny";

/// Nothing that the escaper would change is on the line raw.
fn assert_clean(text: &str) {
    for c in text.chars().filter(|&c| c != '\\') {
        assert_eq!(
            escape::text(&c.to_string()),
            c.to_string(),
            "raw {c:?} in {text:?}"
        );
    }
}

#[test]
fn hostile_text_in_approval_records_cannot_control_the_readers_terminal() {
    let e = env();
    let store = e.store();
    let evil_url = format!("https://api.example.com/{EVIL}");
    let mut held = requested("k3v9q2xa", 1, &evil_url, Some(EVIL));
    if let AuditEvent::ApprovalRequested(ApprovalRequested {
        method, approvers, ..
    }) = &mut held
    {
        *method = EVIL.into();
        *approvers = vec![EVIL.into()];
    }
    let mut answer = decided(
        "k3v9q2xa",
        1,
        &evil_url,
        "denied",
        Some(EVIL),
        Some(EVIL),
        10,
    );
    if let AuditEvent::ApprovalDecided(ApprovalDecided { scope, .. }) = &mut answer {
        *scope = Some(EVIL.into());
    }
    let id = record(&store, info(&["sh"]), vec![held, answer]);
    let summary = store.session(&id).unwrap();
    let text = timeline::render_text(&summary, &store.events(&id, None).unwrap(), None);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" ask ")).collect();
    assert_eq!(
        lines.len(),
        2,
        "no field may start a line of its own:\n{text}"
    );
    for line in &lines {
        assert_clean(line);
    }
    let shown = "x\\x1b[2K\\x1b]0;t\\x07\\r\\u{202e}\\u{2066}\"\\ny";
    // Method, URL and approvers as text; the reason quoted, its `"` escaped.
    assert_eq!(lines[0].matches(shown).count(), 3, "{}", lines[0]);
    assert!(
        lines[0].contains(": \"x\\x1b[2K\\x1b]0;t\\x07\\r\\u{202e}\\u{2066}\\\"\\ny\")"),
        "{}",
        lines[0]
    );
    // Scope and decider as text; the note quoted.
    assert_eq!(lines[1].matches(shown).count(), 2, "{}", lines[1]);
    assert!(
        lines[1].ends_with(": \"x\\x1b[2K\\x1b]0;t\\x07\\r\\u{202e}\\u{2066}\\\"\\ny\""),
        "{}",
        lines[1]
    );
}

#[test]
fn the_har_carries_each_approval_on_the_entry_of_the_exchange_it_held() {
    let e = env();
    let store = e.store();
    let id = record(&store, info(&["sh"]), events());
    let summary = store.session(&id).unwrap();
    let mut buf = Vec::new();
    har::write(&summary, &store.events(&id, None).unwrap(), &mut buf).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
    let entries = v["log"]["entries"].as_array().unwrap();
    let urls: Vec<(&str, u64)> = entries
        .iter()
        .map(|e| {
            (
                e["request"]["url"].as_str().unwrap(),
                e["response"]["status"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        urls,
        [
            ("https://api.stripe.com/v1/balance", 200),
            (CHARGES, 200),
            (REFUNDS, 403),
            (CHARGES, 403),
            (REFUNDS, 0),
        ],
        "one entry per exchange, the one with no HTTP record last"
    );
    assert!(
        entries[0].get("_approval").is_none(),
        "not held: {}",
        entries[0]
    );
    assert_eq!(
        entries[1]["_approval"],
        serde_json::json!({
            "id": "k3v9q2xa",
            "outcome": "approved",
            "scope": "once",
            "by": "alice (uid 1000)",
            "note": "looks fine",
            "waited_ms": 4200,
            "body_sha256": BODY_SHA,
            "rule": "policy.toml:12",
            "reason": "charges need a human",
        })
    );
    // Refused after the wait: the proxy's deny record carries the decision.
    assert_eq!(entries[2]["_decision"], "deny");
    assert_eq!(entries[2]["_approval"]["id"], "p8m2c4rt");
    assert_eq!(entries[2]["_approval"]["outcome"], "denied");
    assert_eq!(entries[2]["_approval"]["by"], "token ci-bot");
    assert_eq!(entries[2]["_approval"]["reason"], serde_json::Value::Null);
    assert_eq!(entries[3]["_approval"]["outcome"], "expired");
    assert_eq!(entries[3]["_approval"]["by"], serde_json::Value::Null);
    assert_eq!(entries[3]["_approval"]["waited_ms"], 120_000);
    // Still waiting when the session ended: an entry of its own, built from
    // the request's record, with no decision.
    let waiting = &entries[4];
    assert_eq!(waiting["_approval"]["id"], "z9z9z9z9");
    assert_eq!(waiting["_approval"]["outcome"], serde_json::Value::Null);
    assert_eq!(waiting["_approval"]["body_sha256"], BODY_SHA);
    assert_eq!(waiting["_seq"], 13);
    assert_eq!(waiting["request"]["method"], "POST");
    assert_eq!(waiting["request"]["bodySize"], 42);
    assert_eq!(
        waiting["request"]["headers"][1]["value"],
        "[secret:STRIPE_KEY]"
    );
    for k in ["send", "wait", "receive"] {
        assert!(waiting["timings"][k].as_f64().unwrap() >= 0.0);
    }
}

#[test]
fn the_jsonl_export_carries_both_approval_records_with_every_field() {
    let e = env();
    let store = e.store();
    let id = record(&store, info(&["sh"]), events());
    let mut buf = Vec::new();
    jsonl::write(&id, &store.events(&id, None).unwrap(), &mut buf).unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(buf)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let req = &lines[3];
    assert_eq!(req["kind"], "approval_requested");
    assert_eq!(req["seq"], 4);
    assert_eq!(req["exec_id"], "e2");
    assert_eq!(req["approval"], "k3v9q2xa");
    assert_eq!(req["exchange"], 2);
    assert_eq!(req["method"], "POST");
    assert_eq!(req["url"], CHARGES);
    assert_eq!(req["request_headers"][0][0], "content-type");
    assert_eq!(req["body_bytes"], 42);
    assert_eq!(req["body_sha256"], BODY_SHA);
    assert_eq!(req["rule"], "policy.toml:12");
    assert_eq!(req["reason"], "charges need a human");
    assert_eq!(req["timeout_ms"], 120_000);
    assert_eq!(req["approvers"], serde_json::json!([]));
    let dec = &lines[4];
    assert_eq!(dec["kind"], "approval_decided");
    assert_eq!(dec["approval"], "k3v9q2xa");
    assert_eq!(dec["exchange"], 2);
    assert_eq!(dec["outcome"], "approved");
    assert_eq!(dec["scope"], "once");
    assert_eq!(dec["by"], "alice (uid 1000)");
    assert_eq!(dec["note"], "looks fine");
    assert_eq!(dec["waited_ms"], 4200);
    assert_eq!(dec["body_sha256"], BODY_SHA);
    assert_eq!(dec["method"], "POST");
    assert_eq!(dec["url"], CHARGES);
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.iter().filter(|k| k.starts_with("approval_")).count(),
        7
    );
}

#[test]
fn a_held_request_belongs_to_the_step_of_the_exec_that_sent_it() {
    let e = env();
    let store = e.store();
    let step = |n| {
        AuditEvent::StepStart(StepStart {
            step: StepNo(n),
            label: Some(format!("call-{n}")),
            command: vec!["python3".into(), "pay.py".into()],
            cwd: None,
            tty: false,
        })
    };
    let mut e2 = exec("e2", None, &["python3", "pay.py"]);
    if let AuditEvent::Exec(Exec { step, .. }) = &mut e2 {
        *step = Some(StepNo(2));
    }
    let id = record(
        &store,
        SessionInfo {
            mode: SessionMode::Session,
            ..info(&[])
        },
        vec![
            step(1),
            step(2),
            e2,
            requested("k3v9q2xa", 1, CHARGES, None),
            decided("k3v9q2xa", 1, CHARGES, "abandoned", None, None, 3000),
        ],
    );
    let summary = store.session(&id).unwrap();
    let back = store.events(&id, None).unwrap();
    let steps = timeline::steps::step_of_each(&back);
    assert_eq!(steps[3], Some(StepNo(2)));
    assert_eq!(steps[4], Some(StepNo(2)));
    let text = timeline::render_text(&summary, &back, None);
    let step2 = text.find("step 2 ").expect("step 2's header");
    let abandoned = text
        .find("approval k3v9q2xa abandoned after 3.0s: the client went away or the session ended first")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(abandoned > step2, "listed under step 2:\n{text}");
}

#[test]
fn approval_kinds_parse_by_name_for_kind_filters() {
    for (k, name) in [
        (EventKind::ApprovalRequested, "approval_requested"),
        (EventKind::ApprovalDecided, "approval_decided"),
    ] {
        assert_eq!(k.as_str(), name);
        assert_eq!(EventKind::parse(name), Some(k));
        assert!(EventKind::ALL.contains(&k));
    }
}

#[test]
fn optional_approval_fields_may_be_absent_from_a_record() {
    // As another producer (or an older airlock) may write them.
    let ev: AuditEvent = serde_json::from_str(
        r#"{"kind":"approval_decided","approval":"k3v9q2xa","outcome":"expired",
            "waited_ms":120000,"body_sha256":"00","method":"GET","url":"https://x/"}"#,
    )
    .unwrap();
    let AuditEvent::ApprovalDecided(ApprovalDecided {
        exec_id,
        exchange,
        scope,
        by,
        note,
        ..
    }) = &ev
    else {
        panic!("{ev:?}");
    };
    assert_eq!(
        (exec_id, exchange, scope, by, note),
        (&None, &None, &None, &None, &None)
    );
    let ev: AuditEvent = serde_json::from_str(
        r#"{"kind":"approval_requested","approval":"k3v9q2xa","method":"GET","url":"https://x/",
            "body_bytes":0,"body_sha256":"00","rule":"p.toml:1","timeout_ms":1000}"#,
    )
    .unwrap();
    assert_eq!(ev.kind(), EventKind::ApprovalRequested);
    assert_eq!(ev.exec_id(), None);
    assert_eq!(ev.step(), None);
}

#[test]
fn a_registered_secret_in_an_approval_record_never_reaches_the_database() {
    // The producer redacts already; the recorder's second line of defence
    // must cover the new records' strings too.
    const SECRET: &str = "sk_live_S3cr3tT0kenValue42";
    let e = env();
    let store = e.store();
    store.redactor().add("STRIPE_KEY", SECRET).unwrap();
    let mut held = requested("k3v9q2xa", 1, &format!("{CHARGES}?key={SECRET}"), None);
    if let AuditEvent::ApprovalRequested(ApprovalRequested {
        request_headers, ..
    }) = &mut held
    {
        request_headers.push(("x-api-key".into(), SECRET.into()));
    }
    let answer = decided(
        "k3v9q2xa",
        1,
        &format!("{CHARGES}?key={SECRET}"),
        "denied",
        Some("alice (uid 1000)"),
        Some(&format!("why does it send {SECRET}?")),
        10,
    );
    let id = record(&store, info(&["sh"]), vec![held, answer]);
    let mut bytes = std::fs::read(&e.db).unwrap();
    for side in ["audit.db-wal", "audit.db-shm"] {
        bytes.extend(std::fs::read(e.dir.path().join(side)).unwrap_or_default());
    }
    assert!(
        !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "secret found in the database files"
    );
    let back = store.events(&id, None).unwrap();
    let AuditEvent::ApprovalDecided(ApprovalDecided { note, url, .. }) = &back[1].event else {
        panic!("{back:?}");
    };
    assert_eq!(
        note.as_deref(),
        Some("why does it send [secret:STRIPE_KEY]?")
    );
    assert!(url.ends_with("?key=[secret:STRIPE_KEY]"), "{url}");
    assert!(verify(&e, &id).is_intact());
}
