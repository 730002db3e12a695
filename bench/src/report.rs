// Why this file is long (~970 lines): most of it is the declarative table of
// report columns (TABLES) and their Markdown rendering, one reading top to
// bottom; the scrubber-cost and live-session sections are their own modules.
//! Turns raw samples (one JSON line per case, contender and run) into the
//! results Markdown and JSON: medians with min/max, ratios against "direct",
//! and added latency.
//!
//! Contenders are whatever labels appear in the samples, so adding one (say
//! mitmproxy) needs only more samples, not changes here.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::machine::Machine;
use crate::stats::Spread;

mod fleet;
mod isolation;
mod rule_variants;
mod sessions;

pub(crate) const BASELINE: &str = "direct";

#[derive(clap::Args)]
pub(crate) struct ReportArgs {
    /// Raw samples, one JSON object per line (output of `load` and `rss`).
    #[arg(long)]
    samples: PathBuf,
    /// Markdown results file to write.
    #[arg(long)]
    out_md: PathBuf,
    /// JSON results file to write (summary plus every raw sample).
    #[arg(long)]
    out_json: PathBuf,
    /// Text file with the exact commands the harness ran.
    #[arg(long)]
    commands: Option<PathBuf>,
    /// Title line, e.g. "Airlock proxy benchmark, 2026-01-01T00:00Z".
    #[arg(long, default_value = "Airlock proxy benchmark")]
    title: String,
    /// Extra facts for the setup table, as KEY=VALUE (commit, mode, nginx version, ...). Repeatable.
    #[arg(long = "info", value_parser = parse_key_value)]
    info: Vec<(String, String)>,
    /// Also replace the text between the `bench:latest` markers of this file
    /// (BENCHMARKS.md) with the tables and reading.
    #[arg(long)]
    splice_into: Option<PathBuf>,
    /// Path of the results Markdown as linked from the spliced file.
    #[arg(long, requires = "splice_into")]
    results_link: Option<String>,
}

pub(crate) const SPLICE_BEGIN: &str = "<!-- bench:latest:begin -->";
pub(crate) const SPLICE_END: &str = "<!-- bench:latest:end -->";

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

#[derive(Deserialize, Serialize, Clone)]
struct RawSample {
    case: String,
    contender: String,
    run: u32,
    #[serde(default)]
    params: BTreeMap<String, serde_json::Value>,
    metrics: BTreeMap<String, f64>,
}

#[derive(Serialize)]
struct Figure {
    case: String,
    contender: String,
    metric: String,
    #[serde(flatten)]
    spread: Spread,
}

/// Aggregated figures keyed by (case, contender, metric).
struct Figures(BTreeMap<(String, String, String), Spread>);

impl Figures {
    fn of(samples: &[RawSample]) -> Self {
        let mut values: BTreeMap<(String, String, String), Vec<f64>> = BTreeMap::new();
        for s in samples {
            for (metric, v) in &s.metrics {
                values
                    .entry((s.case.clone(), s.contender.clone(), metric.clone()))
                    .or_default()
                    .push(*v);
            }
        }
        Self(
            values
                .into_iter()
                .filter_map(|(k, v)| Spread::of(&v).map(|s| (k, s)))
                .collect(),
        )
    }

    fn get(&self, case: &str, contender: &str, metric: &str) -> Option<Spread> {
        self.0
            .get(&(case.to_owned(), contender.to_owned(), metric.to_owned()))
            .copied()
    }

    fn median(&self, case: &str, contender: &str, metric: &str) -> Option<f64> {
        self.get(case, contender, metric).map(|s| s.median)
    }
}

/// How a metric compares across contenders.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// More is better (req/s, MB/s): show the ratio.
    Rate,
    /// Less is better, a duration: show the ratio and the added time.
    Latency,
    /// A size or count: shown as is.
    Plain,
}

/// What an Airlock contender must reach in one table (the issue's targets).
#[derive(Clone, Copy)]
enum Target {
    /// Ratio to the row's baseline at least this.
    RatioAtLeast(f64),
    /// Added over the baseline below this (same unit as the figure).
    AddedBelow(f64),
    /// The figure itself below this.
    Below(f64),
    /// The figure itself at least this.
    AtLeast(f64),
}

impl Target {
    fn met(self, value: f64, base: Option<f64>) -> Option<bool> {
        Some(match self {
            Self::RatioAtLeast(r) => value / base.filter(|b| *b > 0.0)? >= r,
            Self::AddedBelow(a) => value - base? < a,
            Self::Below(x) => value < x,
            Self::AtLeast(x) => value >= x,
        })
    }

