//! What the stronger boundary costs (issue 37): `airlock run` under
//! `--isolation namespaces` and `--isolation gvisor`, next to bwrap and
//! gVisor's own `runsc do`, measured in the same run by bench/isolation.bash.
//! Every figure is given as a ratio to bwrap (a sandbox with nothing of
//! Airlock's) and to the namespace sandbox that records the same way
//! (audited with audited, `--no-audit` with `--no-audit`), and what the
//! record costs under each isolation.

use std::fmt::Write as _;

use super::{Figures, RawSample, cell, escape, fmt, note_of};

const BWRAP: &str = "bwrap";

/// One table of the section: a case and how to read its figure.
struct Case {
    case: &'static str,
    title: &'static str,
    metric: &'static str,
    unit: &'static str,
    /// More is better (requests/s) rather than less (a duration).
    rate: bool,
    rows: &'static [Row],
    note: &'static str,
}

/// A contender, what it is, and the namespace row it is compared with.
struct Row {
    contender: &'static str,
    what: &'static str,
    namespaces: Option<&'static str>,
}

const fn row(contender: &'static str, what: &'static str, namespaces: Option<&'static str>) -> Row {
    Row {
        contender,
        what,
        namespaces,
    }
}

const NS: &str = "airlock-namespaces";
const NS_NO_AUDIT: &str = "airlock-namespaces-no-audit";
const GV: &str = "airlock-gvisor";
const GV_NO_AUDIT: &str = "airlock-gvisor-no-audit";

const CASES: [Case; 3] = [
    Case {
        case: "isolation-startup",
        title: "Start-up: wall time of `CMD /bin/true`",
        metric: "wall_ms",
        unit: "ms",
        rate: false,
        rows: &[
            row(
                BWRAP,
                "`bwrap --unshare-all --die-with-parent`, `/` read-only",
                None,
            ),
            row(
                "runsc-do",
                "`runsc --network=none do`: gVisor alone, nothing of Airlock's",
                None,
            ),
            row(NS_NO_AUDIT, "`airlock run --no-audit`", None),
            row(NS, "`airlock run` (audited)", None),
            row(
                GV_NO_AUDIT,
                "`airlock run --isolation gvisor --no-audit`",
                Some(NS_NO_AUDIT),
            ),
            row(GV, "`airlock run --isolation gvisor` (audited)", Some(NS)),
        ],
        note: "",
    },
    Case {
        case: "isolation-keepalive",
        title: "Keep-alive HTTPS requests/s from inside the sandbox (airlock-bench load, 16 connections, GET /small)",
        metric: "req_per_s",
        unit: "req/s",
        rate: true,
        rows: &[
            row(
                "direct",
                "no sandbox: the client on the host, straight to nginx",
                None,
            ),
            row(
                BWRAP,
                "inside bwrap (`--unshare-all --share-net`), straight to nginx",
                None,
            ),
            row(
                "runsc-do",
                "inside `runsc --network=host do`, straight to nginx over runsc's veth",
                None,
            ),
            row(
                NS,
                "inside `airlock run` (audited): captured, TLS intercepted, recorded",
                None,
            ),
            row(
                GV,
                "inside `airlock run --isolation gvisor` (audited)",
                Some(NS),
            ),
        ],
        note: "bwrap and runsc do have no proxy: they are the direct-from-a-sandbox references \
               (no capture, no interception, no policy, no record), so a ratio to them includes \
               the proxy's hop; the ratio to namespaces is the boundary's cost alone.",
    },
    Case {
        case: "isolation-workload",
        title: "The auditing-overhead workload (execs, file writes, HTTPS requests through curl)",
        metric: "wall_ms",
        unit: "ms",
        rate: false,
        rows: &[
            row(
                BWRAP,
                "inside bwrap (`--share-net`): curl straight to nginx, nothing recorded",
                None,
            ),
            row(NS_NO_AUDIT, "`airlock run --no-audit`", None),
            row(NS, "`airlock run` (audited)", None),
            row(
                GV_NO_AUDIT,
                "`airlock run --isolation gvisor --no-audit`",
                Some(NS_NO_AUDIT),
            ),
            row(GV, "`airlock run --isolation gvisor` (audited)", Some(NS)),
        ],
        note: "bwrap has no proxy and no record: its curl goes straight to nginx \
               (`--resolve`, nginx's CA).",
    },
];

/// (audited, unaudited) pairs: what the record costs under each isolation.
const RECORD_PAIRS: [(&str, &str, &str); 2] =
    [("namespaces", NS, NS_NO_AUDIT), ("gvisor", GV, GV_NO_AUDIT)];

