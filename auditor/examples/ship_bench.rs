//! A fleet's central record (issue 31), measured on a PostgreSQL server of
//! the bench's own (`PgServer`: initdb into a temporary directory, pg_ctl
//! on a free port) and SQLite databases of its own:
//!
//! - ingest: 10 nodes' databases, recorded through `SessionRecorder`,
//!   each shipped by its own `Shipper::drain` thread into one Postgres at
//!   once: events/s, the median of the runs;
//! - lag: nodes recording at a steady rate, each followed by a `Shipper`
//!   (`follow()` on its own thread): for every event, when the shipper
//!   reported it shipped (`ShipProgress::shipped`, after the commit) minus
//!   when `record` returned; p50, p99 and max over every node's events;
//! - search: Postgres filled with EVENTS events (real sessions recorded
//!   and shipped, then copied row for row with `INSERT … SELECT
//!   generate_series` under new session ids, so every row is a shipped
//!   one), then `RecordStore::search` by host, exact and `*.domain`,
//!   each timed from opening the store read-only to holding the events
//!   (what `airlock audit search --audit-db postgres://…` does).
//!
//! Prints one JSON object.
//!
//!     cargo run --release -p airlock-auditor --example ship_bench -- \
//!         full|quick|smoke [ingest] [lag] [search]
//!     cargo run --release -p airlock-auditor --example ship_bench -- serve
//!
//! `serve` starts a server, prints its URL on one line and stops it when
//! its standard input closes (bench/run's `--audit-ship` destination: a
//! harness killed with -9 closes it too, once its children are gone).

#![allow(clippy::print_stdout, clippy::print_stderr)] // it reports by printing
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use airlock_auditor::postgres::PgStore;
use airlock_auditor::ship::{Connect, ShipDestination, ShipProgress, Shipper, ship_all};
use airlock_auditor::sqlite::SqliteStore;
use airlock_auditor::{
    AuditEvent, AuditStore, DnsQuery, Exec, ExecId, FileChange, FileOp, HttpExchange, RecordStore,
    SearchQuery, SessionEnd, SessionInfo, SigningKeySource, TcpConnection, Verdict,
};
use airlock_test_support::postgres::PgServer;
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How much each part does, by mode.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    runs: usize,
    /// Ingest: events in each node's database (10 nodes).
    ingest_per_node: u64,
    /// Lag: nodes, and seconds each records at `LAG_RATE`.
    lag_nodes: usize,
    lag_seconds: u64,
    /// Search: events in the central store, and searches of each kind.
    search_events: u64,
    searches: usize,
}

impl Sizes {
    fn of(mode: &str) -> Option<Self> {
        Some(match mode {
            "full" => Self {
                runs: 5,
                ingest_per_node: 50_000,
                lag_nodes: 5,
                lag_seconds: 20,
                search_events: 10_000_000,
                searches: 21,
            },
            "quick" => Self {
                runs: 3,
                ingest_per_node: 20_000,
                lag_nodes: 5,
                lag_seconds: 10,
                search_events: 1_000_000,
                searches: 11,
            },
            "smoke" => Self {
                runs: 1,
                ingest_per_node: 500,
                lag_nodes: 2,
                lag_seconds: 1,
                search_events: 20_000,
                searches: 3,
            },
            _ => return None,
        })
    }
}

const SHIPPERS: usize = 10;
/// Sessions in each node's database for the ingest.
const SESSIONS_PER_NODE: u64 = 5;
/// Events per second each node records while its lag is measured.
const LAG_RATE: u64 = 1000;
/// Events in each session of the search's store.
const SEARCH_PER_SESSION: u64 = 1000;
/// Sessions recorded and shipped for real, which the rest are copies of.
const TEMPLATES: u64 = 20;
/// One session in this many holds the needles (as in search_bench).
const NEEDLE_EVERY: u64 = 250;
const NEEDLE_HOST: &str = "exfil.example.net";
const NEEDLE_DOMAIN: &str = "*.example.net";

