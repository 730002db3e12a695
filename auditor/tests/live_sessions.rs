//! Live sessions (mode `session`): one record, many steps. Recorded into a
//! real SQLite store and read back the way a responder would: the timeline
//! grouped by step, verification, the sessions list and the exports.

use airlock_auditor::Verdict;
use airlock_auditor::export::{cast, har, jsonl};
use airlock_auditor::{
    AuditEvent, AuditStore, EventKind, ExecId, FileOp, OutputStream, SessionEnd, SessionId,
    SessionInfo, SessionMode, StepNo, TrustAnchor, VerifyOutcome, restore, timeline,
};
use airlock_auditor::{Exec, Exit, FileChange, HttpExchange, Note, Output, StepEnd, StepStart};
use airlock_test_support::audit_store::*;

fn live_info() -> SessionInfo {
    SessionInfo {
        mode: SessionMode::Session,
        ..info(&[])
    }
}

fn step_start(n: u64, label: Option<&str>, command: &[&str], tty: bool) -> AuditEvent {
    AuditEvent::StepStart(StepStart {
        step: StepNo(n),
        label: label.map(str::to_string),
        command: command.iter().map(|s| s.to_string()).collect(),
        cwd: Some("/work".into()),
        tty,
    })
}

fn step_end(n: u64, exit_status: Option<i32>, signal: Option<i32>) -> AuditEvent {
    AuditEvent::StepEnd(StepEnd {
        step: StepNo(n),
        exit_status,
        signal,
        timed_out: false,
        duration_ms: 120.0,
        reason: None,
    })
}

/// An exec in step `step` (None: left for its parent's step to decide).
fn step_exec(id: &str, parent: Option<&str>, step: Option<u64>, argv: &[&str]) -> AuditEvent {
    let mut ev = exec(id, parent, argv);
    if let AuditEvent::Exec(Exec { step: s, .. }) = &mut ev {
        *s = step.map(StepNo);
    }
    ev
}

fn by(exec_id: &str, ev: AuditEvent) -> AuditEvent {
    let mut ev = ev;
    match &mut ev {
        AuditEvent::File(FileChange { exec_id: e, .. })
        | AuditEvent::Http(HttpExchange { exec_id: e, .. }) => {
            *e = Some(ExecId::new(exec_id));
        }
        _ => {}
    }
    ev
}

fn step_output(step: u64, data: &[u8]) -> AuditEvent {
    AuditEvent::Output(Output {
        stream: OutputStream::Stdout,
        data: data.to_vec(),
        step: Some(StepNo(step)),
    })
}

fn http(exec_id: &str, url: &str, status: u16) -> AuditEvent {
    AuditEvent::Http(HttpExchange {
        exec_id: Some(ExecId::new(exec_id)),
        status: Some(status),
        response_body: Some(b"ok".to_vec()),
        bytes_down: 2,
        ms_total: Some(3.0),
        rule: Some("policy.toml:3".into()),
        ..HttpExchange::decided("GET".into(), url.into(), "HTTP/1.1".into(), Verdict::Allow)
    })
}

fn exit(exec_id: &str, status: Option<i32>, signal: Option<i32>) -> AuditEvent {
    AuditEvent::Exit(Exit {
        exec_id: ExecId::new(exec_id),
        status,
        signal,
    })
}

/// Step 1 of every session here: starts a server in the background.
fn step_one() -> Vec<AuditEvent> {
    vec![
        AuditEvent::Note(Note {
            text: "session started".into(),
            policy: None,
        }),
        step_exec("init", None, None, &["airlock-init"]),
        step_start(
            1,
            Some("call-1"),
            &["sh", "-c", "python3 -m http.server 8000 & echo started"],
            false,
        ),
        step_exec(
            "s1",
            Some("init"),
            Some(1),
            &["sh", "-c", "python3 -m http.server"],
        ),
        step_exec(
            "s1bg",
            Some("s1"),
            Some(1),
            &["python3", "-m", "http.server"],
        ),
        step_output(1, b"started\n"),
        by(
            "s1",
            file("/tmp/one.txt", FileOp::Create, Some(b"step one")),
        ),
        http("s1", "https://api.example.com/one", 200),
        exit("s1", Some(0), None),
        step_end(1, Some(0), None),
    ]
}

