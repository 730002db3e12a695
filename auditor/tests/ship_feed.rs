//! The live shipper fed by its recorder in memory (`--audit-ship`), on a
//! real PostgreSQL server: what it stores is exactly what a shipper reading
//! the local record stores, it takes the feed whenever it keeps up, and
//! whatever it missed (rows recorded before it started, a store that was
//! down, a feed that overflowed) it reads from the local record, each
//! event exactly once.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use airlock_auditor::postgres::PgStore;
use airlock_auditor::ship::{ShipDestination, ShipFeed, ShipProgress, ShipReport, Shipper};
use airlock_auditor::sqlite::SqliteStore;
use airlock_auditor::{
    FileOp, OutputStream, RecordStore, SessionEnd, SessionId, SessionRecorder, SigningKeySource,
    TrustAnchor, Verdict, VerifyOutcome,
};
use airlock_test_support::audit_store::{Env, dns, env, exec, file, http_exchange, info, output};
use airlock_test_support::postgres::PgServer;

/// A node recording one session, and a shipper following its record into
/// `pg`, fed by the session's recorder.
struct Node {
    env: Env,
    local: SqliteStore,
    rec: SessionRecorder,
    progress: Arc<ShipProgress>,
    shipper: Option<JoinHandle<ShipReport>>,
}

impl Node {
    fn recording() -> Self {
        let env = env();
        let local = SqliteStore::open(&env.db, SigningKeySource::KeyFile(env.key.clone())).unwrap();
        let rec = local.begin_session(info(&["sh", "agent.sh"])).unwrap();
        Self {
            env,
            local,
            rec,
            progress: Arc::new(ShipProgress::default()),
            shipper: None,
        }
    }

    /// Starts the fed shipper (as `--audit-ship` does).
    fn ship_to(&mut self, pg: &PgServer) {
        let feed = Arc::new(ShipFeed::default());
        self.rec.feed(feed.clone());
        let url = pg.url();
        let shipper = Shipper::new(
            SqliteStore::open_for_shipping(&self.env.db).unwrap(),
            Box::new(move || Ok(Box::new(PgStore::open(&url)?) as Box<dyn ShipDestination>)),
            self.progress.clone(),
        )
        .with_linger(Duration::from_millis(20))
        .with_feed(feed);
        self.shipper = Some(std::thread::spawn(move || shipper.follow()));
    }

    fn id(&self) -> SessionId {
        self.rec.session_id().clone()
    }

    /// Records `n` events of every kind that ships something of its own
    /// (search terms, file contents), a commit every few events.
    fn record_mix(&self, from: usize, n: usize) {
        for i in from..from + n {
            let event = match i % 6 {
                0 => exec(&format!("e{i}"), Some("e1"), &["curl", "-s", "https://x"]),
                1 => dns(&format!("a{i}.example.com")),
                2 => http_exchange(
                    i as u64,
                    "POST",
                    &format!("https://api.example.com/v1/items/{i}"),
                    Some(201),
                    Verdict::Allow,
                ),
                3 => file(
                    &format!("/work/out/{i}.txt"),
                    FileOp::Create,
                    Some(format!("content of file {i}\n").as_bytes()),
                ),
                4 => file("/work/a", FileOp::Rename, None),
                _ => output(OutputStream::Stdout, format!("line {i}\n").as_bytes()),
            };
            self.rec.record(event).unwrap();
            if i % 7 == 0 {
                self.rec.sync().unwrap();
            }
        }
    }

    /// Ends the session and stops the shipper once it shipped it all.
    fn finish(mut self) -> (Env, SqliteStore, SessionId, ShipReport) {
        let id = self.id();
        self.rec.finish(SessionEnd::default()).unwrap();
        self.progress.stop(Instant::now() + Duration::from_secs(30));
        let report = self.shipper.take().unwrap().join().unwrap();
        (self.env, self.local, id, report)
    }
}

