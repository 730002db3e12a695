// Why this file is long (~600 lines): one async function per benchmark case
// (throughput, latency, download, fixed rate, hold), each short, sharing the
// sample and timing types above them; splitting per case would scatter those.
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
use crate::tls::{self, Resumption};
use crate::{rss, stats};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Case {
    /// C concurrent keep-alive connections hammering --path: requests/s.
    Keepalive,
    /// C concurrent workers, each request on a fresh TCP+TLS connection (fresh CONNECT when proxied): requests/s.
    Newconn,
    /// One keep-alive connection, sequential requests: latency percentiles.
    LatencyKeepalive,
    /// Sequential requests, each on a fresh connection: latency percentiles (connect included).
    LatencyNewconn,
    /// One GET of --path over one connection: MB/s (10^6 bytes/s); with
    /// --rss-pid also that process's VmRSS every 100 ms (start/max/end).
    Download,
    /// Open-loop load: --rate requests/s for --duration on a pool of keep-alive
    /// connections; latency from each request's scheduled send time, so a stall
    /// counts against every request it delays (no coordinated omission).
    FixedRate,
    /// Open --concurrency connections (TCP [+ CONNECT] + TLS + one request each),
    /// hold them all open, then read --rss-pid's VmRSS.
    Hold,
}

#[derive(clap::Args)]
pub(crate) struct LoadArgs {
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
    #[arg(long, group = "route")]
    connect: Option<SocketAddr>,
    /// Connect through this explicit proxy with CONNECT.
    #[arg(long, group = "route")]
    proxy: Option<SocketAddr>,
    /// Connect through the proxy named by $HTTPS_PROXY / $https_proxy (http://HOST:PORT).
    #[arg(long, group = "route")]
    proxy_from_env: bool,
    /// Resolve --host with the system resolver and connect to it (transparent capture).
    #[arg(long, group = "route")]
    system_dns: bool,
    /// Ask the proxy to CONNECT to this HOST:PORT instead of --host:--port
    /// (TLS still names --host).
    #[arg(long)]
    tunnel_authority: Option<String>,
    /// CA (PEM) the client trusts: the upstream CA direct, the proxy's CA
    /// proxied [default: $SSL_CERT_FILE, as set by `airlock run`].
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Name of the case in the sample [default: the --case name].
    #[arg(long)]
    label: Option<String>,
    /// fixed-rate: requests per second to schedule.
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    /// download/hold: process whose VmRSS to read (the proxy).
    #[arg(long)]
    rss_pid: Option<u32>,
    /// hold: seconds to keep the connections open after the RSS reading.
    #[arg(long, default_value_t = 0.5)]
    hold: f64,
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
    /// POST this body (instead of a GET) in every request, e.g. an MCP
    /// tools/call message.
    #[arg(long, value_name = "TEXT")]
    post_body: Option<String>,
    /// The POST body's Content-Type.
    #[arg(long, default_value = "application/json")]
    content_type: String,
}

#[derive(Serialize)]
struct Sample {
    case: String,
    contender: String,
    run: u32,
    params: BTreeMap<&'static str, serde_json::Value>,
    metrics: BTreeMap<&'static str, f64>,
}

pub(crate) fn run(args: LoadArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let sample = runtime.block_on(measure(&args))?;
    println!("{}", serde_json::to_string(&sample)?);
    Ok(())
}

