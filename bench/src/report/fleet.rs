//! What shipping costs a node (issue 31): the audited `airlock run` figures
//! with the record streamed to a central PostgreSQL (`--audit-ship`) next
//! to the same without it, measured in the same run, interleaved. The
//! target: within 5% (keep-alive requests/s at least 0.95 times, the
//! auditing-overhead workload at most 1.05 times as long).

use std::fmt::Write as _;

use super::{Figures, cell};

/// Shipping may cost a node at most this share of a figure.
const WITHIN: f64 = 0.05;

/// One figure measured without and with `--audit-ship`.
struct Pair {
    case: &'static str,
    metric: &'static str,
    what: &'static str,
    without: &'static str,
    with: &'static str,
    /// More is better (a rate) rather than less (a duration).
    rate: bool,
    /// Held to the target; a control is shown, not judged.
    judged: bool,
}

const PAIRS: [Pair; 7] = [
    Pair {
        case: "keepalive",
        metric: "req_per_s",
        what: "keep-alive requests/s inside `airlock run`",
        without: "airlock-transparent",
        with: "airlock-transparent-ship",
        rate: true,
        judged: true,
    },
    Pair {
        case: "audit-workload",
        metric: "wall_ms",
        what: "auditing-overhead workload, wall ms",
        without: "airlock-audit",
        with: "airlock-audit-ship",
        rate: false,
        judged: true,
    },
    // The cost to the node itself, apart from the central store's work,
    // which lands on these CPUs only because the bench's store runs here.
    Pair {
        case: "node-cpu",
        metric: "us_per_req",
        what: "the airlock process's CPU per keep-alive request, µs (every thread)",
        without: "airlock-transparent",
        with: "airlock-transparent-ship",
        rate: false,
        judged: true,
    },
    Pair {
        case: "node-cpu",
        metric: "ship_us_per_req",
        what: "of which the shipper thread (`audit-ship`), µs",
        without: "airlock-transparent",
        with: "airlock-transparent-ship",
        rate: false,
        judged: true,
    },
    // A shipper that falls behind ships the rest after the load: its cost
    // is then outside the measured window, and shows here instead.
    Pair {
        case: "node-cpu",
        metric: "tail_s",
        what: "seconds `airlock run` goes on after its client stopped (what was left to ship)",
        without: "airlock-transparent",
        with: "airlock-transparent-ship",
        rate: false,
        judged: true,
    },
    Pair {
        case: "keepalive-pg-apart",
        metric: "req_per_s",
        what: "keep-alive requests/s, PostgreSQL on CPU 1, the node (nginx, airlock, client) on CPU 0",
        without: "airlock-transparent",
        with: "airlock-transparent-ship",
        rate: true,
        judged: true,
    },
    // The control for the row above: no shipping, and CPU 1 busy with a
    // loop that touches no memory and shares nothing with the node. What
    // it costs CPU 0 is what any work on CPU 1 costs it on this machine
    // (two vCPUs of one host), the store's included.
    Pair {
        case: "keepalive-pg-apart",
        metric: "req_per_s",
        what: "control: the same without `--audit-ship`, a busy loop on CPU 1 instead of the store's work",
        without: "airlock-transparent",
        with: "airlock-transparent-cpu1-busy",
        rate: true,
        judged: false,
    },
];

impl Pair {
    /// with / without, and whether it is within the target.
    fn ratio(&self, figures: &Figures) -> Option<(f64, bool)> {
        let without = figures.median(self.case, self.without, self.metric)?;
        let with = figures.median(self.case, self.with, self.metric)?;
        if without <= 0.0 {
            return None;
        }
        let ratio = with / without;
        let met = match self.rate {
            true => ratio >= 1.0 - WITHIN,
            false => ratio <= 1.0 + WITHIN,
        };
        Some((ratio, met))
    }

    /// The target column: yes or no when judged.
    fn verdict(&self, met: bool) -> &'static str {
        match (self.judged, met) {
            (false, _) => "(control)",
            (true, true) => "yes",
            (true, false) => "no",
        }
    }
}

/// The Markdown section, empty when nothing was shipped.
pub(super) fn section(figures: &Figures) -> String {
    let mut md = String::new();
    for pair in &PAIRS {
        let with = figures.get(pair.case, pair.with, pair.metric);
        if with.is_none() {
            continue;
        }
        let without = figures.get(pair.case, pair.without, pair.metric);
        let (ratio, met) = match pair.ratio(figures) {
            Some((r, met)) => (format!("{r:.3}"), pair.verdict(met)),
            None => (String::new(), ""),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {ratio} | {met} |",
            pair.what,
            cell(without),
            cell(with)
        );
    }
    if md.is_empty() {
        return md;
    }
    format!(
        "### What shipping costs a node (`--audit-ship` to PostgreSQL)\n\n\
         | figure | without | with `--audit-ship` | with / without | within 5% |\n\
         |---|---:|---:|---:|:---:|\n{md}\n\
         Both audited; the same run, interleaved. `with` streams the record to a PostgreSQL \
         the harness started (`ship_bench serve`) as it is written; a run ends once its \
         record is shipped. The control's `with` ships nothing: CPU 1 runs a busy loop \
         instead of the store, so the ratio is what work on the other CPU alone costs \
         the node here.\n\n"
    )
}

