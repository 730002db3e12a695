//! Search across sessions: the right events of the right sessions, whatever
//! mode recorded them, found through the index for new sessions and by a
//! scan for sessions recorded before it, without writing to the database.

use airlock_auditor::{ConnectionId, FileChange, HttpExchange, StepStart, TcpConnection};
use std::path::PathBuf;
use std::time::Duration;

use airlock_auditor::search::QueryError;
use airlock_auditor::{
    AuditError, AuditEvent, AuditStore, EventKind, ExecId, FileOp, SearchQuery, SearchResults,
    SessionEnd, SessionId, SessionMode, TrustAnchor,
};
use airlock_test_support::audit_store::*;

fn http(exchange: u64, method: &str, url: &str, decision: &str) -> AuditEvent {
    http_exchange(
        exchange,
        method,
        url,
        (decision != "deny").then_some(200),
        decision.parse().unwrap(),
    )
}

fn tcp(host: Option<&str>, dst: &str, decision: &str) -> AuditEvent {
    AuditEvent::Tcp(TcpConnection {
        exec_id: Some(ExecId::new("e2")),
        connection: Some(ConnectionId(1)),
        dst: dst.into(),
        host: host.map(Into::into),
        port: 443,
        decision: decision.parse().unwrap(),
        rule: None,
        reason: None,
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: None,
    })
}

fn rename(from: &str, to: &str) -> AuditEvent {
    let mut event = file(from, FileOp::Rename, None);
    if let AuditEvent::File(FileChange { rename_to, .. }) = &mut event {
        *rename_to = Some(to.into());
    }
    event
}

fn record(store: &AuditStore, mode: SessionMode, events: Vec<AuditEvent>) -> SessionId {
    let mut session_info = info(&["agent"]);
    session_info.mode = mode;
    let rec = store.begin_session(session_info).expect("begin");
    for e in events {
        rec.record(e).expect("record");
    }
    let id = rec.session_id().clone();
    rec.finish(SessionEnd::default()).expect("finish");
    id
}

/// Three sessions in three modes:
/// - run: curl to api.example.com (allowed, exchange recorded twice),
///   writes /work/out/report.txt and renames it;
/// - proxy: POST to uploads.example.com refused, a GET to pastebin.com;
/// - session: a step running `pip install requests`, DNS for
///   files.pythonhosted.org.
struct World {
    _env: Env,
    store: AuditStore,
    run: SessionId,
    proxy: SessionId,
    live: SessionId,
}

fn world() -> World {
    let env = env();
    let writer = env.store();
    let run = record(
        &writer,
        SessionMode::Run,
        vec![
            exec("e1", None, &["sh", "-c", "curl https://api.example.com/v1"]),
            exec(
                "e2",
                Some("e1"),
                &["curl", "-sS", "https://api.example.com/v1"],
            ),
            dns("API.example.com."),
            tcp(Some("api.example.com"), "10.0.0.1:443", "allow"),
            http(1, "GET", "https://api.example.com/v1?page=2", "allow"),
            http(1, "GET", "https://api.example.com/v1?page=2", "allow"),
            file("/work/out/report.txt", FileOp::Create, Some(b"hello")),
            rename("/work/out/report.txt", "/work/final.txt"),
            output(
                airlock_auditor::OutputStream::Stdout,
                b"api.example.com\r\n",
            ),
        ],
    );
    let proxy = record(
        &writer,
        SessionMode::Proxy,
        vec![
            http(1, "POST", "https://uploads.example.com/put", "deny"),
            http(2, "get", "https://pastebin.com/raw/abc", "report"),
            tcp(None, "[2001:db8::1]:443", "deny"),
        ],
    );
    let live = record(
        &writer,
        SessionMode::Session,
        vec![
            AuditEvent::StepStart(StepStart {
                step: airlock_auditor::StepNo(1),
                label: Some("tool-call-1".into()),
                command: vec!["pip".into(), "install".into(), "requests".into()],
                cwd: None,
                tty: false,
            }),
            exec("e9", None, &["pip", "install", "requests"]),
            dns("files.pythonhosted.org"),
            file("/work/.venv/lib/requests/api.py", FileOp::Create, None),
        ],
    );
    drop(writer);
    let store = AuditStore::open_readonly(&env.db).expect("open read-only");
    World {
        _env: env,
        store,
        run,
        proxy,
        live,
    }
}

