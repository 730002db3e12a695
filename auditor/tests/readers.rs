//! Reading a session back: timeline, HAR, JSONL, asciicast and file restore,
//! checked the way a user would check them.

use airlock_auditor::Verdict;
use airlock_auditor::{Exit, FileChange, HttpExchange, Resize, TcpConnection};
use std::collections::BTreeMap;

use airlock_auditor::export::{cast, har, jsonl};
use airlock_auditor::{
    AuditEvent, AuditStore, ExecId, FileOp, OutputStream, SessionEnd, SessionId, SessionInfo,
    restore, timeline,
};
use airlock_test_support::audit_store::{dns, env, exec, file, info, output};

fn http(url: &str, status: Option<u16>, body: &[u8], decision: &str) -> AuditEvent {
    AuditEvent::Http(HttpExchange {
        exec_id: Some(ExecId::new("e2")),
        request_headers: vec![
            ("content-type".into(), "application/json".into()),
            ("cookie".into(), "a=1; b=2".into()),
            ("authorization".into(), "[secret:API_TOKEN]".into()),
        ],
        request_body: Some(br#"{"q":"hello"}"#.to_vec()),
        status,
        response_headers: vec![("content-type".into(), "application/octet-stream".into())],
        response_body: Some(body.to_vec()),
        bytes_up: 13,
        bytes_down: body.len() as u64,
        ms_to_headers: Some(12.5),
        ms_total: Some(20.0),
        rule: Some("policy.toml:12".into()),
        ..HttpExchange::decided(
            "POST".into(),
            url.into(),
            "HTTP/1.1".into(),
            decision.parse().unwrap(),
        )
    })
}

fn with(ev: AuditEvent, f: impl FnOnce(&mut AuditEvent)) -> AuditEvent {
    let mut ev = ev;
    f(&mut ev);
    ev
}

fn set_rename(ev: &mut AuditEvent, to: &str) {
    if let AuditEvent::File(FileChange { rename_to, .. }) = ev {
        *rename_to = Some(to.into());
    }
}

fn set_mode(ev: &mut AuditEvent, m: u32) {
    if let AuditEvent::File(FileChange { mode, .. }) = ev {
        *mode = Some(m);
    }
}

/// A realistic session: a shell running python, which writes files, resolves
/// a name, connects, makes HTTP requests and prints.
fn session(store: &AuditStore) -> SessionId {
    let rec = store
        .begin_session(SessionInfo {
            max_file_bytes: 1024,
            terminal: Some((100, 30)),
            ..info(&["sh", "-c", "python3 app.py"])
        })
        .unwrap();
    let big: Vec<u8> = (0..2000u32).map(|i| (i % 256) as u8).collect();
    let binary: Vec<u8> = vec![0, 159, 146, 150, 255];
    let events = vec![
        exec("e1", None, &["sh", "-c", "python3 app.py"]),
        exec("e2", Some("e1"), &["python3", "app.py"]),
        output(OutputStream::Stdout, b"starting\r\n"),
        file("/work/out/a.txt", FileOp::Create, Some(b"first version")),
        file("/work/out/a.txt", FileOp::Modify, Some(b"second version\n")),
        file("/work/b.txt", FileOp::Create, Some(b"bbb")),
        with(file("/work/b.txt", FileOp::Rename, None), |e| {
            set_rename(e, "/work/c.txt")
        }),
        file("/work/d.txt", FileOp::Create, Some(b"doomed")),
        file("/work/d.txt", FileOp::Delete, None),
        file("/work/big.bin", FileOp::Create, Some(&big)),
        with(
            file(
                "/work/run.sh",
                FileOp::Create,
                Some(b"#!/bin/sh\necho hi\n"),
            ),
            |e| set_mode(e, 0o4755),
        ),
        file(
            "/work/../../etc/passwd",
            FileOp::Create,
            Some(b"root::0:0::/:/bin/sh\n"),
        ),
        file("/work/empty.txt", FileOp::Create, Some(b"data")),
        AuditEvent::File(FileChange {
            size: Some(0),
            ..FileChange::new("/work/empty.txt".into(), FileOp::Truncate)
        }),
        dns("api.example.com"),
        AuditEvent::Tcp(TcpConnection {
            connection: None,
            exec_id: Some(ExecId::new("e2")),
            dst: "93.184.216.34:443".into(),
            host: Some("api.example.com".into()),
            port: 443,
            decision: Verdict::Allow,
            rule: Some("policy.toml:3".into()),
            reason: None,
            bytes_up: 2048,
            bytes_down: 4096,
            duration_ms: Some(30.0),
        }),
        http(
            "https://api.example.com/v1/items?limit=10&sort=asc",
            Some(200),
            &binary,
            "allow",
        ),
        http(
            "https://evil.example.net/exfil",
            Some(403),
            b"denied: add a rule",
            "deny",
        ),
        output(OutputStream::Stderr, b"warning: done\r\n"),
        AuditEvent::Exit(Exit {
            exec_id: ExecId::new("e2"),
            status: Some(0),
            signal: None,
        }),
    ];
    for ev in events {
        rec.record(ev).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let id = rec.session_id().clone();
    rec.finish(SessionEnd {
        exit_status: Some(0),
        ..Default::default()
    })
    .unwrap();
    id
}

#[test]
fn har_export_has_the_required_har_1_2_structure() {
    let e = env();
    let store = e.store();
    let id = session(&store);
    let summary = store.session(&id).unwrap();
    let events = store.events(&id, None).unwrap();
    let mut buf = Vec::new();
    har::write(&summary, &events, &mut buf).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&buf).expect("HAR parses as JSON");
    let log = &v["log"];
    assert_eq!(log["version"], "1.2");
    assert_eq!(log["creator"]["name"], "airlock");
    assert!(log["creator"]["version"].is_string());
    let entries = log["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    for en in entries {
        assert!(en["startedDateTime"].as_str().unwrap().ends_with('Z'));
        assert!(en["time"].is_number());
        let req = &en["request"];
        for k in [
            "method",
            "url",
            "httpVersion",
            "headers",
            "queryString",
            "cookies",
            "headersSize",
            "bodySize",
        ] {
            assert!(!req[k].is_null(), "request.{k} missing");
        }
        let resp = &en["response"];
        for k in [
            "status",
            "statusText",
            "httpVersion",
            "headers",
            "cookies",
            "content",
            "redirectURL",
            "headersSize",
            "bodySize",
        ] {
            assert!(!resp[k].is_null(), "response.{k} missing");
        }
        assert!(resp["content"]["size"].is_number());
        assert!(resp["content"]["mimeType"].is_string());
        assert!(en["cache"].is_object());
        for k in ["send", "wait", "receive"] {
            assert!(en["timings"][k].as_f64().unwrap() >= 0.0);
        }
    }
    let first = &entries[0];
    assert_eq!(first["request"]["queryString"][0]["name"], "limit");
    assert_eq!(first["request"]["queryString"][1]["value"], "asc");
    assert_eq!(first["request"]["cookies"].as_array().unwrap().len(), 2);
    assert_eq!(first["request"]["postData"]["text"], r#"{"q":"hello"}"#);
    assert_eq!(first["response"]["content"]["encoding"], "base64");
    assert_eq!(first["response"]["content"]["text"], "AJ+Slv8=");
    assert_eq!(entries[1]["response"]["status"], 403);
    assert_eq!(entries[1]["response"]["statusText"], "Forbidden");
    assert_eq!(entries[1]["_decision"], "deny");
    assert_eq!(entries[1]["_rule"], "policy.toml:12");
}

#[test]
fn jsonl_lines_each_parse_with_seq_ts_and_kind() {
    let e = env();
    let store = e.store();
    let id = session(&store);
    let events = store.events(&id, None).unwrap();
    let mut buf = Vec::new();
    jsonl::write(&id, &events, &mut buf).unwrap();
    let text = String::from_utf8(buf).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 20);
    let mut last_seq = 0;
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("each line is JSON");
        let seq = v["seq"].as_u64().unwrap();
        assert_eq!(seq, last_seq + 1);
        last_seq = seq;
        let ts = v["ts"].as_str().unwrap();
        time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339)
            .expect("ts is RFC 3339");
        let kind = v["kind"].as_str().unwrap();
        assert!(
            [
                "exec", "exit", "file", "dns", "http", "tcp", "output", "note"
            ]
            .contains(&kind)
        );
        assert!(v.get("exec_id").is_some());
    }
    let exec: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(exec["argv"][0], "python3");
    assert_eq!(exec["exec_id"], "e2");
    let f: serde_json::Value = serde_json::from_str(lines[3]).unwrap();
    assert_eq!(f["op"], "create");
    assert_eq!(f["path"], "/work/out/a.txt");
    assert_eq!(f["sha256"].as_str().unwrap().len(), 64);
    let h: serde_json::Value = serde_json::from_str(lines[17]).unwrap();
    assert_eq!(h["kind"], "http");
    assert_eq!(h["decision"], "deny");
    assert_eq!(h["rule"], "policy.toml:12");
    assert_eq!(h["status"], 403);
    assert!(h["url"].as_str().unwrap().contains("exfil"));
}

