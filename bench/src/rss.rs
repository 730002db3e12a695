//! Memory of the process under test, from /proc/PID/status (see proc_pid_status(5)):
//! VmRSS is resident memory now, VmHWM the peak resident set since start.

use anyhow::{Context, bail};

pub(crate) fn read_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path}: is process {pid} still running?"))?;
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            let kib = rest.trim().trim_end_matches("kB").trim();
            return kib
                .parse()
                .with_context(|| format!("{path}: cannot parse {field} value {rest:?}"));
        }
    }
    bail!("{path} has no {field} line")
}

pub(crate) fn print_sample(pid: u32, contender: &str, phase: &str) -> anyhow::Result<()> {
    let rss = read_kib(pid, "VmRSS")?;
    let hwm = read_kib(pid, "VmHWM")?;
    let sample = serde_json::json!({
        "case": format!("rss-{phase}"),
        "contender": contender,
        "run": 1,
        "params": { "phase": phase, "pid": pid },
        "metrics": { "vm_rss_mib": rss as f64 / 1024.0, "vm_hwm_mib": hwm as f64 / 1024.0 },
    });
    println!("{sample}");
    Ok(())
}
