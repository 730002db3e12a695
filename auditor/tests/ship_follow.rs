//! A following shipper (`--audit-ship`, `audit ship --follow`) on a real
//! PostgreSQL server: under load it ships the node's events in a few large
//! batches rather than one per recorder commit, and it still ships at once
//! for a decision that waits for the central copy (`--audit-ship-required`).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use airlock_auditor::postgres::PgStore;
use airlock_auditor::ship::{ShipDestination, ShipProgress, ShipReport, Shipper};
use airlock_auditor::sqlite::SqliteStore;
use airlock_auditor::{RecordStore, SessionEnd, SigningKeySource};
use airlock_test_support::audit_store::{Env, dns, env, info};
use airlock_test_support::postgres::PgServer;

/// A node's local record and a shipper following it into `pg`.
struct Node {
    env: Env,
    local: SqliteStore,
    progress: Arc<ShipProgress>,
    shipper: JoinHandle<ShipReport>,
}

impl Node {
    fn following(pg: &PgServer) -> Self {
        Self::lingering(pg, airlock_auditor::ship::LINGER)
    }

    fn lingering(pg: &PgServer, linger: Duration) -> Self {
        let env = env();
        let local = SqliteStore::open(&env.db, SigningKeySource::KeyFile(env.key.clone())).unwrap();
        let url = pg.url();
        let progress = Arc::new(ShipProgress::default());
        let shipper = Shipper::new(
            SqliteStore::open_for_shipping(&env.db).unwrap(),
            Box::new(move || Ok(Box::new(PgStore::open(&url)?) as Box<dyn ShipDestination>)),
            progress.clone(),
        )
        .with_linger(linger);
        let shipper = std::thread::spawn(move || shipper.follow());
        Self {
            env,
            local,
            progress,
            shipper,
        }
    }

    /// Stops the shipper once it has shipped everything: what it did.
    fn stop(self) -> (Env, ShipReport) {
        self.progress.stop(Instant::now() + Duration::from_secs(30));
        (self.env, self.shipper.join().unwrap())
    }
}

/// The events of the central store's one session, and how many batches
/// brought them.
fn central(pg: &PgServer) -> (i64, i64) {
    let row = pg.psql("SELECT (SELECT count(*) FROM events), batches FROM sessions");
    let (events, batches) = row.split_once('|').unwrap();
    (events.parse().unwrap(), batches.parse().unwrap())
}

#[test]
fn a_busy_nodes_events_are_shipped_in_a_few_large_batches_not_one_per_commit() {
    let pg = PgServer::start();
    let node = Node::following(&pg);
    let rec = node.local.begin_session(info(&["sh"])).unwrap();
    // Two seconds of a busy proxy: every event committed on its own, about
    // one a millisecond.
    let start = Instant::now();
    let mut recorded = 0_i64;
    while start.elapsed() < Duration::from_secs(2) {
        rec.record(dns(&format!("a{recorded}.example.com")))
            .unwrap();
        rec.sync().unwrap();
        recorded += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    rec.finish(SessionEnd::default()).unwrap();
    let (env, report) = node.stop();
    let local_events: i64 = env
        .raw()
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    let (events, batches) = central(&pg);
    // Every event once, whatever the batching.
    assert_eq!(events, local_events, "{report:?}");
    assert_eq!(
        pg.psql("SELECT count(*) = count(DISTINCT seq) FROM events"),
        "t"
    );
    assert!(local_events >= recorded, "{local_events} < {recorded}");
    // Shipped as each commit landed, this was one batch for every few
    // events (hundreds of transactions in Postgres, and as many marks in
    // the node's record); gathered for the shipper's linger (100 ms), it
    // is about twenty, and the end's.
    assert!(
        batches <= 40,
        "{batches} batches for {local_events} events in 2 s: {report:?}"
    );
    assert_eq!(report.batches as i64, batches, "{report:?}");
}

#[test]
fn a_decision_waiting_for_the_central_copy_is_shipped_at_once_not_after_the_linger() {
    let pg = PgServer::start();
    // A linger far longer than a batch takes, even on a loaded machine.
    let linger = Duration::from_secs(2);
    let node = Node::lingering(&pg, linger);
    let rec = node.local.begin_session(info(&["sh"])).unwrap();
    let session = rec.session_id().clone();
    // The first connection and the session's row are not what is timed.
    let seq = rec.record(dns("first.example.com")).unwrap();
    rec.sync().unwrap();
    assert!(
        node.progress
            .wait_shipped(&session, seq, Duration::from_secs(10))
    );
    // As `--audit-ship-required` does for each decision: record, commit,
    // then wait until the central store holds it.
    let mut waited = Duration::ZERO;
    for i in 0..5 {
        let seq = rec.record(dns(&format!("d{i}.example.com"))).unwrap();
        rec.sync().unwrap();
        let asked = Instant::now();
        assert!(
            node.progress
                .wait_shipped(&session, seq, Duration::from_secs(5)),
            "event {seq:?} was not shipped within 5 s"
        );
        waited += asked.elapsed();
    }
    // Each right after the last batch, when the shipper lingers: had the
    // wait not woken it, each would take about the whole linger (10 s in
    // all).
    assert!(
        waited < linger * 5 / 2,
        "5 decisions waited {waited:?} for the central store"
    );
    rec.finish(SessionEnd::default()).unwrap();
    let (_env, report) = node.stop();
    let (events, _) = central(&pg);
    assert_eq!(events as u64, report.events);
}