fn ratio(figures: &Figures, case: &str, metric: &str, a: &str, b: &str) -> Option<f64> {
    let a = figures.median(case, a, metric)?;
    let b = figures.median(case, b, metric).filter(|b| *b > 0.0)?;
    Some(a / b)
}

fn ratio_cell(r: Option<f64>) -> String {
    r.map_or(String::new(), |r| format!("{r:.2}"))
}

fn table(figures: &Figures, samples: &[RawSample], c: &Case) -> String {
    let mut md = String::new();
    for r in c.rows {
        let value = figures.get(c.case, r.contender, c.metric);
        if value.is_none() {
            if let Some(why) = note_of(samples, c.case, r.contender) {
                let _ = writeln!(
                    md,
                    "| {} | {} | n/a: {} | | |",
                    r.contender,
                    r.what,
                    escape(why)
                );
            }
            continue;
        }
        let to_bwrap = (r.contender != BWRAP)
            .then(|| ratio(figures, c.case, c.metric, r.contender, BWRAP))
            .flatten();
        let to_ns = r
            .namespaces
            .and_then(|ns| ratio(figures, c.case, c.metric, r.contender, ns));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            r.contender,
            r.what,
            cell(value),
            ratio_cell(to_bwrap),
            ratio_cell(to_ns)
        );
    }
    if md.is_empty() {
        return md;
    }
    let mut out = format!(
        "#### {}\n\n| contender | what | {} | ratio to bwrap | ratio to namespaces |\n\
         |---|---|---:|---:|---:|\n{md}\n\
         Ratio = contender / the other (medians); to namespaces: the namespace sandbox that \
         records the same way.",
        c.title, c.unit
    );
    if !c.note.is_empty() {
        out.push(' ');
        out.push_str(c.note);
    }
    out.push_str("\n\n");
    out
}

/// The cost of the stronger boundary in words, from the figures at hand.
fn summary(figures: &Figures) -> String {
    let mut lines = Vec::new();
    let startup = "isolation-startup";
    if let (Some(gv), Some(ns)) = (
        figures.median(startup, GV, "wall_ms"),
        figures.median(startup, NS, "wall_ms"),
    ) {
        let mut line = format!(
            "- start-up: `--isolation gvisor` takes {} ms where namespaces take {} ms \
             (audited; +{} ms, {:.1}×)",
            fmt(gv),
            fmt(ns),
            fmt(gv - ns),
            gv / ns.max(f64::MIN_POSITIVE)
        );
        if let Some(floor) = figures.median(startup, "runsc-do", "wall_ms") {
            let _ = write!(line, "; `runsc do` alone takes {} ms", fmt(floor));
        }
        lines.push(line);
    }
    if let Some(r) = ratio(figures, "isolation-keepalive", "req_per_s", GV, NS) {
        let mut line = format!(
            "- keep-alive requests/s inside the sandbox: gvisor reaches {r:.2} of namespaces'"
        );
        // What Airlock's hop costs inside gVisor, next to gVisor going direct.
        if let Some(d) = ratio(figures, "isolation-keepalive", "req_per_s", GV, "runsc-do") {
            let _ = write!(line, " and {d:.2} of `runsc do` going direct");
        }
        lines.push(line);
    }
    if let Some(r) = ratio(figures, "isolation-workload", "wall_ms", GV, NS) {
        lines.push(format!(
            "- the mixed workload (audited) takes {r:.1}× as long under gvisor as under namespaces"
        ));
    }
    for case in ["isolation-startup", "isolation-workload"] {
        let parts: Vec<String> = RECORD_PAIRS
            .iter()
            .filter_map(|(name, audited, bare)| {
                let r = ratio(figures, case, "wall_ms", audited, bare)?;
                Some(format!("{r:.2}× under {name}"))
            })
            .collect();
        if !parts.is_empty() {
            let what = if case == "isolation-startup" {
                "start-up"
            } else {
                "the workload"
            };
            lines.push(format!(
                "- the record (audited / `--no-audit`), {what}: {}",
                parts.join(", ")
            ));
        }
    }
    if lines.is_empty() {
        String::new()
    } else {
        format!("{}\n\n", lines.join("\n"))
    }
}

