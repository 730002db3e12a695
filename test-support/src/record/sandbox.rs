//! A private workspace for `airlock run` sessions whose record a test reads back.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Record;
use crate::audit_cli::{audit_cli, export_jsonl};
use crate::disk::tree;

/// A private workspace, a read-only tools directory (compiled helpers and
/// scripts, visible in the sandbox at the same path, and never part of the
/// record) and an audit database.
#[derive(Debug)]
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub ws: PathBuf,
    pub tools: PathBuf,
    airlock: String,
    db: PathBuf,
    key: PathBuf,
}

impl Sandbox {
    /// Sessions of the `airlock` binary at this path (see
    /// [`airlock_bin!`](crate::airlock_bin)).
    pub fn new(airlock: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let tools = dir.path().join("tools");
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&tools).unwrap();
        Self {
            airlock: airlock.to_owned(),
            db: dir.path().join("audit/audit.db"),
            key: dir.path().join("audit/audit.key"),
            dir,
            ws,
            tools,
        }
    }

    /// Compiles `source` with gcc into tools/`name`. A missing or failing gcc
    /// fails the test: the adversarial programs are the test.
    pub fn gcc(&self, name: &str, source: &str, flags: &[&str]) -> PathBuf {
        let src = self.tools.join(format!("{name}.c"));
        std::fs::write(&src, source).unwrap();
        let out = self.tools.join(name);
        let done = Command::new("gcc")
            .args(["-O1", "-Wall", "-Werror", "-pthread", "-o"])
            .arg(&out)
            .arg(&src)
            .args(flags)
            .output()
            .unwrap_or_else(|e| panic!("gcc is needed to build {name}: {e}"));
        assert!(
            done.status.success(),
            "gcc {name}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        out
    }

    /// Writes a tool (a script) into tools/.
    pub fn tool(&self, name: &str, text: &str) -> PathBuf {
        let path = self.tools.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `airlock run` of `sh -c script` in the workspace (the sandbox's
    /// working directory), with `$T` naming the tools directory. Airlock's
    /// own `--timeout` bounds the sandbox; a watchdog here kills airlock
    /// itself if it outlives that by a minute (a hang must fail, not stall
    /// the suite).
    pub fn run(&self, extra: &[&str], script: &str, timeout: Duration) -> Record {
        let before = tree(&self.ws);
        let out_path = self.dir.path().join("stdout");
        let err_path = self.dir.path().join("stderr");
        let started = Instant::now();
        let mut child = Command::new(&self.airlock)
            .current_dir(&self.ws)
            .arg("run")
            .arg("--workspace")
            .arg(&self.ws)
            .arg("--audit-db")
            .arg(&self.db)
            .arg("--audit-key")
            .arg(&self.key)
            .arg("--ro")
            .arg(&self.tools)
            .arg("--env")
            .arg(format!("T={}", self.tools.display()))
            .arg("--timeout")
            .arg(format!("{}s", timeout.as_secs()))
            .arg("--no-tty")
            .args(extra)
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap();
        let deadline = started + timeout + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "airlock run did not end within {:?}: {}",
                    deadline - started,
                    std::fs::read_to_string(&err_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let elapsed = started.elapsed();
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let sessions = audit_cli(&self.airlock, &self.db, &["sessions", "--json"]);
        let sessions: Value = serde_json::from_slice(&sessions.stdout)
            .unwrap_or_else(|_| panic!("no session recorded: {stderr}"));
        let id = sessions[0]["id"].as_str().unwrap().to_owned();
        let events = export_jsonl(&self.airlock, &self.db, &id);
        Record {
            id,
            status: status.code().unwrap_or(-1),
            stdout,
            stderr,
            events,
            elapsed,
            before,
            ws: self.ws.clone(),
            airlock: self.airlock.clone(),
            db: self.db.clone(),
            restored: self.dir.path().join("restored"),
        }
    }
}
