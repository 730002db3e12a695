//! Live sessions (docs/sessions.md): the round trip of one step,
//! `airlock session exec ID -- /bin/true`, next to a fresh sandbox's start-up
//! (`airlock run -- /bin/true`, bwrap) measured in the same run, and what
//! sessions cost in memory: one idle session, and many side by side.
//!
//! The target (issue 14): a step costs at most a third of `airlock run`'s
//! start-up. Each session row is compared with the `airlock run` row that
//! audits the same way (audited with audited, `--no-audit` with `--no-audit`).
//! The same step made through the Python SDK and through `airlock mcp`
//! (issue 15) is put next to the CLI's.

use std::fmt::Write as _;

use super::{Figures, RawSample, cell, escape, fmt, note_of};

const EXEC: &str = "session-exec";
/// A step made by a client other than the CLI (bench/session_clients.py).
const CALL: &str = "session-call";
/// The CLI's audited step, which the clients' rows are compared with.
const CLI: &str = "airlock-session";
/// (client contender, what it is, its target in ms: issue 33)
const CALL_ROWS: [(&str, &str, Option<f64>); 4] = [
    (
        "airlock-sdk",
        "Python SDK: `sb.run([\"/bin/true\"])`",
        Some(3.0),
    ),
    (
        "airlock-sdk-code",
        "Python SDK: `sb.run_code(\"x + 1\")`, persistent interpreter",
        Some(5.0),
    ),
    (
        "airlock-sdk-start",
        "Python SDK: `Sandbox()` start to its first result",
        Some(50.0),
    ),
    (
        "airlock-mcp",
        "MCP: `run_command` through the official client, stdio",
        None,
    ),
];
const MEMORY: &str = "session-memory";
const STARTUP: &str = "startup";
const BWRAP: &str = "bwrap";
/// A step may cost at most this share of `airlock run -- /bin/true`.
const TARGET_SHARE: f64 = 1.0 / 3.0;

/// (session contender, the start-up contender it is compared with, what it is)
const EXEC_ROWS: [(&str, &str, &str); 3] = [
    ("airlock-session", "airlock-audit", "audited"),
    (
        "airlock-session-no-audit",
        "airlock-no-audit",
        "`--no-audit`",
    ),
    (
        "airlock-sessions-live",
        "airlock-audit",
        "audited, with the others live",
    ),
];

/// (memory contender, what it is)
const MEMORY_ROWS: [(&str, &str); 2] = [
    (
        "airlock-session-idle",
        "one idle session (audited), after one step",
    ),
    (
        "airlock-sessions-live",
        "sessions side by side (audited), after one step each",
    ),
];

fn has_case(samples: &[RawSample], case: &str) -> bool {
    samples.iter().any(|s| s.case == case)
}

/// Timed runs of one contender in a case (the `--runs` it was given).
fn runs_of(samples: &[RawSample], case: &str, contender: &str) -> usize {
    samples
        .iter()
        .filter(|s| s.case == case && s.contender == contender && !s.metrics.is_empty())
        .count()
}

/// The Markdown section, empty when the run measured no session.
pub(super) fn section(figures: &Figures, samples: &[RawSample]) -> String {
    if !has_case(samples, EXEC) && !has_case(samples, MEMORY) {
        return String::new();
    }
    let mut md = String::from("### Live sessions\n\n");
    md.push_str(&exec_table(figures, samples));
    md.push_str(&clients_table(figures, samples));
    md.push_str(&memory_table(figures, samples));
    md
}

