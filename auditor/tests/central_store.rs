//! The central store on a real PostgreSQL server (test-support's
//! `PgServer`): shipping is exactly once whatever is retried, raced or
//! restarted, and reaching the store never shows its password.

use std::collections::BTreeMap;

use airlock_auditor::postgres::PgStore;
use airlock_auditor::ship::{ShipDestination, Shipped, ship_all, ship_session};
use airlock_auditor::sqlite::SqliteStore;
use airlock_auditor::{AuditError, FileOp, RecordStore, SessionEnd, SessionId, SigningKeySource};
use airlock_test_support::audit_store::{dns, env, file, info};
use airlock_test_support::postgres::PgServer;

/// A node's local record: an SQLite store with its own key.
fn node() -> (airlock_test_support::audit_store::Env, SqliteStore) {
    let env = env();
    let store = SqliteStore::open(&env.db, SigningKeySource::KeyFile(env.key.clone())).unwrap();
    (env, store)
}

/// A finished session of `n` DNS events and one file write.
fn session(store: &SqliteStore, n: usize) -> SessionId {
    let rec = store.begin_session(info(&["python3", "x.py"])).unwrap();
    rec.record(file("/work/a.txt", FileOp::Create, Some(b"hello")))
        .unwrap();
    for i in 0..n {
        rec.record(dns(&format!("h{i}.example.com"))).unwrap();
    }
    let id = rec.session_id().clone();
    rec.finish(SessionEnd {
        exit_status: Some(0),
        ..SessionEnd::default()
    })
    .unwrap();
    id
}

/// A running session of `n` DNS events, all committed, and its id.
fn running(store: &SqliteStore, n: usize) -> (airlock_auditor::SessionRecorder, SessionId) {
    let rec = store.begin_session(info(&["sh"])).unwrap();
    for i in 0..n {
        rec.record(dns(&format!("a{i}.example.com"))).unwrap();
    }
    rec.sync().unwrap();
    let id = rec.session_id().clone();
    (rec, id)
}

/// The tables a shipped record fills.
const TABLES: [&str; 5] = [
    "sessions",
    "events",
    "checkpoints",
    "contents",
    "event_terms",
];

/// Row counts of every table of the central store, by table.
fn counts(pg: &PgServer) -> BTreeMap<&'static str, i64> {
    TABLES
        .into_iter()
        .map(|t| {
            (
                t,
                pg.psql(&format!("SELECT count(*) FROM {t}"))
                    .parse()
                    .unwrap(),
            )
        })
        .collect()
}

/// The same counts in the node's SQLite file.
fn local_counts(env: &airlock_test_support::audit_store::Env) -> BTreeMap<&'static str, i64> {
    let raw = env.raw();
    TABLES
        .into_iter()
        .map(|t| {
            (
                t,
                raw.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                    .unwrap(),
            )
        })
        .collect()
}

#[test]
fn shipping_a_record_twice_stores_every_row_once() {
    let pg = PgServer::start();
    let (env, local) = node();
    let a = session(&local, 2500);
    session(&local, 3);
    let central = PgStore::open(&pg.url()).unwrap();
    let first = ship_all(&local, &central).unwrap();
    assert_eq!(first.sessions, 2);
    assert_eq!(first.events, 2501 + 4, "{first:?}");
    assert!(first.batches >= 4, "2501 events go in batches: {first:?}");
    assert_eq!(counts(&pg), local_counts(&env));
    let again = ship_all(&local, &central).unwrap();
    assert_eq!(again.events, 0, "{again:?}");
    assert_eq!(counts(&pg), local_counts(&env));
    // The same batches sent again by a shipper that trusts its memory, not
    // the store: nothing is added.
    let batch = local
        .ship_batch(&a, Shipped::default(), 100_000)
        .unwrap()
        .unwrap();
    central.ship(&batch).unwrap();
    central.ship(&batch).unwrap();
    assert_eq!(counts(&pg), local_counts(&env));
    assert_eq!(
        central.shipped(&a).unwrap(),
        Shipped {
            up_to: Some(airlock_auditor::Seq(2501)),
            ended: true
        }
    );
}

