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

pub const BASELINE: &str = "direct";

#[derive(clap::Args)]
pub struct ReportArgs {
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

pub const SPLICE_BEGIN: &str = "<!-- bench:latest:begin -->";
pub const SPLICE_END: &str = "<!-- bench:latest:end -->";

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
    /// Less is better, in microseconds: show the ratio and the added time.
    Latency,
}

struct Table {
    case: &'static str,
    title: &'static str,
    rows: &'static [(&'static str, &'static str, Kind)],
}

const TABLES: &[Table] = &[
    Table {
        case: "keepalive",
        title: "Keep-alive HTTPS requests/s",
        rows: &[("req_per_s", "requests/s", Kind::Rate)],
    },
    Table {
        case: "newconn",
        title: "New-connection HTTPS requests/s (fresh TCP + TLS per request; fresh CONNECT when proxied)",
        rows: &[("req_per_s", "requests/s", Kind::Rate)],
    },
    Table {
        case: "latency-keepalive",
        title: "Latency, sequential requests on one keep-alive connection",
        rows: &[
            ("p50_us", "p50 (µs)", Kind::Latency),
            ("p99_us", "p99 (µs)", Kind::Latency),
        ],
    },
    Table {
        case: "latency-newconn",
        title: "Latency, sequential requests, each on a new connection (connect + TLS + request)",
        rows: &[
            ("p50_us", "p50 (µs)", Kind::Latency),
            ("p99_us", "p99 (µs)", Kind::Latency),
        ],
    },
    Table {
        case: "download",
        title: "Large download, one connection",
        rows: &[("mb_per_s", "MB/s (10^6 B/s)", Kind::Rate)],
    },
];

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
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
            samples.iter().map(|s| s.run).max().unwrap_or(0),
        );
        latest.push_str(&results_tables(&figures, &contenders, &samples));
        latest.push('\n');
        latest.push_str(&reading(&figures, &contenders, &machine, &args.info));
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