    fn text(self, unit: &str) -> String {
        match self {
            Self::RatioAtLeast(r) => format!("≥ {r} × baseline"),
            Self::AddedBelow(a) => format!("< {} {unit} added", fmt(a)),
            Self::Below(x) => format!("< {} {unit}", fmt(x)),
            Self::AtLeast(x) => format!("≥ {} {unit}", fmt(x)),
        }
    }
}

struct Column {
    metric: &'static str,
    label: &'static str,
    unit: &'static str,
    kind: Kind,
    /// Checked for contenders whose name starts with "airlock".
    target: Option<Target>,
}

const fn col(
    metric: &'static str,
    label: &'static str,
    unit: &'static str,
    kind: Kind,
    target: Option<Target>,
) -> Column {
    Column {
        metric,
        label,
        unit,
        kind,
        target,
    }
}

struct Table {
    case: &'static str,
    title: &'static str,
    /// The contender ratios are taken against (sidecar rows use `direct-veth`).
    baseline: &'static str,
    columns: &'static [Column],
}

const REQS: &[Column] = &[col(
    "req_per_s",
    "requests/s",
    "req/s",
    Kind::Rate,
    Some(Target::RatioAtLeast(0.5)),
)];

/// Added p50 per keep-alive request under 200 µs, sequential or at a fixed rate.
const KEEPALIVE_LATENCY: &[Column] = &[
    col(
        "p50_us",
        "p50 µs",
        "µs",
        Kind::Latency,
        Some(Target::AddedBelow(200.0)),
    ),
    col("p99_us", "p99 µs", "µs", Kind::Latency, None),
];

