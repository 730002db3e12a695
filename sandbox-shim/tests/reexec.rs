//! Tests that need a separate process: a different $HOME, an unprivileged
//! user, or a parent that gets `kill -9`ed. The test binary re-executes itself
//! with AIRLOCK_SHIM_HELPER=<mode>; each helper "test" is a no-op otherwise.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use airlock_shim::Sandbox;
use airlock_test_support::shim::{read, run, spec, workspace};
use airlock_test_support::skip_or_fail;

const HELPER: &str = "AIRLOCK_SHIM_HELPER";

fn helper_mode() -> Option<String> {
    std::env::var(HELPER).ok()
}

/// Re-run this test binary, executing only `test_name` in helper mode.
fn helper(test_name: &str, mode: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(HELPER, mode);
    cmd
}

// ---------------------------------------------------------------- $HOME secrets

#[test]
fn helper_home() {
    if helper_mode().as_deref() != Some("home") {
        return;
    }
    let home = PathBuf::from(std::env::var("HOME").unwrap());
    let ws = home.join("project");
    let script = format!(
        "test -e {h}/.ssh/id_ed25519 && echo ssh-visible >> r; \
         test -e {h}/.aws/credentials && echo aws-visible >> r; \
         test -e {h}/.local/share/airlock/ca.key && echo ca-visible >> r; \
         test -e {h}/notes.txt && echo home-visible >> r; \
         echo ok >> r",
        h = home.display()
    );
    let out = run(spec(&ws, &script));
    assert_eq!(out.exit_code(), 0);
    // Granting the whole home read-only still keeps the secrets and the CA dir hidden.
    let mut s = spec(&ws, &script.replace(">> r", ">> r2"));
    s.ro = vec![home.clone()];
    assert_eq!(run(s).exit_code(), 0);
}

#[test]
fn home_secrets_and_ca_dir_are_hidden_but_workspace_inside_home_is_visible() {
    if helper_mode().is_some() {
        return;
    }
    let home = workspace();
    let h = home.path();
    for (dir, file) in [
        (".ssh", "id_ed25519"),
        (".aws", "credentials"),
        (".local/share/airlock", "ca.key"),
        ("project", "README"),
    ] {
        std::fs::create_dir_all(h.join(dir)).unwrap();
        std::fs::write(h.join(dir).join(file), "secret").unwrap();
    }
    std::fs::write(h.join("notes.txt"), "private").unwrap();
    let status = helper("helper_home", "home")
        .env("HOME", h)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(read(&h.join("project"), "r"), "ok\n");
    // With --ro ~, ordinary files are visible, secrets still are not.
    assert_eq!(read(&h.join("project"), "r2"), "home-visible\nok\n");
}

// ---------------------------------------------------------------- kill -9 of the parent

#[test]
fn helper_parent() {
    if helper_mode().as_deref() != Some("parent") {
        return;
    }
    let ws = PathBuf::from(std::env::var("WS").unwrap());
    let mut s = spec(&ws, "sleep 1000.777 & sleep 1000.777");
    s.limits.memory_bytes = Some(64 << 20);
    s.limits.pids = Some(50);
    let mut sb = Sandbox::spawn(s).unwrap();
    sb.release().unwrap();
    let paths: Vec<String> = sb
        .cgroup_paths()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    std::fs::write(ws.join("cgroups"), paths.join("\n")).unwrap();
    std::fs::write(ws.join("ready"), "").unwrap();
    std::thread::sleep(Duration::from_secs(600));
}

/// A failing assertion must not leave the helper (and its sandbox) running.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn count_processes(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .count()
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill_9_of_the_parent_leaves_no_processes_or_cgroups() {
    if helper_mode().is_some() {
        return;
    }
    let ws = workspace();
    let mut child = KillOnDrop(
        helper("helper_parent", "parent")
            .env("WS", ws.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("sandbox start", Duration::from_secs(20), || {
        ws.path().join("ready").exists()
    });
    wait_for("sleepers", Duration::from_secs(5), || {
        count_processes("1000.777") >= 2
    });
    let cgroups: Vec<PathBuf> = read(ws.path(), "cgroups")
        .lines()
        .map(PathBuf::from)
        .collect();
    assert!(!cgroups.is_empty());
    assert!(cgroups.iter().all(|c| c.exists()));
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    wait_for("sandbox processes to die", Duration::from_secs(5), || {
        count_processes("1000.777") == 0
    });
    wait_for("cgroups to disappear", Duration::from_secs(5), || {
        cgroups.iter().all(|c| !c.exists())
    });
}

// ---------------------------------------------------------------- unprivileged user

const TEST_USER: &str = "airlock-shim-test";

fn test_user() -> Option<(u32, u32)> {
    let lookup = || nix::unistd::User::from_name(TEST_USER).ok().flatten();
    if lookup().is_none() {
        let ok = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                TEST_USER,
            ])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok && lookup().is_none() {
            return None;
        }
    }
    lookup().map(|u| (u.uid.as_raw(), u.gid.as_raw()))
}