fn exec_table(figures: &Figures, samples: &[RawSample]) -> String {
    if !has_case(samples, EXEC) {
        return String::new();
    }
    let runs = runs_of(samples, EXEC, "airlock-session");
    let mut md = String::new();
    let _ = writeln!(
        md,
        "A step's round trip: wall time of `airlock session exec ID -- /bin/true` \
         ({runs} runs), next to the start-up of a fresh sandbox in the same run \
         (`airlock run -- /bin/true`, bwrap; the start-up table).\n"
    );
    md.push_str(
        "| contender | ms | `airlock run` ms (same auditing) | / `airlock run` | / bwrap | target |\n\
         |---|---:|---:|---:|---:|---|\n",
    );
    let bwrap = figures.median(STARTUP, BWRAP, "wall_ms");
    for (who, run_row, what) in EXEC_ROWS {
        let value = figures.get(EXEC, who, "wall_ms");
        let Some(v) = value else {
            if let Some(note) = note_of(samples, EXEC, who) {
                let _ = writeln!(md, "| {who} ({what}) | n/a: {} | | | | |", escape(note));
            }
            continue;
        };
        let run = figures.get(STARTUP, run_row, "wall_ms");
        let ratio = |base: Option<f64>| {
            base.filter(|b| *b > 0.0)
                .map_or(String::new(), |b| format!("{:.2}", v.median / b))
        };
        let verdict = run.filter(|r| r.median > 0.0).map_or(String::new(), |r| {
            let met = v.median <= r.median * TARGET_SHARE;
            format!(
                "{} ≤ ⅓ × `airlock run` ({} ms)",
                if met { "✓" } else { "✗" },
                fmt(r.median * TARGET_SHARE)
            )
        });
        let _ = writeln!(
            md,
            "| {who} ({what}) | {} | {run_row}: {} | {} | {} | {verdict} |",
            cell(value),
            cell(run),
            ratio(run.map(|r| r.median)),
            ratio(bwrap),
        );
    }
    md.push('\n');
    md
}

fn clients_table(figures: &Figures, samples: &[RawSample]) -> String {
    if !has_case(samples, CALL) {
        return String::new();
    }
    let cli = figures.get(EXEC, CLI, "wall_ms");
    let mut md = String::from(
        "The same step as agent frameworks make it, each in its own audited session: \
         one call's wall time, from the caller's side, next to `airlock session exec` \
         (a process started per step).\n\n\
         | client | ms | `airlock session exec` ms | / `session exec` | difference ms | target |\n\
         |---|---:|---:|---:|---:|---|\n",
    );
    for (who, what, target) in CALL_ROWS {
        let Some(v) = figures.get(CALL, who, "wall_ms") else {
            if let Some(note) = note_of(samples, CALL, who) {
                let _ = writeln!(md, "| {what} | n/a: {} | | | | |", escape(note));
            }
            continue;
        };
        let verdict = target.map_or(String::new(), |t| {
            let met = if v.median <= t { "✓" } else { "✗" };
            format!("{met} ≤ {} ms", fmt(t))
        });
        let (ratio, difference) = match cli.filter(|c| c.median > 0.0) {
            Some(c) => (
                format!("{:.2}", v.median / c.median),
                format!("{:+.1}", v.median - c.median),
            ),
            None => (String::new(), String::new()),
        };
        let _ = writeln!(
            md,
            "| {what} (`{who}`) | {} | {} | {ratio} | {difference} | {verdict} |",
            cell(Some(v)),
            cell(cli),
        );
    }
    md.push('\n');
    md
}

fn memory_table(figures: &Figures, samples: &[RawSample]) -> String {
    if !has_case(samples, MEMORY) {
        return String::new();
    }
    let mut md = String::from(
        "Memory: VmRSS of the serving process (`airlock session serve`: control socket, \
         proxy, resolver, audit) and of every process of its sandbox (its descendants: \
         supervisor, init, launcher), and their Pss (shared pages split between the \
         processes that map them, so it adds up across sessions; summing VmRSS counts \
         the shared binary once per process).\n\n\
         | | sessions | processes | server VmRSS MiB | sandbox VmRSS MiB | total VmRSS MiB | total Pss MiB | Pss per session MiB | left after stopping all |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for (who, what) in MEMORY_ROWS {
        let get = |metric: &str| figures.median(MEMORY, who, metric);
        let Some(sessions) = get("sessions") else {
            if let Some(note) = note_of(samples, MEMORY, who) {
                let _ = writeln!(md, "| {what} | n/a: {} | | | | | | | |", escape(note));
            }
            continue;
        };
        let show = |v: Option<f64>| v.map_or("n/a".to_owned(), fmt);
        let per_session = get("total_pss_mib")
            .filter(|_| sessions > 0.0)
            .map(|p| p / sessions);
        let left = match (
            get("sessions_listed_after_stop"),
            get("processes_left_after_stop"),
        ) {
            (Some(l), Some(p)) if l == 0.0 && p == 0.0 => "✓ none".to_owned(),
            (Some(l), Some(p)) => format!("✗ {l:.0} session(s) listed, {p:.0} process(es)"),
            _ => String::new(),
        };
        let _ = writeln!(
            md,
            "| {what} (`{who}`) | {sessions:.0} | {:.0} | {} | {} | {} | {} | {} | {left} |",
            get("processes").unwrap_or(0.0),
            show(get("server_rss_mib")),
            show(get("sandbox_rss_mib")),
            show(get("total_rss_mib")),
            show(get("total_pss_mib")),
            show(per_session),
        );
    }
    md.push('\n');
    md
}