/// A session of three steps, each with execs, a file, an HTTP exchange and
/// output, where step 1's background server keeps working during step 2.
fn three_steps(store: &AuditStore) -> SessionId {
    let rec = store.begin_session(live_info()).unwrap();
    let mut events = step_one();
    events.extend([
        step_start(
            2,
            Some("call-2"),
            &["curl", "-s", "http://localhost:8000/"],
            false,
        ),
        step_exec(
            "s2",
            Some("init"),
            Some(2),
            &["curl", "-s", "http://localhost:8000/"],
        ),
        // Step 1's server, still running, serves step 2's request: its
        // events belong to step 1, and so does what it execs.
        by(
            "s1bg",
            file("/tmp/server.log", FileOp::Create, Some(b"GET /")),
        ),
        http("s1bg", "https://api.example.com/from-server", 204),
        step_exec("s1bg-child", Some("s1bg"), None, &["gzip", "server.log"]),
        step_output(2, b"<html>listing</html>\n"),
        by(
            "s2",
            file("/work/two.txt", FileOp::Create, Some(b"step two")),
        ),
        http("s2", "https://api.example.com/two", 200),
        exit("s2", Some(7), None),
        step_end(2, Some(7), None),
        step_start(3, None, &["sleep", "100"], true),
        step_exec("s3", Some("init"), Some(3), &["sleep", "100"]),
        step_output(3, b"zzz\n"),
        by(
            "s3",
            file("/work/three.txt", FileOp::Create, Some(b"step three")),
        ),
        http("s3", "https://api.example.com/three", 200),
        exit("s3", None, Some(9)),
        AuditEvent::StepEnd(StepEnd {
            step: StepNo(3),
            exit_status: None,
            signal: Some(9),
            timed_out: true,
            duration_ms: 10_000.0,
            reason: Some("killed: its timeout (10s) passed".into()),
        }),
        AuditEvent::Note(Note {
            text: "session stopping".into(),
            policy: None,
        }),
        exit("s1bg", None, Some(15)),
    ]);
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

fn position(text: &str, needle: &str) -> usize {
    text.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in:\n{text}"))
}

#[test]
fn the_timeline_groups_a_live_session_by_step_with_background_work_under_its_step() {
    let e = env();
    let store = e.store();
    let id = three_steps(&store);
    let summary = store.session(&id).unwrap();
    let events = store.events(&id, None).unwrap();
    let text = timeline::render_text(&summary, &events, None);

    assert!(text.contains("live session: 3 steps"), "{text}");
    let step1 = position(
        &text,
        "step 1  \"call-1\"  $ sh -c 'python3 -m http.server 8000 & echo started'  (cwd /work)  -> exit 0 after 120ms",
    );
    let step2 = position(
        &text,
        "step 2  \"call-2\"  $ curl -s http://localhost:8000/  (cwd /work)  -> exit 7 after 120ms",
    );
    let step3 = position(
        &text,
        "step 3  $ sleep 100  (cwd /work, tty)  -> timed out, killed by signal 9 after 10.0s  (killed: its timeout (10s) passed)",
    );
    assert!(step1 < step2 && step2 < step3, "steps in order:\n{text}");

    // Session-level events first, whenever they happened.
    assert!(position(&text, "note  session started") < step1);
    assert!(position(&text, "note  session stopping") < step1);
    assert!(position(&text, "exec  airlock-init") < step1);

    // Each step's own events sit under its header, one level deeper.
    for (step, next, needles) in [
        (
            step1,
            step2,
            ["/tmp/one.txt", "api.example.com/one", "\"started\""],
        ),
        (
            step2,
            step3,
            ["/work/two.txt", "api.example.com/two", "listing"],
        ),
        (
            step3,
            text.len(),
            ["/work/three.txt", "api.example.com/three", "zzz"],
        ),
    ] {
        for needle in needles {
            let at = position(&text, needle);
            assert!(
                step < at && at < next,
                "{needle} is not in its step:\n{text}"
            );
        }
    }
    // Step 1's background server worked during step 2, yet its file, its
    // request, the exec it made and its exit at the session's stop are
    // step 1's: after step 1's end record, before step 2's header.
    let end1 = position(&text, "step  1 end: exit 0 after 120ms");
    for needle in [
        "/tmp/server.log",
        "api.example.com/from-server",
        "exec  gzip server.log",
        "exit  exec s1bg killed by signal 15",
    ] {
        let at = position(&text, needle);
        assert!(end1 < at && at < step2, "{needle} is not step 1's:\n{text}");
    }
    // Indentation: a step's exec one level in, its child two.
    assert!(text.contains("#4   exec  sh -c"), "{text}");
    assert!(
        text.contains("#5     exec  python3 -m http.server"),
        "{text}"
    );
    assert!(
        text.contains("#7     file  create   /tmp/one.txt"),
        "{text}"
    );
    assert!(text.contains("#6   out   stdout"), "{text}");
    assert!(text.contains("session ended: exit 0"), "{text}");

    // Filtered to HTTP: each step header stays, with only its exchange.
    let only = [EventKind::Http];
    let text = timeline::render_text(&summary, &events, Some(&only));
    assert!(text.contains("step 2  \"call-2\""), "{text}");
    assert!(!text.contains("note "), "{text}");
    assert!(!text.contains("file "), "{text}");
    assert_eq!(text.matches("http  GET").count(), 4, "{text}");
}

#[test]
fn the_json_timeline_carries_the_steps_and_their_events() {
    let e = env();
    let store = e.store();
    let id = three_steps(&store);
    let summary = store.session(&id).unwrap();
    let events = store.events(&id, None).unwrap();
    let v = timeline::render_json(&summary, &events, None);
    assert_eq!(v["mode"], "session");
    let session: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(session, ["note", "exec", "note"], "session-level events");
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0]["step"], 1);
    assert_eq!(steps[0]["label"], "call-1");
    assert_eq!(steps[0]["exit_status"], 0);
    assert_eq!(steps[1]["exit_status"], 7);
    assert_eq!(steps[2]["label"], serde_json::Value::Null);
    assert_eq!(steps[2]["tty"], true);
    assert_eq!(steps[2]["timed_out"], true);
    assert_eq!(steps[2]["signal"], 9);
    let step1 = steps[0]["events"].as_array().unwrap();
    assert!(step1.iter().all(|e| e["step"] == 1));
    assert!(
        step1
            .iter()
            .any(|e| e["kind"] == "file" && e["path"] == "/tmp/server.log"),
        "the background server's file is step 1's: {step1:#?}"
    );
    assert_eq!(step1[0]["kind"], "step_start");
    let kinds2: Vec<&str> = steps[1]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds2,
        [
            "step_start",
            "exec",
            "output",
            "file",
            "http",
            "exit",
            "step_end"
        ]
    );
}