async fn measure(args: &LoadArgs) -> anyhow::Result<Sample> {
    let mut proxy_authorization = None;
    let route = match (args.connect, args.proxy) {
        (Some(addr), None) => Route::Direct(addr),
        (None, Some(proxy)) => Route::ExplicitProxy(proxy),
        _ if args.proxy_from_env => {
            let (addr, auth) = proxy_from_env()?;
            proxy_authorization = auth;
            Route::ExplicitProxy(addr)
        }
        _ if args.system_dns => Route::SystemDns,
        _ => bail!(
            "pass one of --connect ADDR (direct), --proxy ADDR (explicit proxy), \
             --proxy-from-env or --system-dns (transparent)"
        ),
    };
    if !(args.duration > 0.0 && args.warmup >= 0.0 && args.timeout > 0.0 && args.rate > 0.0) {
        bail!("--duration, --rate and --timeout must be positive and --warmup not negative");
    }
    let ca = match &args.ca {
        Some(ca) => ca.clone(),
        None => std::env::var_os("SSL_CERT_FILE")
            .map(PathBuf::from)
            .context(
                "no --ca given and $SSL_CERT_FILE is not set: pass the CA the client trusts",
            )?,
    };
    let tls = tls::client_config(&ca, args.resumption)?;
    let origin = Origin {
        host: args.host.clone(),
        port: args.port,
    };
    let mut dialer = Dialer::new(route, origin, tls)?;
    dialer.proxy_authorization = proxy_authorization.map(Into::into);
    if let Some(authority) = &args.tunnel_authority {
        dialer.tunnel_authority = authority.as_str().into();
    }
    dialer.post = args.post_body.as_ref().map(|body| {
        std::sync::Arc::new(crate::connect::Post {
            body: body.clone().into(),
            content_type: args.content_type.clone(),
        })
    });
    let timing = Timing {
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        timeout: Duration::from_secs_f64(args.timeout),
    };

    let mut params = BTreeMap::new();
    params.insert("path", args.path.clone().into());
    if args.post_body.is_some() {
        params.insert("method", "POST".into());
    }
    params.insert("resumption", serde_json::to_value(args.resumption)?);
    params.insert(
        "route",
        match route {
            Route::Direct(a) => format!("direct {a}"),
            Route::ExplicitProxy(a) => format!("CONNECT via {a}"),
            Route::SystemDns => "system resolver (transparent)".to_owned(),
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
        Case::Download => {
            download(&dialer, &args.path, args.expect_bytes, args.rss_pid, timing).await?
        }
        Case::FixedRate => {
            params.insert("rate", args.rate.into());
            params.insert("concurrency", args.concurrency.into());
            params.insert("duration_s", args.duration.into());
            fixed_rate(&dialer, &args.path, args.rate, args.concurrency, timing).await?
        }
        Case::Hold => {
            params.insert("concurrency", args.concurrency.into());
            hold(
                &dialer,
                &args.path,
                args.concurrency,
                args.rss_pid,
                args.hold,
                timing,
            )
            .await?
        }
    };
    let case = match &args.label {
        Some(label) => label.clone(),
        None => serde_json::to_value(args.case)?
            .as_str()
            .unwrap_or("unknown")
            .to_owned(),
    };
    Ok(Sample {
        case,
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
    rss_pid: Option<u32>,
    t: Timing,
) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    let mut conn = timed(t.timeout, "connecting", dialer.open()).await?;
    let sampler = rss_pid.map(|pid| tokio::spawn(sample_rss(pid)));
    let began = Instant::now();
    // A download may legitimately take long; bound it by the run's duration budget instead.
    let limit = t.timeout.max(t.duration) * 10;
    let bytes = timed(limit, "the download", conn.get(path)).await;
    let seconds = began.elapsed().as_secs_f64();
    let rss = match sampler {
        Some(task) => {
            task.abort();
            let _ = task.await;
            Some(rss_after(rss_pid)?)
        }
        None => None,
    };
    let bytes = bytes?;
    if let Some(want) = expect
        && bytes != want
    {
        bail!("download of {path} returned {bytes} bytes, expected {want}");
    }
    let mut m = BTreeMap::new();
    m.insert("bytes", bytes as f64);
    m.insert("seconds", seconds);
    m.insert("mb_per_s", bytes as f64 / seconds / 1e6);
    if let Some(rss) = rss {
        m.extend(rss);
    }
    Ok(m)
}

/// VmRSS readings of one process, shared between the sampler task and the case.
static RSS_KIB: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

async fn sample_rss(pid: u32) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        if let Ok(kib) = rss::read_kib(pid, "VmRSS")
            && let Ok(mut v) = RSS_KIB.lock()
        {
            v.push(kib);
        }
    }
}

/// Start, max and end of the samples taken during the download, and how far
/// it rose above the start.
fn rss_after(pid: Option<u32>) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    let mut v = RSS_KIB
        .lock()
        .map_err(|_| anyhow::anyhow!("RSS sampler panicked"))?
        .clone();
    if let Some(pid) = pid {
        v.push(rss::read_kib(pid, "VmRSS")?);
    }
    let mib = |k: u64| k as f64 / 1024.0;
    let (Some(first), Some(last), Some(max)) = (v.first(), v.last(), v.iter().max()) else {
        bail!("no VmRSS reading was taken");
    };
    Ok(BTreeMap::from([
        ("rss_start_mib", mib(*first)),
        ("rss_max_mib", mib(*max)),
        ("rss_end_mib", mib(*last)),
        ("rss_growth_mib", mib(max - first)),
        ("rss_samples", v.len() as f64),
    ]))
}