const TABLES: &[Table] = &[
    Table {
        case: "keepalive",
        title: "Keep-alive HTTPS requests/s, HTTP/1.1 (airlock-bench load)",
        baseline: BASELINE,
        columns: REQS,
    },
    Table {
        case: "keepalive-own-core",
        title: "Keep-alive HTTPS requests/s with the proxy on a CPU of its own (client and nginx pinned to CPU 0, the proxy to CPU 1; airlock-bench load, HTTP/1.1)",
        baseline: BASELINE,
        columns: &[col("req_per_s", "requests/s", "req/s", Kind::Rate, None)],
    },
    Table {
        case: "wrk-h1",
        title: "Keep-alive HTTPS requests/s, HTTP/1.1 (wrk)",
        baseline: BASELINE,
        columns: REQS,
    },
    Table {
        case: "h2load-h2",
        title: "Keep-alive HTTPS requests/s, HTTP/2 (h2load)",
        baseline: BASELINE,
        columns: REQS,
    },
    Table {
        case: "newconn",
        title: "New-connection HTTPS requests/s (fresh TCP + TLS per request; fresh CONNECT when proxied)",
        baseline: BASELINE,
        columns: &[col("req_per_s", "requests/s", "req/s", Kind::Rate, None)],
    },
    Table {
        case: "latency-keepalive",
        title: "Latency, sequential requests on one keep-alive connection",
        baseline: BASELINE,
        columns: KEEPALIVE_LATENCY,
    },
    Table {
        case: "latency-newconn",
        title: "Latency, sequential requests, each on a new connection (connect + TLS + request; proxy certificate cached)",
        baseline: BASELINE,
        columns: &[
            col(
                "p50_us",
                "p50 µs",
                "µs",
                Kind::Latency,
                Some(Target::AddedBelow(2000.0)),
            ),
            col("p99_us", "p99 µs", "µs", Kind::Latency, None),
        ],
    },
    Table {
        case: "fixed-rate",
        title: "Latency at a fixed request rate (open loop, from the scheduled send time)",
        baseline: BASELINE,
        columns: KEEPALIVE_LATENCY,
    },
    Table {
        case: "download",
        title: "Large download, one connection",
        baseline: BASELINE,
        columns: &[col(
            "mb_per_s",
            "MB/s (10^6 B/s)",
            "MB/s",
            Kind::Rate,
            Some(Target::RatioAtLeast(0.6)),
        )],
    },
    Table {
        case: "download-1g",
        title: "Proxy VmRSS during a 1 GiB download (sampled every 100 ms)",
        baseline: BASELINE,
        columns: &[
            col("mb_per_s", "MB/s", "MB/s", Kind::Rate, None),
            col("rss_start_mib", "RSS start MiB", "MiB", Kind::Plain, None),
            col("rss_max_mib", "RSS max MiB", "MiB", Kind::Plain, None),
            col("rss_end_mib", "RSS end MiB", "MiB", Kind::Plain, None),
            // "Flat": the download may not grow the proxy by more than what it
            // buffers for one stream by design, the upstream HTTP/2 stream
            // window (proxy/src/upstream/mod.rs, H2_STREAM_WINDOW = 8 MiB).
            col(
                "rss_growth_mib",
                "RSS growth MiB",
                "MiB",
                Kind::Plain,
                Some(Target::Below(8.0)),
            ),
        ],
    },
    Table {
        case: "rss-idle",
        title: "Proxy VmRSS idle (after start-up, before any traffic)",
        baseline: BASELINE,
        columns: &[col(
            "vm_rss_mib",
            "VmRSS MiB",
            "MiB",
            Kind::Plain,
            Some(Target::Below(20.0)),
        )],
    },
    Table {
        case: "hold",
        title: "Proxy memory holding many concurrent connections (each did TLS + one request)",
        baseline: BASELINE,
        columns: &[
            col("opened", "connections open", "", Kind::Plain, None),
            col("vm_rss_mib", "VmRSS MiB", "MiB", Kind::Plain, None),
            col("vm_hwm_mib", "peak VmHWM MiB", "MiB", Kind::Plain, None),
        ],
    },
    Table {
        case: "startup",
        title: "Start-up: wall time of `CMD /bin/true` (spawn to exit)",
        baseline: "bare",
        columns: &[col(
            "wall_ms",
            "ms",
            "ms",
            Kind::Latency,
            Some(Target::Below(20.0)),
        )],
    },
    Table {
        case: "audit-workload",
        title: "Auditing overhead: mixed workload in `airlock run` (execs, file writes, HTTPS requests)",
        baseline: "airlock-no-audit",
        columns: &[col("wall_ms", "wall ms", "ms", Kind::Latency, None)],
    },
    Table {
        case: "ingest",
        title: "Auditor raw ingest rate (auditor/examples/ingest_bench.rs)",
        baseline: BASELINE,
        columns: &[col(
            "events_per_s",
            "events/s",
            "events/s",
            Kind::Plain,
            Some(Target::AtLeast(100_000.0)),
        )],
    },
    Table {
        case: "search",
        title: "Search across sessions by host and by file path (auditor/examples/search_bench.rs; full runs: 1,000 sessions, 1,000,000 events)",
        baseline: BASELINE,
        columns: &[
            col(
                "host_ms",
                "by host, median ms",
                "ms",
                Kind::Plain,
                Some(Target::Below(100.0)),
            ),
            col(
                "file_ms",
                "by file, median ms",
                "ms",
                Kind::Plain,
                Some(Target::Below(100.0)),
            ),
        ],
    },
    Table {
        case: "fleet-ingest",
        title: "Fleet: aggregate ingest into PostgreSQL from 10 concurrent shippers, one `Shipper::drain` per node database (auditor/examples/ship_bench.rs)",
        baseline: BASELINE,
        columns: &[col(
            "events_per_s",
            "events/s",
            "events/s",
            Kind::Plain,
            // Issue 31.
            Some(Target::AtLeast(50_000.0)),
        )],
    },
    Table {
        case: "fleet-lag",
        title: "Fleet: ship lag, from `record` to shipped (committed in PostgreSQL), at 1,000 events/s per node (ship_bench)",
        baseline: BASELINE,
        columns: &[
            col("p50_ms", "p50 ms", "ms", Kind::Plain, None),
            col(
                "p99_ms",
                "p99 ms",
                "ms",
                Kind::Plain,
                Some(Target::Below(1000.0)),
            ),
            col("max_ms", "max ms", "ms", Kind::Plain, None),
        ],
    },
    Table {
        case: "fleet-search",
        title: "Fleet: search by host in PostgreSQL, from opening the store read-only to holding the events (ship_bench; full runs 10,000,000 events, quick 1,000,000)",
        baseline: BASELINE,
        columns: &[
            col(
                "host_ms",
                "exact host, median ms",
                "ms",
                Kind::Plain,
                Some(Target::Below(100.0)),
            ),
            col(
                "domain_ms",
                "*.domain, median ms",
                "ms",
                Kind::Plain,
                Some(Target::Below(100.0)),
            ),
        ],
    },
    Table {
        case: "policy-replay",
        title: "`airlock policy replay` of one recorded session (auditor/examples/replay_corpus.rs; contender = requests replayed)",
        baseline: BASELINE,
        columns: &[col(
            "wall_ms",
            "wall ms",
            "ms",
            Kind::Latency,
            // Issue 18: 100,000 recorded requests in under 2 s.
            Some(Target::Below(2000.0)),
        )],
    },
];