fn find(store: &AuditStore, query: SearchQuery) -> SearchResults {
    store.search(&query).expect("search")
}

/// (session, kind) of every hit, in order.
fn hits(store: &AuditStore, query: SearchQuery) -> Vec<(SessionId, EventKind)> {
    find(store, query)
        .hits
        .into_iter()
        .map(|h| (h.session, h.event.kind))
        .collect()
}

#[test]
fn a_host_finds_dns_tcp_and_http_of_every_session_case_insensitively() {
    let w = world();
    let found = hits(
        &w.store,
        SearchQuery {
            host: Some("Api.Example.COM".into()),
            ..Default::default()
        },
    );
    // The exchange recorded twice is shown once, as the timeline shows it.
    assert_eq!(
        found,
        vec![
            (w.run.clone(), EventKind::Dns),
            (w.run.clone(), EventKind::Tcp),
            (w.run.clone(), EventKind::Http),
        ]
    );
}

#[test]
fn a_wildcard_host_finds_every_name_under_the_domain_but_not_the_domain() {
    let w = world();
    let found = hits(
        &w.store,
        SearchQuery {
            host: Some("*.example.com".into()),
            ..Default::default()
        },
    );
    let sessions: Vec<&SessionId> = found.iter().map(|(s, _)| s).collect();
    assert!(sessions.contains(&&w.run) && sessions.contains(&&w.proxy));
    assert!(!sessions.contains(&&w.live));
    let none = find(
        &w.store,
        SearchQuery {
            host: Some("*.api.example.com".into()),
            ..Default::default()
        },
    );
    assert!(none.hits.is_empty(), "{none:#?}");
}

#[test]
fn a_connection_without_a_name_is_found_by_its_address() {
    let w = world();
    let found = hits(
        &w.store,
        SearchQuery {
            host: Some("2001:db8::1".into()),
            ..Default::default()
        },
    );
    assert_eq!(found, vec![(w.proxy.clone(), EventKind::Tcp)]);
}

#[test]
fn verdicts_methods_and_url_text_narrow_to_the_refused_request() {
    let w = world();
    let denied = hits(
        &w.store,
        SearchQuery {
            verdict: Some("deny".into()),
            ..Default::default()
        },
    );
    assert_eq!(
        denied,
        vec![
            (w.proxy.clone(), EventKind::Http),
            (w.proxy.clone(), EventKind::Tcp)
        ]
    );
    let post = hits(
        &w.store,
        SearchQuery {
            method: Some("post".into()),
            verdict: Some("deny".into()),
            ..Default::default()
        },
    );
    assert_eq!(post, vec![(w.proxy.clone(), EventKind::Http)]);
    let reported = find(
        &w.store,
        SearchQuery {
            url: Some("/raw/".into()),
            method: Some("GET".into()),
            verdict: Some("report".into()),
            ..Default::default()
        },
    );
    assert_eq!(reported.hits.len(), 1);
    assert!(matches!(&reported.hits[0].event.event,
        AuditEvent::Http(HttpExchange { url, .. }) if url == "https://pastebin.com/raw/abc"));
}

/// Allowed decisions are not in the verdict index (it holds refusals and
/// reports only): search still finds every one of them, however the
/// verdict is spelled, alone or with a host or a time bound.
#[test]
fn every_allowed_decision_is_found_by_verdict_though_the_verdict_index_holds_only_refusals() {
    let w = world();
    let allowed = |host: Option<&str>, since_us: Option<i64>, spelling: &str| {
        hits(
            &w.store,
            SearchQuery {
                verdict: Some(spelling.into()),
                host: host.map(Into::into),
                since_us,
                ..Default::default()
            },
        )
    };
    // The exchange recorded twice is one hit (see `arrange`).
    let in_run = vec![
        (w.run.clone(), EventKind::Dns),
        (w.run.clone(), EventKind::Tcp),
        (w.run.clone(), EventKind::Http),
    ];
    let every = [in_run.clone(), vec![(w.live.clone(), EventKind::Dns)]].concat();
    for spelling in ["allow", "ALLOW", "Allow"] {
        assert_eq!(allowed(None, None, spelling), every, "{spelling}");
        assert_eq!(allowed(None, Some(0), spelling), every, "{spelling}");
        assert_eq!(
            allowed(Some("api.example.com"), None, spelling),
            in_run,
            "{spelling}"
        );
        assert_eq!(
            allowed(Some("*.example.com"), None, spelling),
            in_run,
            "{spelling}"
        );
    }
}