#[test]
fn asciicast_has_a_v2_header_and_output_frames() {
    let e = env();
    let store = e.store();
    let id = session(&store);
    let summary = store.session(&id).unwrap();
    let events = store.events(&id, None).unwrap();
    let mut buf = Vec::new();
    cast::write(&summary, &events, &mut buf).unwrap();
    let text = String::from_utf8(buf).unwrap();
    let mut lines = text.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["version"], 2);
    assert_eq!(header["width"], 100);
    assert_eq!(header["height"], 30);
    assert!(header["timestamp"].as_i64().unwrap() > 1_600_000_000);
    let frames: Vec<serde_json::Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0][1], "o");
    assert_eq!(frames[0][2], "starting\r\n");
    assert_eq!(frames[1][1], "o", "stderr is rendered as output too");
    assert_eq!(frames[1][2], "warning: done\r\n");
    assert!(frames[0][0].as_f64().unwrap() <= frames[1][0].as_f64().unwrap());
}

#[test]
fn asciicast_and_timeline_show_terminal_resizes_in_order() {
    let e = env();
    let store = e.store();
    let rec = store
        .begin_session(SessionInfo {
            terminal: Some((100, 30)),
            ..info(&["bash"])
        })
        .unwrap();
    for ev in [
        output(OutputStream::Stdout, b"30 100\r\n"),
        AuditEvent::Resize(Resize {
            cols: 120,
            rows: 40,
        }),
        output(OutputStream::Stdout, b"40 120\r\n"),
    ] {
        rec.record(ev).unwrap();
    }
    let id = rec.session_id().clone();
    rec.finish(SessionEnd::default()).unwrap();
    let summary = store.session(&id).unwrap();
    let events = store.events(&id, None).unwrap();
    let mut buf = Vec::new();
    cast::write(&summary, &events, &mut buf).unwrap();
    let frames: Vec<serde_json::Value> = String::from_utf8(buf)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        (&frames[0]["width"], &frames[0]["height"]),
        (&100.into(), &30.into())
    );
    let kinds: Vec<(&str, &str)> = frames[1..]
        .iter()
        .map(|f| (f[1].as_str().unwrap(), f[2].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [("o", "30 100\r\n"), ("r", "120x40"), ("o", "40 120\r\n")]
    );
    let text = timeline::render_text(&summary, &events, None);
    assert!(text.contains("term  resized to 120x40"), "{text}");
}