/// The sidecar runs in its own network namespace: compare it with the same veth path.
fn baseline_for(table: &Table, contender: &str) -> &'static str {
    if table.baseline == BASELINE && contender.starts_with("airlock-sidecar") {
        "direct-veth"
    } else {
        table.baseline
    }
}

pub(crate) fn run(args: ReportArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.samples)
        .with_context(|| format!("reading samples from {}", args.samples.display()))?;
    let samples: Vec<RawSample> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{} line {}: not a sample", args.samples.display(), i + 1))
        })
        .collect::<anyhow::Result<_>>()?;
    if samples.is_empty() {
        bail!(
            "{} holds no samples: did every load run fail?",
            args.samples.display()
        );
    }
    let commands = match &args.commands {
        Some(p) => std::fs::read_to_string(p)
            .with_context(|| format!("reading commands from {}", p.display()))?,
        None => String::new(),
    };
    let machine = Machine::probe();
    let figures = Figures::of(&samples);
    let contenders = contenders(&samples);

    let markdown = render_markdown(&args, &machine, &figures, &contenders, &samples, &commands);
    std::fs::write(&args.out_md, markdown)
        .with_context(|| format!("writing {}", args.out_md.display()))?;

    if let Some(target) = &args.splice_into {
        let mut latest = String::new();
        let link = args.results_link.as_deref().unwrap_or("the results file");
        let commit = args
            .info
            .iter()
            .find(|(k, _)| k == "airlock commit")
            .map_or("unknown", |(_, v)| v.as_str());
        let _ = writeln!(
            latest,
            "From [{link}]({link}): {}, airlock commit {commit}, on {} CPU(s) ({}), {:.0} GiB, \
             kernel {}. Median of {} run(s) (min–max).\n",
            args.title,
            machine.cpus,
            machine.cpu_model,
            machine.memory_gib,
            machine.kernel,
            request_runs(&samples),
        );
        latest.push_str(&results_tables(&figures, &contenders, &samples));
        latest.push_str(&sessions::section(&figures, &samples));
        latest.push_str(&comparisons(&figures));
        latest.push_str(&rule_variants::section(
            &figures,
            &rule_variants::CREDENTIAL,
        ));
        latest.push_str(&rule_variants::section(&figures, &rule_variants::ASK));
        latest.push_str(&fleet::section(&figures));
        latest.push_str(&isolation::section(&figures, &samples));
        splice(target, &latest)?;
    }

    let summary: Vec<Figure> = figures
        .0
        .iter()
        .map(|((case, contender, metric), spread)| Figure {
            case: case.clone(),
            contender: contender.clone(),
            metric: metric.clone(),
            spread: *spread,
        })
        .collect();
    let json = serde_json::json!({
        "title": args.title,
        "info": args.info.iter().cloned().collect::<BTreeMap<_, _>>(),
        "machine": machine,
        "baseline": BASELINE,
        "contenders": contenders,
        "summary": summary,
        "derived": derived(&figures, &contenders),
        "credential": rule_variants::json(&figures, &rule_variants::CREDENTIAL),
        "ask": rule_variants::json(&figures, &rule_variants::ASK),
        "sessions": sessions::json(&figures),
        "ship_cost": fleet::json(&figures),
        "isolation": isolation::json(&figures),
        "commands": commands.lines().collect::<Vec<_>>(),
        "samples": samples,
    });
    std::fs::write(&args.out_json, serde_json::to_string_pretty(&json)? + "\n")
        .with_context(|| format!("writing {}", args.out_json.display()))?;
    Ok(())
}