/// Every row of the central store, as text, in a stable order: what two
/// stores must hold alike.
fn dump(pg: &PgServer) -> Vec<String> {
    [
        "SELECT id, started_us, md5(info_json), encode(public_key, 'hex'), key_fingerprint,
                ended_us, md5(end_json), final_seq FROM sessions ORDER BY id",
        "SELECT seq, ts_us, kind, exec_id, md5(payload), encode(hash, 'hex') FROM events ORDER BY seq",
        "SELECT seq, part, ts_us, kind, host, method, verdict, url, path, command
           FROM event_terms ORDER BY seq, part",
        "SELECT seq, encode(hash, 'hex'), is_final, encode(signature, 'hex')
           FROM checkpoints ORDER BY seq, is_final",
        "SELECT sha256, size, md5(data) FROM contents ORDER BY sha256",
    ]
    .iter()
    .map(|sql| pg.psql(sql))
    .collect()
}

/// The central copy verifies against the node's enrolled key.
fn assert_intact(pg: &PgServer, env: &Env, id: &SessionId) {
    let key = airlock_auditor::load_public_key(&env.key).unwrap();
    PgStore::open(&pg.url())
        .unwrap()
        .enroll(&key, Some("node-a"))
        .unwrap();
    let central = airlock_auditor::open_store(
        std::path::Path::new(&pg.url()),
        airlock_auditor::Access::ReadOnly,
    )
    .unwrap();
    let r = central.verify(id, &TrustAnchor::None).unwrap();
    assert_eq!(r.outcome, VerifyOutcome::Intact, "{r:#?}");
}

/// How many events the node's record holds (one session).
fn local_events(env: &Env) -> u64 {
    let n: i64 = env
        .raw()
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    n as u64
}

/// Every event the node recorded is in `pg` exactly once, seq 1 to the
/// last with no gap, and the central copy verifies.
fn assert_every_event_once(pg: &PgServer, env: &Env, id: &SessionId, report: &ShipReport) {
    assert_eq!(report.events, local_events(env), "{report:?}");
    let seqs = pg.psql("SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM events");
    assert_eq!(seqs, format!("{0}|{0}|1|{0}", report.events));
    assert_intact(pg, env, id);
}

#[test]
fn a_fed_shipper_stores_exactly_the_rows_a_shipper_reading_the_record_stores() {
    let fed = PgServer::start();
    let mut node = Node::recording();
    node.ship_to(&fed);
    node.record_mix(0, 3000);
    let (env, local, id, report) = node.finish();
    // Every event went once, and (keeping up) nearly all from memory.
    assert_eq!(report.events, local_events(&env), "{report:?}");
    assert!(report.fed * 10 >= report.events * 9, "{report:?}");
    // The same record, shipped by reading it back.
    let read = PgServer::start();
    airlock_auditor::ship::ship_all(&local, &PgStore::open(&read.url()).unwrap()).unwrap();
    let (from_feed, from_record) = (dump(&fed), dump(&read));
    for (a, b) in from_feed.iter().zip(&from_record) {
        assert_eq!(a, b);
    }
    assert!(from_feed[4].lines().count() >= 500, "file contents shipped");
    assert_intact(&fed, &env, &id);
}

#[test]
fn a_shipper_started_mid_session_reads_what_came_before_and_takes_the_feed_after() {
    let pg = PgServer::start();
    let mut node = Node::recording();
    node.record_mix(0, 1500);
    node.rec.sync().unwrap();
    node.ship_to(&pg);
    node.record_mix(1500, 1500);
    let (env, _local, id, report) = node.finish();
    assert!(report.fed > 0 && report.fed < report.events, "{report:?}");
    assert_every_event_once(&pg, &env, &id, &report);
}

#[test]
fn a_store_down_while_the_feed_overflows_loses_and_repeats_no_event() {
    let pg = PgServer::start();
    let mut node = Node::recording();
    node.ship_to(&pg);
    node.record_mix(0, 600);
    node.rec.sync().unwrap();
    pg.kill9();
    // More than the feed holds (16 MiB) while nobody takes it.
    let big = vec![b'z'; 1 << 20];
    for i in 0..24 {
        node.rec
            .record(file(&format!("/work/big{i}"), FileOp::Create, Some(&big)))
            .unwrap();
        node.record_mix(1000 + i * 50, 50);
    }
    node.rec.sync().unwrap();
    pg.restart();
    node.record_mix(5000, 600);
    let (env, _local, id, report) = node.finish();
    assert_every_event_once(&pg, &env, &id, &report);
}
