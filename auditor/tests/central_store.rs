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

/// Row counts of every table of the central store, by table.
fn counts(pg: &PgServer) -> BTreeMap<&'static str, i64> {
    [
        "sessions",
        "events",
        "checkpoints",
        "contents",
        "event_terms",
    ]
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
    [
        "sessions",
        "events",
        "checkpoints",
        "contents",
        "event_terms",
    ]
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
    let rec = local.begin_session(info(&["sh"])).unwrap();
    let id = rec.session_id().clone();
    for i in 0..10 {
        rec.record(dns(&format!("a{i}.example.com"))).unwrap();
    }
    rec.sync().unwrap();
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
    let rec = local.begin_session(info(&["sh"])).unwrap();
    let id = rec.session_id().clone();
    for i in 0..50 {
        rec.record(dns(&format!("a{i}.example.com"))).unwrap();
    }
    rec.sync().unwrap();
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