/// Replaces what lies between the markers in `path`, keeping the rest of the file.
fn splice(path: &std::path::Path, content: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {} to update its latest figures", path.display()))?;
    let (Some(begin), Some(end)) = (text.find(SPLICE_BEGIN), text.find(SPLICE_END)) else {
        bail!(
            "{} lacks the {SPLICE_BEGIN} / {SPLICE_END} markers; add them where the latest figures go",
            path.display()
        );
    };
    if end < begin {
        bail!(
            "{}: {SPLICE_END} comes before {SPLICE_BEGIN}",
            path.display()
        );
    }
    let updated = format!(
        "{}{SPLICE_BEGIN}\n{}\n{}",
        &text[..begin],
        content.trim_end(),
        &text[end..]
    );
    std::fs::write(path, updated).with_context(|| format!("writing {}", path.display()))
}

/// Baseline first, then the others in order of first appearance.
fn contenders(samples: &[RawSample]) -> Vec<String> {
    let mut out = vec![BASELINE.to_owned()];
    for s in samples {
        if !out.contains(&s.contender) {
            out.push(s.contender.clone());
        }
    }
    out
}

/// Ratios, added latency and target verdicts per contender, for machines reading the JSON.
fn derived(figures: &Figures, contenders: &[String]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for c in contenders {
        let mut entries = serde_json::Map::new();
        for table in TABLES {
            let baseline = baseline_for(table, c);
            for column in table.columns {
                let Some(value) = figures.median(table.case, c, column.metric) else {
                    continue;
                };
                let base = figures.median(table.case, baseline, column.metric);
                let mut e = serde_json::Map::new();
                e.insert("median".into(), value.into());
                e.insert("baseline".into(), baseline.into());
                if let Some(b) = base.filter(|b| *b > 0.0 && c != baseline) {
                    e.insert("ratio".into(), (value / b).into());
                    if column.kind == Kind::Latency {
                        e.insert("added".into(), (value - b).into());
                    }
                }
                if let Some(t) = column.target.filter(|_| c.starts_with("airlock"))
                    && let Some(met) = t.met(value, base)
                {
                    e.insert("target".into(), t.text(column.unit).into());
                    e.insert("target_met".into(), met.into());
                }
                entries.insert(format!("{}.{}", table.case, column.metric), e.into());
            }
        }
        out.insert(c.clone(), entries.into());
    }
    out.into()
}

fn render_markdown(
    args: &ReportArgs,
    machine: &Machine,
    figures: &Figures,
    contenders: &[String],
    samples: &[RawSample],
    commands: &str,
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# {}\n", args.title);
    let runs = request_runs(samples);
    let _ = writeln!(
        md,
        "Each request figure is the median of {runs} run(s), with (min–max) over the runs; \
         start-up and workload figures are over their own runs. Ratio = contender / baseline; \
         added = contender − baseline (medians).\n"
    );
    md.push_str(&results_tables(figures, contenders, samples));
    md.push_str(&sessions::section(figures, samples));
    md.push_str(&comparisons(figures));
    md.push_str(&rule_variants::section(figures, &rule_variants::CREDENTIAL));
    md.push_str(&rule_variants::section(figures, &rule_variants::ASK));
    md.push_str(&fleet::section(figures));
    md.push_str(&isolation::section(figures, samples));
    md.push_str("\n## Machine\n\n| | |\n|---|---|\n");
    for (k, v) in machine.rows() {
        let _ = writeln!(md, "| {k} | {} |", escape(&v));
    }
    if !args.info.is_empty() {
        md.push_str("\n## Setup\n\n| | |\n|---|---|\n");
        for (k, v) in &args.info {
            let _ = writeln!(md, "| {} | {} |", escape(k), escape(v));
        }
    }
    if !commands.trim().is_empty() {
        md.push_str("\n## Commands\n\n```sh\n");
        md.push_str(commands.trim_end());
        md.push_str("\n```\n");
    }
    md
}

/// Runs of the request cases (start-up timings number their runs separately;
/// an isolation-only run has only the isolation group's keep-alive).
fn request_runs(samples: &[RawSample]) -> u32 {
    let case = if samples.iter().any(|s| s.case == "keepalive") {
        "keepalive"
    } else {
        "isolation-keepalive"
    };
    samples
        .iter()
        .filter(|s| s.case == case)
        .map(|s| s.run)
        .max()
        .unwrap_or(0)
}

fn note_of<'a>(samples: &'a [RawSample], case: &str, contender: &str) -> Option<&'a str> {
    samples
        .iter()
        .filter(|s| s.case == case && s.contender == contender)
        .find_map(|s| s.params.get("note").and_then(|v| v.as_str()))
}