#[test]
fn restore_reproduces_the_final_files_byte_for_byte() {
    let e = env();
    let store = e.store();
    let id = session(&store);
    let out = e.dir.path().join("restored");
    let report = restore::restore(&store, &id, &out).unwrap();

    let read = |p: &str| std::fs::read(out.join(p)).ok();
    assert_eq!(
        read("work/out/a.txt").as_deref(),
        Some(&b"second version\n"[..])
    );
    assert_eq!(
        read("work/c.txt").as_deref(),
        Some(&b"bbb"[..]),
        "rename applied"
    );
    assert_eq!(read("work/b.txt"), None, "rename source is gone");
    assert_eq!(read("work/d.txt"), None, "deleted file not restored");
    assert_eq!(
        read("work/empty.txt").as_deref(),
        Some(&b""[..]),
        "truncate applied"
    );
    assert_eq!(read("work/big.bin"), None, "over-cap file is hash-only");
    assert_eq!(
        read("work/run.sh").as_deref(),
        Some(&b"#!/bin/sh\necho hi\n"[..])
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(out.join("work/run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755, "permission bits kept, setuid dropped");
    assert!(!e.dir.path().join("etc/passwd").exists());

    let files: BTreeMap<_, _> = report.restored.iter().cloned().collect();
    assert_eq!(files.len(), 4);
    assert_eq!(report.deleted, vec!["/work/d.txt".to_string()]);
    assert_eq!(report.hash_only.len(), 1);
    assert_eq!(report.hash_only[0].0, "/work/big.bin");
    assert_eq!(report.hash_only[0].2, Some(2000));
    assert_eq!(report.refused.len(), 1);
    assert!(report.refused[0].1.contains(".."));
}

#[test]
fn timeline_indents_by_process_tree_and_filters_kinds() {
    let e = env();
    let store = e.store();
    let id = session(&store);
    let summary = store.session(&id).unwrap();
    let events = store.events(&id, None).unwrap();
    let text = timeline::render_text(&summary, &events, None);
    assert!(text.contains("exec  sh -c 'python3 app.py'"), "{text}");
    assert!(
        text.contains("  exec  python3 app.py"),
        "child exec indented: {text}"
    );
    assert!(
        text.contains(
            "    http  POST https://evil.example.net/exfil -> 403  [deny by policy.toml:12]"
        ),
        "{text}"
    );
    assert!(text.contains("+0."), "relative times: {text}");
    assert!(
        text.contains("1.0 KiB") || text.contains("2.0 KiB") || text.contains("4.0 KiB"),
        "sizes: {text}"
    );
    assert!(text.contains("session ended: exit 0"), "{text}");

    let only = [airlock_auditor::EventKind::Dns];
    let text = timeline::render_text(&summary, &events, Some(&only));
    assert!(text.contains("dns   api.example.com A"));
    assert!(!text.contains("exec "));

    let v = timeline::render_json(&summary, &events, None);
    let items = v["events"].as_array().unwrap();
    assert_eq!(items[0]["depth"], 0);
    assert_eq!(items[1]["depth"], 1);
    assert_eq!(items[3]["depth"], 1, "file event of exec e1 sits under it");
    assert_eq!(items[16]["depth"], 2, "http of exec e2 sits under it");
}
