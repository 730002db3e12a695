//! The real `airlock proxy`, started the way a user starts it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The real `airlock proxy`, on an ephemeral port, with a CA of its own and
/// an events file in a private directory; killed on drop.
#[derive(Debug)]
pub struct AirlockProxy {
    child: Child,
    pub addr: SocketAddr,
    pub dns: Option<SocketAddr>,
    pub dir: TempDir,
    pub ca_pem: PathBuf,
    pub events: PathBuf,
    pub policy: PathBuf,
    /// Every line the proxy wrote to stderr so far.
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl Drop for AirlockProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How to start an [`AirlockProxy`].
#[derive(Debug)]
pub struct ProxyOptions<'a> {
    pub policy: &'a str,
    pub upstream_ca: Option<&'a Path>,
    pub resolve: Vec<String>,
    pub env: Vec<(&'a str, &'a str)>,
    pub dns: bool,
    pub extra: Vec<String>,
    /// A program (and its arguments) that runs `airlock` for the test, e.g.
    /// `unshare -m ...` to give the proxy a private view of some file.
    pub wrapper: Vec<&'a str>,
}

impl<'a> ProxyOptions<'a> {
    pub fn new(policy: &'a str) -> Self {
        Self {
            policy,
            upstream_ca: None,
            resolve: Vec::new(),
            env: Vec::new(),
            dns: false,
            extra: Vec::new(),
            wrapper: Vec::new(),
        }
    }
}

/// `airlock ca init --dir DIR` with the binary at `airlock`, which must succeed.
pub fn init_ca(airlock: &str, dir: &Path) {
    let out = Command::new(airlock)
        .args(["ca", "init", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "ca init: {out:?}");
}

impl AirlockProxy {
    /// Runs `airlock ca init` and `airlock proxy` (the binary at `airlock`,
    /// see [`airlock_bin!`](crate::airlock_bin)), and waits until the proxy
    /// says where it listens (20 s at the most).
    pub fn start(airlock: &str, opts: ProxyOptions<'_>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().join("ca");
        init_ca(airlock, &ca_dir);
        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, opts.policy).unwrap();
        let events = dir.path().join("events.jsonl");
        let mut cmd = match opts.wrapper.split_first() {
            None => Command::new(airlock),
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(airlock);
                cmd
            }
        };
        cmd.args(["proxy", "--listen", "127.0.0.1:0", "--policy"])
            .arg(&policy)
            .arg("--ca-dir")
            .arg(&ca_dir)
            .arg("--events")
            .arg(&events)
            .env("AIRLOCK_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(ca) = opts.upstream_ca {
            cmd.arg("--upstream-ca").arg(ca);
        }
        for r in &opts.resolve {
            cmd.arg("--resolve").arg(r);
        }
        if opts.dns {
            cmd.args(["--dns-listen", "127.0.0.1:0"]);
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        cmd.args(&opts.extra);
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let keep = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line.clone());
                keep.lock().unwrap().push(line);
            }
        });
        let mut addr = None;
        let mut dns = None;
        let deadline = Instant::now() + Duration::from_secs(20);
        while addr.is_none() || (opts.dns && dns.is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("airlock proxy did not start: {:?}", lines.lock()));
            if let Some(rest) = line.strip_prefix("airlock: proxy listening on ") {
                addr = rest.split_whitespace().next().and_then(|a| a.parse().ok());
            }
            if let Some(rest) = line.strip_prefix("airlock: DNS on ") {
                dns = rest.split_whitespace().next().and_then(|a| a.parse().ok());
            }
        }
        Self {
            child,
            addr: addr.unwrap(),
            dns,
            ca_pem: ca_dir.join("ca.pem"),
            dir,
            events,
            policy,
            stderr: lines,
        }
    }

    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The placeholder the proxy announced for the credential environment
    /// variable `name` (`airlock: placeholder NAME=VALUE ...` on stderr).
    pub fn placeholder(&self, name: &str) -> Option<String> {
        let prefix = format!("airlock: placeholder {name}=");
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
    }

    /// Every event recorded so far.
    pub fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The events once `done` holds for them (a response is recorded when
    /// its body ends, after the client already has it), or after 10 s.
    pub async fn events_when(
        &self,
        done: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events = self.events();
            if done(&events) || Instant::now() > deadline {
                return events;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop with SIGTERM and wait for a clean exit; returns the exit status.
    pub fn stop(&mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        self.child.wait().ok().and_then(|s| s.code())
    }
}
