//! The benchmark cases. Each invocation runs one case once against one
//! contender and prints one JSON sample; `bench/run` repeats and interleaves
//! them and `report` takes medians.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;

use crate::connect::{Dialer, Origin, Route};
use crate::stats;
use crate::tls::{self, Resumption};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    /// C concurrent keep-alive connections hammering --path: requests/s.
    Keepalive,
    /// C concurrent workers, each request on a fresh TCP+TLS connection (fresh CONNECT when proxied): requests/s.
    Newconn,
    /// One keep-alive connection, sequential requests: latency percentiles.
    LatencyKeepalive,
    /// Sequential requests, each on a fresh connection: latency percentiles (connect included).
    LatencyNewconn,
    /// One GET of --path over one connection: MB/s (10^6 bytes/s).
    Download,
}

#[derive(clap::Args)]
pub struct LoadArgs {
    #[arg(long, value_enum)]
    case: Case,
    /// Label of what is between client and nginx: "direct", "airlock-explicit", ...
    #[arg(long)]
    contender: String,
    /// Run number, copied into the sample.
    #[arg(long, default_value_t = 1)]
    run: u32,
    /// Origin host name (SNI, certificate name, Host header).
    #[arg(long, default_value = "bench.test")]
    host: String,
    /// Origin port.
    #[arg(long)]
    port: u16,
    /// Request path.
    #[arg(long, default_value = "/small")]
    path: String,
    /// Connect straight to this address (direct contender).
    #[arg(long, conflicts_with = "proxy", required_unless_present = "proxy")]
    connect: Option<SocketAddr>,
    /// Connect through this explicit proxy with CONNECT.
    #[arg(long)]
    proxy: Option<SocketAddr>,
    /// CA (PEM) the client trusts: the upstream CA direct, the proxy's CA proxied.
    #[arg(long)]
    ca: PathBuf,
    /// Concurrent connections/workers for the throughput cases.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Measured seconds (after warm-up).
    #[arg(long, default_value_t = 4.0)]
    duration: f64,
    /// Warm-up seconds before measuring (not counted).
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// TLS session resumption for new connections.
    #[arg(long, value_enum, default_value_t = Resumption::Off)]
    resumption: Resumption,
    /// Seconds any one connect or request may take before the run fails.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Download case: fail unless exactly this many body bytes arrive.
    #[arg(long)]
    expect_bytes: Option<u64>,
}

#[derive(Serialize)]
struct Sample {
    case: Case,
    contender: String,
    run: u32,
    params: BTreeMap<&'static str, serde_json::Value>,
    metrics: BTreeMap<&'static str, f64>,
}

pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let sample = runtime.block_on(measure(&args))?;
    println!("{}", serde_json::to_string(&sample)?);
    Ok(())
}

async fn measure(args: &LoadArgs) -> anyhow::Result<Sample> {
    let route = match (args.connect, args.proxy) {
        (Some(addr), None) => Route::Direct(addr),
        (None, Some(proxy)) => Route::ExplicitProxy(proxy),
        _ => bail!("pass exactly one of --connect ADDR (direct) or --proxy ADDR (explicit proxy)"),
    };
    if !(args.duration > 0.0 && args.warmup >= 0.0 && args.timeout > 0.0) {
        bail!("--duration and --timeout must be positive and --warmup not negative");
    }
    let tls = tls::client_config(&args.ca, args.resumption)?;
    let origin = Origin {
        host: args.host.clone(),
        port: args.port,
    };
    let dialer = Dialer::new(route, origin, tls)?;
    let timing = Timing {
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        timeout: Duration::from_secs_f64(args.timeout),
    };

    let mut params = BTreeMap::new();
    params.insert("path", args.path.clone().into());
    params.insert("resumption", serde_json::to_value(args.resumption)?);
    params.insert(
        "route",
        match route {
            Route::Direct(a) => format!("direct {a}"),
            Route::ExplicitProxy(a) => format!("CONNECT via {a}"),
        }
        .into(),
    );
    let metrics = match args.case {
        Case::Keepalive | Case::Newconn => {
            params.insert("concurrency", args.concurrency.into());
            params.insert("duration_s", args.duration.into());
            params.insert("warmup_s", args.warmup.into());
            throughput(
                &dialer,
                &args.path,
                args.case == Case::Keepalive,
                args.concurrency,
                timing,
            )
            .await?
        }
        Case::LatencyKeepalive | Case::LatencyNewconn => {
            params.insert("concurrency", 1.into());
            params.insert("duration_s", args.duration.into());
            params.insert("warmup_s", args.warmup.into());
            latency(
                &dialer,
                &args.path,
                args.case == Case::LatencyKeepalive,
                timing,
            )
            .await?
        }
        Case::Download => download(&dialer, &args.path, args.expect_bytes, timing).await?,
    };
    Ok(Sample {
        case: args.case,
        contender: args.contender.clone(),
        run: args.run,
        params,
        metrics,
    })
}