/// The Markdown section, empty when the isolation group did not run.
pub(super) fn section(figures: &Figures, samples: &[RawSample]) -> String {
    let tables: String = CASES.iter().map(|c| table(figures, samples, c)).collect();
    if tables.is_empty() {
        return tables;
    }
    format!(
        "### What the stronger boundary costs: namespaces, gVisor, bwrap (issue 37)\n\n\
         Measured in the same run, the contenders interleaved inside every run \
         (bench/isolation.bash).\n\n{}{tables}",
        summary(figures)
    )
}

/// The same figures for machines: `{"CASE": {"CONTENDER": {"median", "ratio_bwrap", "ratio_namespaces"}}}`.
pub(super) fn json(figures: &Figures) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for c in &CASES {
        let mut rows = serde_json::Map::new();
        for r in c.rows {
            let Some(median) = figures.median(c.case, r.contender, c.metric) else {
                continue;
            };
            let mut e = serde_json::Map::new();
            e.insert("metric".into(), c.metric.into());
            e.insert("median".into(), median.into());
            e.insert("more_is_better".into(), c.rate.into());
            if r.contender != BWRAP
                && let Some(x) = ratio(figures, c.case, c.metric, r.contender, BWRAP)
            {
                e.insert("ratio_bwrap".into(), x.into());
            }
            if let Some(x) = r
                .namespaces
                .and_then(|ns| ratio(figures, c.case, c.metric, r.contender, ns))
            {
                e.insert("ratio_namespaces".into(), x.into());
            }
            rows.insert(r.contender.into(), e.into());
        }
        if !rows.is_empty() {
            out.insert(c.case.into(), rows.into());
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(case: &str, contender: &str, metric: &str, v: f64) -> RawSample {
        serde_json::from_value(serde_json::json!({
            "case": case, "contender": contender, "run": 1, "metrics": {metric: v}
        }))
        .unwrap()
    }

    #[test]
    fn gvisor_is_compared_with_bwrap_and_with_the_namespace_sandbox_that_records_the_same_way() {
        let samples = vec![
            sample("isolation-startup", BWRAP, "wall_ms", 5.0),
            sample("isolation-startup", NS_NO_AUDIT, "wall_ms", 10.0),
            sample("isolation-startup", NS, "wall_ms", 20.0),
            sample("isolation-startup", GV_NO_AUDIT, "wall_ms", 300.0),
            sample("isolation-startup", GV, "wall_ms", 400.0),
            sample("isolation-keepalive", BWRAP, "req_per_s", 10000.0),
            sample("isolation-keepalive", NS, "req_per_s", 5000.0),
            sample("isolation-keepalive", GV, "req_per_s", 1000.0),
            sample("isolation-keepalive", "runsc-do", "req_per_s", 2000.0),
        ];
        let figures = Figures::of(&samples);
        let md = section(&figures, &samples);
        assert!(
            md.contains("| airlock-gvisor-no-audit | `airlock run --isolation gvisor --no-audit` | 300 | 60.00 | 30.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| airlock-gvisor | `airlock run --isolation gvisor` (audited) | 400 | 80.00 | 20.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| airlock-gvisor | inside `airlock run --isolation gvisor` (audited) | 1,000 | 0.10 | 0.20 |"),
            "{md}"
        );
        assert!(md.contains("+380 ms, 20.0×"), "{md}");
        assert!(
            md.contains("gvisor reaches 0.20 of namespaces' and 0.50 of `runsc do` going direct"),
            "{md}"
        );
        assert!(
            md.contains("start-up: 2.00× under namespaces, 1.33× under gvisor"),
            "{md}"
        );
        assert!(md.contains("direct-from-a-sandbox references"), "{md}");
        let json = json(&figures);
        assert_eq!(json["isolation-startup"][GV]["ratio_namespaces"], 20.0);
        assert_eq!(json["isolation-keepalive"][GV]["ratio_bwrap"], 0.1);
    }

    #[test]
    fn a_contender_that_could_not_run_is_marked_with_why() {
        let mut failed = sample("isolation-keepalive", GV, "x", 0.0);
        failed.metrics.clear();
        failed
            .params
            .insert("note".into(), "failed: connection refused".into());
        let samples = vec![
            sample("isolation-keepalive", NS, "req_per_s", 5000.0),
            failed,
        ];
        let md = section(&Figures::of(&samples), &samples);
        assert!(
            md.contains("| airlock-gvisor | inside `airlock run --isolation gvisor` (audited) | n/a: failed: connection refused | | |"),
            "{md}"
        );
    }

    #[test]
    fn nothing_is_shown_when_the_group_did_not_run() {
        let samples = vec![sample("keepalive", "direct", "req_per_s", 1000.0)];
        assert_eq!(section(&Figures::of(&samples), &samples), "");
    }
}