/// The per-case tables (a row per contender), also copied into BENCHMARKS.md by bench/run.
fn results_tables(figures: &Figures, contenders: &[String], samples: &[RawSample]) -> String {
    let mut md = String::new();
    for table in TABLES {
        if !samples.iter().any(|s| s.case == table.case) {
            continue;
        }
        let _ = writeln!(
            md,
            "### {}{}\n",
            table.title,
            case_params(table.case, samples)
        );
        let has_target = table.columns.iter().any(|c| c.target.is_some());
        let mut header = String::from("| contender |");
        let mut rule = String::from("|---|");
        for column in table.columns {
            let _ = write!(header, " {} |", column.label);
            rule.push_str("---:|");
            if column.kind != Kind::Plain {
                let _ = write!(header, " ratio |");
                rule.push_str("---:|");
            }
            if column.kind == Kind::Latency {
                let _ = write!(header, " added |");
                rule.push_str("---:|");
            }
        }
        if has_target {
            header.push_str(" target |");
            rule.push_str("---|");
        }
        let _ = writeln!(md, "{header}\n{rule}");
        // The table's baseline first, then the others in the order they were measured.
        let ordered = contenders
            .iter()
            .filter(|c| c.as_str() == table.baseline)
            .chain(contenders.iter().filter(|c| c.as_str() != table.baseline));
        for c in ordered {
            let has_figure = table
                .columns
                .iter()
                .any(|col| figures.get(table.case, c, col.metric).is_some());
            let note = note_of(samples, table.case, c);
            if !has_figure && note.is_none() {
                continue;
            }
            let baseline = baseline_for(table, c);
            let _ = write!(md, "| {c} |");
            if !has_figure {
                let span = table
                    .columns
                    .iter()
                    .map(|col| match col.kind {
                        Kind::Plain => 1,
                        Kind::Rate => 2,
                        Kind::Latency => 3,
                    })
                    .sum::<usize>()
                    + usize::from(has_target);
                let _ = write!(md, " n/a: {} |", escape(note.unwrap_or_default()));
                md.push_str(&" |".repeat(span.saturating_sub(1)));
                md.push('\n');
                continue;
            }
            let mut verdicts = Vec::new();
            for column in table.columns {
                let value = figures.get(table.case, c, column.metric);
                let base = figures.get(table.case, baseline, column.metric);
                let _ = write!(md, " {} |", cell(value));
                let pair = match (base, value) {
                    (Some(b), Some(v)) if b.median > 0.0 && c != baseline => {
                        Some((b.median, v.median))
                    }
                    _ => None,
                };
                if column.kind != Kind::Plain {
                    let ratio = pair.map_or(String::new(), |(b, v)| format!("{:.2}", v / b));
                    let _ = write!(md, " {ratio} |");
                }
                if column.kind == Kind::Latency {
                    let added = pair.map_or(String::new(), |(b, v)| signed(v - b));
                    let _ = write!(md, " {added} |");
                }
                if let (Some(t), Some(v)) = (column.target, value)
                    && c.starts_with("airlock")
                    && let Some(met) = t.met(v.median, base.map(|b| b.median))
                {
                    verdicts.push(format!(
                        "{} {}",
                        if met { "✓" } else { "✗" },
                        t.text(column.unit)
                    ));
                }
            }
            if has_target {
                let _ = write!(md, " {} |", verdicts.join("; "));
            }
            md.push('\n');
        }
        let baselines: Vec<&str> = {
            let mut b: Vec<&str> = contenders
                .iter()
                .map(|c| baseline_for(table, c))
                .filter(|b| {
                    figures
                        .0
                        .keys()
                        .any(|(case, c, _)| case == table.case && c == b)
                })
                .collect();
            b.dedup();
            b
        };
        if table.columns.iter().any(|c| c.kind != Kind::Plain) && !baselines.is_empty() {
            let _ = writeln!(
                md,
                "\nRatio and added are against `{}`{}.",
                table.baseline,
                if baselines.contains(&"direct-veth") {
                    " (`airlock-sidecar` against `direct-veth`, the same client in the same network namespace without the sidecar)"
                } else {
                    ""
                }
            );
        }
        md.push('\n');
    }
    md
}