/// One event of a node's realistic mix: an exec, a DNS lookup, a
/// connection, an HTTP exchange, a file written with its content.
fn event(node: u64, i: u64) -> AuditEvent {
    let exec_id = Some(ExecId::new(format!("{}:{}", 1000 + i % 7, node)));
    let host = format!("pkg{}.pypi.org", (node + i) % 200);
    match i % 5 {
        0 => AuditEvent::Exec(Exec {
            exec_id: ExecId::new(format!("{}:{}", 1000 + i, node)),
            parent_exec_id: exec_id,
            pid: (1000 + i % 30000) as i32,
            ppid: 1000,
            uid: 1000,
            path: "/usr/bin/python3".into(),
            argv: vec![
                "python3".into(),
                "-m".into(),
                "pip".into(),
                "install".into(),
                format!("package-{}", i % 1000).into(),
            ],
            cwd: "/work".into(),
            env_names: vec!["PATH".into(), "HOME".into(), "LANG".into()],
            env_values_nonsecret: BTreeMap::from([("LANG".into(), "C.UTF-8".into())]),
            step: None,
            image: Default::default(),
        }),
        1 => AuditEvent::Dns(DnsQuery {
            exec_id,
            name: host,
            qtype: "A".into(),
            answer: vec!["151.101.0.223".into(), "151.101.64.223".into()],
            decision: Verdict::Allow,
            rule: Some("policy.toml:12".into()),
        }),
        2 => AuditEvent::Tcp(TcpConnection {
            connection: None,
            exec_id,
            dst: "151.101.0.223:443".into(),
            host: Some(host),
            port: 443,
            decision: Verdict::Allow,
            rule: Some("policy.toml:12".into()),
            reason: None,
            bytes_up: 1200 + i % 500,
            bytes_down: 50_000 + i % 9000,
            duration_ms: Some(42.0),
        }),
        3 => http(
            exec_id,
            &format!("https://{host}/simple/package-{}/", i % 1000),
        ),
        _ => {
            // Distinct content per file version: the store keeps each once.
            let content = format!(
                "# generated module {i} of node {node}\nVERSION = \"1.{}.{}\"\n\ndef main():\n    return {}\n",
                i % 97,
                i % 13,
                i * 7 % 1000
            )
            .repeat(3)
            .into_bytes();
            AuditEvent::File(FileChange {
                exec_id,
                size: Some(content.len() as u64),
                mode: Some(0o644),
                content: Some(content),
                ..FileChange::new(
                    format!(
                        "/work/.venv/lib/python3.12/site-packages/pkg{}/mod{}.py",
                        node % 50,
                        i % 500
                    )
                    .into(),
                    FileOp::Modify,
                )
            })
        }
    }
}