#[test]
fn a_running_session_ships_as_it_goes_and_its_end_once_it_ended() {
    let pg = PgServer::start();
    let (env, local) = node();
    let central = PgStore::open(&pg.url()).unwrap();
    let rec = local.begin_session(info(&["sh"])).unwrap();
    let id = rec.session_id().clone();
    assert_eq!(central.shipped(&id).unwrap(), Shipped::default());
    for i in 0..5 {
        rec.record(dns(&format!("a{i}.example.com"))).unwrap();
    }
    rec.sync().unwrap();
    ship_session(&local, &id, &central).unwrap();
    let at = central.shipped(&id).unwrap();
    assert_eq!(at.up_to, Some(airlock_auditor::Seq(5)));
    assert!(!at.ended);
    assert_eq!(
        pg.psql("SELECT ended_us IS NULL AND end_json IS NULL AND final_seq IS NULL FROM sessions"),
        "t"
    );
    // Nothing new: nothing to send.
    assert!(local.ship_batch(&id, at, 100).unwrap().is_none());
    for i in 0..5 {
        rec.record(dns(&format!("b{i}.example.com"))).unwrap();
    }
    rec.finish(SessionEnd::default()).unwrap();
    ship_session(&local, &id, &central).unwrap();
    let at = central.shipped(&id).unwrap();
    assert!(at.ended, "{at:?}");
    assert!(local.ship_batch(&id, at, 100).unwrap().is_none());
    assert_eq!(counts(&pg), local_counts(&env));
    let raw = env.raw();
    let (ended_us, end_json, final_seq): (i64, String, i64) = raw
        .query_row(
            "SELECT ended_us, end_json, final_seq FROM sessions",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        pg.psql("SELECT ended_us, end_json, final_seq FROM sessions"),
        format!("{ended_us}|{end_json}|{final_seq}")
    );
}

#[test]
fn a_session_recorded_before_search_existed_ships_its_search_terms_computed_centrally() {
    let pg = PgServer::start();
    let (env, local) = node();
    let id = session(&local, 3);
    // A record from before search: no terms were written as it was recorded.
    env.raw()
        .execute_batch("DROP TABLE event_terms; DROP TABLE search_indexed;")
        .unwrap();
    let central = PgStore::open(&pg.url()).unwrap();
    ship_all(&local, &central).unwrap();
    // One row a DNS event, one for the file write, each with its value.
    assert_eq!(
        pg.psql("SELECT string_agg(seq || ':' || part || ':' || kind || ':' || coalesce(host, path), ',' ORDER BY seq) FROM event_terms"),
        "1:0:file:/work/a.txt,2:0:dns:com.example.h0,3:0:dns:com.example.h1,4:0:dns:com.example.h2"
    );
    let query = airlock_auditor::SearchQuery {
        host: Some("h1.example.com".into()),
        ..Default::default()
    };
    let hits = central.search(&query).unwrap().hits;
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].session, id);
}

#[test]
fn a_sessions_end_is_written_once_and_never_overwritten() {
    let pg = PgServer::start();
    let (_env, local) = node();
    let id = session(&local, 3);
    let central = PgStore::open(&pg.url()).unwrap();
    ship_all(&local, &central).unwrap();
    let before = pg.psql("SELECT ended_us, end_json, final_seq FROM sessions");
    let mut forged = local
        .ship_batch(&id, Shipped::default(), 100)
        .unwrap()
        .unwrap();
    forged.row.ended_us = Some(1);
    forged.row.end_json = Some("{\"exit_status\":99}".into());
    forged.row.final_seq = Some(2);
    central.ship(&forged).unwrap();
    assert_eq!(
        pg.psql("SELECT ended_us, end_json, final_seq FROM sessions"),
        before
    );
}

#[test]
fn a_batch_claiming_a_held_session_with_another_key_or_start_is_refused() {
    let pg = PgServer::start();
    let (_env, local) = node();
    let id = session(&local, 3);
    let central = PgStore::open(&pg.url()).unwrap();
    let batch = local
        .ship_batch(&id, Shipped::default(), 100)
        .unwrap()
        .unwrap();
    central.ship(&batch).unwrap();
    let before = counts(&pg);
    let (_env2, other) = node();
    let mut forged = other
        .ship_batch(&session(&other, 3), Shipped::default(), 100)
        .unwrap()
        .unwrap();
    forged.session = id.clone();
    let mut started = batch.clone();
    started.row.started_us += 1;
    let mut relabelled = batch.clone();
    relabelled.row.info_json = relabelled.row.info_json.replace("testhost", "otherhost");
    for forged in [forged, started, relabelled] {
        let e = central.ship(&forged).unwrap_err();
        assert!(matches!(e, AuditError::Central(_)), "{e:?}");
        assert!(e.to_string().contains("refusing to merge"), "{e}");
    }
    assert_eq!(counts(&pg), before);
}