/// Open-loop schedule: a dispatcher releases one request every 1/rate s into a
/// queue that `workers` keep-alive connections drain. Latency is measured from
/// the scheduled time, so a request queued behind a slow one counts its wait.
async fn fixed_rate(
    dialer: &Dialer,
    path: &str,
    rate: f64,
    workers: usize,
    t: Timing,
) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    if workers == 0 {
        bail!("--concurrency must be at least 1");
    }
    let total = (rate * (t.warmup + t.duration).as_secs_f64()).ceil() as u64;
    let warm = (rate * t.warmup.as_secs_f64()).ceil() as u64;
    let (tx, rx) = tokio::sync::mpsc::channel::<(u64, Instant)>(total.max(1) as usize);
    let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let dialer = dialer.clone();
        let path = path.to_owned();
        let rx = rx.clone();
        set.spawn(async move {
            let mut conn = None;
            let mut micros = Vec::new();
            loop {
                let next = rx.lock().await.recv().await;
                let Some((i, scheduled)) = next else { break };
                one_request(&dialer, &path, &mut conn, true, t.timeout).await?;
                if i >= warm {
                    micros.push(scheduled.elapsed().as_secs_f64() * 1e6);
                }
            }
            anyhow::Ok(micros)
        });
    }
    // The pacer is a plain thread: tokio's timer has millisecond granularity,
    // which would add up to 1 ms of lateness to every scheduled send, while
    // nanosleep(2) wakes within tens of microseconds and does not spin.
    let pacer = std::thread::spawn(move || {
        let start = Instant::now() + Duration::from_millis(50);
        let interval = Duration::from_secs_f64(1.0 / rate);
        for i in 0..total {
            let at = start + interval.mul_f64(i as f64);
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if tx.blocking_send((i, at)).is_err() {
                break;
            }
        }
    });
    let mut micros = Vec::new();
    while let Some(done) = set.join_next().await {
        micros.extend(done.context("a load worker panicked")??);
    }
    pacer
        .join()
        .map_err(|_| anyhow::anyhow!("the request pacer thread panicked"))?;
    let achieved = micros.len() as f64 / t.duration.as_secs_f64();
    let summary = stats::Percentiles::of(&mut micros)
        .context("no request completed inside the measured window; raise --duration")?;
    Ok(BTreeMap::from([
        ("requests", micros.len() as f64),
        ("achieved_req_per_s", achieved),
        ("p50_us", summary.p50),
        ("p99_us", summary.p99),
        ("mean_us", summary.mean),
        ("max_us", summary.max),
    ]))
}

/// Many idle connections at once: what a proxy pays per open connection.
async fn hold(
    dialer: &Dialer,
    path: &str,
    count: usize,
    rss_pid: Option<u32>,
    hold_s: f64,
    t: Timing,
) -> anyhow::Result<BTreeMap<&'static str, f64>> {
    let before = rss_pid.map(|p| rss::read_kib(p, "VmRSS")).transpose()?;
    let mut set = tokio::task::JoinSet::new();
    // Bounded parallel opening so a slow proxy is not timed out by a burst of 1000 handshakes.
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(64));
    for _ in 0..count {
        let dialer = dialer.clone();
        let path = path.to_owned();
        let gate = gate.clone();
        set.spawn(async move {
            let permit = gate.acquire_owned().await?;
            let mut conn = timed(t.timeout, "connecting", dialer.open()).await?;
            timed(t.timeout, "a request", conn.get(&path)).await?;
            drop(permit);
            anyhow::Ok(conn)
        });
    }
    let mut open = Vec::with_capacity(count);
    let mut failed = 0u64;
    let mut first_error = None;
    while let Some(done) = set.join_next().await {
        match done.context("a connection task panicked")? {
            Ok(conn) => open.push(conn),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    // Let the proxy settle (buffers freed after the first response) before reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let still_open = open.iter().filter(|c| c.reusable()).count();
    let mut m = BTreeMap::from([
        ("opened", open.len() as f64),
        ("still_open", still_open as f64),
        ("failed", failed as f64),
    ]);
    if let Some(pid) = rss_pid {
        m.insert("vm_rss_mib", rss::read_kib(pid, "VmRSS")? as f64 / 1024.0);
        m.insert("vm_hwm_mib", rss::read_kib(pid, "VmHWM")? as f64 / 1024.0);
        if let Some(b) = before {
            m.insert("idle_rss_mib", b as f64 / 1024.0);
        }
    }
    if let Some(e) = first_error {
        eprintln!("airlock-bench: {failed} of {count} connections failed; first: {e:#}");
    }
    tokio::time::sleep(Duration::from_secs_f64(hold_s.max(0.0))).await;
    drop(open);
    Ok(m)
}

/// `http://[USER:PASS@]HOST:PORT` from $HTTPS_PROXY (or the lower-case / HTTP_
/// variants), resolved once, with the `Proxy-Authorization: Basic` value for
/// its user info (sandbox-runtime puts a per-session token there).
fn proxy_from_env() -> anyhow::Result<(SocketAddr, Option<String>)> {
    use base64::Engine as _;
    use std::net::ToSocketAddrs as _;
    let (name, value) = ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"]
        .iter()
        .find_map(|k| std::env::var(k).ok().map(|v| (*k, v)))
        .context(
            "--proxy-from-env: none of HTTPS_PROXY/https_proxy/HTTP_PROXY/http_proxy is set",
        )?;
    let rest = value.trim_start_matches("http://").trim_end_matches('/');
    let (userinfo, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let addr = hostport
        .to_socket_addrs()
        .with_context(|| format!("${name}: {hostport:?} is not HOST:PORT"))?
        .next()
        .with_context(|| format!("${name}: {hostport:?} resolved to no address"))?;
    let auth = userinfo.map(|u| {
        let decoded = percent_encoding::percent_decode_str(u).decode_utf8_lossy();
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(decoded.as_bytes())
        )
    });
    Ok((addr, auth))
}