fn userns_available() -> bool {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    read("/proc/sys/user/max_user_namespaces").as_deref() != Some("0")
        && read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() != Some("0")
        && read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() != Some("1")
}

#[test]
fn helper_unprivileged() {
    if helper_mode().as_deref() != Some("unpriv") {
        return;
    }
    let ws = PathBuf::from(std::env::var("WS").unwrap());
    let uid = nix::unistd::getuid().as_raw();
    let script = "id -u > r; touch /etc/x 2>/dev/null && echo etc-writable >> r; \
                  echo t > /tmp/t && cat /tmp/t >> r; \
                  grep CapEff /proc/self/status >> r; \
                  unshare -r true 2>/dev/null && echo unshared >> r; \
                  ls -d /proc/[0-9]* | wc -l >> r; \
                  /usr/bin/python3 -c 'import socket; s=socket.create_connection((\"198.51.100.1\", 80), timeout=5); s.sendall(b\"x\"); print(s.recv(9).decode())' >> r";
    let mut s = spec(&ws, script);
    s.limits.memory_bytes = Some(256 << 20);
    s.limits.pids = Some(64);
    s.limits.cpus = Some(1.0);
    let mut sb = Sandbox::spawn(s).expect("unprivileged spawn");
    let notices = sb.notices();
    assert_eq!(notices.len(), 3, "{notices:?}");
    assert!(notices[0].contains("RLIMIT_AS"), "{notices:?}");
    assert!(notices[2].contains("--cpus is not enforced"), "{notices:?}");
    let net = sb.take_network().unwrap();
    let proxy = std::thread::spawn(move || {
        let (mut c, _) = net.transparent.accept().unwrap();
        let dst = nix::sys::socket::getsockopt(&c, nix::sys::socket::sockopt::OriginalDst).unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        c.write_all(b"captured").unwrap();
        u16::from_be(dst.sin_port)
    });
    sb.release().unwrap();
    let out = sb.wait().unwrap();
    assert_eq!(out.exit_code(), 0);
    assert_eq!(proxy.join().unwrap(), 80);
    let r = std::fs::read_to_string(ws.join("r")).unwrap();
    let lines: Vec<&str> = r.lines().collect();
    assert_eq!(lines[0], uid.to_string(), "{r}");
    assert_eq!(lines[1], "t", "{r}");
    assert_eq!(lines[2], "CapEff:\t0000000000000000", "{r}");
    assert!(lines[3].trim().parse::<u32>().unwrap() < 10, "{r}");
    assert_eq!(lines[4], "captured", "{r}");
    assert_eq!(lines.len(), 5, "{r}");
}

#[test]
fn unprivileged_user_gets_the_same_sandbox() {
    if helper_mode().is_some() {
        return;
    }
    let Some((uid, gid, ws)) = test_user_with_workspace() else {
        return;
    };
    let exe = std::env::current_exe().unwrap();
    assert!(
        executable_by_others(&exe),
        "test binary must be reachable by {TEST_USER}"
    );
    let out = helper("helper_unprivileged", "unpriv")
        .env("WS", ws.path())
        .env("HOME", ws.path())
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "unprivileged helper failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn helper_unprivileged_observe() {
    if helper_mode().as_deref() != Some("unpriv-observe") {
        return;
    }
    let ws = PathBuf::from(std::env::var("WS").unwrap());
    let mut s = spec(
        &ws,
        "for i in 1 2 3; do /bin/true $i; done; echo hi > /tmp/x; echo ws > w; exit 5",
    );
    s.observe = Some(airlock_shim::ObserveSpec::default());
    let mut sb = Sandbox::spawn(s).expect("unprivileged spawn");
    let rx = sb.take_observations().unwrap();
    sb.release().unwrap();
    assert_eq!(sb.wait().unwrap().exit_code(), 5);
    let obs: Vec<airlock_record::AuditEvent> = rx.try_iter().collect();
    let uid = nix::unistd::getuid().as_raw();
    let mut trues = 0;
    let mut files = Vec::new();
    let mut sh_exit = None;
    for o in &obs {
        match o {
            airlock_record::AuditEvent::Exec(airlock_record::Exec {
                path, argv, uid: u, ..
            }) => {
                assert_eq!(*u, uid);
                if path.as_bytes().ends_with(b"/true") {
                    trues += 1;
                    assert_eq!(argv.len(), 2);
                }
            }
            airlock_record::AuditEvent::Exit(airlock_record::Exit {
                exec_id, status, ..
            }) if exec_id.as_str() == "1" => {
                sh_exit = *status;
            }
            airlock_record::AuditEvent::File(f) => {
                files.push((f.path.as_bytes().to_vec(), f.content.clone()));
            }
            _ => {}
        }
    }
    assert_eq!(trues, 3, "{obs:?}");
    assert_eq!(sh_exit, Some(5));
    assert!(
        files.contains(&("/tmp/x".into(), Some(b"hi\n".to_vec()))),
        "{files:?}"
    );
    let w = std::fs::canonicalize(&ws)
        .unwrap()
        .join("w")
        .into_os_string()
        .into_encoded_bytes();
    assert!(files.contains(&(w, Some(b"ws\n".to_vec()))), "{files:?}");
}