fn http(exec_id: Option<ExecId>, url: &str) -> AuditEvent {
    AuditEvent::Http(HttpExchange {
        exec_id,
        request_headers: vec![
            ("user-agent".into(), "pip/24.0".into()),
            (
                "accept".into(),
                "application/vnd.pypi.simple.v1+json".into(),
            ),
        ],
        status: Some(200),
        response_headers: vec![("content-type".into(), "application/json".into())],
        response_body: Some(br#"{"files":[],"meta":{"api-version":"1.1"}}"#.to_vec()),
        bytes_up: 300,
        bytes_down: 4000,
        ms_to_headers: Some(20.0),
        ms_total: Some(25.0),
        rule: Some("policy.toml:12".into()),
        ..HttpExchange::decided("GET".into(), url.into(), "HTTP/2".into(), Verdict::Allow)
    })
}

/// What the searches look for, in one session in `NEEDLE_EVERY`: a lookup
/// and an upload to the exact host, and a lookup and a connection to
/// another host of its domain.
fn needles() -> Vec<AuditEvent> {
    let exec_id = Some(ExecId::new("666:1"));
    let dns = |name: &str| {
        AuditEvent::Dns(DnsQuery {
            exec_id: exec_id.clone(),
            name: name.into(),
            qtype: "A".into(),
            answer: vec!["203.0.113.9".into()],
            decision: Verdict::Allow,
            rule: None,
        })
    };
    vec![
        dns(NEEDLE_HOST),
        http(exec_id.clone(), &format!("https://{NEEDLE_HOST}/upload")),
        dns("c2.example.net"),
        AuditEvent::Tcp(TcpConnection {
            connection: None,
            exec_id: exec_id.clone(),
            dst: "203.0.113.10:443".into(),
            host: Some("c2.example.net".into()),
            port: 443,
            decision: Verdict::Deny,
            rule: None,
            reason: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: None,
        }),
    ]
}

fn info(node: u64, role: &str) -> SessionInfo {
    SessionInfo {
        command: vec!["bench".into(), node.to_string().into()],
        host: format!("node-{node}"),
        labels: BTreeMap::from([("bench".into(), role.into())]),
        ..SessionInfo::default()
    }
}

/// Opens a connection to the central store each time it is called, as
/// `--audit-ship` does.
fn connect(url: &str) -> Connect {
    let url = url.to_string();
    Box::new(move || Ok(Box::new(PgStore::open(&url)?) as Box<dyn ShipDestination>))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// The store's tables, emptied between runs (as the superuser).
fn empty_store(pg: &PgServer) {
    pg.psql("TRUNCATE sessions, events, event_terms, checkpoints, contents RESTART IDENTITY");
}

// ------------------------------------------------------------ CPU time

/// CPU seconds (user + system) from /proc/PID/stat: the process's own, and
/// its children's that it waited for (clock ticks are 1/100 s there).
fn cpu_of(pid: &str) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis, from the state (3rd).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let tick = |i: usize| fields.get(i - 3)?.parse::<f64>().ok().map(|t| t / 100.0);
    Some((tick(14)? + tick(15)?, tick(16)? + tick(17)?))
}

/// CPU seconds spent so far by this process and by the server: the
/// postmaster and its helpers, and the backends that exited (a shipper's
/// backend exits when the shipper lets go of its connection).
fn cpu_now(pg: &PgServer) -> (f64, f64) {
    let ours = cpu_of("self").map_or(0.0, |(own, _)| own);
    let helpers =
        pg.psql("SELECT pid FROM pg_stat_activity WHERE backend_type <> 'client backend'");
    let mut server = 0.0;
    let mut postmaster = None;
    for pid in helpers.lines() {
        server += cpu_of(pid).map_or(0.0, |(own, _)| own);
        postmaster = postmaster.or_else(|| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let ppid = status.lines().find_map(|l| l.strip_prefix("PPid:"))?;
            Some(ppid.trim().to_string())
        });
    }
    if let Some((own, children)) = postmaster.as_deref().and_then(cpu_of) {
        server += own + children;
    }
    (ours, server)
}

// ----------------------------------------------------------------- ingest