/// The same figures for machines: exec medians with their ratios and
/// verdict, and the memory figures per contender.
pub(super) fn json(figures: &Figures) -> serde_json::Value {
    let mut exec = serde_json::Map::new();
    let bwrap = figures.median(STARTUP, BWRAP, "wall_ms");
    for (who, run_row, _) in EXEC_ROWS {
        let Some(v) = figures.median(EXEC, who, "wall_ms") else {
            continue;
        };
        let mut e = serde_json::Map::new();
        e.insert("median_ms".into(), v.into());
        if let Some(r) = figures
            .median(STARTUP, run_row, "wall_ms")
            .filter(|r| *r > 0.0)
        {
            e.insert("airlock_run".into(), run_row.into());
            e.insert("airlock_run_ms".into(), r.into());
            e.insert("ratio_to_airlock_run".into(), (v / r).into());
            e.insert("target".into(), "≤ 1/3 × airlock run".into());
            e.insert("target_met".into(), (v <= r * TARGET_SHARE).into());
        }
        if let Some(b) = bwrap.filter(|b| *b > 0.0) {
            e.insert("bwrap_ms".into(), b.into());
            e.insert("ratio_to_bwrap".into(), (v / b).into());
        }
        exec.insert(who.into(), e.into());
    }
    let mut memory = serde_json::Map::new();
    for (who, _) in MEMORY_ROWS {
        let metrics: serde_json::Map<String, serde_json::Value> = figures
            .0
            .iter()
            .filter(|((case, c, _), _)| case == MEMORY && c == who)
            .map(|((_, _, metric), s)| (metric.clone(), s.median.into()))
            .collect();
        if !metrics.is_empty() {
            memory.insert(who.into(), metrics.into());
        }
    }
    let mut calls = serde_json::Map::new();
    let cli = figures.median(EXEC, CLI, "wall_ms");
    for (who, _, target) in CALL_ROWS {
        let Some(v) = figures.median(CALL, who, "wall_ms") else {
            continue;
        };
        let mut c = serde_json::Map::new();
        c.insert("median_ms".into(), v.into());
        if let Some(t) = target {
            c.insert("target_ms".into(), t.into());
            c.insert("target_met".into(), (v <= t).into());
        }
        if let Some(cli) = cli.filter(|c| *c > 0.0) {
            c.insert("session_exec_ms".into(), cli.into());
            c.insert("ratio_to_session_exec".into(), (v / cli).into());
        }
        calls.insert(who.into(), c.into());
    }
    serde_json::json!({ "exec": exec, "calls": calls, "memory": memory })
}

#[cfg(test)]
mod tests {
    use super::super::RawSample;
    use super::*;