/// Cross-contender targets: Airlock against mitmproxy and Squid.
fn comparisons(figures: &Figures) -> String {
    let mut lines = Vec::new();
    for case in ["keepalive", "newconn"] {
        let Some(airlock) = figures.median(case, "airlock-explicit", "req_per_s") else {
            continue;
        };
        if let Some(m) = figures
            .median(case, "mitmproxy", "req_per_s")
            .filter(|m| *m > 0.0)
        {
            let x = airlock / m;
            let mark = if case == "keepalive" {
                if x >= 10.0 {
                    "✓ (target ≥ 10×)"
                } else {
                    "✗ (target ≥ 10×)"
                }
            } else {
                ""
            };
            lines.push(format!(
                "- {case}: airlock-explicit is {x:.1}× mitmproxy {mark}"
            ));
        }
        if let Some(sq) = figures
            .median(case, "squid-ssl-bump", "req_per_s")
            .filter(|m| *m > 0.0)
        {
            let x = airlock / sq;
            let mark = if case == "keepalive" {
                if x > 1.0 {
                    "✓ (target: ahead)"
                } else {
                    "✗ (target: ahead)"
                }
            } else {
                ""
            };
            lines.push(format!(
                "- {case}: airlock-explicit is {x:.2}× squid-ssl-bump {mark}"
            ));
        }
    }
    lines.extend(references(figures));
    if lines.is_empty() {
        String::new()
    } else {
        format!("### Against the alternatives\n\n{}\n", lines.join("\n"))
    }
}

/// What the same hop costs in nginx, for reading the keep-alive ratios: the
/// references' own ratios to direct, and Airlock's to the TLS-terminating one.
fn references(figures: &Figures) -> Vec<String> {
    let mut lines = Vec::new();
    for case in ["keepalive", "keepalive-own-core"] {
        lines.extend(references_in(figures, case));
    }
    lines
}

fn references_in(figures: &Figures, case: &str) -> Vec<String> {
    let Some(direct) = figures
        .median(case, BASELINE, "req_per_s")
        .filter(|d| *d > 0.0)
    else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for (reference, what) in [
        (
            "nginx-tls-proxy",
            "nginx terminating and re-encrypting TLS, no policy or audit",
        ),
        ("nginx-tcp-relay", "nginx copying bytes, no TLS work"),
    ] {
        let Some(r) = figures
            .median(case, reference, "req_per_s")
            .filter(|r| *r > 0.0)
        else {
            continue;
        };
        let mut line = format!(
            "- {case}: {reference} ({what}) reaches {:.2} of direct",
            r / direct
        );
        if let Some(a) = figures.median(case, "airlock-explicit", "req_per_s") {
            line.push_str(&format!("; airlock-explicit is {:.2}× it", a / r));
        }
        lines.push(line);
    }
    lines
}

/// "(16 connections, GET /small, 4 s)" from the first sample of a case.
fn case_params(case: &str, samples: &[RawSample]) -> String {
    let Some(s) = samples.iter().find(|s| s.case == case) else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let Some(c) = s.params.get("concurrency").and_then(|v| v.as_u64())
        && c > 1
    {
        parts.push(format!("{c} connections"));
    }
    if let Some(p) = s.params.get("path").and_then(|v| v.as_str()) {
        parts.push(format!("GET {p}"));
    }
    if let Some(d) = s.params.get("duration_s").and_then(|v| v.as_f64()) {
        parts.push(format!("{d} s measured per run"));
    }
    if case.contains("newconn")
        && let Some(r) = s.params.get("resumption").and_then(|v| v.as_str())
    {
        parts.push(format!("TLS resumption {r}"));
    }
    if case.starts_with("fleet-") {
        for (key, what) in [
            ("shippers", "shippers"),
            ("nodes", "nodes"),
            ("rate", "events/s per node"),
            ("events", "events"),
        ] {
            // Given by bench/run as text (`airlock-bench sample --param`).
            if let Some(v) = s
                .params
                .get(key)
                .and_then(|v| v.as_str()?.parse::<f64>().ok())
            {
                parts.push(format!("{} {what}", fmt(v)));
            }
        }
    }
    if case == "download"
        && let Some(b) = s.metrics.get("bytes")
    {
        parts.push(format!("{:.0} MiB", b / 1024.0 / 1024.0));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

fn cell(s: Option<Spread>) -> String {
    match s {
        Some(s) if s.runs > 1 => format!("{} ({}–{})", fmt(s.median), fmt(s.min), fmt(s.max)),
        Some(s) => fmt(s.median),
        None => "n/a".to_owned(),
    }
}

/// Three significant-ish digits without scientific notation, thousands separated.
fn fmt(v: f64) -> String {
    if v.abs() >= 100.0 {
        let rounded = v.round() as i64;
        let digits = rounded.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, ch) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(ch);
        }
        if rounded < 0 { format!("-{out}") } else { out }
    } else {
        format!("{v:.1}")
    }
}