fn ingest(work: &Path, pg: &PgServer, sizes: Sizes) -> Result<Value, BoxError> {
    let originals = work.join("ingest-nodes");
    std::fs::create_dir_all(&originals)?;
    let per_session = sizes.ingest_per_node / SESSIONS_PER_NODE;
    let record_start = Instant::now();
    let recorded: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..SHIPPERS as u64)
            .map(|node| {
                let db = originals.join(format!("node-{node}.db"));
                s.spawn(move || -> Result<u64, BoxError> {
                    let store = AuditStore::open(&db, SigningKeySource::Ephemeral)?;
                    let mut n = 0;
                    for session in 0..SESSIONS_PER_NODE {
                        let rec = store.begin_session(info(node, "ingest"))?;
                        for i in 0..per_session {
                            rec.record(event(node * 100 + session, i))?;
                            n += 1;
                        }
                        rec.finish(SessionEnd::default())?;
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("recorder thread"))
            .collect::<Result<_, _>>()
    })?;
    let record_s = record_start.elapsed().as_secs_f64();
    let events: u64 = recorded.iter().sum();

    let mut rates = Vec::new();
    let (mut cpu_shipper, mut cpu_server) = (Vec::new(), Vec::new());
    let mut shipped_events = 0;
    for run in 0..sizes.runs {
        empty_store(pg);
        // Each run ships fresh copies: a database remembers what it shipped.
        let dir = work.join(format!("ingest-run-{run}"));
        std::fs::create_dir_all(&dir)?;
        let mut dbs = Vec::new();
        for node in 0..SHIPPERS {
            let from = originals.join(format!("node-{node}.db"));
            let to = dir.join(format!("node-{node}.db"));
            std::fs::copy(&from, &to)?;
            dbs.push(to);
        }
        let url = pg.url();
        let cpu_before = cpu_now(pg);
        let barrier = Barrier::new(SHIPPERS + 1);
        let (elapsed, reports) = std::thread::scope(|s| {
            let handles: Vec<_> = dbs
                .iter()
                .map(|db| {
                    let (url, barrier) = (&url, &barrier);
                    s.spawn(move || -> Result<_, BoxError> {
                        let local = SqliteStore::open_for_shipping(db)?;
                        let shipper =
                            Shipper::new(local, connect(url), Arc::new(ShipProgress::default()));
                        barrier.wait();
                        Ok(shipper.drain()?)
                    })
                })
                .collect();
            barrier.wait();
            let start = Instant::now();
            let reports: Vec<_> = handles
                .into_iter()
                .map(|h| h.join().expect("shipper thread"))
                .collect();
            (start.elapsed(), reports)
        });
        let mut n = 0;
        for r in reports {
            n += r?.events;
        }
        // The shippers' backends exit once they let go of their connections.
        for _ in 0..100 {
            let backends = pg.psql(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
            );
            if backends == "0" {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let cpu_after = cpu_now(pg);
        cpu_shipper.push(cpu_after.0 - cpu_before.0);
        cpu_server.push(cpu_after.1 - cpu_before.1);
        let held: u64 = pg.psql("SELECT count(*) FROM events").parse()?;
        if held != n {
            return Err(format!("run {run}: shipped {n} events, the store holds {held}").into());
        }
        shipped_events = n;
        rates.push(n as f64 / elapsed.as_secs_f64());
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::remove_dir_all(&originals)?;
    Ok(json!({
        "shippers": SHIPPERS,
        "recorded_events": events,
        "record_seconds": record_s,
        "shipped_events_per_run": shipped_events,
        "runs": rates.len(),
        "events_per_second_runs": rates,
        "events_per_second_median": median(rates.clone()),
        // What one event costs in CPU, whatever else the machine runs: the
        // shippers (reading SQLite, sending) and the server (storing).
        "shipper_cpu_us_per_event": median(cpu_shipper) * 1e6 / shipped_events as f64,
        "server_cpu_us_per_event": median(cpu_server) * 1e6 / shipped_events as f64,
    }))
}

// -------------------------------------------------------------------- lag

/// One node's events: when each was recorded, and when it was seen shipped.
#[derive(Default)]
struct Timings {
    recorded: Vec<(u64, Instant)>,
    lags_ms: Vec<f64>,
}

fn lag(work: &Path, pg: &PgServer, sizes: Sizes) -> Result<Value, BoxError> {
    empty_store(pg);
    let url = pg.url();
    let per_node = sizes.lag_seconds * LAG_RATE;
    let results: Vec<Vec<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..sizes.lag_nodes as u64)
            .map(|node| {
                let db = work.join(format!("lag-node-{node}.db"));
                let url = &url;
                s.spawn(move || lag_node(&db, url, node, per_node))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("node thread"))
            .collect::<Result<_, _>>()
    })?;
    let mut all: Vec<f64> = results.into_iter().flatten().collect();
    if all.len() as u64 != per_node * sizes.lag_nodes as u64 {
        return Err(format!("lag: {} events timed, not {}", all.len(), per_node).into());
    }
    all.sort_by(f64::total_cmp);
    Ok(json!({
        "nodes": sizes.lag_nodes,
        "events_per_second_per_node": LAG_RATE,
        "seconds": sizes.lag_seconds,
        "events": all.len(),
        "p50_ms": percentile(&all, 0.50),
        "p99_ms": percentile(&all, 0.99),
        "max_ms": all.last().copied().unwrap_or(0.0),
    }))
}

/// Records `n` events at `LAG_RATE` with a following shipper, and returns
/// each event's lag in ms.
fn lag_node(db: &Path, url: &str, node: u64, n: u64) -> Result<Vec<f64>, BoxError> {
    let store = AuditStore::open(db, SigningKeySource::Ephemeral)?;
    let rec = store.begin_session(info(node, "lag"))?;
    let session = rec.session_id().clone();
    rec.sync()?;
    let progress = Arc::new(ShipProgress::default());
    let shipper = Shipper::new(
        SqliteStore::open_for_shipping(db)?,
        connect(url),
        progress.clone(),
    );
    let timings = Mutex::new(Timings::default());
    let recording = AtomicBool::new(true);
    std::thread::scope(|s| -> Result<(), BoxError> {
        let follower = s.spawn(move || shipper.follow());
        // The watcher: each time the shipper reports more shipped, the
        // events up to there are shipped now.
        let watcher = s.spawn(|| {
            let mut next = 0usize;
            loop {
                let done = !recording.load(Ordering::SeqCst);
                let up_to = progress.shipped(&session).up_to.map(|s| s.get());
                let now = Instant::now();
                let mut t = timings.lock().unwrap();
                if let Some(up_to) = up_to {
                    while next < t.recorded.len() && t.recorded[next].0 <= up_to {
                        let lag = now.duration_since(t.recorded[next].1);
                        t.lags_ms.push(lag.as_secs_f64() * 1000.0);
                        next += 1;
                    }
                }
                if done && next == t.recorded.len() {
                    return;
                }
                drop(t);
                std::thread::sleep(Duration::from_micros(500));
            }
        });
        let start = Instant::now();
        let every = Duration::from_secs(1) / LAG_RATE as u32;
        for i in 0..n {
            let due = start + every * i as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let seq = rec.record(event(node, i))?;
            timings
                .lock()
                .unwrap()
                .recorded
                .push((seq.get(), Instant::now()));
        }
        recording.store(false, Ordering::SeqCst);
        watcher.join().expect("watcher thread");
        rec.finish(SessionEnd::default())?;
        progress.stop(Instant::now() + Duration::from_secs(10));
        follower.join().expect("shipper thread");
        Ok(())
    })?;
    Ok(timings.into_inner().unwrap().lags_ms)
}

// ----------------------------------------------------------------- search

fn search(work: &Path, pg: &PgServer, sizes: Sizes) -> Result<Value, BoxError> {
    empty_store(pg);
    let fill_start = Instant::now();
    let sessions = (sizes.search_events / SEARCH_PER_SESSION).max(2);
    let needle_sessions = sessions.div_ceil(NEEDLE_EVERY);
    let templates = TEMPLATES.min(sessions - needle_sessions).max(1);
    let copies = (sessions - needle_sessions - templates).div_ceil(templates);

    // The real sessions: recorded, then shipped as a node ships them.
    let db = work.join("search-node.db");
    {
        let store = AuditStore::open(&db, SigningKeySource::Ephemeral)?;
        for s in 0..templates + needle_sessions {
            let needle = s >= templates;
            let rec = store.begin_session(info(s, if needle { "needle" } else { "haystack" }))?;
            let mut n = SEARCH_PER_SESSION;
            if needle {
                for ev in needles() {
                    rec.record(ev)?;
                    n -= 1;
                }
            }
            for i in 0..n {
                rec.record(event(s, i))?;
            }
            rec.finish(SessionEnd::default())?;
        }
    }
    let central = PgStore::open(&pg.url())?;
    ship_all(&SqliteStore::open_for_shipping(&db)?, &central)?;
    drop(central);
    std::fs::remove_file(&db)?;
    let shipped_s = fill_start.elapsed().as_secs_f64();

    // The copies: each haystack session's rows again under a new id (its
    // start time's 12 digits, then 20 of a hash), from another node.
    if copies > 0 {
        let rebuild = set_aside_indexes(pg);
        replicate(pg, copies)?;
        pg.psql(&format!("SET maintenance_work_mem = '256MB'; {rebuild}"));
    }
    // As autovacuum leaves a store in time: statistics and visibility map.
    pg.psql("VACUUM ANALYZE");
    let fill_s = fill_start.elapsed().as_secs_f64();
    let events: u64 = pg.psql("SELECT count(*) FROM events").parse()?;
    let db_bytes: u64 = pg
        .psql("SELECT pg_database_size(current_database())")
        .parse()?;

    let url = pg.url();
    let exact = SearchQuery {
        host: Some(NEEDLE_HOST.into()),
        ..SearchQuery::default()
    };
    let domain = SearchQuery {
        host: Some(NEEDLE_DOMAIN.into()),
        ..SearchQuery::default()
    };
    let (exact_ms, exact_open_ms, exact_hits) = time_search(&url, &exact, sizes.searches)?;
    let (domain_ms, domain_open_ms, domain_hits) = time_search(&url, &domain, sizes.searches)?;
    let needle_sessions = needle_sessions as usize;
    if exact_hits != 2 * needle_sessions || domain_hits != 4 * needle_sessions {
        return Err(format!(
            "search: {exact_hits} exact and {domain_hits} domain hits, not {} and {}",
            2 * needle_sessions,
            4 * needle_sessions
        )
        .into());
    }
    Ok(json!({
        "events": events,
        "sessions": sessions,
        "fill_seconds": fill_s,
        "record_and_ship_seconds": shipped_s,
        "db_bytes": db_bytes,
        "searches": sizes.searches,
        "host_ms_median": exact_ms,
        "host_query_ms_median": exact_open_ms,
        "host_hits": exact_hits,
        "domain_ms_median": domain_ms,
        "domain_query_ms_median": domain_open_ms,
        "domain_hits": domain_hits,
    }))
}

/// Drops the indexes and constraints of the tables the copies go into
/// (building them once afterwards is faster than keeping them up to date
/// row by row), and returns the SQL that puts them back as they were.
fn set_aside_indexes(pg: &PgServer) -> String {
    const TABLES: &str = "'events', 'event_terms', 'checkpoints'";
    let constraints = pg.psql(&format!(
        "SELECT format('ALTER TABLE %I DROP CONSTRAINT %I', c.conrelid::regclass, c.conname),
                format('ALTER TABLE %I ADD CONSTRAINT %I %s', c.conrelid::regclass, c.conname,
                       pg_get_constraintdef(c.oid))
         FROM pg_constraint c
         WHERE c.conrelid::regclass::text IN ({TABLES}) AND c.contype IN ('p', 'u', 'f')"
    ));
    let indexes = pg.psql(&format!(
        "SELECT format('DROP INDEX %I', i.indexname), i.indexdef FROM pg_indexes i
         WHERE i.schemaname = current_schema() AND i.tablename IN ({TABLES})
           AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)"
    ));
    let (mut drop, mut rebuild) = (Vec::new(), Vec::new());
    for line in constraints.lines().chain(indexes.lines()) {
        if let Some((d, r)) = line.split_once('|') {
            drop.push(d.to_string());
            rebuild.push(r.to_string());
        }
    }
    pg.psql(&drop.join("; "));
    rebuild.join("; ")
}

/// Copies every haystack session `copies` times, row for row, into new
/// sessions: the rows are the shipped ones, so they read, search and
/// verify alike. Generic over the tables' columns (only `sid` and the
/// session's id and node change), so it follows the store's schema.
fn replicate(pg: &PgServer, copies: u64) -> Result<(), BoxError> {
    let columns = |table: &str| -> Vec<String> {
        pg.psql(&format!(
            "SELECT column_name FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = '{table}'
             ORDER BY ordinal_position"
        ))
        .lines()
        .map(str::to_string)
        .collect()
    };
    let session_cols: Vec<String> = columns("sessions")
        .into_iter()
        .filter(|c| c != "sid")
        .collect();
    let picked: Vec<String> = session_cols
        .iter()
        .map(|c| match c.as_str() {
            "id" => "c.new_id".to_string(),
            "node" => "'node-' || (c.copy % 97)".to_string(),
            other => format!("t.{other}"),
        })
        .collect();
    pg.psql(&format!(
        "CREATE TABLE bench_copies AS
           SELECT t.sid AS old_sid, g AS copy,
                  left(t.id, 12) || substr(md5(t.id || ':' || g), 1, 20) AS new_id
           FROM sessions t CROSS JOIN generate_series(1, {copies}) g
           WHERE t.labels->>'bench' = 'haystack';
         INSERT INTO sessions ({}) SELECT {} FROM bench_copies c JOIN sessions t ON t.sid = c.old_sid;
         CREATE TABLE bench_sids AS
           SELECT c.old_sid, n.sid AS new_sid FROM bench_copies c JOIN sessions n ON n.id = c.new_id",
        session_cols.join(", "),
        picked.join(", "),
    ));
    for table in ["events", "event_terms", "checkpoints"] {
        let cols = columns(table);
        let picked: Vec<String> = cols
            .iter()
            .map(|c| match c.as_str() {
                "sid" => "m.new_sid".to_string(),
                other => format!("t.{other}"),
            })
            .collect();
        pg.psql(&format!(
            "INSERT INTO {table} ({}) SELECT {} FROM bench_sids m JOIN {table} t ON t.sid = m.old_sid",
            cols.join(", "),
            picked.join(", ")
        ));
    }
    pg.psql("DROP TABLE bench_copies; DROP TABLE bench_sids");
    Ok(())
}

/// Median ms of `searches` searches from opening the store to holding the
/// events, the median of the query alone on an open store, and the hits.
fn time_search(
    url: &str,
    query: &SearchQuery,
    searches: usize,
) -> Result<(f64, f64, usize), BoxError> {
    let mut whole = Vec::with_capacity(searches);
    let mut alone = Vec::with_capacity(searches);
    let mut hits = 0;
    for _ in 0..searches {
        let start = Instant::now();
        let store = PgStore::open_readonly(url)?;
        let opened = Instant::now();
        let found = store.search(query)?;
        let end = Instant::now();
        whole.push((end - start).as_secs_f64() * 1000.0);
        alone.push((end - opened).as_secs_f64() * 1000.0);
        hits = found.hits.len();
    }
    Ok((median(whole), median(alone), hits))
}

// ------------------------------------------------------------------ main

/// Starts a server, prints its URL, and stops it once stdin closes. With
/// `--at ADDRESS --client CIDR` it also listens on ADDRESS (of the network
/// namespace it runs in), lets in clients from CIDR, and prints the URL at
/// ADDRESS: a store reached over a link, as on another machine.
fn serve(args: &[String]) -> Result<(), BoxError> {
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let (pg, url) = match (flag("--at"), flag("--client")) {
        (Some(at), Some(client)) => {
            let pg = PgServer::start_listening_on(&[at], &[client]);
            let url = pg.url().replacen("@127.0.0.1:", &format!("@{at}:"), 1);
            (pg, url)
        }
        (None, None) => {
            let pg = PgServer::start();
            let url = pg.url();
            (pg, url)
        }
        _ => {
            return Err(
                "ship_bench serve: give both --at ADDRESS and --client CIDR, or neither".into(),
            );
        }
    };
    println!("{url}");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(pg);
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("quick", String::as_str);
    if mode == "serve" {
        return serve(&args[1..]);
    }
    let sizes = Sizes::of(mode).ok_or_else(|| {
        format!("ship_bench: unknown mode {mode:?}: give full, quick, smoke or serve")
    })?;
    let parts: Vec<&str> = match args.get(1..).filter(|p| !p.is_empty()) {
        Some(p) => p.iter().map(String::as_str).collect(),
        None => vec!["ingest", "lag", "search"],
    };
    let work: PathBuf = tempfile::Builder::new()
        .prefix("airlock-ship-bench-")
        .tempdir()?
        .keep();
    let pg = PgServer::start();
    // The store's schema, created as a node's first shipment would.
    PgStore::open(&pg.url())?;
    let mut out = json!({ "mode": mode });
    let result = (|| -> Result<(), BoxError> {
        for part in &parts {
            let started = Instant::now();
            let figures = match *part {
                "ingest" => ingest(&work, &pg, sizes)?,
                "lag" => lag(&work, &pg, sizes)?,
                "search" => search(&work, &pg, sizes)?,
                other => return Err(format!("ship_bench: unknown part {other:?}").into()),
            };
            eprintln!(
                "ship_bench: {part} took {:.1} s",
                started.elapsed().as_secs_f64()
            );
            out[*part] = figures;
        }
        Ok(())
    })();
    drop(pg);
    let _ = std::fs::remove_dir_all(&work);
    result?;
    println!("{out}");
    Ok(())
}
