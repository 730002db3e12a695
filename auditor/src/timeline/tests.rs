use super::*;
use crate::{
    ApprovalDecided, ApprovalRequested, DnsQuery, Exec, FileChange, HttpExchange, Note, Output,
    StepEnd, StepStart, TcpConnection, Untraced,
};
use crate::{FileOp, OutputStream, WebSocketMessage, WebSocketRecord};

/// What a hostile program would put in a field: erase the line, retitle
/// the window, return to column 0, reverse the text, and a literal
/// backslash sequence that must not read as an escape.
const EVIL: &str = "a\x1b[2Kb\x1b]0;t\x07c\rd\u{202e}e\u{2066}f\u{9b}g\\x1bh";
const SHOWN: &str = "a\\x1b[2Kb\\x1b]0;t\\x07c\\rd\\u{202e}e\\u{2066}f\\u{9b}g\\\\x1bh";

fn s() -> String {
    EVIL.to_owned()
}

fn assert_clean(line: &str) {
    // The websocket record is a second line; a backslash is printed as
    // itself (escaped, it is two of them); anything else the escaper
    // would change must not be there raw.
    for c in line.chars().filter(|c| !matches!(c, '\n' | '\\')) {
        assert_eq!(
            escape::text(&c.to_string()),
            c.to_string(),
            "raw {c:?} in {line:?}"
        );
    }
    assert!(line.contains(SHOWN), "no escaped field in {line:?}");
}

#[test]
fn every_field_from_the_sandbox_is_escaped() {
    let id = || Some(ExecId::new("e1"));
    let events = [
        AuditEvent::Exec(Exec {
            exec_id: ExecId::new("e1"),
            parent_exec_id: None,
            pid: 1,
            ppid: 0,
            uid: 0,
            path: s().into(),
            argv: vec![s().into()],
            cwd: s().into(),
            env_names: vec![],
            env_values_nonsecret: Default::default(),
            step: None,
            image: Default::default(),
        }),
        AuditEvent::File(FileChange {
            exec_id: id(),
            rename_to: Some(s().into()),
            ..FileChange::new(s().into(), FileOp::Rename)
        }),
        AuditEvent::Dns(DnsQuery {
            exec_id: id(),
            name: s(),
            qtype: s(),
            answer: vec![s()],
            decision: Verdict::Deny,
            rule: Some(s()),
        }),
        AuditEvent::Tcp(TcpConnection {
            exec_id: id(),
            connection: None,
            dst: s(),
            host: Some(s()),
            port: 1,
            decision: Verdict::Deny,
            rule: None,
            reason: Some(s()),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: None,
        }),
        AuditEvent::Http(HttpExchange {
            exec_id: id(),
            rule: Some(s().into()),
            reason: Some(s()),
            websocket: Some(Box::new(WebSocketRecord {
                messages: vec![WebSocketMessage {
                    ts_us: 0,
                    direction: "to_client".into(),
                    opcode: s(),
                    fragments: 1,
                    bytes: 1,
                    payload: EVIL.as_bytes().to_vec(),
                    truncated: false,
                }],
                closed_by: s(),
                close_code: None,
                close_reason: Some(s()),
                messages_to_upstream: 0,
                bytes_to_upstream: 0,
                messages_to_client: 1,
                bytes_to_client: 1,
                ms_total: None,
                error: Some(s()),
            })),
            ..HttpExchange::decided(s(), s(), s(), Verdict::Deny)
        }),
        AuditEvent::Output(Output {
            stream: OutputStream::Stdout,
            data: EVIL.as_bytes().to_vec(),
            step: None,
        }),
        AuditEvent::Note(Note {
            text: s(),
            policy: None,
        }),
        // A task's name is whatever it set with prctl(PR_SET_NAME).
        AuditEvent::Untraced(Untraced {
            exec_id: None,
            pid: 5,
            ppid: 0,
            uid: 0,
            comm: s().into(),
        }),
    ];
    for ev in &events {
        let line = describe(ev);
        assert_clean(&line);
    }
    // The exec line shows argv, path and cwd, each escaped.
    let exec = describe(&events[0]);
    assert_eq!(exec.matches(SHOWN).count(), 3, "{exec}");
    // The rename shows both names.
    assert_eq!(describe(&events[1]).matches(SHOWN).count(), 2);
}

#[test]
fn step_records_from_the_caller_are_escaped() {
    let start = AuditEvent::StepStart(StepStart {
        step: crate::StepNo(1),
        label: Some(s()),
        command: vec![s()],
        cwd: Some(s()),
        tty: true,
    });
    let line = describe(&start);
    assert_clean(&line);
    // Label, command and cwd, each escaped.
    assert_eq!(line.matches(SHOWN).count(), 3, "{line}");
    let end = AuditEvent::StepEnd(StepEnd {
        step: crate::StepNo(1),
        exit_status: None,
        signal: Some(9),
        timed_out: true,
        duration_ms: f64::NAN,
        reason: Some(s()),
    });
    let line = describe(&end);
    assert_clean(&line);
    assert!(
        line.contains("timed out, killed by signal 9 after 0ms"),
        "{line}"
    );
}

#[test]
fn approval_records_are_escaped() {
    // The method and URL are the sandbox's; the note and the decider's name
    // whoever answered; the rest the policy's. All are escaped.
    let requested = AuditEvent::ApprovalRequested(ApprovalRequested {
        approval: s(),
        exec_id: None,
        exchange: None,
        method: s(),
        url: s(),
        request_headers: vec![(s(), s())],
        body_bytes: 0,
        body_sha256: s(),
        rule: s().into(),
        reason: Some(s()),
        timeout_ms: u64::MAX,
        approvers: vec![s()],
    });
    let line = describe(&requested);
    assert_clean(&line);
    // Id, method, URL, rule, reason and approvers (headers and the body's
    // hash are not shown).
    assert_eq!(line.matches(SHOWN).count(), 6, "{line}");
    let decided = AuditEvent::ApprovalDecided(ApprovalDecided {
        approval: s(),
        exec_id: None,
        exchange: None,
        outcome: s(),
        scope: Some(s()),
        by: Some(s()),
        note: Some(s()),
        waited_ms: u64::MAX,
        body_sha256: s(),
        method: s(),
        url: s(),
    });
    let line = describe(&decided);
    assert_clean(&line);
    // Id, outcome, scope, decider and note.
    assert_eq!(line.matches(SHOWN).count(), 5, "{line}");
}
