//! `airlock session`: one sandbox kept across many steps, tested as a user
//! (and an agent) would drive it: real TLS upstream, real namespaces, real
//! processes, the real record.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use airlock_test_support::pki::TestPki;
use airlock_test_support::skip_or_fail;
use airlock_test_support::upstream::Upstream;

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

fn audit_cli(db: &Path, args: &[&str]) -> Output {
    airlock_test_support::audit_cli::audit_cli(AIRLOCK, db, args)
}

/// A TLS upstream, a policy that allows GET /echo/** on it, a workspace and
/// an audit store, all the sessions of one test need.
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
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        std::fs::create_dir_all(dir.path().join("audit")).unwrap();
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

    /// `airlock audit verify SESSION` against this test's key.
    fn verify(&self, session: &str) -> Output {
        let key = self.dir.path().join("audit/audit.key");
        audit_cli(
            &self.db(),
            &["verify", session, "--audit-key", key.to_str().unwrap()],
        )
    }

    fn base(&self) -> String {
        format!("https://api.test:{}", self.upstream.port())
    }

    fn start_args(&self) -> Vec<String> {
        let p = |p: PathBuf| p.to_string_lossy().into_owned();
        vec![
            "session".into(),
            "start".into(),
            "--policy".into(),
            p(self.dir.path().join("policy.toml")),
            "--workspace".into(),
            p(self.workspace()),
            "--upstream-ca".into(),
            p(self.ca.clone()),
            "--resolve".into(),
            "api.test:127.0.0.1".into(),
            "--audit-db".into(),
            p(self.db()),
            "--audit-key".into(),
            p(self.dir.path().join("audit/audit.key")),
        ]
    }

    /// `airlock session start` with these extra options; the live session.
    /// With `--no-audit`, the record's options are left out.
    fn start(&self, extra: &[&str]) -> Session {
        let mut args = self.start_args();
        if extra.contains(&"--no-audit") {
            let at = args.iter().position(|a| a == "--audit-db").unwrap();
            args.truncate(at);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = airlock(&args);
        assert_eq!(out.status.code(), Some(0), "start: {}", show(&out));
        let id = String::from_utf8(out.stdout.clone())
            .unwrap()
            .trim()
            .to_owned();
        assert!(
            id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit()),
            "start prints the id alone: {}",
            show(&out)
        );
        Session { id, stopped: false }
    }
}

/// A live session; stopped when dropped.
struct Session {
    id: String,
    stopped: bool,
}

impl Session {
    fn exec(&self, options: &[&str], command: &[&str]) -> Output {
        let mut args = vec!["session", "exec", &self.id];
        args.extend(options);
        args.push("--");
        args.extend(command);
        airlock(&args)
    }

    fn sh(&self, script: &str) -> Output {
        self.exec(&[], &["sh", "-c", script])
    }

    /// `airlock session exec ID -- sh -c SCRIPT`, to spawn, stdin closed.
    fn sh_command(&self, script: &str) -> Command {
        let mut command = Command::new(AIRLOCK);
        command
            .args(["session", "exec", &self.id, "--", "sh", "-c", script])
            .stdin(Stdio::null());
        command
    }

    /// `airlock session ls --json`'s entry for this session, if listed.
    fn info(&self) -> Option<serde_json::Value> {
        let out = airlock(&["session", "ls", "--json"]);
        assert_eq!(out.status.code(), Some(0), "ls: {}", show(&out));
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == self.id.as_str())
            .cloned()
    }

    fn pids(&self) -> (i32, i32) {
        let info = self.info().expect("the session is listed");
        (
            info["pids"]["server"].as_i64().unwrap() as i32,
            info["pids"]["init"].as_i64().unwrap() as i32,
        )
    }

    fn audit_session(&self) -> String {
        self.info().unwrap()["audit_session"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn stop(&mut self) -> Output {
        self.stopped = true;
        airlock(&["session", "stop", &self.id])
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = airlock(&["session", "stop", &self.id]);
        }
    }
}

fn airlock<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(AIRLOCK)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Airlock refused: exit 125 and one line on stderr, which is returned.
fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(125), "{}", show(out));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "one line: {}", show(out));
    stderr
}

