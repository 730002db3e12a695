//! `airlock run` under a chosen isolation against the standard TLS
//! upstream: the fixture the run suites share, so a suite runs under
//! namespaces and gVisor by taking an [`Isolation`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::audit_cli::{audit_ok, first_session_id};
use crate::client::ClientOutput;
use crate::isolation::Isolation;
use crate::pki::TestPki;
use crate::upstream::{Extra, Upstream};

/// A TLS upstream on the host's loopback serving `names` (each pinned to
/// 127.0.0.1 for the sandbox), a private directory with the workspace, and
/// an audit database per run signed with one key.
#[derive(Debug)]
pub struct SandboxFixture {
    pub pki: TestPki,
    pub upstream: Upstream,
    pub dir: tempfile::TempDir,
    pub isolation: Isolation,
    airlock: String,
    names: Vec<String>,
    runs: AtomicUsize,
}

impl SandboxFixture {
    /// The fixture for the `airlock` binary at `airlock` (see
    /// [`airlock_bin!`](crate::airlock_bin)).
    pub async fn new(airlock: &str, isolation: Isolation, names: &[&str], extra: Extra) -> Self {
        let pki = TestPki::new();
        let upstream = Upstream::start_with(Some(pki.server_config(names)), extra).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        Self {
            pki,
            upstream,
            dir,
            isolation,
            airlock: airlock.to_owned(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            runs: AtomicUsize::new(0),
        }
    }

    pub fn port(&self) -> u16 {
        self.upstream.port()
    }

    pub fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// The audit database of the latest run.
    pub fn db(&self) -> PathBuf {
        let run = self.runs.load(Ordering::SeqCst);
        self.dir.path().join(format!("audit/run{run}/audit.db"))
    }

    pub fn key(&self) -> PathBuf {
        self.dir.path().join("audit/audit.key")
    }

    /// Writes `version = 1` and `rules` as the policy file.
    pub fn write_policy(&self, rules: &str) -> PathBuf {
        let path = self.dir.path().join("policy.toml");
        std::fs::write(&path, format!("version = 1\n{rules}")).unwrap();
        path
    }

    /// `airlock run` under the fixture's isolation with `policy`, the pins
    /// and upstream CA, a new audit database, `extra` options, then
    /// `command`. A 60 s `--timeout` unless `extra` has one.
    pub async fn run(&self, policy: &Path, extra: &[&str], command: &[&str]) -> ClientOutput {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let mut cmd = tokio::process::Command::new(&self.airlock);
        cmd.arg("run")
            .args(self.isolation.args())
            .arg("--policy")
            .arg(policy)
            .arg("--workspace")
            .arg(self.workspace())
            .arg("--upstream-ca")
            .arg(&self.pki.ca_pem);
        for name in &self.names {
            cmd.args(["--resolve", &format!("{name}:127.0.0.1")]);
        }
        if !extra.contains(&"--timeout") {
            cmd.args(["--timeout", "60s"]);
        }
        let out = cmd
            .arg("--audit-db")
            .arg(self.db())
            .arg("--audit-key")
            .arg(self.key())
            .args(extra)
            .arg("--")
            .args(command)
            .output()
            .await
            .unwrap();
        ClientOutput::from(out)
    }

    /// The latest run's session id.
    pub fn session_id(&self, context: &dyn std::fmt::Debug) -> String {
        first_session_id(&self.airlock, &self.db(), context)
    }

    /// The latest run's timeline, as `airlock audit timeline` prints it.
    pub fn timeline(&self, context: &dyn std::fmt::Debug) -> String {
        let id = self.session_id(context);
        audit_ok(&self.airlock, &self.db(), &["timeline", &id])
    }

    /// The latest run's events, as `airlock audit export` writes them.
    pub fn events(&self, context: &dyn std::fmt::Debug) -> Vec<serde_json::Value> {
        let id = self.session_id(context);
        crate::audit_cli::export_jsonl(&self.airlock, &self.db(), &id)
    }

    /// `airlock audit verify` of the latest run says the chain is intact.
    pub fn assert_verifies(&self, context: &dyn std::fmt::Debug) {
        let id = self.session_id(context);
        let key = self.key().display().to_string();
        let verify = audit_ok(
            &self.airlock,
            &self.db(),
            &["verify", &id, "--audit-key", &key],
        );
        assert!(verify.contains("intact"), "{verify}");
    }
}

/// The timeline has `method url` answered with `status` on one line: the
/// exchange is on record with its outcome.
pub fn assert_on_record(timeline: &str, method: &str, url: &str, status: u16) {
    let exchange = format!("{method} {url} -> {status}");
    assert!(
        timeline.lines().any(|l| l.contains(&exchange)),
        "{exchange} is not on record:\n{timeline}"
    );
}