#[test]
fn unprivileged_user_is_observed_too() {
    run_helper_as_test_user("helper_unprivileged_observe", "unpriv-observe", "observe");
}

fn executable_by_others(p: &Path) -> bool {
    p.ancestors().skip(1).all(|d| {
        std::fs::metadata(d)
            .map(|m| m.permissions().mode() & 0o001 != 0)
            .unwrap_or(false)
    }) && std::fs::metadata(p)
        .map(|m| m.permissions().mode() & 0o001 != 0)
        .unwrap_or(false)
}

// ------------------------------------------------------- unprivileged session

#[test]
fn helper_unprivileged_session() {
    if helper_mode().as_deref() != Some("unpriv-session") {
        return;
    }
    use airlock_shim::{ExitKind, ObserveSpec, StepEvent, StepId, StepRequest, StepStdio};
    let ws = PathBuf::from(std::env::var("WS").unwrap());
    let mut s = spec(&ws, "");
    s.command.clear();
    s.session = true;
    s.observe = Some(ObserveSpec::default());
    let mut sb = Sandbox::spawn(s).expect("unprivileged session spawn");
    let observations = sb.take_observations().unwrap();
    let control = sb.start_session().unwrap();
    let init = sb.pid();
    let (tx, events) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || sb.wait_session(|e| tx.send(e).unwrap()));
    let run = |step: u64, script: &str| -> (ExitKind, String) {
        let request = StepRequest {
            step: StepId(step),
            argv: vec!["sh".into(), "-c".into(), script.into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: None,
            terminal: None,
        };
        let (out_r, out_w) = nix::unistd::pipe().unwrap();
        let null = || std::fs::File::open("/dev/null").unwrap().into();
        control
            .exec(&request, StepStdio::Pipes([null(), out_w, null()]))
            .unwrap();
        let mut out = String::new();
        std::fs::File::from(out_r).read_to_string(&mut out).unwrap();
        match events.recv_timeout(Duration::from_secs(30)).unwrap() {
            StepEvent::Exited { step: got, status } if got == StepId(step) => (status, out),
            other => panic!("{other:?}"),
        }
    };
    let uid = nix::unistd::getuid().as_raw();
    assert_eq!(
        run(1, "id -u; echo kept > /tmp/state"),
        (ExitKind::Exited(0), format!("{uid}\n"))
    );
    assert_eq!(
        run(2, "cat /tmp/state; grep CapEff /proc/self/status"),
        (
            ExitKind::Exited(0),
            "kept\nCapEff:\t0000000000000000\n".to_string()
        )
    );
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(init), nix::sys::signal::SIGKILL).unwrap();
    waiter.join().unwrap().unwrap();
    let steps: Vec<Option<StepId>> = observations
        .try_iter()
        .filter_map(|o| match o {
            airlock_record::AuditEvent::Exec(e) => Some(e.step.map(|s| StepId(s.get()))),
            _ => None,
        })
        .collect();
    assert!(steps.contains(&Some(StepId(1))), "{steps:?}");
    assert!(steps.contains(&Some(StepId(2))), "{steps:?}");
    assert!(steps.iter().all(Option::is_some), "{steps:?}");
}

#[test]
fn unprivileged_user_gets_the_same_session_steps() {
    run_helper_as_test_user("helper_unprivileged_session", "unpriv-session", "session");
}

/// Run `helper` (a test of this file in helper mode) as the test user, in a
/// workspace of theirs, and require it to succeed.
fn run_helper_as_test_user(helper_name: &str, tag: &str, what: &str) {
    if helper_mode().is_some() {
        return;
    }
    let Some((uid, gid, ws)) = test_user_with_workspace() else {
        return;
    };
    let out = helper(helper_name, tag)
        .env("WS", ws.path())
        .env("HOME", ws.path())
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "unprivileged {what} helper failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test user (created when missing) and a workspace it owns; None,
/// after saying why (skip_or_fail), when this machine cannot have one.
fn test_user_with_workspace() -> Option<(u32, u32, tempfile::TempDir)> {
    if !nix::unistd::geteuid().is_root() {
        skip_or_fail("not root, cannot create a test user");
        return None;
    }
    if !userns_available() {
        skip_or_fail("unprivileged user namespaces are disabled on this kernel");
        return None;
    }
    let Some((uid, gid)) = test_user() else {
        skip_or_fail(&format!("could not create user {TEST_USER} with useradd"));
        return None;
    };
    let ws = workspace();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    nix::unistd::chown(
        ws.path(),
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .unwrap();
    Some((uid, gid, ws))
}
