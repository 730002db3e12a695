//! Sandboxes run through the shim's library API (real namespaces, real
//! nft), for the shim's own tests.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_shim::{Limits, Outcome, Sandbox, SandboxSpec};

/// `sh -c script` in `workspace`: the shim's defaults (no extra mounts, no
/// proxy, no observer), a minimal PATH, a 64 MiB /tmp and a 60 s timeout.
pub fn spec(workspace: &Path, script: &str) -> SandboxSpec {
    SandboxSpec {
        command: vec!["sh".into(), "-c".into(), script.into()],
        workspace: workspace.to_path_buf(),
        limits: Limits {
            timeout: Some(Duration::from_secs(60)),
            tmp_bytes: 64 << 20,
            ..Limits::default()
        },
        env: vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("LANG".into(), "C.UTF-8".into()),
        ],
        ..SandboxSpec::default()
    }
}

/// Spawns the sandbox, lets it go and waits for its outcome.
pub fn run(spec: SandboxSpec) -> Outcome {
    let mut sb = Sandbox::spawn(spec).expect("spawn sandbox");
    sb.release().expect("release");
    sb.wait().expect("wait")
}

/// A fresh workspace directory.
pub fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("airlock-shim-test")
        .tempdir()
        .expect("tempdir")
}

/// The text of `name` in the workspace.
pub fn read(ws: &Path, name: &str) -> String {
    std::fs::read_to_string(ws.join(name)).unwrap_or_else(|e| panic!("read {name}: {e}"))
}

/// The system python3, if there is one.
pub fn python() -> Option<PathBuf> {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// `s` as an `OsString`.
pub fn os(s: &str) -> OsString {
    s.into()
}