/// "+153" / "-2,366": a difference with its sign.
fn signed(v: f64) -> String {
    if v >= 0.0 {
        format!("+{}", fmt(v))
    } else {
        fmt(v)
    }
}

fn escape(s: &str) -> String {
    s.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(case: &str, contender: &str, run: u32, metric: &str, v: f64) -> RawSample {
        RawSample {
            case: case.into(),
            contender: contender.into(),
            run,
            params: BTreeMap::new(),
            metrics: BTreeMap::from([(metric.to_owned(), v)]),
        }
    }

    #[test]
    fn tables_show_median_ratio_and_added_latency() {
        let samples = vec![
            sample("keepalive", "direct", 1, "req_per_s", 1000.0),
            sample("keepalive", "direct", 2, "req_per_s", 3000.0),
            sample("keepalive", "direct", 3, "req_per_s", 2000.0),
            sample("keepalive", "airlock-explicit", 1, "req_per_s", 500.0),
            sample("keepalive", "airlock-explicit", 2, "req_per_s", 1000.0),
            sample("keepalive", "airlock-explicit", 3, "req_per_s", 900.0),
            sample("latency-keepalive", "direct", 1, "p50_us", 100.0),
            sample("latency-keepalive", "airlock-explicit", 1, "p50_us", 250.0),
        ];
        let figures = Figures::of(&samples);
        let md = results_tables(&figures, &contenders(&samples), &samples);
        assert!(
            md.contains("| airlock-explicit | 900 (500–1,000) | 0.45 | ✗ ≥ 0.5 × baseline |"),
            "{md}"
        );
        assert!(md.contains("| direct | 2,000 (1,000–3,000) |  |"), "{md}");
        assert!(
            md.contains("| airlock-explicit | 250 | 2.50 | +150 |"),
            "{md}"
        );
        assert!(
            !md.contains("download"),
            "cases without samples are left out: {md}"
        );
    }

    #[test]
    fn references_give_the_keepalive_ratios_their_scale() {
        let samples = vec![
            sample("keepalive", "direct", 1, "req_per_s", 1000.0),
            sample("keepalive", "airlock-explicit", 1, "req_per_s", 200.0),
            sample("keepalive", "nginx-tls-proxy", 1, "req_per_s", 400.0),
            sample("keepalive", "nginx-tcp-relay", 1, "req_per_s", 550.0),
        ];
        let text = comparisons(&Figures::of(&samples));
        assert!(
            text.contains("nginx-tls-proxy (nginx terminating and re-encrypting TLS, no policy or audit) reaches 0.40 of direct; airlock-explicit is 0.50× it"),
            "{text}"
        );
        assert!(
            text.contains(
                "nginx-tcp-relay (nginx copying bytes, no TLS work) reaches 0.55 of direct"
            ),
            "{text}"
        );
    }

    #[test]
    fn unmeasured_contenders_are_marked_not_dropped() {
        let mut note = sample("wrk-h1", "mitmproxy", 1, "x", 0.0);
        note.metrics.clear();
        note.params
            .insert("note".into(), "wrk has no proxy support".into());
        let samples = vec![sample("wrk-h1", "direct", 1, "req_per_s", 1000.0), note];
        let md = results_tables(&Figures::of(&samples), &contenders(&samples), &samples);
        assert!(
            md.contains("| mitmproxy | n/a: wrk has no proxy support |"),
            "{md}"
        );
    }

    #[test]
    fn sidecar_is_compared_with_the_veth_path() {
        let samples = vec![
            sample("keepalive", "direct", 1, "req_per_s", 1000.0),
            sample("keepalive", "direct-veth", 1, "req_per_s", 800.0),
            sample("keepalive", "airlock-sidecar", 1, "req_per_s", 400.0),
        ];
        let md = results_tables(&Figures::of(&samples), &contenders(&samples), &samples);
        assert!(md.contains("| airlock-sidecar | 400 | 0.50 | ✓"), "{md}");
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(fmt(1234567.4), "1,234,567");
        assert_eq!(fmt(999.6), "1,000");
        assert_eq!(fmt(12.34), "12.3");
        assert_eq!(fmt(-1500.0), "-1,500");
    }
}