#[test]
fn a_batch_that_would_leave_a_gap_is_refused() {
    let pg = PgServer::start();
    let (_env, local) = node();
    let (rec, id) = running(&local, 10);
    let central = PgStore::open(&pg.url()).unwrap();
    let first = local
        .ship_batch(&id, Shipped::default(), 3)
        .unwrap()
        .unwrap();
    central.ship(&first).unwrap();
    let skipped = local
        .ship_batch(
            &id,
            Shipped {
                up_to: Some(airlock_auditor::Seq(6)),
                ended: false,
            },
            3,
        )
        .unwrap()
        .unwrap();
    let e = central.ship(&skipped).unwrap_err();
    assert!(e.to_string().contains("begins at event 7"), "{e}");
    assert_eq!(pg.psql("SELECT max(seq) FROM events"), "3");
    rec.finish(SessionEnd::default()).unwrap();
}

#[test]
fn shippers_racing_on_the_same_sessions_store_every_event_exactly_once() {
    let pg = PgServer::start();
    let (env, local) = node();
    let ids: Vec<SessionId> = (0..3).map(|_| session(&local, 1500)).collect();
    let local = &local;
    let ids = &ids;
    let url = pg.url();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let url = url.clone();
            s.spawn(move || {
                // A store (and connection) of its own per shipper.
                let central = PgStore::open(&url).unwrap();
                for id in ids {
                    ship_session(local, id, &central).unwrap();
                }
            });
        }
    });
    assert_eq!(counts(&pg), local_counts(&env));
    assert_eq!(
        pg.psql("SELECT count(*) FROM (SELECT sid, seq FROM events GROUP BY sid, seq HAVING count(*) > 1) d"),
        "0"
    );
    assert_eq!(
        pg.psql("SELECT count(*) FROM sessions WHERE ended_us IS NULL"),
        "0"
    );
}

#[test]
fn a_shipper_resumes_exactly_where_the_store_stood_after_postgres_was_killed_and_restarted() {
    let pg = PgServer::start();
    let (env, local) = node();
    let (rec, id) = running(&local, 50);
    let central = PgStore::open(&pg.url()).unwrap();
    ship_session(&local, &id, &central).unwrap();
    pg.kill9();
    for i in 0..50 {
        rec.record(dns(&format!("b{i}.example.com"))).unwrap();
    }
    rec.finish(SessionEnd::default()).unwrap();
    let down = ship_session(&local, &id, &central).unwrap_err();
    let text = down.to_string();
    assert!(!text.contains(pg.password()), "{text}");
    pg.restart();
    // The same store value: its lost connection is opened again.
    ship_session(&local, &id, &central).unwrap();
    assert_eq!(counts(&pg), local_counts(&env));
    assert!(central.shipped(&id).unwrap().ended);
}