    fn sample(case: &str, contender: &str, run: u32, metrics: &[(&str, f64)]) -> RawSample {
        serde_json::from_value(serde_json::json!({
            "case": case, "contender": contender, "run": run,
            "metrics": metrics.iter().map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v))).collect::<serde_json::Map<_, _>>(),
        }))
        .unwrap()
    }

    #[test]
    fn a_step_is_compared_with_airlock_run_and_bwrap() {
        let samples = vec![
            sample(STARTUP, BWRAP, 1, &[("wall_ms", 4.0)]),
            sample(STARTUP, "airlock-audit", 1, &[("wall_ms", 15.0)]),
            sample(STARTUP, "airlock-no-audit", 1, &[("wall_ms", 9.0)]),
            sample(EXEC, "airlock-session", 1, &[("wall_ms", 3.0)]),
            sample(EXEC, "airlock-session-no-audit", 1, &[("wall_ms", 4.0)]),
        ];
        let figures = Figures::of(&samples);
        let md = section(&figures, &samples);
        assert!(
            md.contains("| airlock-session (audited) | 3.0 | airlock-audit: 15.0 | 0.20 | 0.75 | ✓ ≤ ⅓ × `airlock run` (5.0 ms) |"),
            "{md}"
        );
        assert!(
            md.contains("| airlock-session-no-audit (`--no-audit`) | 4.0 | airlock-no-audit: 9.0 | 0.44 | 1.00 | ✗"),
            "{md}"
        );
        let json = json(&figures);
        assert_eq!(json["exec"]["airlock-session"]["target_met"], true);
        assert_eq!(
            json["exec"]["airlock-session-no-audit"]["target_met"],
            false
        );
    }

    #[test]
    fn sdk_and_mcp_calls_are_compared_with_session_exec() {
        let samples = vec![
            sample(EXEC, CLI, 1, &[("wall_ms", 5.0)]),
            sample(CALL, "airlock-sdk", 1, &[("wall_ms", 3.0)]),
            sample(CALL, "airlock-mcp", 1, &[("wall_ms", 6.5)]),
            sample(CALL, "airlock-sdk-code", 1, &[("wall_ms", 4.5)]),
            sample(CALL, "airlock-sdk-start", 1, &[("wall_ms", 61.0)]),
        ];
        let figures = Figures::of(&samples);
        let md = section(&figures, &samples);
        assert!(
            md.contains("(`airlock-sdk`) | 3.0 | 5.0 | 0.60 | -2.0 | ✓ ≤ 3.0 ms |"),
            "{md}"
        );
        assert!(
            md.contains("(`airlock-sdk-code`) | 4.5 | 5.0 | 0.90 | -0.5 | ✓ ≤ 5.0 ms |"),
            "{md}"
        );
        assert!(md.contains("(`airlock-sdk-start`) | 61.0 |"), "{md}");
        assert!(md.contains("| ✗ ≤ 50.0 ms |"), "{md}");
        assert_eq!(
            json(&figures)["calls"]["airlock-sdk-start"]["target_met"],
            false
        );
        assert!(
            md.contains("(`airlock-mcp`) | 6.5 | 5.0 | 1.30 | +1.5 |"),
            "{md}"
        );
        assert_eq!(
            json(&figures)["calls"]["airlock-mcp"]["ratio_to_session_exec"],
            1.3
        );
    }

    #[test]
    fn memory_rows_add_up_per_session_and_check_nothing_is_left() {
        let samples = vec![
            sample(
                MEMORY,
                "airlock-sessions-live",
                1,
                &[
                    ("sessions", 20.0),
                    ("processes", 80.0),
                    ("server_rss_mib", 400.0),
                    ("sandbox_rss_mib", 100.0),
                    ("total_rss_mib", 500.0),
                    ("total_pss_mib", 300.0),
                ],
            ),
            sample(
                MEMORY,
                "airlock-sessions-live",
                1,
                &[
                    ("sessions_listed_after_stop", 0.0),
                    ("processes_left_after_stop", 0.0),
                ],
            ),
        ];
        let md = section(&Figures::of(&samples), &samples);
        assert!(
            md.contains("| 20 | 80 | 400 | 100 | 500 | 300 | 15.0 | ✓ none |"),
            "{md}"
        );
        assert!(!md.contains("one idle session"), "{md}");
    }

    #[test]
    fn nothing_measured_means_no_section() {
        let samples = vec![sample(STARTUP, BWRAP, 1, &[("wall_ms", 4.0)])];
        assert!(section(&Figures::of(&samples), &samples).is_empty());
    }
}
