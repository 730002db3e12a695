//! What a credential-bearing rule costs. `airlock-credential` is the same
//! proxy and rule as `airlock-explicit`, plus a `[[credential]]` for the host,
//! so the proxy injects a header into every request and every response passes
//! the secret scrubber. Their ratio is the scrubber's cost; issue 21's target
//! compares `airlock-credential` before and after a scrubber change (no more
//! than 5% slower), which takes two runs of `bench/run --only credential`.

use std::fmt::Write as _;

use super::{Figures, cell};

pub(super) const PLAIN: &str = "airlock-explicit";
pub(super) const CREDENTIAL: &str = "airlock-credential";

/// (case, metric, what it is) for each figure compared.
const COMPARED: [(&str, &str, &str); 2] = [
    ("keepalive", "req_per_s", "keep-alive requests/s"),
    ("download", "mb_per_s", "download MB/s (10^6 B/s)"),
];

/// The Markdown section, empty when nothing went through the credential-bearing rule.
pub(super) fn section(figures: &Figures) -> String {
    let mut md = String::new();
    for (case, metric, what) in COMPARED {
        let credential = figures.get(case, CREDENTIAL, metric);
        if credential.is_none() {
            continue;
        }
        let plain = figures.get(case, PLAIN, metric);
        let ratio = match (plain, credential) {
            (Some(p), Some(c)) if p.median > 0.0 => format!("{:.2}", c.median / p.median),
            _ => String::new(),
        };
        let _ = writeln!(
            md,
            "| {what} | {} | {} | {ratio} |",
            cell(plain),
            cell(credential)
        );
    }
    if md.is_empty() {
        return md;
    }
    format!(
        "### Through a credential-bearing rule (the secret scrubber's cost)\n\n\
         | figure | {PLAIN} | {CREDENTIAL} | credential / plain |\n|---|---:|---:|---:|\n{md}\n\
         `{CREDENTIAL}` is `{PLAIN}`'s rule with a `[[credential]]` injecting a header: every \
         response passes the scrubber. To judge a scrubber change, compare the `{CREDENTIAL}` \
         column of a run before it with one after it (`bench/run --only credential`).\n\n"
    )
}

/// The same figures for machines: `{"keepalive.req_per_s": {"plain", "credential", "ratio"}}`.
pub(super) fn json(figures: &Figures) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (case, metric, _) in COMPARED {
        let Some(credential) = figures.median(case, CREDENTIAL, metric) else {
            continue;
        };
        let mut entry = serde_json::Map::new();
        entry.insert("credential".into(), credential.into());
        if let Some(plain) = figures.median(case, PLAIN, metric) {
            entry.insert("plain".into(), plain.into());
            if plain > 0.0 {
                entry.insert("ratio".into(), (credential / plain).into());
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
            sample("keepalive", CREDENTIAL, 1, "req_per_s", 950.0),
            sample("download", PLAIN, 1, "mb_per_s", 400.0),
            sample("download", CREDENTIAL, 1, "mb_per_s", 300.0),
        ];
        let figures = Figures::of(&samples);
        let md = section(&figures);
        assert!(
            md.contains("| keep-alive requests/s | 1,000 | 950 | 0.95 |"),
            "{md}"
        );
        assert!(
            md.contains("| download MB/s (10^6 B/s) | 400 | 300 | 0.75 |"),
            "{md}"
        );
        let json = json(&figures);
        assert_eq!(json["keepalive.req_per_s"]["ratio"], 0.95);
        assert_eq!(json["download.mb_per_s"]["plain"], 400.0);
    }

    #[test]
    fn no_section_without_credential_figures() {
        let samples = vec![sample("keepalive", PLAIN, 1, "req_per_s", 1000.0)];
        assert_eq!(section(&Figures::of(&samples)), "");
    }
}