/// A database made before the verdict index left allowed decisions out
/// has the full index: every search by verdict gives the same events there.
#[test]
fn a_database_with_the_earlier_full_verdict_index_finds_the_same_events_by_verdict() {
    let w = world();
    let queries: Vec<SearchQuery> = ["allow", "deny", "report"]
        .into_iter()
        .flat_map(|verdict| {
            [None, Some("post"), Some("GET")].map(|method| SearchQuery {
                verdict: Some(verdict.into()),
                method: method.map(Into::into),
                ..Default::default()
            })
        })
        .collect();
    let now: Vec<_> = queries.iter().map(|q| hits(&w.store, q.clone())).collect();
    assert!(now.iter().filter(|found| !found.is_empty()).count() >= 5);
    w._env
        .raw()
        .execute_batch(
            "DROP INDEX event_terms_by_verdict;
             CREATE INDEX event_terms_by_verdict ON event_terms (verdict, ts_us) WHERE verdict IS NOT NULL;",
        )
        .unwrap();
    let earlier = AuditStore::open_readonly(&w._env.db).unwrap();
    let then: Vec<_> = queries.iter().map(|q| hits(&earlier, q.clone())).collect();
    assert_eq!(then, now);
}

#[test]
fn a_file_is_found_by_exact_path_by_either_side_of_a_rename_or_by_directory() {
    let w = world();
    let exact = find(
        &w.store,
        SearchQuery {
            file: Some("/work/out/report.txt".into()),
            ..Default::default()
        },
    );
    let ops: Vec<FileOp> = exact
        .hits
        .iter()
        .map(|h| match &h.event.event {
            AuditEvent::File(FileChange { op, .. }) => *op,
            other => panic!("not a file event: {other:?}"),
        })
        .collect();
    assert_eq!(ops, vec![FileOp::Create, FileOp::Rename]);
    assert!(exact.hits.iter().all(|h| h.session == w.run));
    let renamed_to = hits(
        &w.store,
        SearchQuery {
            file: Some("/work/final.txt".into()),
            ..Default::default()
        },
    );
    assert_eq!(renamed_to, vec![(w.run.clone(), EventKind::File)]);
    let under_work = hits(
        &w.store,
        SearchQuery {
            file: Some("/work/".into()),
            ..Default::default()
        },
    );
    // Create and rename in the run session, one file in the live one; a
    // rename's two paths are both under /work/ but it is one event.
    assert_eq!(under_work.len(), 3, "{under_work:?}");
    let prefix_is_not_a_directory = find(
        &w.store,
        SearchQuery {
            file: Some("/work/out/report".into()),
            ..Default::default()
        },
    );
    assert!(prefix_is_not_a_directory.hits.is_empty());
}

#[test]
fn a_command_is_found_in_argv_in_the_exec_path_and_in_live_session_steps() {
    let w = world();
    let pip = hits(
        &w.store,
        SearchQuery {
            command: Some("install requests".into()),
            ..Default::default()
        },
    );
    assert_eq!(
        pip,
        vec![
            (w.live.clone(), EventKind::StepStart),
            (w.live.clone(), EventKind::Exec)
        ]
    );
    let by_path = hits(
        &w.store,
        SearchQuery {
            command: Some("/usr/bin/curl".into()),
            ..Default::default()
        },
    );
    assert_eq!(by_path, vec![(w.run.clone(), EventKind::Exec)]);
    // Terminal output mentioning the host is not a command or a request.
    let output = find(
        &w.store,
        SearchQuery {
            command: Some("api.example.com".into()),
            ..Default::default()
        },
    );
    assert!(output.hits.iter().all(|h| h.event.kind == EventKind::Exec));
}