/// The same figures for machines: `{"keepalive.req_per_s": {"without", "with", "ratio", "within_target"}}`.
pub(super) fn json(figures: &Figures) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for pair in &PAIRS {
        let Some(with) = figures.median(pair.case, pair.with, pair.metric) else {
            continue;
        };
        let mut entry = serde_json::Map::new();
        entry.insert("with".into(), with.into());
        if let Some(without) = figures.median(pair.case, pair.without, pair.metric) {
            entry.insert("without".into(), without.into());
        }
        if let Some((ratio, met)) = pair.ratio(figures) {
            entry.insert("ratio".into(), ratio.into());
            if pair.judged {
                entry.insert("within_target".into(), met.into());
            }
        }
        let key = match pair.judged {
            true => format!("{}.{}", pair.case, pair.metric),
            false => format!("{}.{}.{}", pair.case, pair.metric, pair.with),
        };
        out.insert(key, entry.into());
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::super::RawSample;
    use super::*;

    fn sample(case: &str, contender: &str, metric: &str, v: f64) -> RawSample {
        serde_json::from_value(serde_json::json!({
            "case": case, "contender": contender, "run": 1, "metrics": {metric: v}
        }))
        .unwrap()
    }

    #[test]
    fn shipping_is_judged_against_the_same_audited_figure_without_it() {
        let samples = vec![
            sample("keepalive", "airlock-transparent", "req_per_s", 1000.0),
            sample("keepalive", "airlock-transparent-ship", "req_per_s", 960.0),
            sample("audit-workload", "airlock-audit", "wall_ms", 1000.0),
            sample("audit-workload", "airlock-audit-ship", "wall_ms", 1100.0),
        ];
        let figures = Figures::of(&samples);
        let md = section(&figures);
        assert!(
            md.contains(
                "| keep-alive requests/s inside `airlock run` | 1,000 | 960 | 0.960 | yes |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| auditing-overhead workload, wall ms | 1,000 | 1,100 | 1.100 | no |"),
            "{md}"
        );
        let json = json(&figures);
        assert_eq!(json["keepalive.req_per_s"]["within_target"], true);
        assert_eq!(json["audit-workload.wall_ms"]["within_target"], false);
    }

    #[test]
    fn the_nodes_own_cost_is_judged_by_its_cpu_per_request_and_with_the_store_apart() {
        let samples = vec![
            sample("node-cpu", "airlock-transparent", "us_per_req", 40.0),
            sample("node-cpu", "airlock-transparent-ship", "us_per_req", 41.0),
            sample("node-cpu", "airlock-transparent", "ship_us_per_req", 0.0),
            sample(
                "node-cpu",
                "airlock-transparent-ship",
                "ship_us_per_req",
                0.5,
            ),
            sample(
                "keepalive-pg-apart",
                "airlock-transparent",
                "req_per_s",
                1000.0,
            ),
            sample(
                "keepalive-pg-apart",
                "airlock-transparent-ship",
                "req_per_s",
                900.0,
            ),
            sample(
                "keepalive-pg-apart",
                "airlock-transparent-cpu1-busy",
                "req_per_s",
                850.0,
            ),
        ];
        let figures = Figures::of(&samples);
        let md = section(&figures);
        assert!(
            md.contains("(every thread) | 40.0 | 41.0 | 1.025 | yes |"),
            "{md}"
        );
        // Nothing to divide by: shown, not judged.
        assert!(
            md.contains("(`audit-ship`), µs | 0.0 | 0.5 |  |  |"),
            "{md}"
        );
        assert!(md.contains("on CPU 0 | 1,000 | 900 | 0.900 | no |"), "{md}");
        // The control is shown beside it, never judged, and kept apart.
        assert!(
            md.contains("instead of the store's work | 1,000 | 850 | 0.850 | (control) |"),
            "{md}"
        );
        let json = json(&figures);
        assert_eq!(json["keepalive-pg-apart.req_per_s"]["ratio"], 0.9);
        let control = &json["keepalive-pg-apart.req_per_s.airlock-transparent-cpu1-busy"];
        assert_eq!(control["ratio"], 0.85);
        assert!(control.get("within_target").is_none(), "{control}");
    }

    #[test]
    fn nothing_is_shown_when_nothing_was_shipped() {
        let samples = vec![sample(
            "keepalive",
            "airlock-transparent",
            "req_per_s",
            1000.0,
        )];
        assert_eq!(section(&Figures::of(&samples)), "");
    }
}
