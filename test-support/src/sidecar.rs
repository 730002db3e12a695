//! `airlock sidecar` as the tests run it: a process whose stderr (its log)
//! and stdout (`--events -`) lines are collected, awaited until ready,
//! signalled and stopped, and killed when dropped.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long a sidecar may take to say something awaited.
const PATIENCE: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Sidecar {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
    stdout: Arc<Mutex<Vec<String>>>,
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sidecar {
    /// Starts `cmd` (an `airlock sidecar` command line) with its output
    /// collected.
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn airlock sidecar");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let pipes: [(Box<dyn Read + Send>, _); 2] = [
            (
                Box::new(child.stderr.take().expect("stderr")),
                stderr.clone(),
            ),
            (
                Box::new(child.stdout.take().expect("stdout")),
                stdout.clone(),
            ),
        ];
        for (pipe, lines) in pipes {
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    lines.lock().expect("lines").push(line);
                }
            });
        }
        Self {
            child,
            stderr,
            stdout,
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        self.stderr.lock().expect("log").join("\n")
    }

    /// Waits for a log line containing `needle`, `count` times in all.
    pub async fn wait_for(&self, needle: &str, count: usize) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let seen = self
                .stderr
                .lock()
                .expect("log")
                .iter()
                .filter(|l| l.contains(needle))
                .count();
            if seen >= count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "sidecar never said {needle:?}: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn ready(self) -> Self {
        self.wait_for("airlock: sidecar ready", 1).await;
        self
    }

    pub fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        kill(pid, signal).expect("signal the sidecar");
    }

    /// Waits for it to exit: its exit code, `None` when a signal ended it.
    pub fn wait(&mut self) -> Option<i32> {
        self.child.wait().ok().and_then(|s| s.code())
    }

    /// SIGTERM, and the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        self.signal(Signal::SIGTERM);
        self.wait()
    }

    /// The JSON-lines events it printed on stdout (`--events -`).
    pub fn stdout_events(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lock()
            .expect("stdout")
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
            .collect()
    }
}