/// Ratios and added latency per contender, for machines reading the JSON.
fn derived(figures: &Figures, contenders: &[String]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for c in contenders.iter().filter(|c| *c != BASELINE) {
        let mut entries = serde_json::Map::new();
        for table in TABLES {
            for (metric, _, kind) in table.rows {
                let (Some(base), Some(value)) = (
                    figures.median(table.case, BASELINE, metric),
                    figures.median(table.case, c, metric),
                ) else {
                    continue;
                };
                let key = format!("{}.{}", table.case, metric);
                let mut e = serde_json::Map::new();
                if base > 0.0 {
                    e.insert("ratio".into(), (value / base).into());
                }
                if *kind == Kind::Latency {
                    e.insert("added_us".into(), (value - base).into());
                }
                entries.insert(key, e.into());
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
    let runs = samples.iter().map(|s| s.run).max().unwrap_or(0);
    let _ = writeln!(
        md,
        "Each figure is the median of {runs} run(s), with (min–max) over the runs. \
         Ratio = contender / direct; added = contender − direct (medians).\n"
    );
    md.push_str(&results_tables(figures, contenders, samples));
    md.push_str("\n## Reading\n\n");
    md.push_str(&reading(figures, contenders, machine, &args.info));
    md.push_str("\n\n## Machine\n\n| | |\n|---|---|\n");
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

/// The per-case tables, also copied into BENCHMARKS.md by bench/run.
fn results_tables(figures: &Figures, contenders: &[String], samples: &[RawSample]) -> String {
    let mut md = String::new();
    let others: Vec<&String> = contenders.iter().filter(|c| *c != BASELINE).collect();
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
        let has_latency = table.rows.iter().any(|r| r.2 == Kind::Latency);
        let mut header = String::from("| | direct |");
        let mut rule = String::from("|---|---:|");
        for c in &others {
            let _ = write!(header, " {c} | ratio |");
            rule.push_str("---:|---:|");
            if has_latency {
                let _ = write!(header, " added |");
                rule.push_str("---:|");
            }
        }
        let _ = writeln!(md, "{header}\n{rule}");
        for (metric, label, kind) in table.rows {
            let base = figures.get(table.case, BASELINE, metric);
            let _ = write!(md, "| {label} | {} |", cell(base));
            for c in &others {
                let value = figures.get(table.case, c, metric);
                let ratio = match (base, value) {
                    (Some(b), Some(v)) if b.median > 0.0 => format!("{:.2}", v.median / b.median),
                    _ => "n/a".to_owned(),
                };
                let _ = write!(md, " {} | {ratio} |", cell(value));
                if has_latency {
                    let added = match (base, value, kind) {
                        (Some(b), Some(v), Kind::Latency) => {
                            format!("{:+.0} µs", v.median - b.median)
                        }
                        _ => String::new(),
                    };
                    let _ = write!(md, " {added} |");
                }
            }
            md.push('\n');
        }
        md.push('\n');
    }
    let rss: Vec<&String> = others
        .iter()
        .copied()
        .filter(|c| figures.get("rss-idle", c, "vm_rss_mib").is_some())
        .collect();
    if !rss.is_empty() {
        md.push_str("### Proxy memory (from /proc/PID/status)\n\n");
        md.push_str("| | idle VmRSS (MiB) | VmRSS after all cases (MiB) | peak VmHWM over all cases (MiB) |\n|---|---:|---:|---:|\n");
        for c in rss {
            let _ = writeln!(
                md,
                "| {c} | {} | {} | {} |",
                num(figures.median("rss-idle", c, "vm_rss_mib")),
                num(figures.median("rss-after-all-cases", c, "vm_rss_mib")),
                num(figures.median("rss-after-all-cases", c, "vm_hwm_mib")),
            );
        }
    }
    md
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

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.1}"))
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

fn escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A few sentences saying what the figures mean, filled from the figures.
fn reading(
    f: &Figures,
    contenders: &[String],
    machine: &Machine,
    info: &[(String, String)],
) -> String {
    let Some(c) = contenders.iter().find(|c| *c != BASELINE) else {
        return "Only the direct baseline was measured.".to_owned();
    };
    let mut s = Vec::new();
    let pct = |case: &str, metric: &str| -> Option<(f64, f64, f64)> {
        let d = f.median(case, BASELINE, metric)?;
        let p = f.median(case, c, metric)?;
        (d > 0.0).then(|| (p / d * 100.0, p, d))
    };
    if let (Some(ka), Some(nc)) = (pct("keepalive", "req_per_s"), pct("newconn", "req_per_s")) {
        s.push(format!(
            "Through {c}, keep-alive throughput is {:.0}% of direct ({} vs {} requests/s) and \
             new-connection throughput is {:.0}% of direct ({} vs {}): every proxied request is \
             decrypted, checked against the policy, logged as an event line (to a file, \
             as deployed) and re-encrypted towards nginx. A new proxied connection pays a CONNECT exchange and a TLS handshake \
             with the proxy (certificate minted for bench.test) instead of with nginx, while the \
             proxy reuses pooled connections to nginx; that is why the new-connection ratio sits \
             much closer to 1 than the keep-alive one, and can exceed it when the client's and \
             the server's handshakes, not forwarding, are what saturates the cores.",
            ka.0,
            fmt(ka.1),
            fmt(ka.2),
            nc.0,
            fmt(nc.1),
            fmt(nc.2)
        ));
    }
    let added = |case: &str, m: &str| Some(f.median(case, c, m)? - f.median(case, BASELINE, m)?);
    if let (Some(a50), Some(a99)) = (
        added("latency-keepalive", "p50_us"),
        added("latency-keepalive", "p99_us"),
    ) {
        let mut sentence = format!(
            "On one idle keep-alive connection the proxy {} at p50 and {} at p99",
            change(a50),
            change(a99)
        );
        if let (Some(n50), Some(n99)) = (
            added("latency-newconn", "p50_us"),
            added("latency-newconn", "p99_us"),
        ) {
            let _ = write!(
                sentence,
                "; when each request opens a new connection it {} at p50 and {} at p99",
                change(n50),
                change(n99)
            );
        }
        sentence.push('.');
        s.push(sentence);
    }
    if let Some(dl) = pct("download", "mb_per_s") {
        s.push(format!(
            "The large download streams at {} MB/s through {c} vs {} MB/s direct ({:.0}%).",
            fmt(dl.1),
            fmt(dl.2),
            dl.0
        ));
    }
    if let (Some(idle), Some(peak)) = (
        f.median("rss-idle", c, "vm_rss_mib"),
        f.median("rss-after-all-cases", c, "vm_hwm_mib"),
    ) {
        s.push(format!(
            "The proxy process used {idle:.1} MiB resident when idle and peaked at {peak:.1} MiB \
             (VmHWM) over all cases, including the concurrent and large-download ones."
        ));
    }
    let load = info
        .iter()
        .find(|(k, _)| k == "load average")
        .map(|(_, v)| {
            let v = v.split(" (").next().unwrap_or(v);
            format!(" (load average {v}; well above 2 means other work shared them too)")
        })
        .unwrap_or_default();
    s.push(format!(
        "Caveat: nginx, the proxy and the load generator share the same {} CPU(s){load}, so in \
         the proxied runs three busy processes compete for cores where the direct runs have \
         two; the ratios are therefore pessimistic compared with a proxy on its own cores, and \
         the run-to-run spread (min–max) is the noise floor to read differences against.",
        machine.cpus
    ));
    s.join(" ")
}

/// "adds 170 µs" / "measures 1.69 ms less" for a latency difference in µs.
fn change(us: f64) -> String {
    let size = |v: f64| {
        if v >= 1000.0 {
            format!("{:.2} ms", v / 1000.0)
        } else {
            format!("{v:.0} µs")
        }
    };
    if us >= 0.0 {
        format!("adds {}", size(us))
    } else {
        format!("measures {} less", size(-us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_changes_read_naturally() {
        assert_eq!(change(170.4), "adds 170 µs");
        assert_eq!(change(4980.0), "adds 4.98 ms");
        assert!(change(-1692.0).starts_with("measures 1.69 ms less"));
    }

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
            md.contains("| requests/s | 2,000 (1,000–3,000) | 900 (500–1,000) | 0.45 |"),
            "{md}"
        );
        assert!(
            md.contains("| p50 (µs) | 100 | 250 | 2.50 | +150 µs |"),
            "{md}"
        );
        assert!(
            !md.contains("download"),
            "cases without samples are left out: {md}"
        );
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(fmt(1234567.4), "1,234,567");
        assert_eq!(fmt(999.6), "1,000");
        assert_eq!(fmt(12.34), "12.3");
        assert_eq!(fmt(-1500.0), "-1,500");
    }
}
