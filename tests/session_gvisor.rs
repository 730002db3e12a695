//! `airlock session start --isolation gvisor`: a live session whose steps
//! run under gVisor's kernel, one runsc container holding the session and a
//! `runsc exec` per step, with the same proxy, the same record and nothing
//! left behind. Driven as a user drives it: real runsc, real curl and
//! python, a real TLS upstream, the real record. These tests fail, never
//! skip, when runsc is missing: `scripts/setup` installs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use airlock_test_support::pki::TestPki;
use airlock_test_support::upstream::Upstream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

/// A TLS upstream `api.test`, a policy allowing GET /echo/** on it, a
/// workspace, an audit store and a private TMPDIR (where the session's
/// server keeps runsc's state, so the test can look for what is left).
struct Env {
    _pki: TestPki,
    upstream: Upstream,
    dir: tempfile::TempDir,
    ca: PathBuf,
}

impl Env {
    async fn new() -> Self {
        let pki = TestPki::new();
        let upstream = Upstream::start(Some(pki.server_config(&["api.test"]))).await;
        let dir = tempfile::tempdir().unwrap();
        let policy = format!(
            "version = 1\n[[allow]]\nhost = \"api.test\"\nport = {}\nmethods = [\"GET\"]\npaths = [\"/echo\", \"/echo/**\"]\n",
            upstream.port()
        );
        std::fs::write(dir.path().join("policy.toml"), policy).unwrap();
        for sub in ["ws", "audit", "tmp"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let ca = pki.ca_pem.clone();
        Self {
            _pki: pki,
            upstream,
            dir,
            ca,
        }
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("audit/audit.db")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("audit/audit.key")
    }

    /// The server's TMPDIR: runsc's state and bundle live under it.
    fn tmp(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }

    fn base(&self) -> String {
        format!("https://api.test:{}", self.upstream.port())
    }

    /// `airlock session start --isolation gvisor` with `extra` options.
    fn start(&self, extra: &[&str]) -> Session {
        let out = Command::new(AIRLOCK)
            .args(["session", "start", "--isolation", "gvisor", "--policy"])
            .arg(self.dir.path().join("policy.toml"))
            .arg("--workspace")
            .arg(self.workspace())
            .arg("--upstream-ca")
            .arg(&self.ca)
            .args(["--resolve", "api.test:127.0.0.1", "--audit-db"])
            .arg(self.db())
            .arg("--audit-key")
            .arg(self.key())
            .args(extra)
            .env("TMPDIR", self.tmp())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "start: {}", show(&out));
        let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        assert_eq!(id.len(), 16, "start prints the id alone: {id}");
        Session { id, stopped: false }
    }

    /// `airlock audit ARGS` against this test's store.
    fn audit(&self, args: &[&str]) -> String {
        let out = Command::new(AIRLOCK)
            .arg("audit")
            .args(args)
            .arg("--audit-db")
            .arg(self.db())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "audit {args:?}: {}", show(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// runsc's state directories the session's server made (one per session).
    fn runsc_states(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.tmp())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("airlock-gvisor-"))
            })
            .collect()
    }
}

/// A live session; stopped when dropped.
struct Session {
    id: String,
    stopped: bool,
}

impl Session {
    fn exec(&self, options: &[&str], command: &[&str]) -> Output {
        self.exec_with_stdin(options, command, b"")
    }

    fn exec_with_stdin(&self, options: &[&str], command: &[&str], stdin: &[u8]) -> Output {
        use std::io::Write;
        let mut child = Command::new(AIRLOCK)
            .args(["session", "exec", &self.id])
            .args(options)
            .arg("--")
            .args(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
    }

    fn sh(&self, script: &str) -> Output {
        self.exec(&[], &["sh", "-c", script])
    }

    /// The audit session's id, from `session ls --json`.
    fn audit_session(&self) -> String {
        let out = Command::new(AIRLOCK)
            .args(["session", "ls", "--json"])
            .output()
            .unwrap();
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == self.id.as_str())
            .expect("the session is listed")["audit_session"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn server_pid(&self) -> i32 {
        let out = Command::new(AIRLOCK)
            .args(["session", "ls", "--json"])
            .output()
            .unwrap();
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == self.id.as_str())
            .expect("the session is listed")["pids"]["server"]
            .as_i64()
            .unwrap() as i32
    }

    fn stop(&mut self) -> Output {
        self.stopped = true;
        Command::new(AIRLOCK)
            .args(["session", "stop", &self.id])
            .output()
            .unwrap()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = Command::new(AIRLOCK)
                .args(["session", "stop", &self.id])
                .output();
        }
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Host processes whose command line names `needle`.
fn processes_naming(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.parse::<u32>().ok()?;
            let cmdline = std::fs::read(format!("/proc/{name}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline
                .contains(needle)
                .then(|| format!("{name}: {cmdline}"))
        })
        .collect()
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(") ")
            .next()
            .is_some_and(|s| !s.starts_with('Z'))
    })
}