#[derive(Clone, Copy)]
struct Timing {
    warmup: Duration,
    duration: Duration,
    timeout: Duration,
}

async fn timed<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(limit, fut)
        .await
        .with_context(|| format!("{what} took longer than {limit:?}"))?
}

/// One request, on `conn` if kept alive or on a fresh connection otherwise.
async fn one_request(
    dialer: &Dialer,
    path: &str,
    keepalive: &mut Option<crate::connect::Connection>,
    reuse: bool,
    limit: Duration,
) -> anyhow::Result<()> {
    if reuse {
        // A server may end a keep-alive connection (nginx after keepalive_requests,
        // with `Connection: close`); a real client reconnects, and so do we.
        if keepalive.as_ref().is_some_and(|c| !c.reusable()) {
            *keepalive = None;
        }
        if keepalive.is_none() {
            *keepalive = Some(timed(limit, "connecting", dialer.open()).await?);
        }
        let conn = keepalive
            .as_mut()
            .context("keep-alive connection missing")?;
        timed(limit, "a request", conn.get(path)).await?;
    } else {
        let mut conn = timed(limit, "connecting", dialer.open()).await?;
        timed(limit, "a request", conn.get(path)).await?;
    }
    Ok(())
}

async fn throughput(
    dialer: &Dialer,
    path: &str,
    reuse: bool,
    concurrency: usize,
    t: Timing,
) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    if concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let start = Instant::now();
    let measure_from = start + t.warmup;
    let end = measure_from + t.duration;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let dialer = dialer.clone();
        let path = path.to_owned();
        workers.spawn(async move {
            let mut conn = None;
            let mut counted = 0u64;
            loop {
                one_request(&dialer, &path, &mut conn, reuse, t.timeout).await?;
                let now = Instant::now();
                if now >= end {
                    break;
                }
                if now >= measure_from {
                    counted += 1;
                }
            }
            anyhow::Ok(counted)
        });
    }
    let mut requests = 0u64;
    while let Some(done) = workers.join_next().await {
        requests += done.context("a load worker panicked")??;
    }
    let mut m = BTreeMap::new();
    m.insert("requests", requests as f64);
    m.insert("req_per_s", requests as f64 / t.duration.as_secs_f64());
    Ok(m)
}

async fn latency(
    dialer: &Dialer,
    path: &str,
    reuse: bool,
    t: Timing,
) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    let start = Instant::now();
    let measure_from = start + t.warmup;
    let end = measure_from + t.duration;
    let mut conn = None;
    let mut micros = Vec::new();
    loop {
        let began = Instant::now();
        one_request(dialer, path, &mut conn, reuse, t.timeout).await?;
        let now = Instant::now();
        if now >= end {
            break;
        }
        if began >= measure_from {
            micros.push((now - began).as_secs_f64() * 1e6);
        }
    }
    let summary = stats::Percentiles::of(&mut micros)
        .context("no request completed inside the measured window; raise --duration")?;
    let mut m = BTreeMap::new();
    m.insert("requests", micros.len() as f64);
    m.insert("p50_us", summary.p50);
    m.insert("p99_us", summary.p99);
    m.insert("mean_us", summary.mean);
    m.insert("max_us", summary.max);
    Ok(m)
}

async fn download(
    dialer: &Dialer,
    path: &str,
    expect: Option<u64>,
    t: Timing,
) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    let mut conn = timed(t.timeout, "connecting", dialer.open()).await?;
    let began = Instant::now();
    // A download may legitimately take long; bound it by the run's duration budget instead.
    let limit = t.timeout.max(t.duration) * 10;
    let bytes = timed(limit, "the download", conn.get(path)).await?;
    let seconds = began.elapsed().as_secs_f64();
    if let Some(want) = expect
        && bytes != want
    {
        bail!("download of {path} returned {bytes} bytes, expected {want}");
    }
    let mut m = BTreeMap::new();
    m.insert("bytes", bytes as f64);
    m.insert("seconds", seconds);
    m.insert("mb_per_s", bytes as f64 / seconds / 1e6);
    Ok(m)
}
