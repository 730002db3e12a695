//! One cgroup per sandbox for --memory/--pids/--cpus: cgroup v2 where the
//! controllers are delegated to us, else the v1 controllers, else nothing (the
//! caller falls back to rlimits and says so). See cgroups(7).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::ShimError;
use crate::spec::Limits;

/// Extra pids the shim itself needs inside the cgroup (supervisor + init).
pub(crate) const SHIM_PIDS: u64 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// The sandbox's cgroup directories (one per v1 controller, or a single v2 dir).
#[derive(Debug, Clone)]
pub(crate) struct Cgroup {
    version: Version,
    /// (controller, directory); for v2 the controller is "" and there is one dir.
    dirs: Vec<(String, PathBuf)>,
}

/// What the cgroup could not take care of (the caller uses rlimits instead).
#[derive(Debug, Default)]
pub(crate) struct Unenforced {
    pub memory: bool,
    pub pids: bool,
    pub cpus: bool,
}

struct Mounts {
    v1: Vec<(String, PathBuf)>,
    v2: Option<PathBuf>,
}

fn mounts() -> Mounts {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut m = Mounts {
        v1: Vec::new(),
        v2: None,
    };
    for line in info.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mp) = pre.split(' ').nth(4) else {
            continue;
        };
        // Only hierarchies mounted from their root map /proc/self/cgroup paths 1:1.
        if pre.split(' ').nth(3) != Some("/") {
            continue;
        }
        let mut post = post.split(' ');
        let fstype = post.next().unwrap_or("");
        let superopts = post.nth(1).unwrap_or("");
        match fstype {
            "cgroup2" => m.v2 = Some(PathBuf::from(mp)),
            "cgroup" => {
                for ctl in ["memory", "pids", "cpu"] {
                    if superopts.split(',').any(|o| o == ctl) {
                        m.v1.push((ctl.to_string(), PathBuf::from(mp)));
                    }
                }
            }
            _ => {}
        }
    }
    m
}

/// Our own cgroup path per controller ("" is the v2 hierarchy).
fn own_paths() -> Vec<(String, String)> {
    let text = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(ctls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        for ctl in ctls.split(',') {
            out.push((ctl.to_string(), path.trim_start_matches('/').to_string()));
        }
    }
    out
}

fn write(path: &Path, value: &str) -> Result<(), ShimError> {
    fs::write(path, value).map_err(|e| ShimError::Cgroup {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// Remove sandbox cgroups left behind by crashed runs. Directory names start
/// with the owning airlock's pid; only those whose owner is gone are touched
/// (a live airlock may have created one that nothing has joined yet), and
/// rmdir refuses non-empty cgroups anyway.
fn reap_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let owner = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok());
        let owner_alive = owner.is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) && !owner_alive {
            let _ = fs::remove_dir(e.path());
        }
    }
}

fn wanted(limits: &Limits) -> Vec<&'static str> {
    let mut w = Vec::new();
    if limits.memory_bytes.is_some() {
        w.push("memory");
    }
    if limits.pids.is_some() {
        w.push("pids");
    }
    if limits.cpus.is_some() {
        w.push("cpu");
    }
    w
}

const CFS_PERIOD_US: u64 = 100_000;

impl Cgroup {
    /// Create and configure the cgroup. Returns None when no limit was asked
    /// for or nothing is available; `unenforced` says which limits remain.
    pub(crate) fn create(
        limits: &Limits,
        id: &str,
    ) -> Result<(Option<Self>, Unenforced), ShimError> {
        let want = wanted(limits);
        let mut missing = Unenforced {
            memory: limits.memory_bytes.is_some(),
            pids: limits.pids.is_some(),
            cpus: limits.cpus.is_some(),
        };
        if want.is_empty() || !nix::unistd::geteuid().is_root() {
            return Ok((None, missing));
        }
        let m = mounts();
        let own = own_paths();
        if let Some(cg) = Self::create_v2(&m, &own, &want, id)? {
            cg.configure(limits)?;
            return Ok((Some(cg), Unenforced::default()));
        }
        let mut dirs = Vec::new();
        for ctl in &want {
            let Some((_, mp)) = m.v1.iter().find(|(c, _)| c == ctl) else {
                continue;
            };
            let rel = own
                .iter()
                .find(|(c, _)| c == ctl)
                .map(|(_, p)| p.as_str())
                .unwrap_or("");
            let parent = mp.join(rel).join("airlock");
            fs::create_dir_all(&parent).map_err(|e| ShimError::Cgroup {
                path: parent.display().to_string(),
                reason: e.to_string(),
            })?;
            reap_stale(&parent);
            let dir = parent.join(id);
            fs::create_dir(&dir).map_err(|e| ShimError::Cgroup {
                path: dir.display().to_string(),
                reason: e.to_string(),
            })?;
            match *ctl {
                "memory" => missing.memory = false,
                "pids" => missing.pids = false,
                _ => missing.cpus = false,
            }
            dirs.push((ctl.to_string(), dir));
        }
        if dirs.is_empty() {
            return Ok((None, missing));
        }
        let cg = Self {
            version: Version::V1,
            dirs,
        };
        if let Err(e) = cg.configure(limits) {
            cg.remove();
            return Err(e);
        }
        Ok((Some(cg), missing))
    }