#[test]
fn the_session_filter_takes_a_prefix_and_rejects_unknown_sessions() {
    let w = world();
    let prefix: String = w.proxy.as_str().chars().take(20).collect();
    let only_proxy = hits(
        &w.store,
        SearchQuery {
            host: Some("*.example.com".into()),
            session: Some(prefix),
            ..Default::default()
        },
    );
    assert!(!only_proxy.is_empty());
    assert!(only_proxy.iter().all(|(s, _)| s == &w.proxy));
    let unknown = w.store.search(&SearchQuery {
        host: Some("api.example.com".into()),
        session: Some("ffffffffffff".into()),
        ..Default::default()
    });
    assert!(
        matches!(unknown, Err(AuditError::UnknownSession(_))),
        "{unknown:?}"
    );
}

#[test]
fn time_ranges_split_sessions_recorded_before_and_after_a_moment() {
    let env = env();
    let writer = env.store();
    let early = record(&writer, SessionMode::Run, vec![dns("api.example.com")]);
    std::thread::sleep(Duration::from_millis(20));
    let moment = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    std::thread::sleep(Duration::from_millis(20));
    let late = record(&writer, SessionMode::Sidecar, vec![dns("api.example.com")]);
    let host = || Some("api.example.com".to_string());
    let sessions = |q: SearchQuery| -> Vec<SessionId> {
        find(&writer, q)
            .hits
            .into_iter()
            .map(|h| h.session)
            .collect()
    };
    assert_eq!(
        sessions(SearchQuery {
            host: host(),
            until_us: Some(moment),
            ..Default::default()
        }),
        vec![early.clone()]
    );
    assert_eq!(
        sessions(SearchQuery {
            host: host(),
            since_us: Some(moment),
            ..Default::default()
        }),
        vec![late.clone()]
    );
    assert_eq!(
        sessions(SearchQuery {
            host: host(),
            ..Default::default()
        }),
        vec![early, late]
    );
    let backwards = writer.search(&SearchQuery {
        host: host(),
        since_us: Some(moment),
        until_us: Some(moment - 1),
        ..Default::default()
    });
    assert!(
        matches!(backwards, Err(AuditError::Query(QueryError::TimeRange))),
        "{backwards:?}"
    );
}

#[test]
fn nothing_matching_is_an_empty_result_and_a_query_without_terms_is_refused() {
    let w = world();
    let none = find(
        &w.store,
        SearchQuery {
            host: Some("nowhere.invalid".into()),
            ..Default::default()
        },
    );
    assert!(none.hits.is_empty());
    assert_eq!(none.scanned_sessions, 0, "every session is indexed");
    let refused = |q: SearchQuery| match w.store.search(&q) {
        Err(AuditError::Query(e)) => e,
        other => panic!("{q:?} gave {other:?}"),
    };
    assert_eq!(
        refused(SearchQuery {
            since_us: Some(0),
            ..Default::default()
        }),
        QueryError::Empty
    );
    assert_eq!(
        refused(SearchQuery {
            host: Some("*.".into()),
            ..Default::default()
        }),
        QueryError::Host("*.".into())
    );
    assert_eq!(
        refused(SearchQuery {
            verdict: Some("maybe".into()),
            ..Default::default()
        }),
        QueryError::Verdict("maybe".into())
    );
    assert_eq!(
        refused(SearchQuery {
            command: Some("  ".into()),
            ..Default::default()
        }),
        QueryError::Blank { flag: "--command" }
    );
}

const SECRET: &str = "sk-live-5up3r53cr3t";

