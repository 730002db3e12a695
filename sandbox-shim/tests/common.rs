//! Helpers shared by the integration tests (real namespaces, real nft).
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_shim::{Limits, Outcome, Sandbox, SandboxSpec};

/// A test whose prerequisite is missing (root, a tool, a kernel feature) calls
/// this and returns. In CI (`CI=true`) the test fails here instead: a green CI
/// run must mean that every test ran. Elsewhere it skips loudly, on stderr,
/// naming the test (the test harness names each test's thread after it).
#[track_caller]
pub fn skip_or_fail(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{test}: prerequisite missing in CI (CI=true), failing instead of skipping: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
}

pub fn spec(workspace: &Path, script: &str) -> SandboxSpec {
    SandboxSpec {
        command: vec!["sh".into(), "-c".into(), script.into()],
        workspace: workspace.to_path_buf(),
        ro: vec![],
        rw: vec![],
        hide: vec![],
        limits: Limits {
            memory_bytes: None,
            pids: None,
            cpus: None,
            timeout: Some(Duration::from_secs(60)),
            tmp_bytes: 64 << 20,
        },
        env: vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("LANG".into(), "C.UTF-8".into()),
        ],
        user: None,
        ca_bundle_pem: None,
        hostname: "airlock".into(),
        observe: None,
        stdio: None,
        allow_unix_sockets: false,
        terminal: false,
        session: false,
    }
}

pub fn run(spec: SandboxSpec) -> Outcome {
    let mut sb = Sandbox::spawn(spec).expect("spawn sandbox");
    sb.release().expect("release");
    sb.wait().expect("wait")
}

pub fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("airlock-shim-test")
        .tempdir()
        .expect("tempdir")
}

pub fn read(ws: &Path, name: &str) -> String {
    std::fs::read_to_string(ws.join(name)).unwrap_or_else(|e| panic!("read {name}: {e}"))
}

pub fn python() -> Option<PathBuf> {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

pub fn os(s: &str) -> OsString {
    s.into()
}
