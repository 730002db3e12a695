//! Start-up's overlap: the sandbox's init makes its mounts while `nft`
//! loads the capture rules (docs/architecture.md, "`airlock run`"). The
//! command must still never run before the rules are in place, nor at all
//! when they fail to load. A hostile or broken `nft` is put first in PATH,
//! where airlock finds it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// A directory holding an `nft` that runs `body` (a shell script).
fn fake_nft(dir: &Path, body: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let nft = bin.join("nft");
    std::fs::write(&nft, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&nft, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// `airlock run --no-audit` with `bin` first in PATH, in a fresh workspace.
fn run_with_nft(bin: &Path, workspace: &Path, command: &[&str]) -> Output {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    Command::new(AIRLOCK)
        .env("PATH", path)
        .args(["run", "--no-tty", "--no-audit", "--workspace"])
        .arg(workspace)
        .arg("--")
        .args(command)
        .output()
        .unwrap()
}

/// The command leaves this mark in the workspace if it ever runs.
fn marking(workspace: &Path) -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("touch {}/ran", workspace.display()),
    ]
}

fn assert_never_ran(out: &Output, workspace: &Path) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "airlock succeeded: {stderr}");
    assert!(
        !workspace.join("ran").exists(),
        "the command ran without capture rules; stderr: {stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("airlock:") && l.contains("nft")),
        "no one-line airlock: error naming nft: {stderr}"
    );
}

#[test]
fn an_nft_that_refuses_the_rules_after_the_mounts_are_made_starts_no_command() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    // Slow enough that init has made every mount before nft answers.
    let bin = fake_nft(
        dir.path(),
        "cat >/dev/null; sleep 0.3; echo 'Error: refused by the test' >&2; exit 1",
    );
    let command = marking(&workspace);
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let out = run_with_nft(&bin, &workspace, &command);
    assert_never_ran(&out, &workspace);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refused by the test"),
        "nft's own words are not shown: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_nft_killed_by_a_signal_while_loading_starts_no_command() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let bin = fake_nft(dir.path(), "cat >/dev/null; sleep 0.3; kill -9 $$");
    let command = marking(&workspace);
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let out = run_with_nft(&bin, &workspace, &command);
    assert_never_ran(&out, &workspace);
}

#[test]
fn an_nft_that_exits_without_reading_its_rules_starts_no_command() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let bin = fake_nft(dir.path(), "exit 3");
    let command = marking(&workspace);
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let out = run_with_nft(&bin, &workspace, &command);
    assert_never_ran(&out, &workspace);
}

#[test]
fn a_slow_nft_is_waited_for_so_the_commands_first_connection_is_captured() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let real = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("nft is installed");
    let bin = fake_nft(dir.path(), &format!("sleep 0.5; exec {real} \"$@\""));
    // Without the rules, 192.0.2.1 (TEST-NET-1) goes out through lo and is
    // refused at once; with them the proxy takes the connection and
    // answers (deny-all policy: a refusal, but an HTTP one).
    let out = run_with_nft(
        &bin,
        &workspace,
        &[
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
            "http://192.0.2.1/",
        ],
    );
    let code = String::from_utf8_lossy(&out.stdout);
    assert!(
        code != "000" && !code.is_empty(),
        "the first connection was not captured (curl saw {code:?}); stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
