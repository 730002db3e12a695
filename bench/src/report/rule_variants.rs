//! What a rule costs beyond the plain one: the same proxy and allow rule as
//! `airlock-explicit`, measured beside it in the same run, plus one thing.
//!
//! - `airlock-credential` adds a `[[credential]]` for the host, so the proxy
//!   injects a header into every request and every response passes the
//!   secret scrubber. Issue 21's target compares it before and after a
//!   scrubber change (no more than 5% slower): two runs of
//!   `bench/run --only credential`.
//! - `airlock-ask` adds `[[ask]]` rules that no request of the benchmark
//!   matches (on the same host and on others). Issue 16's target: they cost
//!   nothing measurable on other requests (`bench/run --only ask`).

use std::fmt::Write as _;

use super::{Figures, cell};

pub(super) const PLAIN: &str = "airlock-explicit";

/// One variant of the plain rule and how its section reads.
pub(super) struct Variant {
    pub contender: &'static str,
    /// The JSON key of its figure, and the ratio column's name.
    key: &'static str,
    heading: &'static str,
    /// What the variant adds, and how to judge a change.
    note: &'static str,
    compared: &'static [(&'static str, &'static str, &'static str)],
}

pub(super) const CREDENTIAL: Variant = Variant {
    contender: "airlock-credential",
    key: "credential",
    heading: "Through a credential-bearing rule (the secret scrubber's cost)",
    note: "`airlock-credential` is `airlock-explicit`'s rule with a `[[credential]]` injecting a \
           header: every response passes the scrubber. To judge a scrubber change, compare the \
           `airlock-credential` column of a run before it with one after it \
           (`bench/run --only credential`).",
    compared: &[
        ("keepalive", "req_per_s", "keep-alive requests/s"),
        ("download", "mb_per_s", "download MB/s (10^6 B/s)"),
    ],
};

pub(super) const ASK: Variant = Variant {
    contender: "airlock-ask",
    key: "ask",
    heading: "With [[ask]] rules that no request matches (what approval rules cost the rest)",
    note: "`airlock-ask` is `airlock-explicit`'s policy plus 50 `[[ask]]` rules (25 for other \
           methods and paths on the benchmark's host, 25 for other hosts) that no request of the \
           benchmark matches, so every request is checked against them and none is held \
           (`bench/run --only ask`).",
    compared: &[
        ("keepalive", "req_per_s", "keep-alive requests/s"),
        ("latency-keepalive", "p50_us", "keep-alive request p50 µs"),
    ],
};

/// The Markdown section, empty when nothing went through the variant.
pub(super) fn section(figures: &Figures, variant: &Variant) -> String {
    let mut md = String::new();
    for (case, metric, what) in variant.compared {
        let measured = figures.get(case, variant.contender, metric);
        if measured.is_none() {
            continue;
        }
        let plain = figures.get(case, PLAIN, metric);
        let ratio = match (plain, measured) {
            (Some(p), Some(m)) if p.median > 0.0 => format!("{:.2}", m.median / p.median),
            _ => String::new(),
        };
        let _ = writeln!(
            md,
            "| {what} | {} | {} | {ratio} |",
            cell(plain),
            cell(measured)
        );
    }
    if md.is_empty() {
        return md;
    }
    format!(
        "### {}\n\n| figure | {PLAIN} | {} | {} / plain |\n|---|---:|---:|---:|\n{md}\n{}\n\n",
        variant.heading, variant.contender, variant.key, variant.note
    )
}

/// The same figures for machines: `{"keepalive.req_per_s": {"plain", KEY, "ratio"}}`.
pub(super) fn json(figures: &Figures, variant: &Variant) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (case, metric, _) in variant.compared {
        let Some(measured) = figures.median(case, variant.contender, metric) else {
            continue;
        };
        let mut entry = serde_json::Map::new();
        entry.insert(variant.key.into(), measured.into());
        if let Some(plain) = figures.median(case, PLAIN, metric) {
            entry.insert("plain".into(), plain.into());
            if plain > 0.0 {
                entry.insert("ratio".into(), (measured / plain).into());
            }
        }
        out.insert(format!("{case}.{metric}"), entry.into());
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::super::RawSample;
    use super::*;

    fn sample(case: &str, contender: &str, run: u32, metric: &str, v: f64) -> RawSample {
        serde_json::from_value(serde_json::json!({
            "case": case, "contender": contender, "run": run, "metrics": {metric: v}
        }))
        .unwrap()
    }

    #[test]
    fn credential_figures_are_shown_beside_the_plain_rule_with_their_ratio() {
        let samples = vec![
            sample("keepalive", PLAIN, 1, "req_per_s", 1000.0),
            sample("keepalive", CREDENTIAL.contender, 1, "req_per_s", 950.0),
            sample("download", PLAIN, 1, "mb_per_s", 400.0),
            sample("download", CREDENTIAL.contender, 1, "mb_per_s", 300.0),
        ];
        let figures = Figures::of(&samples);
        let md = section(&figures, &CREDENTIAL);
        assert!(
            md.contains("| keep-alive requests/s | 1,000 | 950 | 0.95 |"),
            "{md}"
        );
        assert!(
            md.contains("| download MB/s (10^6 B/s) | 400 | 300 | 0.75 |"),
            "{md}"
        );
        let json = json(&figures, &CREDENTIAL);
        assert_eq!(json["keepalive.req_per_s"]["ratio"], 0.95);
        assert_eq!(json["download.mb_per_s"]["plain"], 400.0);
        assert_eq!(json["download.mb_per_s"]["credential"], 300.0);
    }

    #[test]
    fn ask_figures_compare_throughput_and_latency() {
        let samples = vec![
            sample("keepalive", PLAIN, 1, "req_per_s", 1000.0),
            sample("keepalive", ASK.contender, 1, "req_per_s", 990.0),
            sample("latency-keepalive", PLAIN, 1, "p50_us", 200.0),
            sample("latency-keepalive", ASK.contender, 1, "p50_us", 202.0),
        ];
        let figures = Figures::of(&samples);
        let md = section(&figures, &ASK);
        assert!(md.contains("| ask / plain |"), "{md}");
        assert!(
            md.contains("| keep-alive requests/s | 1,000 | 990 | 0.99 |"),
            "{md}"
        );
        assert_eq!(json(&figures, &ASK)["keepalive.req_per_s"]["ask"], 990.0);
    }

    #[test]
    fn no_section_without_the_variants_figures() {
        let samples = vec![sample("keepalive", PLAIN, 1, "req_per_s", 1000.0)];
        assert_eq!(section(&Figures::of(&samples), &CREDENTIAL), "");
        assert_eq!(section(&Figures::of(&samples), &ASK), "");
    }
}