/// Every way of failing to reach the store: one line naming the problem
/// and the fix, and never the password.
#[test]
fn reaching_the_store_fails_with_the_problem_and_its_fix_and_never_the_password() {
    let pg = PgServer::start();
    let password = pg.password().to_string();
    let port = pg.port();
    let wrong_password = pg.url().replace(&password, "not-the-password");
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cases = [
        (
            wrong_password.clone(),
            "refused the password for role \"airlock\"",
        ),
        (
            pg.url()
                .replace(&format!(":{port}/"), &format!(":{closed_port}/")),
            "cannot reach the server",
        ),
        (
            pg.url().replace("/airlock?", "/nosuchdb?"),
            "has no database \"nosuchdb\"",
        ),
        (
            pg.url().replace("?sslmode=disable", ""),
            "does not offer TLS and sslmode=verify-full requires it",
        ),
        (
            pg.url().replace("sslmode=disable", "sslmode=require"),
            "does not offer TLS and sslmode=require requires it",
        ),
        (
            pg.url().replace("sslmode=disable", "sslmode=verify-ca"),
            "invalid sslmode \"verify-ca\"",
        ),
    ];
    for (url, problem) in &cases {
        let e = PgStore::open(url).unwrap_err().to_string();
        assert!(e.contains(problem), "{url}: {e}");
        assert!(!e.contains(&password), "{e}");
        assert!(!e.contains("not-the-password"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
    // sslmode=prefer falls back to plain, as libpq's does.
    PgStore::open(&pg.url().replace("sslmode=disable", "sslmode=prefer")).unwrap();
    // A server that went down.
    let central = PgStore::open(&pg.url()).unwrap();
    pg.kill9();
    let e = central
        .shipped(&SessionId::from_stored("00".into()))
        .unwrap_err();
    let text = e.to_string();
    assert!(!text.contains(&password), "{text}");
    let e = PgStore::open(&pg.url()).unwrap_err().to_string();
    assert!(e.contains("cannot reach the server"), "{e}");
    assert!(!e.contains(&password), "{e}");
}

#[test]
fn the_password_may_come_from_a_file_or_the_environment_instead_of_the_url() {
    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, format!("{}\n", pg.password())).unwrap();
    // Setting this process's environment races the other tests' threads:
    // a child run of this test binary gets it instead.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "password_from_the_environment_child",
            "--ignored",
            "--nocapture",
        ])
        .env("AIRLOCK_TEST_PG_URL", pg.url_without_password())
        .env("AIRLOCK_AUDIT_DB_PASSWORD_FILE", &file)
        .env_remove("PGPASSWORD")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "password_from_the_environment_child",
            "--ignored",
            "--nocapture",
        ])
        .env("AIRLOCK_TEST_PG_URL", pg.url_without_password())
        .env("PGPASSWORD", pg.password())
        .env_remove("AIRLOCK_AUDIT_DB_PASSWORD_FILE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Run by the test above in a child with the environment set.
#[test]
#[ignore = "run by the_password_may_come_from_a_file_or_the_environment_instead_of_the_url"]
fn password_from_the_environment_child() {
    // Run alone (--run-ignored), it has no server to reach.
    if let Ok(url) = std::env::var("AIRLOCK_TEST_PG_URL") {
        PgStore::open(&url).unwrap();
    }
}

#[test]
fn tls_is_verified_by_default_and_sslmode_says_how_much_to_check() {
    let pki = airlock_test_support::pki::TestPki::new();
    let (cert, key) = pki.cert_and_key_pem(&["127.0.0.1"]);
    let pg = PgServer::start_tls(&cert, &key);
    let base = pg.url().replace("?sslmode=disable", "");
    let ca = pki.ca_pem.display().to_string();
    // The server's CA named: verified, and the connection is encrypted.
    let central = PgStore::open(&format!("{base}?sslrootcert={ca}")).unwrap();
    assert_eq!(
        central
            .shipped(&SessionId::from_stored("00".into()))
            .unwrap(),
        Shipped::default()
    );
    assert_eq!(
        pg.psql("SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE s.ssl AND a.application_name = 'airlock'"),
        "1"
    );
    // Not named: the default (verify-full) refuses a server it cannot
    // vouch for, and says how to name its CA.
    let e = PgStore::open(&base).unwrap_err().to_string();
    assert!(
        e.contains("certificate does not verify") && e.contains("sslrootcert"),
        "{e}"
    );
    assert!(!e.contains(pg.password()), "{e}");
    // A CA that did not sign it.
    let other = airlock_test_support::pki::TestPki::new();
    let e = PgStore::open(&format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        other.ca_pem.display()
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("certificate does not verify"), "{e}");
    // require encrypts without checking who the server is.
    PgStore::open(&format!("{base}?sslmode=require")).unwrap();
    // The certificate names another host than the URL's.
    let e = PgStore::open(&format!(
        "{}?sslrootcert={ca}",
        base.replace("127.0.0.1", "localhost")
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("certificate does not verify"), "{e}");
}

/// A node's record shipped whole, the central store opened as readers open
/// it, and the node's key enrolled.
struct Shipped1 {
    pg: PgServer,
    env: airlock_test_support::audit_store::Env,
    local: SqliteStore,
    central: airlock_auditor::AuditStore,
    ids: Vec<SessionId>,
}

fn shipped_record() -> Shipped1 {
    let pg = PgServer::start();
    let (env, local) = node();
    let mut ids = vec![session(&local, 40)];
    let rec = local.begin_session(info(&["curl", "x"])).unwrap();
    rec.record(airlock_test_support::audit_store::http_exchange(
        1,
        "GET",
        "https://api.example.com/v1/things",
        Some(200),
        airlock_auditor::Verdict::Allow,
    ))
    .unwrap();
    rec.record(file("/work/out/b.txt", FileOp::Create, Some(b"bee")))
        .unwrap();
    rec.record(dns("example.org")).unwrap();
    ids.push(rec.session_id().clone());
    rec.finish(SessionEnd::default()).unwrap();
    let writer = PgStore::open(&pg.url()).unwrap();
    ship_all(&local, &writer).unwrap();
    let key = airlock_auditor::load_public_key(&env.key).unwrap();
    writer.enroll(&key, Some("node-a")).unwrap();
    let central = airlock_auditor::open_store(
        std::path::Path::new(&pg.url()),
        airlock_auditor::Access::ReadOnly,
    )
    .unwrap();
    Shipped1 {
        pg,
        env,
        local,
        central,
        ids,
    }
}

#[test]
fn every_reader_reads_the_shipped_copy_as_it_reads_the_nodes_record() {
    let s = shipped_record();
    let local: &dyn RecordStore = &s.local;
    let central: &dyn RecordStore = &s.central;
    assert_eq!(central.sessions().unwrap(), local.sessions().unwrap());
    for id in &s.ids {
        assert_eq!(central.session(id).unwrap(), local.session(id).unwrap());
        assert_eq!(
            central.events(id, None).unwrap(),
            local.events(id, None).unwrap()
        );
        assert_eq!(
            central
                .events(id, Some(&[airlock_auditor::EventKind::Dns]))
                .unwrap(),
            local
                .events(id, Some(&[airlock_auditor::EventKind::Dns]))
                .unwrap()
        );
        assert_eq!(
            central.events_after(id, airlock_auditor::Seq(2)).unwrap(),
            local.events_after(id, airlock_auditor::Seq(2)).unwrap()
        );
        for n in [4, 12, id.as_str().len()] {
            let prefix = &id.as_str()[..n];
            assert_eq!(
                format!("{:?}", central.resolve_session(prefix)),
                format!("{:?}", local.resolve_session(prefix))
            );
        }
        assert_eq!(central.resolve_session(id.as_str()).unwrap(), *id);
    }
    let sha = airlock_test_support::disk::sha256_hex(b"bee");
    assert_eq!(central.content(&sha).unwrap().as_deref(), Some(&b"bee"[..]));
    let q = |f: fn(&mut airlock_auditor::SearchQuery)| {
        let mut q = airlock_auditor::SearchQuery::default();
        f(&mut q);
        q
    };
    let queries = [
        q(|q| q.host = Some("api.example.com".into())),
        q(|q| q.host = Some("*.example.com".into())),
        q(|q| q.host = Some("EXAMPLE.org".into())),
        q(|q| q.file = Some("/work/".into())),
        q(|q| q.file = Some("b.txt".into())),
        q(|q| q.file = Some("/work/a.txt".into())),
        q(|q| q.url = Some("/v1/".into())),
        q(|q| q.method = Some("get".into())),
        q(|q| q.verdict = Some("allow".into())),
        q(|q| {
            q.verdict = Some("allow".into());
            q.since_us = Some(0);
            q.until_us = Some(i64::MAX);
        }),
        airlock_auditor::SearchQuery {
            host: Some("*.example.com".into()),
            session: Some(s.ids[1].to_string()),
            ..Default::default()
        },
        // The set --label and --node resolve to: both sessions wrote under
        // /work/, only the one in the set is found.
        airlock_auditor::SearchQuery {
            file: Some("/work/".into()),
            sessions: Some(vec![s.ids[0].clone()]),
            ..Default::default()
        },
        airlock_auditor::SearchQuery {
            file: Some("/work/".into()),
            sessions: Some(vec![s.ids[0].clone(), s.ids[1].clone()]),
            session: Some(s.ids[1].to_string()),
            ..Default::default()
        },
    ];
    for query in &queries {
        let want = local.search(query).unwrap();
        assert!(!want.hits.is_empty(), "{query:?} finds something locally");
        assert_eq!(central.search(query).unwrap(), want, "{query:?}");
    }
    // An empty set (a label no session carries) matches nothing.
    let nobody = airlock_auditor::SearchQuery {
        file: Some("/work/".into()),
        sessions: Some(Vec::new()),
        ..Default::default()
    };
    assert!(local.search(&nobody).unwrap().hits.is_empty());
    assert!(central.search(&nobody).unwrap().hits.is_empty());
    // Verified against the enrolled key: intact, as on the node.
    for id in &s.ids {
        let r = central
            .verify(id, &airlock_auditor::TrustAnchor::None)
            .unwrap();
        assert_eq!(r.outcome, airlock_auditor::VerifyOutcome::Intact, "{r:#?}");
        assert_eq!(
            r.key_trust,
            airlock_auditor::KeyTrust::Enrolled {
                node: Some("node-a".into())
            }
        );
        let l = local
            .verify(
                id,
                &airlock_auditor::TrustAnchor::KeyFile(s.env.key.clone()),
            )
            .unwrap();
        assert_eq!(
            (r.events, r.verified_through),
            (l.events, l.verified_through)
        );
    }
    // A reader never writes, and cannot record.
    let e = central
        .begin_session(info(&["sh"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--audit-ship"), "{e}");
    assert!(!e.contains(s.pg.password()), "{e}");
}

#[test]
fn the_data_version_moves_with_every_shipped_batch_and_key_change() {
    let s = shipped_record();
    let v0 = s.central.data_version().unwrap();
    assert_eq!(
        s.central.data_version().unwrap(),
        v0,
        "reading moves nothing"
    );
    let writer = PgStore::open(&s.pg.url()).unwrap();
    session(&s.local, 2);
    ship_all(&s.local, &writer).unwrap();
    let v1 = s.central.data_version().unwrap();
    assert_ne!(v1, v0);
    let fp =
        airlock_auditor::KeyFingerprint::of(&airlock_auditor::load_public_key(&s.env.key).unwrap());
    writer.revoke(&fp.0).unwrap();
    let v2 = s.central.data_version().unwrap();
    assert_ne!(v2, v1);
    writer
        .enroll(&airlock_auditor::load_public_key(&s.env.key).unwrap(), None)
        .unwrap();
    let v3 = s.central.data_version().unwrap();
    assert!(v3 != v2 && v3 != v1, "{v1} {v2} {v3}");
}

#[test]
fn the_store_works_from_a_tokio_runtimes_blocking_threads() {
    let s = shipped_record();
    let central = std::sync::Arc::new(s.central);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ids = s.ids.clone();
    let counts = rt.block_on(async move {
        let mut out = Vec::new();
        for id in ids {
            let central = central.clone();
            out.push(
                tokio::task::spawn_blocking(move || {
                    let n = central.events(&id, None).unwrap().len();
                    central
                        .verify(&id, &airlock_auditor::TrustAnchor::None)
                        .unwrap();
                    n
                })
                .await
                .unwrap(),
            );
        }
        // Dropped inside the runtime's blocking pool too.
        tokio::task::spawn_blocking(move || drop(central))
            .await
            .unwrap();
        out
    });
    assert_eq!(counts, vec![41, 3]);
}

/// Verifies `id` on the central store (enrolled keys) and on the node
/// (its own key).
fn both_verify(
    s: &Shipped1,
    id: &SessionId,
) -> (airlock_auditor::VerifyReport, airlock_auditor::VerifyReport) {
    let central = s
        .central
        .verify(id, &airlock_auditor::TrustAnchor::None)
        .unwrap();
    let local = s
        .local
        .verify(
            id,
            &airlock_auditor::TrustAnchor::KeyFile(s.env.key.clone()),
        )
        .unwrap();
    (central, local)
}

/// Runs `sql` on the central store and on the node's record, its `{sid}`
/// being the session's row in each.
fn tamper_both(s: &Shipped1, id: &SessionId, sql: &str) {
    let pg_sid =
        s.pg.psql(&format!("SELECT sid FROM sessions WHERE id = '{id}'"));
    s.pg.psql(&sql.replace("{sid}", &pg_sid));
    let raw = s.env.raw();
    let local_sid: i64 = raw
        .query_row(
            "SELECT sid FROM sessions WHERE id = ?1",
            [id.as_str()],
            |r| r.get(0),
        )
        .unwrap();
    raw.execute_batch(&sql.replace("{sid}", &local_sid.to_string()))
        .unwrap();
}

#[test]
fn a_row_changed_in_postgres_is_named_as_on_the_node() {
    let s = shipped_record();
    let id = &s.ids[0];
    // seq 9 is the DNS query for h7.example.com.
    tamper_both(
        &s,
        id,
        "UPDATE events SET payload = replace(payload, 'h7.example.com', 'h7.evil.test') WHERE sid = {sid} AND seq = 9",
    );
    let (central, local) = both_verify(&s, id);
    airlock_test_support::audit_store::assert_tampered(&central, 9, "seq 9");
    assert_eq!(central.problems, local.problems);
    assert_eq!(
        central.summary(),
        local.summary().replace(
            "signed by the trusted key",
            "signed by enrolled node key of node-a",
        )
    );
    // A changed file content, the same.
    let id = &s.ids[1];
    tamper_both(&s, id, "UPDATE contents SET data = substr(data, 2)");
    let (central, local) = both_verify(&s, id);
    assert_eq!(central.outcome, airlock_auditor::VerifyOutcome::Tampered);
    assert_eq!(central.problems, local.problems);
    assert_eq!(central.first_bad_seq, local.first_bad_seq);
}

#[test]
fn a_sessions_tail_deleted_in_postgres_is_detected_as_on_the_node() {
    let s = shipped_record();
    let id = &s.ids[0];
    tamper_both(&s, id, "DELETE FROM events WHERE sid = {sid} AND seq > 35");
    let (central, local) = both_verify(&s, id);
    assert_eq!(
        central.outcome,
        airlock_auditor::VerifyOutcome::Tampered,
        "{central:#?}"
    );
    assert_eq!(central.problems, local.problems);
    assert!(
        central.summary().contains("TAMPERED"),
        "{}",
        central.summary()
    );
    // The tail, its final checkpoint and the end all deleted: what is
    // left is a session whose end never arrived, and says so, never intact.
    tamper_both(
        &s,
        id,
        "DELETE FROM checkpoints WHERE sid = {sid} AND is_final; UPDATE sessions SET ended_us = NULL, end_json = NULL, final_seq = NULL WHERE sid = {sid}",
    );
    let (central, _) = both_verify(&s, id);
    assert_ne!(central.outcome, airlock_auditor::VerifyOutcome::Intact);
    assert!(!central.is_intact());
}

#[test]
fn a_session_signed_by_a_key_not_enrolled_or_revoked_is_unverified_never_intact() {
    let s = shipped_record();
    // A second node whose key nobody enrolled.
    let (other_env, other) = node();
    let stranger = session(&other, 3);
    let writer = PgStore::open(&s.pg.url()).unwrap();
    ship_all(&other, &writer).unwrap();
    let fp = airlock_auditor::KeyFingerprint::of(
        &airlock_auditor::load_public_key(&other_env.key).unwrap(),
    )
    .0;
    let r = s
        .central
        .verify(&stranger, &airlock_auditor::TrustAnchor::None)
        .unwrap();
    assert_eq!(
        r.outcome,
        airlock_auditor::VerifyOutcome::Unverified,
        "{r:#?}"
    );
    assert_eq!(r.key_trust, airlock_auditor::KeyTrust::NotEnrolled);
    assert!(!r.is_intact());
    let summary = r.summary();
    assert!(
        summary.contains("UNVERIFIED") && summary.contains(&fp),
        "{summary}"
    );
    assert!(summary.contains("airlock audit keys add"), "{summary}");
    // Even when the caller names that very key as trusted: on a central
    // store trust is enrolment.
    let r = s
        .central
        .verify(
            &stranger,
            &airlock_auditor::TrustAnchor::KeyFile(other_env.key.clone()),
        )
        .unwrap();
    assert_eq!(r.outcome, airlock_auditor::VerifyOutcome::Unverified);
    // Enrolled: intact. Revoked: unverified again, naming the revocation.
    writer
        .enroll(
            &airlock_auditor::load_public_key(&other_env.key).unwrap(),
            Some("node-b"),
        )
        .unwrap();
    assert!(
        s.central
            .verify(&stranger, &airlock_auditor::TrustAnchor::None)
            .unwrap()
            .is_intact()
    );
    writer.revoke(&fp).unwrap();
    let r = s
        .central
        .verify(&stranger, &airlock_auditor::TrustAnchor::None)
        .unwrap();
    assert_eq!(
        r.outcome,
        airlock_auditor::VerifyOutcome::Unverified,
        "{r:#?}"
    );
    assert!(
        r.summary().contains("revoked") && r.summary().contains("node-b"),
        "{}",
        r.summary()
    );
    // Tampering still outranks trust: a changed row of an unenrolled
    // session is tampered, not merely unverified.
    s.pg.psql(&format!(
        "UPDATE events SET ts_us = ts_us + 1 WHERE seq = 2 AND sid = (SELECT sid FROM sessions WHERE id = '{stranger}')"
    ));
    let r = s
        .central
        .verify(&stranger, &airlock_auditor::TrustAnchor::None)
        .unwrap();
    assert_eq!(
        r.outcome,
        airlock_auditor::VerifyOutcome::Tampered,
        "{r:#?}"
    );
    // An unknown fingerprint is refused by name.
    let e = writer.revoke("SHA256:00").unwrap_err().to_string();
    assert!(e.contains("SHA256:00") && e.contains("keys list"), "{e}");
}

#[test]
fn a_session_whose_end_was_never_shipped_is_incomplete_up_to_its_last_shipped_event() {
    let s = shipped_record();
    let rec = s.local.begin_session(info(&["sh"])).unwrap();
    let id = rec.session_id().clone();
    for i in 0..7 {
        rec.record(dns(&format!("c{i}.example.com"))).unwrap();
    }
    rec.sync().unwrap();
    let writer = PgStore::open(&s.pg.url()).unwrap();
    ship_session(&s.local, &id, &writer).unwrap();
    // The node "dies" here: it records more and ends, but ships nothing.
    for i in 0..3 {
        rec.record(dns(&format!("d{i}.example.com"))).unwrap();
    }
    rec.finish(SessionEnd::default()).unwrap();
    let last_ts = s.local.events(&id, None).unwrap()[6].ts_us;
    let r = s
        .central
        .verify(&id, &airlock_auditor::TrustAnchor::None)
        .unwrap();
    assert_eq!(
        r.outcome,
        airlock_auditor::VerifyOutcome::Incomplete,
        "{r:#?}"
    );
    assert!(!r.finished);
    let summary = r.summary();
    assert!(
        summary.contains(&format!(
            "INCOMPLETE: shipped up to event 7 at {}",
            airlock_auditor::humanize::rfc3339(last_ts)
        )),
        "{summary}"
    );
    // Shipped at last: intact.
    ship_session(&s.local, &id, &writer).unwrap();
    assert!(
        s.central
            .verify(&id, &airlock_auditor::TrustAnchor::None)
            .unwrap()
            .is_intact()
    );
}

#[test]
fn a_store_opened_for_reading_never_writes() {
    let pg = PgServer::start();
    let (env, local) = node();
    let id = session(&local, 3);
    PgStore::open(&pg.url()).unwrap();
    let reader = PgStore::open_readonly(&pg.url()).unwrap();
    let batch = local
        .ship_batch(&id, Shipped::default(), 100)
        .unwrap()
        .unwrap();
    let e = reader.ship(&batch).unwrap_err().to_string();
    assert!(e.contains("read-only transaction"), "{e}");
    assert!(
        reader
            .enroll(&airlock_auditor::load_public_key(&env.key).unwrap(), None)
            .is_err()
    );
    assert_eq!(pg.psql("SELECT count(*) FROM sessions"), "0");
    assert_eq!(pg.psql("SELECT count(*) FROM node_keys"), "0");
    // An empty database is not a store yet: a reader says so, and does
    // not create one.
    pg.psql(
        "DROP TABLE meta, sessions, events, checkpoints, contents, event_terms, node_keys CASCADE",
    );
    let e = PgStore::open_readonly(&pg.url()).unwrap_err().to_string();
    assert!(e.contains("holds no airlock record yet"), "{e}");
    assert_eq!(
        pg.psql("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"),
        "0"
    );
}

#[test]
fn shippers_of_different_nodes_at_once_each_store_their_sessions_whole() {
    let pg = PgServer::start();
    // Four nodes whose sessions write the same file contents, so their
    // batches insert the same content keys at the same time.
    let nodes: Vec<_> = (0..4)
        .map(|n| {
            let (env, local) = node();
            let rec = local.begin_session(info(&["sh"])).unwrap();
            for i in 0..300 {
                let name = format!("/work/f{}.txt", (i + n * 7) % 20);
                let body = format!("shared {}", (i * 3 + n) % 20);
                rec.record(file(&name, FileOp::Create, Some(body.as_bytes())))
                    .unwrap();
                rec.record(dns(&format!("n{n}-{i}.example.com"))).unwrap();
            }
            rec.finish(SessionEnd::default()).unwrap();
            (env, local)
        })
        .collect();
    let url = pg.url();
    std::thread::scope(|s| {
        for (_, local) in &nodes {
            let url = url.clone();
            s.spawn(move || {
                let central = PgStore::open(&url).unwrap();
                ship_all(local, &central).unwrap();
            });
        }
    });
    assert_eq!(
        pg.psql("SELECT count(*) FROM sessions WHERE ended_us IS NOT NULL"),
        "4"
    );
    assert_eq!(
        pg.psql("SELECT count(*) FROM events"),
        (4 * 600).to_string()
    );
    let distinct: i64 = nodes
        .iter()
        .map(|(env, _)| {
            env.raw()
                .query_row("SELECT count(*) FROM contents", [], |r| r.get::<_, i64>(0))
                .unwrap()
        })
        .max()
        .unwrap();
    assert_eq!(
        pg.psql("SELECT count(*) FROM contents"),
        distinct.to_string()
    );
    let reader = PgStore::open_readonly(&url).unwrap();
    for summary in reader.sessions().unwrap() {
        let r = reader
            .verify(&summary.id, &airlock_auditor::TrustAnchor::None)
            .unwrap();
        // Chains whole; the keys are not enrolled, so unverified, not intact.
        assert_eq!(
            r.outcome,
            airlock_auditor::VerifyOutcome::Unverified,
            "{r:#?}"
        );
        assert_eq!(r.events, 600);
    }
}