#[test]
fn a_live_session_verifies_and_lists_as_a_session_with_its_step_count() {
    let e = env();
    let store = e.store();
    let id = three_steps(&store);
    let r = store
        .verify(&id, &TrustAnchor::KeyFile(e.key.clone()))
        .unwrap();
    assert!(r.is_intact(), "{r:#?}");

    let run = thirty_event_session(&store);
    let list = store.sessions().unwrap();
    let live = list.iter().find(|s| s.id == id).unwrap();
    assert_eq!(live.info.mode, SessionMode::Session);
    assert_eq!(live.steps, Some(3));
    assert_eq!(timeline::session_title(live, None), "[session, 3 steps]");
    assert_eq!(
        serde_json::to_value(live.info.mode).unwrap(),
        serde_json::json!("session")
    );
    let other = list.iter().find(|s| s.id == run).unwrap();
    assert_eq!(other.steps, None);
    assert_eq!(timeline::session_title(other, None), "python3 x.py");
}

#[test]
fn a_tampered_step_label_fails_verification_at_its_seq() {
    let e = env();
    let store = e.store();
    let id = three_steps(&store);
    let seq: i64 = e
        .raw()
        .query_row(
            "SELECT seq FROM events WHERE kind = 'step_start' AND payload LIKE '%\"call-2\"%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    e.raw()
        .execute(
            "UPDATE events SET payload = replace(payload, '\"call-2\"', '\"call-9\"') WHERE seq = ?1",
            [seq],
        )
        .unwrap();
    let r = store
        .verify(&id, &TrustAnchor::KeyFile(e.key.clone()))
        .unwrap();
    assert_eq!(r.outcome, VerifyOutcome::Tampered, "{r:#?}");
    assert_eq!(r.first_bad_seq.map(|s| s.get()), Some(seq as u64), "{r:#?}");
}

#[test]
fn an_interrupted_live_session_verifies_up_to_its_last_event_and_shows_as_interrupted() {
    let e = env();
    let store = e.store();
    let rec = store.begin_session(live_info()).unwrap();
    for ev in step_one() {
        rec.record(ev).unwrap();
    }
    rec.sync().unwrap();
    for ev in [
        step_start(2, Some("call-2"), &["make", "test"], false),
        step_exec("s2", Some("init"), Some(2), &["make", "test"]),
        step_output(2, b"running\n"),
    ] {
        rec.record(ev).unwrap();
    }
    let id = rec.session_id().clone();
    // The serving process dies: no end record, no step_end for step 2.
    drop(rec);

    let r = store
        .verify(&id, &TrustAnchor::KeyFile(e.key.clone()))
        .unwrap();
    assert_eq!(r.outcome, VerifyOutcome::Incomplete, "{r:#?}");
    assert!(r.problems.is_empty(), "{r:#?}");
    assert!(!r.finished);
    assert_eq!(r.verified_through.get(), r.events, "{r:#?}");

    let summary = store.session(&id).unwrap();
    assert!(summary.ended_us.is_none());
    assert_eq!(summary.steps, Some(2));
    let events = store.events(&id, None).unwrap();
    let text = timeline::render_text(&summary, &events, None);
    assert!(text.contains("step 1  \"call-1\""), "{text}");
    assert!(
        text.contains("step 2  \"call-2\"  $ make test  (cwd /work)  -> did not end (still running, or the session was interrupted)"),
        "{text}"
    );
    assert!(text.contains("\"running\""), "{text}");
    assert!(
        text.ends_with("(session did not finish: crashed or still running)\n"),
        "{text}"
    );
    let v = timeline::render_json(&summary, &events, None);
    assert_eq!(v["steps"][1]["ended"], false);
}

#[test]
fn a_label_cannot_forge_timeline_lines_or_control_the_terminal() {
    let forged = "x\n   +0.001s 00:00:00.000     #9 step 9  \"forged\"  -> exit 0\x1b[2K\r\u{202e}";
    let render = |label: &str| {
        let e = env();
        let store = e.store();
        let rec = store.begin_session(live_info()).unwrap();
        for ev in [
            step_start(1, Some(label), &["true"], false),
            step_exec("s1", None, Some(1), &["true"]),
            step_end(1, Some(0), None),
        ] {
            rec.record(ev).unwrap();
        }
        let id = rec.session_id().clone();
        rec.finish(SessionEnd::default()).unwrap();
        let summary = store.session(&id).unwrap();
        let events = store.events(&id, None).unwrap();
        timeline::render_text(&summary, &events, None)
    };
    let plain = render("call-1");
    let evil = render(forged);
    assert_eq!(
        evil.lines().count(),
        plain.lines().count(),
        "the label added lines:\n{evil}"
    );
    assert!(
        !evil.contains(['\x1b', '\r', '\u{202e}']),
        "raw control in:\n{evil}"
    );
    let header = evil
        .lines()
        .find(|l| l.contains(" step 1  "))
        .expect("header");
    assert!(
        header.contains(
            "\"x\\n   +0.001s 00:00:00.000     #9 step 9  \\\"forged\\\"  -> exit 0\\x1b[2K\\r\\u{202e}\""
        ),
        "{header}"
    );
    assert_eq!(
        evil.matches("forged").count(),
        1,
        "only in the header:\n{evil}"
    );
}

#[test]
fn exports_filters_and_restore_know_the_step_records() {
    let e = env();
    let store = e.store();
    let id = three_steps(&store);
    let summary = store.session(&id).unwrap();
    let events = store.events(&id, None).unwrap();

    // --kind step_start,step_end
    let kinds = [EventKind::StepStart, EventKind::StepEnd];
    for k in kinds {
        assert_eq!(EventKind::parse(k.as_str()), Some(k));
    }
    assert_eq!(EventKind::StepStart.as_str(), "step_start");
    assert_eq!(EventKind::StepEnd.as_str(), "step_end");
    assert_eq!(store.events(&id, Some(&kinds)).unwrap().len(), 6);

    // JSONL: every record, the step ones with their fields.
    let mut out = Vec::new();
    jsonl::write(&id, &events, &mut out).unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), events.len());
    let start2 = lines
        .iter()
        .find(|l| l["kind"] == "step_start" && l["step"] == 2)
        .unwrap();
    assert_eq!(start2["label"], "call-2");
    assert_eq!(start2["command"][0], "curl");
    let end3 = lines
        .iter()
        .find(|l| l["kind"] == "step_end" && l["step"] == 3)
        .unwrap();
    assert_eq!(end3["timed_out"], true);
    assert_eq!(end3["duration_ms"], 10_000.0);
    assert!(
        lines
            .iter()
            .any(|l| l["kind"] == "output" && l["step"] == 2)
    );
    assert!(lines.iter().any(|l| l["kind"] == "exec" && l["step"] == 1));

    // HAR: the HTTP exchanges only, as before.
    let har = har::to_value(&summary, &events);
    assert_eq!(har["log"]["entries"].as_array().unwrap().len(), 4);

    // asciicast: a marker per step, each step's output after its marker.
    let mut out = Vec::new();
    cast::write(&summary, &events, &mut out).unwrap();
    let frames: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let shown: Vec<String> = frames
        .iter()
        .map(|f| format!("{} {}", f[1].as_str().unwrap(), f[2].as_str().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [
            "m step 1: call-1",
            "o started\n",
            "m step 2: call-2",
            "o <html>listing</html>\n",
            "m step 3",
            "o zzz\n",
        ]
    );

    // Restore: the files of every step.
    let dir = tempfile::tempdir().unwrap();
    let report = restore::restore(&store, &id, dir.path()).unwrap();
    let mut paths: Vec<String> = report.restored.iter().map(|(p, _)| p.to_string()).collect();
    paths.sort_unstable();
    assert_eq!(
        paths,
        [
            "/tmp/one.txt",
            "/tmp/server.log",
            "/work/three.txt",
            "/work/two.txt"
        ]
    );
}

