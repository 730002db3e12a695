//! What the figures were measured on, read from /proc so results files are
//! comparable across machines.

use std::collections::BTreeMap;

use serde::Serialize;

#[derive(Serialize)]
pub(crate) struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    pub os: String,
}

impl Machine {
    pub(crate) fn probe() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_gib = field(&meminfo, "MemTotal")
            .and_then(|v| v.trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".to_owned(), |s| s.trim().to_owned());
        let os = std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|s| field_eq(&s, "PRETTY_NAME"))
            .unwrap_or_else(|| "unknown".to_owned());
        Self {
            // Same figure as nproc(1): CPUs this process may run on.
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model,
            memory_gib,
            kernel,
            os,
        }
    }

    pub(crate) fn rows(&self) -> BTreeMap<&'static str, String> {
        BTreeMap::from([
            ("CPUs (nproc)", self.cpus.to_string()),
            ("CPU model", self.cpu_model.clone()),
            ("Memory", format!("{:.1} GiB", self.memory_gib)),
            ("Kernel", self.kernel.clone()),
            ("OS", self.os.clone()),
        ])
    }
}

/// `key : value` lines as in /proc/cpuinfo and /proc/meminfo.
fn field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_owned())
    })
}

/// `KEY="value"` lines as in os-release(5).
fn field_eq(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
    })
}