/// The containers runsc knows under `state`'s root.
fn runsc_list(state: &Path) -> String {
    let out = Command::new("runsc")
        .arg(format!("--root={}", state.join("root").display()))
        .arg("list")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gvisor_sessions_steps_run_on_gvisors_kernel_and_share_files_and_the_sessions_env() {
    let env = Env::new().await;
    let s = env.start(&["--env", "SHARED=from-start"]);
    // gVisor's own kernel, not the host's.
    let out = s.sh("uname -a; dmesg");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let host = Command::new("uname").arg("-r").output().unwrap();
    let host = String::from_utf8_lossy(&host.stdout).trim().to_owned();
    assert!(stdout(&out).contains("gVisor"), "{}", show(&out));
    assert!(
        !stdout(&out).contains(&host),
        "host kernel {host}: {}",
        show(&out)
    );
    // One step's files are the next one's; the session's environment is
    // every step's, a step's own --env only its own.
    let out = s.exec(
        &["--env", "ONLY=step1"],
        &["sh", "-c", "echo one > shared.txt; echo $SHARED $ONLY"],
    );
    assert_eq!(stdout(&out), "from-start step1\n", "{}", show(&out));
    let out = s.sh("cat shared.txt; echo \"$SHARED [$ONLY]\"; pwd");
    assert_eq!(
        stdout(&out),
        format!("one\nfrom-start []\n{}\n", env.workspace().display()),
        "{}",
        show(&out)
    );
    assert_eq!(
        std::fs::read_to_string(env.workspace().join("shared.txt")).unwrap(),
        "one\n"
    );
    // --cwd is the step's working directory.
    let out = s.exec(&["--cwd", "/tmp"], &["pwd"]);
    assert_eq!(stdout(&out), "/tmp\n", "{}", show(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gvisor_steps_stdin_stdout_stderr_and_exit_status_are_its_own() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let out = s.exec_with_stdin(
        &[],
        &["sh", "-c", "tr a-z A-Z; echo to-stderr >&2; exit 7"],
        b"hello\n",
    );
    assert_eq!(out.status.code(), Some(7), "{}", show(&out));
    assert_eq!(stdout(&out), "HELLO\n", "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("to-stderr"),
        "{}",
        show(&out)
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("to-stderr"),
        "{}",
        show(&out)
    );
    assert_eq!(s.exec(&[], &["true"]).status.code(), Some(0));
    assert_eq!(s.sh("kill -TERM $$").status.code(), Some(128 + 15));
    let out = s.exec(&[], &["no-such-command-here"]);
    assert_eq!(out.status.code(), Some(127), "{}", show(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_gvisor_step_is_killed_with_its_children_and_the_session_goes_on() {
    let env = Env::new().await;
    let s = env.start(&[]);
    // Children, a grandchild, and one in a process group of its own.
    let out = s.exec(
        &["--timeout", "1s"],
        &[
            "sh",
            "-c",
            "sleep 301 & echo $! > /tmp/bg; sh -c 'sleep 302 & echo $! > /tmp/grand; wait' & setsid sleep 303 & echo $! > /tmp/own; sleep 300",
        ],
    );
    assert_eq!(out.status.code(), Some(124), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("timed out"),
        "{}",
        show(&out)
    );
    let out = s.sh(
        "for f in bg grand own; do kill -0 $(cat /tmp/$f) 2>/dev/null && echo $f alive || echo $f gone; done",
    );
    assert_eq!(
        stdout(&out),
        "bg gone\ngrand gone\nown gone\n",
        "{}",
        show(&out)
    );
    let out = s.sh("echo still here");
    assert_eq!(stdout(&out), "still here\n", "{}", show(&out));
    // Ctrl-C (SIGINT) to `airlock session exec` reaches the step's command.
    let child = Command::new(AIRLOCK)
        .args(["session", "exec", &s.id, "--", "sleep", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + 2), "{}", show(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gvisor_session_whose_server_is_killed_outright_leaves_no_runsc_running() {
    let env = Env::new().await;
    let mut s = env.start(&[]);
    let out = s.sh("(setsid sleep 3002 </dev/null >/dev/null 2>&1 &); exit 0");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let server = s.server_pid();
    let states = env.runsc_states();
    assert_eq!(states.len(), 1, "{states:?}");
    let needle = states[0].display().to_string();
    assert!(!processes_naming(&needle).is_empty(), "runsc runs");
    // No chance to clean up: SIGKILL.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    s.stopped = true;
    let mut left = processes_naming(&needle);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        left = processes_naming(&needle);
    }
    assert_eq!(left, Vec::<String>::new(), "runsc outlived its server");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gvisor_sessions_execs_and_writes_are_on_record_and_the_chain_verifies() {
    let env = Env::new().await;
    let mut s = env.start(&[]);
    let out = s.exec(
        &["--label", "writer"],
        &[
            "sh",
            "-c",
            "echo recorded-content > written.txt; mkdir made",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let out = s.exec(&[], &["cat", "written.txt"]);
    assert_eq!(stdout(&out), "recorded-content\n", "{}", show(&out));
    let audit_session = s.audit_session();
    let out = s.stop();
    assert_eq!(out.status.code(), Some(0), "stop: {}", show(&out));
    let sessions = env.audit(&["sessions", "--json"]);
    assert!(sessions.contains("\"gvisor\""), "{sessions}");
    let timeline = env.audit(&["timeline", &audit_session]);
    // Each step's own command, from gVisor's trace points.
    assert!(
        timeline.contains("exec  sh -c 'echo recorded-content > written.txt; mkdir made'"),
        "{timeline}"
    );
    assert!(timeline.contains("exec  mkdir made"), "{timeline}");
    assert!(timeline.contains("exec  cat written.txt"), "{timeline}");
    assert!(timeline.contains("step 1  \"writer\""), "{timeline}");
    let written = env.workspace().join("written.txt");
    assert!(
        timeline.contains(&format!("create   {}", written.display())),
        "{timeline}"
    );
    assert!(
        timeline.contains(&format!("create   {}/made/", env.workspace().display())),
        "{timeline}"
    );
    let files = env.audit(&["files", &audit_session]);
    assert!(files.contains(&written.display().to_string()), "{files}");
    let out = Command::new(AIRLOCK)
        .args(["audit", "verify", &audit_session, "--audit-db"])
        .arg(env.db())
        .arg("--audit-key")
        .arg(env.key())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "verify: {}", show(&out));
}

/// Every way out but the proxy, tried from a step: one line per attempt,
/// `NAME: blocked` or `NAME: ESCAPED ...`.
const ESCAPES: &str = r#"
import socket, sys
port = int(sys.argv[1])

def attempt(name, f):
    try:
        print(name + ": ESCAPED " + repr(f()))
    except Exception as e:
        print(name + ": blocked (" + type(e).__name__ + ")")

def raw(kind, proto):
    s = socket.socket(socket.AF_INET, kind, proto)
    s.settimeout(3)
    s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("127.0.0.1", 0))
    return s.recvfrom(64)

def packet():
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    return s.recv(64)

def host_loopback(host):
    # The upstream listens on the host's loopback, not the sandbox's: a
    # connection there is the proxy's, which refuses it.
    s = socket.create_connection((host, port), timeout=3)
    s.sendall(b"GET /echo/x HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
    data = s.recv(4096).decode(errors="replace")
    if not data or " 403 " in data.split("\r\n")[0] or "Airlock refused" in data:
        raise PermissionError("refused by airlock")
    return data[:60]

def udp_loopback():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(b"x", ("127.0.0.1", port))
    return s.recvfrom(64)

attempt("raw icmp", lambda: raw(socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("raw tcp", lambda: raw(socket.SOCK_RAW, socket.IPPROTO_TCP))
attempt("packet", packet)
attempt("loopback 127.0.0.1", lambda: host_loopback("127.0.0.1"))
attempt("loopback 127.0.0.2", lambda: host_loopback("127.0.0.2"))
attempt("loopback localhost", lambda: host_loopback("localhost"))
attempt("udp loopback", udp_loopback)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn egress_from_a_gvisor_session_is_only_through_the_proxy() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let base = env.base();
    let out = s.exec(
        &[],
        &[
            "curl",
            "-sS",
            "-w",
            "\n%{http_code}",
            &format!("{base}/echo/ok"),
        ],
    );
    assert!(stdout(&out).ends_with("\n200"), "{}", show(&out));
    assert!(stdout(&out).contains("/echo/ok"), "{}", show(&out));
    let out = s.exec(
        &[],
        &[
            "curl",
            "-sS",
            "-w",
            "\n%{http_code}",
            &format!("{base}/admin"),
        ],
    );
    assert!(stdout(&out).ends_with("\n403"), "{}", show(&out));
    assert!(
        stdout(&out).contains("Airlock refused this request."),
        "{}",
        show(&out)
    );
    let port = env.upstream.port().to_string();
    let out = s.exec(&[], &["python3", "-c", ESCAPES, &port]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(stdout(&out).lines().count(), 7, "{}", show(&out));
    for line in stdout(&out).lines() {
        assert!(line.contains(": blocked"), "{line}\n{}", show(&out));
    }
    assert_eq!(env.upstream.hits(), 1, "only the allowed request left");
}

#[tokio::test(flavor = "multi_thread")]
async fn session_stop_leaves_no_runsc_container_state_or_process_even_with_a_daemon_running() {
    let env = Env::new().await;
    let mut s = env.start(&[]);
    let server = s.server_pid();
    // A hostile step: a daemon (double fork, its own session) that
    // outlives the step.
    let out = s.sh(
        "(setsid sh -c 'trap \"\" TERM HUP; exec sleep 3001' </dev/null >/dev/null 2>&1 &); exit 0",
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let out = s.sh("cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c 'sleep 3001'");
    assert_eq!(stdout(&out).trim(), "1", "the daemon runs: {}", show(&out));
    let states = env.runsc_states();
    assert_eq!(states.len(), 1, "{states:?}");
    let state = states[0].clone();
    assert!(
        runsc_list(&state).contains("running"),
        "{}",
        runsc_list(&state)
    );
    let needle = state.display().to_string();
    assert!(
        !processes_naming(&needle).is_empty(),
        "runsc runs while the session does"
    );
    let out = s.stop();
    assert_eq!(out.status.code(), Some(0), "stop: {}", show(&out));
    // The server's last act is to go; then nothing of runsc is left.
    for _ in 0..100 {
        if !alive(server) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!alive(server), "the session's server is gone");
    assert_eq!(processes_naming(&needle), Vec::<String>::new());
    assert!(!state.exists(), "runsc's state and bundle are removed");
    assert!(
        !runsc_list(&state).contains("airlock-"),
        "{}",
        runsc_list(&state)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_terminal_step_under_gvisor_is_refused_in_one_line_saying_why() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let out = s.exec(&["-t"], &["true"]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("airlock: "), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--isolation gvisor") && stderr.contains("without -t"),
        "{stderr}"
    );
    // The session goes on.
    assert_eq!(s.exec(&[], &["true"]).status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gvisor_sessions_steps_run_as_its_user_and_its_timeout_ends_it_leaving_nothing() {
    let env = Env::new().await;
    let mut s = env.start(&["--user", "65534:65534", "--timeout", "4s"]);
    s.stopped = true;
    let out = s.exec(&[], &["id", "-u"]);
    assert_eq!(stdout(&out), "65534\n", "{}", show(&out));
    let state = env.runsc_states().remove(0);
    let needle = state.display().to_string();
    // Concurrent steps, each its own runsc exec.
    let children: Vec<_> = (0..3)
        .map(|i| {
            Command::new(AIRLOCK)
                .args(["session", "exec", &s.id, "--", "sh", "-c"])
                .arg(format!("sleep 0.5; echo done{i}"))
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert_eq!(stdout(&out), format!("done{i}\n"), "{}", show(&out));
    }
    // The session's --timeout ends it; then nothing of runsc is left.
    let mut left = processes_naming(&needle);
    for _ in 0..200 {
        if left.is_empty() && !state.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        left = processes_naming(&needle);
    }
    assert_eq!(left, Vec::<String>::new(), "runsc outlived the session");
    assert!(!state.exists(), "runsc's state is removed");
}