/// A python script that tries to connect to the Unix socket at `path` and
/// prints "reached" or "refused ERRNO".
fn connect_probe(path: &str) -> String {
    format!(
        "import socket\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect('{path}'); print('reached')\nexcept OSError as e: print('refused', e.errno)\n"
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Wait (bounded) for `check` to hold.
fn eventually(what: &str, limit: Duration, check: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The cgroups airlock made for the sandbox that `server` spawned (the shim
/// names them `<pid>-...` after the process that spawned the sandbox).
fn cgroups_of(server: i32) -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: usize, prefix: &str, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name() == "airlock" {
                for c in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
                    if c.file_name().to_string_lossy().starts_with(prefix) {
                        out.push(c.path());
                    }
                }
            } else if depth > 0 {
                walk(&e.path(), depth - 1, prefix, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        Path::new("/sys/fs/cgroup"),
        4,
        &format!("{server}-"),
        &mut out,
    );
    out
}

/// Nothing of the session is left on the host.
fn assert_nothing_left(session: &Session, server: i32, init: i32) {
    eventually(
        "the server and the sandbox end",
        Duration::from_secs(10),
        || !alive(server) && !alive(init),
    );
    assert!(session.info().is_none(), "`ls` no longer lists it");
    // The supervisor removes the cgroups once init is gone.
    eventually("the cgroups are removed", Duration::from_secs(10), || {
        cgroups_of(server).is_empty()
    });
    let sock = Path::new("/run/airlock").join(format!("{}.sock", session.id));
    assert!(!sock.exists(), "{} is removed", sock.display());
    // Its log too: the server removes it as it ends, `ls` when it was killed.
    let log = sock.with_extension("log");
    eventually("the log is removed", Duration::from_secs(10), || {
        let _ = airlock(&["session", "ls"]);
        !log.exists()
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn files_and_background_servers_persist_across_steps() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let out = s.sh("echo kept > /tmp/state && echo ws > note && pwd");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(stdout(&out).trim(), env.workspace().to_string_lossy());
    let out = s.sh("cat /tmp/state note");
    assert_eq!(stdout(&out), "kept\nws\n", "{}", show(&out));
    // A server started in the background in one step...
    let out = s.sh(
        "python3 -m http.server 18080 --bind 127.0.0.1 >/tmp/server.log 2>&1 & \
         for i in $(seq 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 18080))' 2>/dev/null && break; sleep 0.05; done; echo started",
    );
    assert_eq!(stdout(&out), "started\n", "{}", show(&out));
    // ...answers curl in the next one, and keeps logging to its file.
    let out = s.sh("curl -sS -o /dev/null -w '%{http_code}' http://127.0.0.1:18080/");
    assert_eq!(stdout(&out), "200", "{}", show(&out));
    let out = s.sh("grep -c 'GET / ' /tmp/server.log");
    assert_eq!(stdout(&out).trim(), "1", "{}", show(&out));
    assert_eq!(s.info().unwrap()["commands"], 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_step_is_held_to_the_policy() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let base = env.base();
    for step in 0..2 {
        let out = s.exec(&[], &["curl", "-sS", &format!("{base}/echo/step{step}")]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        assert!(
            stdout(&out).contains(&format!("/echo/step{step}")),
            "{}",
            show(&out)
        );
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
        let text = stdout(&out);
        assert!(text.ends_with("\n403"), "{}", show(&out));
        assert!(
            text.contains("[[allow]]"),
            "the refusal says which rule to add: {text}"
        );
    }
    assert_eq!(env.upstream.hits(), 2, "only the allowed requests left");
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_statuses_follow_airlock_run() {
    let env = Env::new().await;
    let s = env.start(&[]);
    assert_eq!(s.exec(&[], &["true"]).status.code(), Some(0));
    assert_eq!(s.sh("exit 3").status.code(), Some(3));
    assert_eq!(s.sh("kill -TERM $$").status.code(), Some(128 + 15));
    let out = s.exec(&[], &["no-such-command-here"]);
    assert_eq!(out.status.code(), Some(127), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("command not found"));
    // stdin is streamed to the command.
    let mut child = Command::new(AIRLOCK)
        .args(["session", "exec", &s.id, "--", "tr", "a-z", "A-Z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out), "HELLO\n");
    // Ctrl-C (SIGINT) to `airlock session exec` reaches the step's command.
    let child = Command::new(AIRLOCK)
        .args(["session", "exec", &s.id, "--", "sleep", "30"])
        .spawn()
        .unwrap();
    eventually("the step runs", Duration::from_secs(10), || {
        s.info().is_some_and(|i| i["running"] == 1)
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + 2), "{}", show(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn execs_run_concurrently() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let started = Instant::now();
    let children: Vec<_> = (0..3)
        .map(|i| {
            Command::new(AIRLOCK)
                .args(["session", "exec", &s.id, "--", "sh", "-c"])
                .arg(format!("sleep 1; echo done{i}"))
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert_eq!(stdout(&out), format!("done{i}\n"), "{}", show(&out));
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "three 1 s steps took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_timeout_kills_its_tree_and_the_session_lives_on() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let out = s.exec(
        &["--timeout", "1s"],
        &["sh", "-c", "sleep 300 & echo $! > /tmp/bg; sleep 300"],
    );
    assert_eq!(out.status.code(), Some(124), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("timed out"));
    // Its background child is gone too; the session still takes steps.
    let out = s.sh("kill -0 $(cat /tmp/bg) 2>/dev/null && echo alive || echo gone");
    assert_eq!(stdout(&out), "gone\n", "{}", show(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_leaves_nothing_behind_and_the_record_verifies() {
    let env = Env::new().await;
    // Limits, so that there are cgroups to leave behind.
    let name = format!("stop-test-{}", std::process::id());
    let mut s = env.start(&["--name", &name, "--memory", "256M", "--pids", "64"]);
    s.sh("sleep 1000 &");
    let (server, init) = s.pids();
    assert!(!cgroups_of(server).is_empty(), "the session has cgroups");
    let audit = s.audit_session();
    let out = s.stop();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_nothing_left(&s, server, init);
    let out = env.verify(&audit);
    assert!(out.status.success(), "verify: {}", show(&out));
    // An exec after the stop is refused on one line.
    refused(&s.exec(&[], &["true"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_session_stops_by_itself() {
    let env = Env::new().await;
    let s = env.start(&["--idle-timeout", "2s"]);
    // A step keeps it busy while its pids are read (a loaded machine may
    // take more than the idle timeout to list it otherwise).
    let busy = s
        .sh_command("sleep 3; echo busy")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (server, init) = s.pids();
    let busy = busy.wait_with_output().unwrap();
    assert_eq!(busy.status.code(), Some(0), "running is not idle");
    assert_nothing_left(&s, server, init);
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_the_server_ends_the_sandbox_and_the_record_still_verifies() {
    let env = Env::new().await;
    let s = env.start(&["--memory", "256M", "--pids", "64"]);
    s.sh("echo before > /tmp/x; sleep 1000 &");
    let (server, init) = s.pids();
    assert!(!cgroups_of(server).is_empty(), "the session has cgroups");
    let audit = s.audit_session();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert_nothing_left(&s, server, init);
    // The record is incomplete (it never got its end), not broken.
    let out = env.verify(&audit);
    let text = stdout(&out);
    assert!(!text.contains("TAMPERED"), "{}", show(&out));
    assert!(
        text.contains("session never finished") && out.status.code() == Some(1),
        "verify: {}",
        show(&out)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_one_line_and_125() {
    let env = Env::new().await;
    let name = format!("dup-{}", std::process::id());
    let s = env.start(&["--name", &name]);
    // The same name twice.
    let mut args = env.start_args();
    args.extend(["--name".to_owned(), name.clone()]);
    let out = airlock(&args);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already live"),
        "{}",
        show(&out)
    );
    // Unknown and ambiguous sessions.
    let out = airlock(&["session", "exec", "no-such-session", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no live session"));
    let other = env.start(&[]);
    let out = airlock(&["session", "exec", "", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    drop(other);
    // By name and by unique prefix.
    assert_eq!(s.exec(&[], &["true"]).status.code(), Some(0));
    let out = airlock(&["session", "exec", &name, "--", "echo", "by-name"]);
    assert_eq!(stdout(&out), "by-name\n", "{}", show(&out));
    let out = airlock(&["session", "exec", &s.id[..12], "--", "echo", "by-prefix"]);
    assert_eq!(stdout(&out), "by-prefix\n", "{}", show(&out));
    // A relative --cwd.
    let out = airlock(&[
        "session", "exec", &s.id, "--env", "X=1", "--cwd", "relative", "--", "true",
    ]);
    refused(&out);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_cannot_reach_any_control_socket() {
    let env = Env::new().await;
    let other = env.start(&[]);
    let s = env.start(&["--allow-unix-sockets"]);
    for id in [&s.id, &other.id] {
        let probe = connect_probe(&format!("/run/airlock/{id}.sock"));
        let out = s.exec(&[], &["python3", "-c", &probe]);
        assert!(stdout(&out).starts_with("refused"), "{}", show(&out));
    }
    let out = s.sh("ls /run/airlock 2>&1; ls -a /run/user 2>&1 | head -3");
    assert!(!stdout(&out).contains(&other.id), "{}", show(&out));
    assert!(!stdout(&out).contains(".sock"), "{}", show(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn another_user_cannot_exec_into_the_session() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let sock = format!("/run/airlock/{}.sock", s.id);
    let out = Command::new("runuser")
        .args(["-u", "nobody", "--", "python3", "-c"])
        .arg(connect_probe(&sock))
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "refused 13\n", "{}", show(&out));
    let out = Command::new("runuser")
        .args([
            "-u", "nobody", "--", AIRLOCK, "session", "exec", &s.id, "--", "id",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_timeline_shows_each_step_with_its_label() {
    let env = Env::new().await;
    let mut s = env.start(&[]);
    let base = env.base();
    s.exec(&["--label", "call_1"], &["sh", "-c", "echo one > /tmp/a"]);
    s.exec(
        &["--label", "call_2"],
        &[
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            &format!("{base}/echo/two"),
        ],
    );
    let audit = s.audit_session();
    s.stop();
    let out = audit_cli(&env.db(), &["timeline", &audit]);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", show(&out));
    let one = text.find("call_1").expect("step 1's label");
    let two = text.find("call_2").expect("step 2's label");
    let get = text.find("/echo/two").expect("the request");
    assert!(one < two && two < get, "grouped by step:\n{text}");
}

const TEST_USER: &str = "airlock-session-test";

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `airlock ARGS` as `user` through runuser, with its own runtime directory.
fn airlock_as(user: &str, runtime: &Path, airlock: &Path, args: &[&str]) -> Output {
    Command::new("runuser")
        .args(["-u", user, "--", "env", "PATH=/usr/local/bin:/usr/bin:/bin"])
        .arg(format!("XDG_RUNTIME_DIR={}", runtime.display()))
        .arg(format!("HOME={}", runtime.display()))
        .arg(airlock)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ordinary_user_keeps_sessions_too() {
    let add = Command::new("useradd").args(["-m", TEST_USER]).output();
    let Ok(add) = add else {
        skip_or_fail("useradd is missing");
        return;
    };
    assert!(
        add.status.success() || String::from_utf8_lossy(&add.stderr).contains("already exists"),
        "useradd: {add:?}"
    );
    let env = Env::new().await;
    // What the user needs, world-readable; the binary copied out of the
    // shared target directory. Not under /tmp or /run, which every sandbox
    // replaces with its own: the runtime directory in it must be hidden by
    // airlock itself, as one anywhere else ($XDG_RUNTIME_DIR) must be.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    chmod(dir.path(), 0o777);
    let airlock_bin = dir.path().join("airlock");
    std::fs::copy(AIRLOCK, &airlock_bin).unwrap();
    chmod(&airlock_bin, 0o755);
    let policy = env.dir.path().join("policy.toml");
    for (from, to) in [(&policy, "policy.toml"), (&env.ca, "ca.pem")] {
        std::fs::copy(from, dir.path().join(to)).unwrap();
        chmod(&dir.path().join(to), 0o644);
    }
    for sub in ["ws", "audit", "run"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
        chmod(&dir.path().join(sub), 0o777);
    }
    let runtime = dir.path().join("run/user");
    std::fs::create_dir(&runtime).unwrap();
    let uid: u32 = String::from_utf8(
        Command::new("id")
            .args(["-u", TEST_USER])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    nix::unistd::chown(&runtime, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
    chmod(&runtime, 0o700);
    let p = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let start = airlock_as(
        TEST_USER,
        &runtime,
        &airlock_bin,
        &[
            "session",
            "start",
            "--policy",
            &p("policy.toml"),
            "--workspace",
            &p("ws"),
            "--upstream-ca",
            &p("ca.pem"),
            "--resolve",
            "api.test:127.0.0.1",
            "--audit-db",
            &p("audit/audit.db"),
            "--audit-key",
            &p("audit/audit.key"),
            "--name",
            "mine",
            "--allow-unix-sockets",
        ],
    );
    assert_eq!(start.status.code(), Some(0), "{}", show(&start));
    let id = stdout(&start).trim().to_owned();
    let exec = |script: &str| {
        airlock_as(
            TEST_USER,
            &runtime,
            &airlock_bin,
            &["session", "exec", "mine", "--", "sh", "-c", script],
        )
    };
    let out = exec("id -u; echo kept > /tmp/f");
    assert_eq!(stdout(&out), format!("{uid}\n"), "{}", show(&out));
    let base = env.base();
    let out = exec(&format!(
        "cat /tmp/f; curl -sS -o /dev/null -w '%{{http_code}}\\n' {base}/echo/u; curl -sS -o /dev/null -w '%{{http_code}}\\n' {base}/admin"
    ));
    assert_eq!(stdout(&out), "kept\n200\n403\n", "{}", show(&out));
    // The session directory is out of the sandbox's sight, its own socket
    // out of reach (it may make AF_UNIX sockets here).
    let sessions = runtime.join("airlock");
    let out = exec(&format!("ls -a {} 2>&1", sessions.display()));
    assert!(!stdout(&out).contains(&id), "{}", show(&out));
    let probe = connect_probe(&sessions.join(format!("{id}.sock")).to_string_lossy());
    let out = airlock_as(
        TEST_USER,
        &runtime,
        &airlock_bin,
        &["session", "exec", "mine", "--", "python3", "-c", &probe],
    );
    assert!(stdout(&out).starts_with("refused"), "{}", show(&out));
    // Another user cannot get in: not through airlock, not to the socket.
    let out = airlock_as(
        "nobody",
        &runtime,
        &airlock_bin,
        &["session", "exec", &id, "--", "id"],
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let sock = runtime.join(format!("airlock/{id}.sock"));
    assert!(sock.exists());
    let out = Command::new("runuser")
        .args(["-u", "nobody", "--", "python3", "-c"])
        .arg(connect_probe(&sock.to_string_lossy()))
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "refused 13\n", "{}", show(&out));
    let out = airlock_as(
        TEST_USER,
        &runtime,
        &airlock_bin,
        &["session", "stop", "mine"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(!sock.exists(), "stop removes the socket");
}

/// Fail closed: when the audit store fills up mid-step the session stops
/// (the step gets 125 and one line saying why) rather than run on unrecorded.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_audit_store_stops_the_session() {
    let env = Env::new().await;
    let fs = airlock_test_support::disk::Tmpfs::mount("1M");
    let keys = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut args = env.start_args();
    for (option, value) in [
        ("--audit-db", fs.path().join("audit.db")),
        ("--audit-key", keys.path().join("audit.key")),
        ("--workspace", ws.path().to_owned()),
    ] {
        let at = args.iter().position(|a| a == option).unwrap();
        args[at + 1] = value.to_string_lossy().into_owned();
    }
    let out = airlock(&args);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let s = Session {
        id: stdout(&out).trim().to_owned(),
        stopped: false,
    };
    // 100 files of 64 KiB recorded with their content: far more than 1 MiB.
    let started = Instant::now();
    let out = s.sh(
        "for i in $(seq 100); do dd if=/dev/urandom of=f$i bs=64k count=1 status=none; done; sleep 30; echo finished",
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(!stdout(&out).contains("finished"));
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "{:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("the audit store failed"), "{stderr}");
    eventually("the session is gone", Duration::from_secs(10), || {
        s.info().is_none()
    });
    refused(&s.exec(&[], &["true"]));
}

/// A step asked of a session that is still coming up gets an answer, never
/// a hang: one line and 125 until it is ready, then it runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_that_is_still_starting_answers_at_once() {
    let env = Env::new().await;
    let name = format!("starting-{}", std::process::id());
    let mut args = env.start_args();
    args.extend(["--name".to_owned(), name.clone()]);
    let starter = Command::new(AIRLOCK)
        .args(&args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut refusals = Vec::new();
    loop {
        let out = airlock(&["session", "exec", &name, "--", "echo", "ran"]);
        if out.status.code() == Some(0) {
            assert_eq!(stdout(&out), "ran\n");
            break;
        }
        let stderr = refused(&out);
        assert!(
            stderr.contains("still starting") || stderr.contains("no live session"),
            "{stderr}"
        );
        refusals.push(stderr);
        assert!(Instant::now() < deadline, "never ready: {refusals:?}");
    }
    let out = starter.wait_with_output().unwrap();
    let _s = Session {
        id: stdout(&out).trim().to_owned(),
        stopped: false,
    };
    eprintln!("refused while starting: {refusals:?}");
}

/// The control protocol as docs/sessions.md describes it, spoken by a client
/// that is not airlock (python, as the SDK will): info, an exec with stdin,
/// output frames and the exit frame, a bad request, and stop.
#[tokio::test(flavor = "multi_thread")]
async fn the_control_protocol_works_as_documented() {
    let env = Env::new().await;
    let mut s = env.start(&[]);
    let client = r#"
import json, socket, struct, sys
path = sys.argv[1]

def ask(request):
    c = socket.socket(socket.AF_UNIX); c.connect(path)
    c.sendall((json.dumps(request) + "\n").encode())
    return c, c.makefile("rb")

c, f = ask({"op": "info"})
info = json.loads(f.readline())
print("info", info["ok"], info["session"]["state"])

c, f = ask({"op": "exec", "argv": ["sh", "-c", "tr a-z A-Z; echo oops >&2; exit 7"],
            "env": [["GREETING", "hi"]], "label": "raw"})
first = json.loads(f.readline())
print("step", first["ok"], first["step"])
c.sendall(bytes([0x00]) + struct.pack(">I", 6) + b"hello\n")
c.sendall(bytes([0x01]) + struct.pack(">I", 0))
out = {0x11: b"", 0x12: b""}
while True:
    head = f.read(5)
    kind, n = head[0], struct.unpack(">I", head[1:])[0]
    data = f.read(n)
    if kind in out:
        out[kind] += data
    elif kind == 0x13:
        print("exit", json.loads(data)["exit_code"])
        break
    else:
        print("unexpected", kind, data)
        break
print("stdout", out[0x11].decode().strip(), "stderr", out[0x12].decode().strip())

c, f = ask({"op": "dance"})
bad = json.loads(f.readline())
print("bad", bad["ok"], "error" in bad)
"#;
    let sock = format!("/run/airlock/{}.sock", s.id);
    let out = Command::new("python3")
        .args(["-c", client, &sock])
        .output()
        .unwrap();
    assert_eq!(
        stdout(&out),
        "info True ready\nstep True 1\nexit 7\nstdout HELLO stderr oops\nbad False True\n",
        "{}",
        show(&out)
    );
    let out = s.stop();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
}

/// The kill frame (0x04) ends a step and everything it started, however it
/// tried to survive (its own session, SIGTERM ignored, a double fork), and
/// the exit frame still follows with the reason; the session lives on.
/// Before it, a client could only hang up (losing the report) or signal the
/// step's process group (which `setsid` leaves).
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_frame_ends_the_step_and_everything_it_started_and_the_report_follows() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let client = r#"
import json, socket, struct, sys
c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1])
script = ("setsid sleep 991 & sh -c 'trap \"\" TERM INT HUP; sleep 992' & "
          "sh -c 'sleep 993 & exit 0' & echo ready; cat")
c.sendall((json.dumps({"op": "exec", "argv": ["sh", "-c", script]}) + "\n").encode())
f = c.makefile("rb")
print("step", json.loads(f.readline())["step"])
while True:
    head = f.read(5)
    kind, n = head[0], struct.unpack(">I", head[1:])[0]
    data = f.read(n)
    if kind == 0x11 and b"ready" in data:
        c.sendall(bytes([0x04]) + struct.pack(">I", 0))
    elif kind == 0x13:
        report = json.loads(data)
        print("exit", report["exit_code"], report["signal"], report["reason"])
        break
    elif kind != 0x11:
        print("unexpected", kind, data)
        break
"#;
    let sock = format!("/run/airlock/{}.sock", s.id);
    let out = Command::new("python3")
        .args(["-c", client, &sock])
        .output()
        .unwrap();
    assert_eq!(
        stdout(&out),
        "step 1\nexit 137 9 killed: its client asked (kill)\n",
        "{}",
        show(&out)
    );
    // Nothing it started is left, and the session takes the next step.
    let left = s.sh(
        "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -o 'sleep 99[123]' || true",
    );
    assert_eq!(
        (left.status.code(), stdout(&left)),
        (Some(0), String::new()),
        "{}",
        show(&left)
    );
}

/// The `kill` request ends a step from a connection of its own, so that
/// nothing queued on the step's connection can hold it: here 3 MiB of input
/// that the command never reads sit before anything else the client could
/// send there. The step's connection gets the exit report; a step that is
/// not running is refused with one line.
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_request_ends_a_step_whose_unread_input_holds_its_connection() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let client = r#"
import json, socket, struct, sys, threading, time
path = sys.argv[1]

def ask(request):
    c = socket.socket(socket.AF_UNIX); c.connect(path)
    c.sendall((json.dumps(request) + "\n").encode())
    return c, c.makefile("rb")

c, f = ask({"op": "exec", "argv": ["sleep", "30"]})
step = json.loads(f.readline())["step"]
chunk = bytes([0x00]) + struct.pack(">I", 1 << 20) + b"x" * (1 << 20)
threading.Thread(target=lambda: c.sendall(chunk * 3), daemon=True).start()
time.sleep(0.5)
began = time.monotonic()
_, k = ask({"op": "kill", "step": step})
print("kill", json.loads(k.readline())["ok"])
while True:
    head = f.read(5)
    kind, n = head[0], struct.unpack(">I", head[1:])[0]
    data = f.read(n)
    if kind == 0x13:
        report = json.loads(data)
        print("exit", report["signal"], report["reason"], time.monotonic() - began < 3)
        break
_, k = ask({"op": "kill", "step": step})
answer = json.loads(k.readline())
print("again", answer["ok"], answer["error"].split(":")[0])
"#;
    let sock = format!("/run/airlock/{}.sock", s.id);
    let out = Command::new("python3")
        .args(["-c", client, &sock])
        .output()
        .unwrap();
    assert_eq!(
        stdout(&out),
        "kill True\nexit 9 killed: its client asked (kill) True\nagain False step 1 is not running in session \n"
            .replace("session \n", &format!("session {}\n", s.id)),
        "{}",
        show(&out)
    );
}

/// A step's caller learns what the policy refused that step and the rule
/// to add, without reading the record: in `session exec`'s stderr, in the
/// exit frame's `denials`, and from the `denials` request. A refusal made by
/// one step is never reported as another's, and a refused URL's query (what
/// a hostile program may have tried to send) stays out of the report.
#[tokio::test(flavor = "multi_thread")]
async fn refusals_reach_the_step_that_made_them() {
    let env = Env::new().await;
    let mut s = env.start(&[]);
    let base = env.base();
    let out = s.exec(
        &["--label", "refused"],
        &[
            "sh",
            "-c",
            &format!(
                "curl -sS -o /dev/null {base}/echo/ok; curl -sS -o /dev/null '{base}/admin?token=s3cr3t'; \
                 curl -sS -o /dev/null '{base}/admin?token=again'; curl -sS -o /dev/null https://evil.test/; \
                 python3 -c 'import socket; socket.getaddrinfo(\"data.exfil.test\", 80)'"
            ),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains(&format!(
            "airlock: refused GET {base}/admin (2 times): no rule allows this path for this host and method"
        )),
        "{}",
        show(&out)
    );
    assert!(
        err.contains(r#"to allow it, add: [[allow]] host = "api.test""#)
            && err.contains(r#"paths = ["/admin"]"#),
        "{}",
        show(&out)
    );
    assert!(
        err.contains(r#"airlock: refused GET https://evil.test/: no rule allows this host"#)
            && err.contains(r#"to allow it, add: [[allow]] host = "evil.test" methods = ["GET"]"#),
        "{}",
        show(&out)
    );
    // A refused name still resolves (to the proxy), so what connects to it
    // is refused with an explanation; reported once, as that request. A
    // name that nothing connected to is reported as a name.
    assert!(!err.contains("refused evil.test"), "{}", show(&out));
    assert!(
        err.contains(r#"airlock: refused data.exfil.test"#)
            && err.contains(r#"to allow it, add: [[allow]] host = "data.exfil.test""#),
        "{}",
        show(&out)
    );
    assert!(!err.contains("s3cr3t"), "{}", show(&out));
    let clean = s.exec(
        &[],
        &["curl", "-sS", "-o", "/dev/null", &format!("{base}/echo/x")],
    );
    assert_eq!(clean.status.code(), Some(0), "{}", show(&clean));
    assert!(
        !String::from_utf8_lossy(&clean.stderr).contains("refused"),
        "another step's refusals are not this one's: {}",
        show(&clean)
    );

    let client = r#"
import json, socket, struct, sys
path, url = sys.argv[1], sys.argv[2]

def ask(request):
    c = socket.socket(socket.AF_UNIX); c.connect(path)
    c.sendall((json.dumps(request) + "\n").encode())
    return c, c.makefile("rb")

c, f = ask({"op": "exec", "argv": ["curl", "-sS", "-o", "/dev/null", "-X", "DELETE", url]})
step = json.loads(f.readline())["step"]
c.sendall(bytes([0x01]) + struct.pack(">I", 0))
while True:
    head = f.read(5)
    kind, n = head[0], struct.unpack(">I", head[1:])[0]
    data = f.read(n)
    if kind == 0x13:
        report = json.loads(data)
        break
(d,) = report["denials"]
print(d["kind"], d["method"], d["url"] == url, d["step"] == step, d["count"])
print(d["rule"].splitlines())
c, f = ask({"op": "denials"})
every = json.loads(f.readline())
print(every["ok"], every["dropped"], sorted((x["kind"], x["step"]) for x in every["denials"]),
      sorted(x["count"] for x in every["denials"] if x["kind"] == "request"))
"#;
    let sock = format!("/run/airlock/{}.sock", s.id);
    let url = format!("{base}/echo/gone");
    let out = Command::new("python3")
        .args(["-c", client, &sock, &url])
        .output()
        .unwrap();
    let port = env.upstream.port();
    assert_eq!(
        stdout(&out),
        format!(
            "request DELETE True True 1\n\
             ['[[allow]]', 'host = \"api.test\"', 'ports = [{port}]', 'methods = [\"DELETE\"]', 'paths = [\"/echo/gone\"]']\n\
             True 0 [('dns', 1), ('request', 1), ('request', 1), ('request', 3)] [1, 1, 2]\n"
        ),
        "{}",
        show(&out)
    );
    assert_eq!(s.stop().status.code(), Some(0));
}

/// A step ends when its command does, even with a background process that
/// writes without pause on the same output: what the command wrote is
/// delivered, the rest only recorded (a hostile or merely chatty program
/// must not hold the caller, the timeout or the idle timer forever).
#[tokio::test(flavor = "multi_thread")]
async fn a_chatty_background_process_does_not_hold_the_step() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let mut child = s
        .sh_command("yes & yes & yes & echo started")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Read what it sends while waiting, so the pipe never fills.
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut head = vec![0u8; 64];
        let mut total = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match std::io::Read::read(&mut out, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if total < head.len() {
                        let k = n.min(head.len() - total);
                        head[total..total + k].copy_from_slice(&buf[..k]);
                    }
                    total += n;
                }
            }
        }
        (head, total)
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the step never ended");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (head, total) = reader.join().unwrap();
    assert_eq!(status.code(), Some(0));
    let head = String::from_utf8_lossy(&head);
    assert!(
        head.contains("started") || head.starts_with("y\n"),
        "{head}"
    );
    assert!(total <= 4 << 20, "bounded: {total} bytes");
    // The session still answers, and the next step is not held either.
    let out = s.exec(&[], &["echo", "next"]);
    assert_eq!(stdout(&out), "next\n", "{}", show(&out));
}

/// The shell line with which a step sends `signal` to every helper airlock
/// runs in its sandbox (init, and each step's holder), found by their names
/// as a hostile step would find them.
fn signal_helpers(signal: &str) -> String {
    format!(
        "for p in $(grep -l '^airlock:' /proc/[0-9]*/comm | cut -d/ -f3); do kill -{signal} $p 2>/dev/null; done; echo sent"
    )
}

/// After an attack: a step with `--timeout 3s` that would run 10 s gives
/// 124 within 4 s.
fn assert_timeout_holds(s: &Session, after: &str) {
    let started = Instant::now();
    let out = s.exec(&["--timeout", "3s"], &["sleep", "10"]);
    let took = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(124),
        "after {after}: {}",
        show(&out)
    );
    assert!(
        took < Duration::from_secs(4),
        "after {after}: took {took:?}"
    );
}

/// After a one-off attack: the timeout holds, and the session takes the
/// next step as before.
fn assert_steps_are_not_held(s: &Session, after: &str) {
    assert_timeout_holds(s, after);
    let out = s.exec(&["--timeout", "3s"], &["echo", "alive"]);
    assert_eq!(stdout(&out), "alive\n", "after {after}: {}", show(&out));
}

/// Every process in the sandbox can read the command line of every other
/// one it sees, whatever their dumpable flag (proc(5)): init and the step
/// holders are forks of airlock, so theirs must not be airlock's own
/// (its paths, labels, store). Read every way: each process, each thread,
/// and through /proc/self's parent.
#[tokio::test(flavor = "multi_thread")]
async fn no_step_can_read_the_command_line_airlock_was_started_with() {
    let env = Env::new().await;
    let marker = format!("probe{}", std::process::id());
    let granted = tempfile::Builder::new().prefix(&marker).tempdir().unwrap();
    let granted = granted.path().to_str().unwrap();
    for extra in [&[][..], &["--no-audit"][..]] {
        let mut extra = extra.to_vec();
        extra.extend(["--ro", granted]);
        let s = env.start(&extra);
        let out = s.sh(
            "cat /proc/[0-9]*/cmdline /proc/[0-9]*/task/*/cmdline /proc/$PPID/cmdline \
             /proc/1/cmdline 2>/dev/null | tr '\\0' ' '; echo; tr '\\0' '\\n' < /proc/1/cmdline | head -1",
        );
        assert_eq!(out.status.code(), Some(0), "{extra:?}: {}", show(&out));
        let text = stdout(&out);
        for leaked in [&marker[..], "--ro", "--audit-db", "session", "start"] {
            assert!(!text.contains(leaked), "{extra:?} sees {leaked:?}: {text}");
        }
        assert!(text.ends_with("airlock:init\n"), "{extra:?}: {text}");
    }
}

/// A step runs with the uid of airlock's helpers in its sandbox, so kill(2)
/// reaches them. Init serves the steps as PID 1 of the sandbox, which no
/// signal sent from inside reaches (pid_namespaces(7)); the observer drops
/// what a step sends a holder; a step that kills its own holder is answered,
/// not held. With and without the record (unobserved, init's watch lets a
/// stopped holder go on).
#[tokio::test(flavor = "multi_thread")]
async fn no_step_can_stop_or_kill_the_helpers_that_serve_its_session() {
    let env = Env::new().await;
    for extra in [&[][..], &["--no-audit"][..]] {
        let s = env.start(extra);
        let out = s.sh("cat /proc/1/comm; grep -l '^airlock:s' /proc/[0-9]*/comm | wc -l");
        assert_eq!(
            stdout(&out),
            "airlock:init\n1\n",
            "{extra:?}: {}",
            show(&out)
        );
        for signal in [
            "STOP", "TSTP", "TTIN", "TTOU", "TERM", "INT", "HUP", "QUIT", "KILL",
        ] {
            let what = format!("SIG{signal} to every helper {extra:?}");
            let out = s.sh(&signal_helpers(signal));
            match signal {
                // The step's own holder is among them: SIGKILL cannot be
                // dropped, and the step is answered, its command's group
                // killed, rather than held.
                "KILL" => {
                    let stderr = refused(&out);
                    assert!(stderr.contains("the holder of step"), "{what}: {stderr}");
                }
                // Unobserved, a stopped holder is let go on by init's watch.
                _ => assert_eq!(stdout(&out), "sent\n", "{what}: {}", show(&out)),
            }
            let state = s.sh("cut -d' ' -f3 /proc/1/stat");
            assert_eq!(
                stdout(&state),
                "S\n",
                "{what}: init runs on: {}",
                show(&state)
            );
            assert_steps_are_not_held(&s, &what);
        }
    }
}

/// What one step leaves running attacks the helpers during the next steps:
/// stopping every helper it sees, over and over, flooding its output, or
/// filling the process limit. Each later step is still answered on time,
/// and the session still stops. (A step's own processes are in reach of
/// what another step left, by design: docs/sessions.md.)
#[tokio::test(flavor = "multi_thread")]
async fn a_process_left_by_one_step_cannot_hold_the_next() {
    let env = Env::new().await;
    let stop_loop = |signal: &str| {
        format!(
            "(while :; do {} >/dev/null; sleep 0.01; done) >/dev/null 2>&1 &",
            signal_helpers(signal)
        )
    };
    let attacks = [
        ("a SIGSTOP loop", stop_loop("STOP")),
        ("a SIGTSTP loop", stop_loop("TSTP")),
        ("an output flood", "yes &".to_owned()),
    ];
    for (what, attack) in &attacks {
        let mut s = env.start(&[]);
        let out = s.sh(attack);
        assert_eq!(out.status.code(), Some(0), "{what}: {}", show(&out));
        assert_timeout_holds(&s, what);
        assert_timeout_holds(&s, what);
        let out = s.stop();
        assert_eq!(out.status.code(), Some(0), "{what}: {}", show(&out));
    }
    // Killing every holder as it appears: each step is answered at once
    // (125, naming its holder) instead of being held, on time or not.
    let s = env.start(&[]);
    let out = s.sh(&stop_loop("KILL"));
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    for _ in 0..3 {
        assert_answered_on_time(&s, "the holder of step");
    }
    // The process limit filled just before the next step.
    let s = env.start(&["--pids", "48"]);
    let out = s.sh("(while :; do sleep 60 & done) >/dev/null 2>&1 & sleep 1; echo filled");
    assert_eq!(stdout(&out), "filled\n", "{}", show(&out));
    assert_answered_on_time(&s, "process limit is reached");
}

/// A step with `--timeout 3s` that would run 10 s is answered within 4 s:
/// timed out (124), or refused with one line saying `why` it could not run.
fn assert_answered_on_time(s: &Session, why: &str) {
    let started = Instant::now();
    let out = s.exec(&["--timeout", "3s"], &["sleep", "10"]);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "answered on time: {}",
        show(&out)
    );
    if out.status.code() != Some(124) {
        assert!(refused(&out).contains(why), "{}", show(&out));
    }
}

/// Neither ptrace(2), /proc/PID/mem, renice, SCHED_IDLE, prlimit(2) nor an
/// OOM score reaches a helper from a step: the helpers hold capabilities the
/// step has not, which the kernel requires of whoever traces, reads or
/// reschedules them (and observed, they are traced already); setting
/// another process's limits is refused by seccomp, and init's OOM score is
/// read-only.
#[tokio::test(flavor = "multi_thread")]
async fn no_step_can_trace_or_write_into_a_helper() {
    let env = Env::new().await;
    for extra in [&[][..], &["--no-audit"][..]] {
        let s = env.start(extra);
        let probe = r#"
import ctypes, glob, os, resource
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
helpers = [int(p.split('/')[2]) for p in glob.glob('/proc/[0-9]*/comm') if open(p).read().startswith('airlock:')]
assert 1 in helpers and len(helpers) >= 2, helpers
for pid in helpers:
    for name, req in (('attach', 16), ('seize', 0x4206)):
        r = libc.ptrace(req, pid, None, None)
        print(pid, name, 'refused' if r == -1 else 'ALLOWED')
    for mode in ('rb', 'r+b'):
        try:
            with open(f'/proc/{pid}/mem', mode) as m:
                m.seek(0x400000); m.read(1) if mode == 'rb' else m.write(b'\0')
            print(pid, 'mem', mode, 'ALLOWED')
        except OSError:
            print(pid, 'mem', mode, 'refused')
    try:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
        print(pid, 'renice', 'ALLOWED')
    except OSError:
        print(pid, 'renice', 'refused')
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        print(pid, 'sched_idle', 'ALLOWED')
    except OSError:
        print(pid, 'sched_idle', 'refused')
    for limit in (resource.RLIMIT_NOFILE, resource.RLIMIT_CPU, resource.RLIMIT_NPROC):
        try:
            resource.prlimit(pid, limit, (1, 1))
            print(pid, 'prlimit', limit, 'ALLOWED')
        except OSError:
            print(pid, 'prlimit', limit, 'refused')
for name in ('oom_score_adj', 'oom_adj'):
    try:
        with open(f'/proc/1/{name}', 'w') as f:
            f.write('15' if name == 'oom_adj' else '1000')
        print(1, name, 'ALLOWED')
    except OSError:
        print(1, name, 'refused')
"#;
        let out = s.exec(&[], &["python3", "-c", probe]);
        assert_eq!(out.status.code(), Some(0), "{extra:?}: {}", show(&out));
        let text = stdout(&out);
        assert!(text.lines().count() >= 20, "{extra:?}: {text}");
        assert!(!text.contains("ALLOWED"), "{extra:?}: {text}");
        assert_steps_are_not_held(&s, "ptrace and /proc/PID/mem");
    }
}

/// `airlock session exec` leaves within a second of SIGTERM or SIGINT,
/// even when the step ignores the signal it passes on; the step is then
/// killed, its caller gone.
#[tokio::test(flavor = "multi_thread")]
async fn the_client_leaves_within_a_second_of_sigterm_or_sigint() {
    let env = Env::new().await;
    let s = env.start(&[]);
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let mut child = s
            .sh_command("trap '' TERM INT; echo ready; sleep 30")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line, "ready\n");
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        let sent = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                sent.elapsed() < Duration::from_secs(1),
                "still waiting after {signal}"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(128 + signal as i32));
        eventually("the step is killed", Duration::from_secs(5), || {
            s.info().is_some_and(|i| i["running"] == 0)
        });
    }
}

/// A session whose server stops answering (here: stopped on the host)
/// holds no client: `exec` gives up after the step's timeout and a grace
/// with one line naming the session and `airlock session stop`, and `ls`
/// lists it as not answering instead of hanging or hiding it.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_that_stops_answering_holds_no_client() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let (server, _) = s.pids();
    use nix::sys::signal::{Signal, kill};
    let server_pid = nix::unistd::Pid::from_raw(server);
    kill(server_pid, Signal::SIGSTOP).unwrap();
    let started = Instant::now();
    let out = s.exec(&["--timeout", "1s"], &["true"]);
    let took = started.elapsed();
    let line = refused(&out);
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(line.contains("is not answering"), "{line}");
    assert!(
        line.contains(&format!("airlock session stop {}", s.id)),
        "{line}"
    );
    let info = s.info().expect("still listed");
    assert_eq!(info["state"], "not answering", "{info}");
    assert_eq!(info["pids"]["server"], server, "{info}");
    kill(server_pid, Signal::SIGCONT).unwrap();
    let out = s.exec(&[], &["echo", "back"]);
    assert_eq!(stdout(&out), "back\n", "{}", show(&out));
}

/// Every process of a sandbox (its init's PID namespace, as the host sees
/// it), frozen with the cgroup freezer until dropped. Frozen is stopped
/// beyond anything a signal does: nothing inside runs, not even init.
struct Frozen {
    dir: PathBuf,
}

impl Frozen {
    fn sandbox_of(init: i32) -> Self {
        let root = Path::new("/sys/fs/cgroup/freezer");
        assert!(
            root.join("cgroup.procs").exists(),
            "the cgroup v1 freezer is not mounted at {}",
            root.display()
        );
        let dir = root.join(format!("airlock-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ns = std::fs::read_link(format!("/proc/{init}/ns/pid")).unwrap();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.parse::<i32>().is_err() {
                continue;
            }
            let theirs = std::fs::read_link(format!("/proc/{name}/ns/pid")).ok();
            if name == init.to_string() || theirs.as_ref() == Some(&ns) {
                let _ = std::fs::write(dir.join("cgroup.procs"), &name);
            }
        }
        std::fs::write(dir.join("freezer.state"), "FROZEN").unwrap();
        eventually("the sandbox is frozen", Duration::from_secs(5), || {
            std::fs::read_to_string(dir.join("freezer.state")).unwrap_or_default() == "FROZEN\n"
        });
        Self { dir }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("freezer.state"), "THAWED");
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write("/sys/fs/cgroup/freezer/cgroup.procs", pid);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The step's timeout is kept by airlock's clock, outside the sandbox: with
/// every process inside stopped (the whole sandbox frozen from the host,
/// init included), a step with `--timeout 1s` is answered 124 within 1 s of
/// its kill, the session is listed as not answering and says so in its
/// record, and it serves steps again once its sandbox runs again.
#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_fires_on_time_even_with_every_process_inside_stopped() {
    let env = Env::new().await;
    let s = env.start(&[]);
    let (_, init) = s.pids();
    let audit = s.audit_session();
    let frozen = Frozen::sandbox_of(init);
    let started = Instant::now();
    let out = s.exec(&["--timeout", "1s"], &["sleep", "5"]);
    let took = started.elapsed();
    let info = s.info().expect("listed");
    drop(frozen);
    assert_eq!(out.status.code(), Some(124), "{}", show(&out));
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not answering"), "{stderr}");
    assert_eq!(info["state"], "not answering", "{info}");
    let out = s.exec(&["--timeout", "3s"], &["echo", "back"]);
    assert_eq!(stdout(&out), "back\n", "{}", show(&out));
    assert_eq!(s.info().unwrap()["state"], "ready", "answering again");
    let timeline = audit_cli(&env.db(), &["timeline", &audit]);
    assert!(
        String::from_utf8_lossy(&timeline.stdout).contains("the session is not answering"),
        "{}",
        show(&timeline)
    );
}

/// One session's sandbox reaches nothing of another's: not its workspace
/// (read or write), not its proxy (the other's requests and its own are
/// each in their own record only), not its control or approvals sockets
/// (`the_sandbox_cannot_reach_any_control_socket` covers both sessions).
#[tokio::test(flavor = "multi_thread")]
async fn one_session_reaches_nothing_of_another() {
    let env_a = Env::new().await;
    let env_b = Env::new().await;
    let a = env_a.start(&[]);
    let b = env_b.start(&[]);
    std::fs::write(env_b.workspace().join("marker"), "b's file").unwrap();
    let theirs = env_b.workspace();
    let theirs = theirs.display();
    let out = a.sh(&format!(
        "cat {theirs}/marker 2>/dev/null || echo unreadable; echo x > {theirs}/planted 2>/dev/null || echo unwritable; ls {theirs} 2>/dev/null || echo unlisted"
    ));
    assert_eq!(
        stdout(&out),
        "unreadable\nunwritable\nunlisted\n",
        "{}",
        show(&out)
    );
    assert!(!env_b.workspace().join("planted").exists());
    // Each sandbox's requests go through its own proxy, into its own record.
    let url_a = format!("{}/echo/from-a", env_a.base());
    let url_b = format!("{}/echo/from-b", env_b.base());
    let out = a.exec(&[], &["curl", "-sS", &url_a]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let out = b.exec(&[], &["curl", "-sS", &url_b]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let (record_a, record_b) = (a.audit_session(), b.audit_session());
    let timeline = |env: &Env, session: &str| {
        String::from_utf8_lossy(&audit_cli(&env.db(), &["timeline", session]).stdout).into_owned()
    };
    let (ta, tb) = (timeline(&env_a, &record_a), timeline(&env_b, &record_b));
    assert!(
        ta.contains("/echo/from-a") && !ta.contains("/echo/from-b"),
        "{ta}"
    );
    assert!(
        tb.contains("/echo/from-b") && !tb.contains("/echo/from-a"),
        "{tb}"
    );
    // Nothing listens in A's network but A's own proxy and resolver.
    let out = a.sh("cat /proc/net/tcp /proc/net/tcp6 | awk '$4 == \"0A\" {print $2}' | sort -u");
    let listening: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert!(
        listening
            .iter()
            .all(|l| l.ends_with(":3A99") || l.ends_with(":0035")),
        "only the proxy (15001) and the resolver (53) listen: {listening:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_sessions_lists_a_live_session_by_its_name_or_first_step_not_its_serve_line() {
    let env = Env::new().await;
    let name = format!("live-demo-{}", std::process::id());
    let mut named = env.start(&["--name", &name]);
    let mut unnamed = env.start(&[]);
    // Before any step: the name, or the mode alone.
    for s in [&named, &unnamed] {
        let out = s.exec(&["--label", "call_1"], &["echo", "first step"]);
        assert!(out.status.success(), "{}", show(&out));
    }
    named.sh("true");
    let (named_audit, unnamed_audit) = (named.audit_session(), unnamed.audit_session());
    named.stop();
    unnamed.stop();
    let out = audit_cli(&env.db(), &["sessions"]);
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    let line_of = |audit: &str| -> String {
        text.lines()
            .find(|l| l.starts_with(&audit[..14]))
            .unwrap_or_else(|| panic!("{audit} listed:\n{text}"))
            .to_owned()
    };
    let named_line = line_of(&named_audit);
    assert!(
        named_line.ends_with(&format!("  [session {name}, 2 steps]")),
        "{named_line}"
    );
    let unnamed_line = line_of(&unnamed_audit);
    assert!(
        unnamed_line.ends_with("  [session, 1 step] echo 'first step'"),
        "{unnamed_line}"
    );
    assert!(!text.contains("session serve"), "{text}");
    // The serve line stays in the session's details.
    let out = audit_cli(&env.db(), &["timeline", &named_audit]);
    assert!(
        stdout(&out).contains("session serve --id"),
        "{}",
        show(&out)
    );
}
