//! `airlock run` from a terminal: the command gets a pseudo-terminal of the
//! sandbox's own, relayed by airlock, never the caller's terminal. Driven
//! through tmux, as a person would: keys go in with `send-keys`, the screen
//! comes back with `capture-pane`. Every wait polls the screen with a
//! deadline; none relies on a fixed sleep.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();

const PYTHON: &str = "/usr/bin/python3";
const DEADLINE: Duration = Duration::from_secs(30);

/// A tmux server of its own (so tests run in parallel) with one 100x30 pane
/// running `airlock run ... -- COMMAND`, then printing airlock's exit status
/// and the pane's terminal settings.
struct Pane {
    socket: String,
    dir: tempfile::TempDir,
}

impl Pane {
    fn start(airlock_args: &[&str], command: &[&str]) -> Self {
        Self::start_as(None, airlock_args, command)
    }

    /// As `start`, with airlock run by `user` (through runuser) when given.
    fn start_as(user: Option<&str>, airlock_args: &[&str], command: &[&str]) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let socket = format!(
            "airlock-tty-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
        let mut line = Vec::new();
        let mut airlock = PathBuf::from(AIRLOCK);
        if let Some(user) = user {
            // Everything the user needs in one world-accessible directory,
            // including a copy of the binary.
            use std::os::unix::fs::PermissionsExt;
            let open = std::fs::Permissions::from_mode(0o777);
            std::fs::set_permissions(dir.path(), open.clone()).unwrap();
            std::fs::set_permissions(dir.path().join("ws"), open).unwrap();
            airlock = dir.path().join("airlock");
            std::fs::copy(AIRLOCK, &airlock).unwrap();
            line.extend(["runuser".to_owned(), "-u".into(), quote(user), "--".into()]);
        }
        line.extend([
            quote(airlock.to_str().unwrap()),
            "run".into(),
            "--workspace".into(),
            quote(dir.path().join("ws").to_str().unwrap()),
            "--audit-db".into(),
            quote(dir.path().join("audit/audit.db").to_str().unwrap()),
            "--audit-key".into(),
            quote(dir.path().join("audit/audit.key").to_str().unwrap()),
        ]);
        if !airlock_args.contains(&"--timeout") {
            line.extend(["--timeout".into(), "120s".into()]);
        }
        line.extend(airlock_args.iter().map(|a| quote(a)));
        line.push("--".into());
        line.extend(command.iter().map(|a| quote(a)));
        let script = format!(
            "#!/bin/sh\n{}\necho AIRLOCK-EXIT=$?\nstty -a\nexec sleep 600\n",
            line.join(" ")
        );
        let script_path = dir.path().join("pane.sh");
        std::fs::write(&script_path, script).unwrap();
        let pane = Self { socket, dir };
        let out = pane.tmux(&[
            "new-session",
            "-d",
            "-x",
            "100",
            "-y",
            "30",
            "sh",
            script_path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "tmux new-session: {out:?}");
        pane
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux is installed (scripts/setup)")
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// Type a line and press Enter.
    fn type_line(&self, text: &str) {
        assert!(self.tmux(&["send-keys", "-l", text]).status.success());
        self.key("Enter");
    }

    /// Press a key, e.g. "C-c".
    fn key(&self, key: &str) {
        assert!(self.tmux(&["send-keys", key]).status.success());
    }

    /// The whole pane, wrapped lines joined, with its history.
    fn screen(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p", "-J", "-S", "-500"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Poll the screen until `ready` holds; the screen then.
    fn wait_until(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_for(&self, text: &str) -> String {
        self.wait_until(text, |s| s.contains(text))
    }

    /// Run a shell line and wait for its end, marked by text the typed line
    /// itself does not contain (the shell computes it).
    fn shell(&self, line: &str) -> String {
        static N: AtomicU32 = AtomicU32::new(100);
        let n = N.fetch_add(1, Ordering::Relaxed);
        self.type_line(&format!("{line}; echo done-$(({n}+1))"));
        self.wait_for(&format!("done-{}", n + 1))
    }

    /// The lines a shell line printed (between its echo and its end mark).
    fn output_of(&self, line: &str) -> Vec<String> {
        let screen = self.shell(line);
        let after = screen.rsplit_once(line).map(|(_, a)| a).unwrap_or("");
        after
            .lines()
            .skip(1)
            .take_while(|l| !l.starts_with("done-"))
            .map(str::to_owned)
            .collect()
    }

    fn pane_tty(&self) -> String {
        let out = self.tmux(&["display-message", "-p", "#{pane_tty}"]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn pane_pid(&self) -> i32 {
        let out = self.tmux(&["display-message", "-p", "#{pane_pid}"]);
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    /// airlock's exit status and the pane's terminal settings after it.
    fn after_airlock(&self) -> (i32, String) {
        let screen = self.wait_until("airlock to exit and stty -a", |s| {
            s.contains("AIRLOCK-EXIT=") && s.contains("speed ")
        });
        let (_, rest) = screen.rsplit_once("AIRLOCK-EXIT=").unwrap();
        let code = rest
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap();
        (code, rest.to_owned())
    }

    fn asciicast(&self) -> Vec<serde_json::Value> {
        let db = self.dir.path().join("audit/audit.db");
        let sessions = Command::new(AIRLOCK)
            .args(["audit", "sessions", "--json", "--audit-db"])
            .arg(&db)
            .output()
            .unwrap();
        let sessions: serde_json::Value = serde_json::from_slice(&sessions.stdout).unwrap();
        let id = sessions[0]["id"].as_str().unwrap();
        let cast = self.dir.path().join("s.cast");
        let out = Command::new(AIRLOCK)
            .args(["audit", "export", id, "--format", "cast", "--out"])
            .arg(&cast)
            .arg("--audit-db")
            .arg(&db)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        std::fs::read_to_string(&cast)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// Settings `stty -a` printed include canonical mode and echo again.
fn assert_cooked(stty: &str) {
    let words: Vec<&str> = stty.split_whitespace().collect();
    for flag in ["icanon", "echo", "isig", "opost"] {
        assert!(
            words.contains(&flag),
            "the caller's terminal is restored ({flag}): {stty}"
        );
    }
}

fn interactive_bash() -> Vec<&'static str> {
    vec!["bash", "--norc", "--noprofile", "-i"]
}

#[test]
fn the_command_runs_on_a_pty_of_the_sandbox_with_the_callers_window_size_and_its_resizes() {
    let pane = Pane::start(&[], &interactive_bash());
    let tty = pane.output_of("tty; test -c $(tty) && echo tty-exists");
    assert!(
        tty[0].starts_with("/dev/pts/") && tty.contains(&"tty-exists".to_owned()),
        "tty names a terminal that exists inside the sandbox: {tty:?}"
    );
    assert_eq!(pane.output_of("stty size"), ["30 100"]);
    assert!(
        pane.tmux(&["resize-window", "-x", "120", "-y", "40"])
            .status
            .success()
    );
    pane.wait_until("the resize to reach the sandbox", |_| {
        pane.output_of("stty size") == ["40 120"]
    });
    pane.type_line("exit 7");
    let (code, stty) = pane.after_airlock();
    assert_eq!(code, 7);
    assert_cooked(&stty);

    let cast = pane.asciicast();
    assert_eq!(
        (cast[0]["width"].as_u64(), cast[0]["height"].as_u64()),
        (Some(100), Some(30)),
        "the recording starts with the terminal's size: {}",
        cast[0]
    );
    assert!(
        cast.iter().any(|f| f[1] == "r" && f[2] == "120x40"),
        "the recording has the resize"
    );
    let output: String = cast
        .iter()
        .filter(|f| f[1] == "o")
        .filter_map(|f| f[2].as_str())
        .collect();
    assert!(
        output.contains("30 100") && output.contains("40 120"),
        "the recording has what the terminal showed: {output:?}"
    );
}

#[test]
fn an_unprivileged_caller_gets_a_pty_of_the_sandbox_too() {
    let pane = Pane::start_as(Some("nobody"), &[], &interactive_bash());
    assert_eq!(pane.output_of("id -un"), ["nobody"]);
    let tty = pane.output_of("tty; test -O $(tty) && echo owned");
    assert!(
        tty[0].starts_with("/dev/pts/") && tty[1] == "owned",
        "the pty exists inside and belongs to the user: {tty:?}"
    );
    assert_eq!(pane.output_of("stty size"), ["30 100"]);
    pane.type_line(&format!(
        "{PYTHON} -c \"import time; print('sleeping-' + 'now', flush=True); time.sleep(100)\""
    ));
    pane.wait_for("sleeping-now");
    pane.key("C-c");
    assert_eq!(pane.output_of("echo status-$?"), ["status-130"]);
    pane.type_line("exit");
    let (code, stty) = pane.after_airlock();
    assert_eq!(code, 0);
    assert_cooked(&stty);
}

#[test]
fn ctrl_c_and_ctrl_z_reach_the_sandboxed_foreground_job_and_job_control_works() {
    let pane = Pane::start(&[], &interactive_bash());
    let pgrp = pane.output_of(&format!(
        "{PYTHON} -c 'import os; print(os.getpgrp() == os.tcgetpgrp(0), os.getsid(0) == os.getppid())'"
    ));
    assert_eq!(
        pgrp,
        ["True True"],
        "the command's job is the pty's foreground group, in the shell's session"
    );

    // The job announces itself with text its typed command line lacks, so
    // the keys are sent only once it runs in the foreground.
    pane.type_line(&format!(
        "{PYTHON} -c \"import time; print('sleeping-' + 'now', flush=True); time.sleep(100)\""
    ));
    pane.wait_for("sleeping-now");
    pane.key("C-c");
    pane.wait_for("KeyboardInterrupt");
    assert_eq!(
        pane.output_of("echo status-$?"),
        ["status-130"],
        "Ctrl-C interrupted the job, and the shell in the sandbox lives on"
    );

    pane.type_line(&format!(
        "{PYTHON} -c \"import signal, time; signal.signal(signal.SIGCONT, lambda *a: print('contin' + 'ued', flush=True)); print('dozing-' + 'now', flush=True); time.sleep(200)\""
    ));
    pane.wait_for("dozing-now");
    pane.key("C-z");
    pane.wait_for("Stopped");
    let jobs = pane.output_of("jobs");
    assert!(jobs.iter().any(|l| l.contains("Stopped")), "{jobs:?}");
    pane.type_line("fg");
    pane.wait_for("continued");
    pane.key("C-c");
    pane.wait_until("the second KeyboardInterrupt", |s| {
        s.matches("KeyboardInterrupt").count() >= 2
    });
    assert_eq!(pane.output_of("echo status-$?"), ["status-130"]);
    pane.type_line("exit");
    let (code, stty) = pane.after_airlock();
    assert_eq!(code, 0, "bash exits with its last status (the echo)");
    assert_cooked(&stty);
}

#[test]
fn an_interactive_python_repl_evaluates_input() {
    let pane = Pane::start(&[], &[PYTHON, "-q"]);
    pane.wait_for(">>> ");
    pane.type_line("print(6 * 7, 'answer')");
    pane.wait_for("42 answer");
    pane.type_line("import os; print(os.isatty(0), os.ttyname(0))");
    pane.wait_for("True /dev/pts/");
    pane.type_line("exit()");
    let (code, stty) = pane.after_airlock();
    assert_eq!(code, 0);
    assert_cooked(&stty);
}

/// Checks from inside: every terminal the process holds belongs to the
/// sandbox's own devpts instance, and TIOCSTI is refused.
const INSIDE_CHECK: &str = r#"
import errno, fcntl, os, stat, termios
ours = os.stat("/dev/pts/ptmx").st_dev
foreign = []
for name in os.listdir("/proc/self/fd"):
    try:
        st = os.fstat(int(name))
    except OSError:
        continue
    major = os.major(st.st_rdev)
    if stat.S_ISCHR(st.st_mode) and (136 <= major <= 143 or major in (4, 5)) and st.st_dev != ours:
        foreign.append((name, os.readlink("/proc/self/fd/" + name)))
print("foreign-terminals", foreign)
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"x")
    print("tiocsti allowed")
except OSError as e:
    print("tiocsti refused", errno.errorcode[e.errno])
"#;

#[test]
fn the_callers_terminal_never_enters_the_sandbox_and_tiocsti_stays_refused() {
    let pane = Pane::start(&[], &interactive_bash());
    std::fs::write(pane.workspace().join("check.py"), INSIDE_CHECK).unwrap();
    let out = pane.output_of(&format!("{PYTHON} check.py"));
    assert_eq!(out, ["foreign-terminals []", "tiocsti refused EPERM"]);

    // From the host: no process airlock started holds the pane's terminal.
    // Compared by device, not by path: the sandbox's own pty may carry the
    // same name in its devpts instance.
    let pane_tty = device_of(Path::new(&pane.pane_tty())).expect("the pane's terminal");
    let airlock = children(pane.pane_pid())
        .into_iter()
        .find(|p| comm(*p) == "airlock")
        .expect("airlock runs in the pane");
    let sandbox = descendants(airlock);
    assert!(sandbox.len() >= 3, "supervisor, init, bash: {sandbox:?}");
    let mut terminals_seen = 0;
    for pid in sandbox {
        for fd in fds(pid) {
            let Some(device) = device_of(&fd) else {
                continue;
            };
            terminals_seen += usize::from(device.1 >> 8 == 136);
            assert_ne!(
                device,
                pane_tty,
                "pid {pid} ({}) holds the caller's terminal as {}",
                comm(pid),
                fd.display()
            );
        }
    }
    assert!(terminals_seen >= 3, "bash holds its own pty as 0, 1 and 2");
    pane.type_line("exit");
    assert_cooked(&pane.after_airlock().1);
}

#[test]
fn the_callers_terminal_is_restored_after_the_sandboxed_process_is_killed_with_sigkill() {
    let marker = format!("kill-me-{}", std::process::id());
    let pane = Pane::start(&[], &[PYTHON, "-q", "-i", "-c", "pass", &marker]);
    pane.wait_for(">>> ");
    let python = (0..)
        .map(|_| {
            let found = all_pids().into_iter().find(|p| {
                let args = cmdline(*p);
                args.first().is_some_and(|a| a.ends_with("python3")) && args.contains(&marker)
            });
            if found.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            found
        })
        .take(200)
        .flatten()
        .next()
        .expect("the sandboxed python from the host");
    assert!(
        Command::new("kill")
            .args(["-9", &python.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let (code, stty) = pane.after_airlock();
    assert_eq!(code, 137, "airlock reports the SIGKILL");
    assert_cooked(&stty);
}

#[test]
fn the_callers_terminal_is_restored_after_the_timeout_and_after_sigterm_of_airlock() {
    let pane = Pane::start(&["--timeout", "2s"], &[PYTHON, "-q"]);
    pane.wait_for(">>> ");
    let (code, stty) = pane.after_airlock();
    assert_eq!(code, 124, "the timeout's exit status");
    assert_cooked(&stty);

    let pane = Pane::start(&[], &[PYTHON, "-q"]);
    pane.wait_for(">>> ");
    let airlock = children(pane.pane_pid())
        .into_iter()
        .find(|p| comm(*p) == "airlock")
        .expect("airlock runs in the pane");
    assert!(
        Command::new("kill")
            .args(["-TERM", &airlock.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let (code, stty) = pane.after_airlock();
    assert_eq!(code, 143, "airlock stopped the sandbox on SIGTERM");
    assert_cooked(&stty);
}

#[test]
fn airlocks_own_refusal_notices_stay_readable_while_the_terminal_is_raw() {
    let pane = Pane::start(
        &[],
        &[
            "sh",
            "-c",
            // Refused by name or, where every name resolves, by request:
            // either way airlock prints a notice.
            "curl -s -o /dev/null https://refused.example/; echo after-$((1+1)); sleep 600",
        ],
    );
    let screen = pane.wait_for("after-2");
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("airlock: refused") && l.contains("refused.example")),
        "{screen}"
    );
    assert!(
        screen.lines().any(|l| l == "after-2"),
        "the line after airlock's notice starts in the first column: {screen}"
    );
    pane.key("C-c");
    assert_cooked(&pane.after_airlock().1);
}

#[test]
fn no_tty_gives_the_command_pipes_even_from_a_terminal() {
    let pane = Pane::start(
        &["--no-tty"],
        &[
            "sh",
            "-c",
            "test -t 0 && echo stdin=tty || echo stdin=pipe; test -t 1 && echo stdout=tty || echo stdout=pipe; read line; echo got-$line",
        ],
    );
    pane.wait_for("stdout=pipe");
    pane.type_line("hello");
    let screen = pane.wait_for("got-hello");
    assert!(screen.contains("stdin=pipe"), "{screen}");
    let (code, stty) = pane.after_airlock();
    assert_eq!(code, 0);
    assert_cooked(&stty);
}

#[test]
fn without_a_terminal_the_command_gets_pipes_as_before_and_tty_forces_a_pty() {
    let ws = tempfile::tempdir().unwrap();
    let run = |extra: &[&str], script: &str| {
        let mut child = Command::new(AIRLOCK)
            .args(["run", "--no-audit", "--workspace"])
            .arg(ws.path())
            .args(extra)
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"abc\n").unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run(
        &[],
        "read x; echo got-$x; test -t 0 || echo stdin-not-a-tty",
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "got-abc\nstdin-not-a-tty\n"
    );

    let out = run(&["--tty"], "tty; read x; echo got-$x");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        // `tty` names a pty, and the pty ends lines as a terminal does;
        // whether its echo of the input comes before `tty`'s line is timing.
        text.split("\r\n").any(|line| line.starts_with("/dev/pts/"))
            && text.contains("got-abc\r\n"),
        "--tty runs the command on a pty even with pipes around airlock: {text:?}"
    );
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

fn stat_field(pid: i32, index: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name, which may contain spaces.
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(index).map(str::to_owned)
}

fn children(parent: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|p| stat_field(*p, 1).and_then(|pp| pp.parse().ok()) == Some(parent))
        .collect()
}

fn descendants(root: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(p) = queue.pop() {
        for c in children(p) {
            found.push(c);
            queue.push(c);
        }
    }
    found
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn fds(pid: i32) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.filter_map(|e| Some(e.ok()?.path())).collect()
}

/// (st_dev, st_rdev) of what a path (or a /proc/PID/fd link) opens.
fn device_of(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.rdev()))
}