    /// v2 only when every wanted controller is already delegated to our cgroup.
    fn create_v2(
        m: &Mounts,
        own: &[(String, String)],
        want: &[&str],
        id: &str,
    ) -> Result<Option<Self>, ShimError> {
        let Some(root) = &m.v2 else { return Ok(None) };
        let rel = own
            .iter()
            .find(|(c, _)| c.is_empty())
            .map(|(_, p)| p.as_str())
            .unwrap_or("");
        let base = root.join(rel);
        let available = fs::read_to_string(base.join("cgroup.subtree_control")).unwrap_or_default();
        let v2_names: Vec<&str> = want.to_vec();
        if !v2_names
            .iter()
            .all(|c| available.split_whitespace().any(|a| a == *c))
        {
            return Ok(None);
        }
        let parent = base.join("airlock");
        if !parent.exists() {
            fs::create_dir(&parent).map_err(|e| ShimError::Cgroup {
                path: parent.display().to_string(),
                reason: e.to_string(),
            })?;
        }
        let enable: Vec<String> = v2_names.iter().map(|c| format!("+{c}")).collect();
        write(&parent.join("cgroup.subtree_control"), &enable.join(" "))?;
        reap_stale(&parent);
        let dir = parent.join(id);
        fs::create_dir(&dir).map_err(|e| ShimError::Cgroup {
            path: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        Ok(Some(Self {
            version: Version::V2,
            dirs: vec![(String::new(), dir)],
        }))
    }

    fn dir(&self, ctl: &str) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(c, _)| self.version == Version::V2 || c == ctl)
            .map(|(_, d)| d.as_path())
    }

    fn configure(&self, limits: &Limits) -> Result<(), ShimError> {
        if let (Some(mem), Some(dir)) = (limits.memory_bytes, self.dir("memory")) {
            match self.version {
                Version::V2 => {
                    write(&dir.join("memory.max"), &mem.to_string())?;
                    // No swap escape hatch.
                    let _ = fs::write(dir.join("memory.swap.max"), "0");
                }
                Version::V1 => {
                    write(&dir.join("memory.limit_in_bytes"), &mem.to_string())?;
                    let memsw = dir.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write(&memsw, &mem.to_string())?;
                    }
                }
            }
        }
        if let (Some(pids), Some(dir)) = (limits.pids, self.dir("pids")) {
            write(&dir.join("pids.max"), &(pids + SHIM_PIDS).to_string())?;
        }
        if let (Some(cpus), Some(dir)) = (limits.cpus, self.dir("cpu")) {
            let quota = ((cpus * CFS_PERIOD_US as f64).round() as u64).max(1000);
            match self.version {
                Version::V2 => write(&dir.join("cpu.max"), &format!("{quota} {CFS_PERIOD_US}"))?,
                Version::V1 => {
                    write(&dir.join("cpu.cfs_period_us"), &CFS_PERIOD_US.to_string())?;
                    write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// Move the calling process into every directory ("0" means "me", see cgroups(7)).
    pub(crate) fn join_self(&self) -> Result<(), ShimError> {
        for (_, dir) in &self.dirs {
            write(&dir.join("cgroup.procs"), "0")?;
        }
        Ok(())
    }

    /// Did the kernel OOM-kill something in this cgroup?
    pub(crate) fn oom_killed(&self) -> bool {
        let Some(dir) = self.dir("memory") else {
            return false;
        };
        let file = match self.version {
            Version::V2 => dir.join("memory.events"),
            Version::V1 => dir.join("memory.oom_control"),
        };
        fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("oom_kill "))
            .any(|n| n.trim().parse::<u64>().map(|n| n > 0).unwrap_or(false))
    }

    /// SIGKILL everything still inside.
    pub(crate) fn kill_all(&self) {
        for (_, dir) in &self.dirs {
            if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
                for pid in procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                    crate::sys::kill(nix::unistd::Pid::from_raw(pid), libc::SIGKILL);
                }
            }
        }
    }

    /// Leave the cgroup (into its parent) so it can be removed by ourselves.
    pub(crate) fn leave_self(&self) {
        for (_, dir) in &self.dirs {
            if let Some(parent) = dir.parent().and_then(Path::parent) {
                let _ = fs::write(parent.join("cgroup.procs"), "0");
            }
        }
    }

    /// Remove the directories, waiting briefly for exiting tasks to leave.
    /// Traced tasks whose tracer died (PTRACE_O_EXITKILL) leave last: their
    /// exit waits for the kernel to unlink them from the dead tracer, so the
    /// wait is bounded at about 4 s rather than 1 s.
    pub(crate) fn remove(&self) {
        for (_, dir) in &self.dirs {
            for attempt in 0..800 {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) => {
                        if attempt % 20 == 19 {
                            self.kill_all();
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            }
        }
    }

    pub(crate) fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|(_, d)| d.clone()).collect()
    }
}