#[test]
fn a_secret_in_a_steps_label_command_or_reason_is_redacted() {
    const SECRET: &str = "ghp_S3cr3tT0kenValue42";
    let e = env();
    let store = e.store();
    store.redactor().add("GITHUB_TOKEN", SECRET).unwrap();
    let rec = store.begin_session(live_info()).unwrap();
    rec.record(step_start(
        1,
        Some(&format!("call with {SECRET}")),
        &["curl", "-H", &format!("token {SECRET}")],
        false,
    ))
    .unwrap();
    rec.record(AuditEvent::StepEnd(StepEnd {
        step: StepNo(1),
        exit_status: None,
        signal: Some(9),
        timed_out: false,
        duration_ms: 1.0,
        reason: Some(format!("killed: {SECRET}")),
    }))
    .unwrap();
    let id = rec.session_id().clone();
    rec.finish(SessionEnd::default()).unwrap();

    let payloads: Vec<String> = {
        let conn = e.raw();
        let mut stmt = conn.prepare("SELECT payload FROM events").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(payloads.len(), 2);
    for p in &payloads {
        assert!(!p.contains(SECRET), "{p}");
        assert!(p.contains("[secret:GITHUB_TOKEN]"), "{p}");
    }
    let events = store.events(&id, None).unwrap();
    let AuditEvent::StepStart(StepStart { label, command, .. }) = &events[0].event else {
        panic!("{events:?}");
    };
    assert_eq!(label.as_deref(), Some("call with [secret:GITHUB_TOKEN]"));
    assert_eq!(command[2], "token [secret:GITHUB_TOKEN]");
}