#[test]
fn a_registered_secret_is_neither_in_the_index_nor_findable() {
    let env = env();
    let store = env.store();
    store.redactor().add("API_KEY", SECRET).unwrap();
    let url = format!("https://api.example.com/v1?key={SECRET}");
    record(
        &store,
        SessionMode::Run,
        vec![
            exec("e1", None, &["curl", &url]),
            http(1, "GET", &url, "allow"),
            file(&format!("/work/{SECRET}.txt"), FileOp::Create, None),
        ],
    );
    let raw = env.raw();
    let leaked: i64 = raw
        .query_row(
            "SELECT COUNT(*) FROM event_terms WHERE instr(coalesce(url,'') || coalesce(path,'') || coalesce(command,''), ?1) > 0",
            [SECRET],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(leaked, 0);
    let by_secret = find(
        &store,
        SearchQuery {
            url: Some(SECRET.into()),
            ..Default::default()
        },
    );
    assert!(by_secret.hits.is_empty());
    let by_name = find(
        &store,
        SearchQuery {
            url: Some("[secret:API_KEY]".into()),
            ..Default::default()
        },
    );
    assert_eq!(by_name.hits.len(), 1);
    assert!(!format!("{by_name:?}").contains(SECRET));
}

#[test]
fn search_never_writes_and_sessions_still_verify_intact() {
    let w = world();
    let db = w.store.path().to_path_buf();
    let before = std::fs::read(&db).unwrap();
    let wal = db.with_extension("db-wal");
    let wal_before = std::fs::read(&wal).ok();
    find(
        &w.store,
        SearchQuery {
            host: Some("*.example.com".into()),
            ..Default::default()
        },
    );
    assert_eq!(std::fs::read(&db).unwrap(), before);
    assert_eq!(std::fs::read(&wal).ok(), wal_before);
    let key = w._env.key.clone();
    for id in [&w.run, &w.proxy, &w.live] {
        let report = w
            .store
            .verify(id, &TrustAnchor::KeyFile(key.clone()))
            .unwrap();
        assert!(report.is_intact(), "{report:#?}");
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The legacy fixture (recorded before search existed) beside a session
/// recorded now.
fn legacy_and_new(drop_index_tables: bool) -> (Env, SessionId) {
    let e = env();
    let store = e.store();
    let sql = std::fs::read_to_string(fixture("legacy_session.sql")).unwrap();
    let raw = e.raw();
    raw.execute_batch(&sql).expect("load the fixture");
    let new = record(&store, SessionMode::Run, vec![dns("api.example.com")]);
    drop(store);
    if drop_index_tables {
        // As in a database no version with search ever opened.
        raw.execute_batch("DROP TABLE event_terms; DROP TABLE search_indexed;")
            .unwrap();
    }
    (e, new)
}

#[test]
fn sessions_recorded_before_the_index_are_scanned_and_found_the_same_way() {
    let (e, new) = legacy_and_new(false);
    let store = AuditStore::open_readonly(&e.db).unwrap();
    let legacy = store.resolve_session("01a210fef705dd71").unwrap();
    let found = find(
        &store,
        SearchQuery {
            host: Some("api.example.com".into()),
            ..Default::default()
        },
    );
    assert_eq!(found.scanned_sessions, 1);
    let sessions: Vec<&SessionId> = found.hits.iter().map(|h| &h.session).collect();
    assert_eq!(sessions.iter().filter(|s| ***s == legacy).count(), 3);
    assert_eq!(sessions.iter().filter(|s| ***s == new).count(), 1);
    let renamed = hits(
        &store,
        SearchQuery {
            file: Some("/work/final.txt".into()),
            ..Default::default()
        },
    );
    assert_eq!(renamed, vec![(legacy.clone(), EventKind::File)]);
    let make = hits(
        &store,
        SearchQuery {
            command: Some("make test".into()),
            ..Default::default()
        },
    );
    assert_eq!(
        make,
        vec![
            (legacy.clone(), EventKind::Exec),
            (legacy.clone(), EventKind::Exec)
        ]
    );
    let verified = store
        .verify(
            &legacy,
            &TrustAnchor::KeyFile(fixture("legacy_session.pub")),
        )
        .unwrap();
    assert!(verified.is_intact(), "{verified:#?}");
}

#[test]
fn a_database_without_the_index_tables_is_searched_by_scanning_every_session() {
    let (e, _new) = legacy_and_new(true);
    let store = AuditStore::open_readonly(&e.db).unwrap();
    let found = find(
        &store,
        SearchQuery {
            host: Some("api.example.com".into()),
            ..Default::default()
        },
    );
    assert_eq!(found.scanned_sessions, 2);
    assert_eq!(found.hits.len(), 4);
}

/// The index is outside the chain, so `verify` compares it with the events:
/// rows deleted (to hide an event from search), changed (to misplace it) or
/// added (to point a search at the wrong event) make the session tampered,
/// at the seq of the event whose rows no longer match.
#[test]
fn verify_catches_an_index_edited_to_hide_or_misplace_an_event() {
    let edits = [
        (
            "deleted",
            "DELETE FROM event_terms WHERE host = 'com.pastebin'",
        ),
        (
            "changed",
            "UPDATE event_terms SET host = 'com.example.innocent' WHERE host = 'com.pastebin'",
        ),
        (
            "added",
            "INSERT INTO event_terms (sid, seq, ts_us, kind, host)
             SELECT sid, seq, ts_us, kind, 'com.example.decoy' FROM event_terms
             WHERE host = 'com.pastebin'",
        ),
    ];
    for (what, sql) in edits {
        let w = world();
        let pastebin = SearchQuery {
            host: Some("pastebin.com".into()),
            ..Default::default()
        };
        assert_eq!(
            hits(&w.store, pastebin.clone()),
            [(w.proxy.clone(), EventKind::Http)]
        );
        let changed = w._env.raw().execute(sql, []).unwrap();
        assert_eq!(changed, 1, "{what}");
        let trust = TrustAnchor::KeyFile(w._env.key.clone());
        let report = w.store.verify(&w.proxy, &trust).unwrap();
        assert_eq!(
            report.outcome,
            airlock_auditor::VerifyOutcome::Tampered,
            "{what}: {report:#?}"
        );
        assert_eq!(
            report.first_bad_seq,
            Some(airlock_auditor::Seq(2)),
            "{what}: {report:#?}"
        );
        assert!(
            report.problems[0].contains("search index"),
            "{what}: {report:#?}"
        );
        for id in [&w.run, &w.live] {
            assert!(w.store.verify(id, &trust).unwrap().is_intact(), "{what}");
        }
    }
}

/// A session being recorded grows its index with its events: verifying it
/// meanwhile says "incomplete", never "tampered".
#[test]
fn a_session_verified_while_it_records_is_incomplete_not_tampered() {
    let env = env();
    let store = env.store();
    let rec = store.begin_session(info(&["agent"])).unwrap();
    let reader = AuditStore::open_readonly(&env.db).unwrap();
    let trust = TrustAnchor::KeyFile(env.key.clone());
    for i in 0..20 {
        rec.record(dns(&format!("host{i}.example.com"))).unwrap();
        rec.record(http(
            i,
            "GET",
            &format!("https://api{i}.example.com/x"),
            "allow",
        ))
        .unwrap();
        if i % 5 == 0 {
            rec.sync().unwrap();
        }
        let report = reader.verify(rec.session_id(), &trust).unwrap();
        assert_eq!(
            report.outcome,
            airlock_auditor::VerifyOutcome::Incomplete,
            "{report:#?}"
        );
    }
    let id = rec.session_id().clone();
    rec.finish(SessionEnd::default()).unwrap();
    assert!(reader.verify(&id, &trust).unwrap().is_intact());
}

/// What an engine must honour for label and node filters, which are
/// resolved above it into `SearchQuery::sessions`: only those sessions,
/// indexed or scanned, none for an empty set, an id no session has
/// ignored, and with `session` too only a session in both.
#[test]
fn a_search_keeps_to_the_set_of_sessions_it_is_given_indexed_or_scanned() {
    let (e, new) = legacy_and_new(false);
    let store = AuditStore::open_readonly(&e.db).unwrap();
    let legacy = store.resolve_session("01a210fef705dd71").unwrap();
    let within = |sessions: Vec<SessionId>, session: Option<&str>| {
        let found = find(
            &store,
            SearchQuery {
                host: Some("api.example.com".into()),
                sessions: Some(sessions),
                session: session.map(Into::into),
                ..Default::default()
            },
        );
        let mut ids: Vec<SessionId> = found.hits.into_iter().map(|h| h.session).collect();
        ids.dedup();
        (ids, found.scanned_sessions)
    };
    assert_eq!(within(vec![new.clone()], None), (vec![new.clone()], 0));
    assert_eq!(
        within(vec![legacy.clone()], None),
        (vec![legacy.clone()], 1)
    );
    let (both, scanned) = within(vec![legacy.clone(), new.clone()], None);
    assert_eq!((both.len(), scanned), (2, 1), "{both:?}");
    assert_eq!(within(vec![], None), (vec![], 0));
    let nobody = SessionId::from_stored("ffffffffffffffffffffffffffffffff".into());
    assert_eq!(
        within(vec![nobody, new.clone()], None),
        (vec![new.clone()], 0)
    );
    assert_eq!(
        within(vec![new.clone()], Some(&legacy.as_str()[..16])),
        (vec![], 0)
    );
    assert_eq!(
        within(vec![legacy.clone(), new.clone()], Some(new.as_str())),
        (vec![new], 0)
    );
}
