//! Session mode with real namespaces: one sandbox, many steps (as root).

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::OwnedFd;
use std::sync::mpsc::{Receiver, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use airlock_shim::pty::WindowSize;
use airlock_shim::{
    ExitKind, ObserveSpec, Outcome, Sandbox, ShimError, StepControl, StepEvent, StepId,
    StepRequest, StepStdio,
};
use airlock_test_support::shim::*;
use nix::unistd::Pid;

/// How long a test waits for any one event before it fails (never hangs).
const PATIENCE: Duration = Duration::from_secs(30);

/// A live session: the step handle, the events `wait_session` hands over
/// (from its own thread), and what is needed to end it.
struct Live {
    control: StepControl,
    events: Receiver<StepEvent>,
    /// Events that came while another step's was awaited.
    pending: Vec<StepEvent>,
    init: i32,
    cgroups: Vec<std::path::PathBuf>,
    waiter: Option<JoinHandle<Result<Outcome, ShimError>>>,
    observations: Option<Receiver<airlock_record::AuditEvent>>,
    _ws: tempfile::TempDir,
}

fn start_with(observe: bool, adjust: impl FnOnce(&mut airlock_shim::SandboxSpec)) -> Live {
    let ws = workspace();
    let mut s = spec(ws.path(), "");
    s.command.clear();
    s.session = true;
    if observe {
        s.observe = Some(ObserveSpec::default());
    }
    adjust(&mut s);
    let mut sandbox = Sandbox::spawn(s).expect("spawn a session sandbox");
    let observations = sandbox.take_observations();
    let control = sandbox.start_session().expect("start the session");
    let init = sandbox.pid();
    let cgroups = sandbox.cgroup_paths();
    let (tx, events) = channel();
    let waiter = std::thread::spawn(move || {
        sandbox.wait_session(|event| {
            let _ = tx.send(event);
        })
    });
    Live {
        control,
        events,
        pending: Vec::new(),
        init,
        cgroups,
        waiter: Some(waiter),
        observations,
        _ws: ws,
    }
}

fn start() -> Live {
    start_with(false, |_| {})
}

fn env() -> Vec<(OsString, OsString)> {
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("LANG".into(), "C.UTF-8".into()),
    ]
}

fn request(step: u64, argv: &[&str]) -> StepRequest {
    StepRequest {
        step: StepId(step),
        argv: argv.iter().map(OsString::from).collect(),
        env: env(),
        cwd: None,
        terminal: None,
    }
}

/// The read ends of a step's stdout and stderr.
struct Output {
    stdout: OwnedFd,
    stderr: OwnedFd,
}

impl Output {
    fn stdout(self) -> String {
        read_all(self.stdout)
    }
}

fn read_all(fd: OwnedFd) -> String {
    let mut out = String::new();
    std::fs::File::from(fd).read_to_string(&mut out).unwrap();
    out
}

impl Live {
    /// Run `request` with /dev/null as stdin and pipes for stdout and stderr.
    fn exec(&self, request: StepRequest) -> Output {
        let stdin = std::fs::File::open("/dev/null").unwrap().into();
        let (out_r, out_w) = nix::unistd::pipe().unwrap();
        let (err_r, err_w) = nix::unistd::pipe().unwrap();
        self.control
            .exec(&request, StepStdio::Pipes([stdin, out_w, err_w]))
            .expect("hand the step over");
        Output {
            stdout: out_r,
            stderr: err_r,
        }
    }

    fn sh(&self, step: u64, script: &str) -> Output {
        self.exec(request(step, &["sh", "-c", script]))
    }

    /// The next event of `step` (others are kept for later).
    fn next_event(&mut self, step: u64) -> StepEvent {
        let step = StepId(step);
        let of = |e: &StepEvent| match e {
            StepEvent::Terminal { step, .. }
            | StepEvent::Exited { step, .. }
            | StepEvent::Failed { step, .. } => *step,
        };
        if let Some(at) = self.pending.iter().position(|e| of(e) == step) {
            return self.pending.remove(at);
        }
        loop {
            let event = self
                .events
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|e| panic!("no event for {step} within {PATIENCE:?}: {e}"));
            if of(&event) == step {
                return event;
            }
            self.pending.push(event);
        }
    }

    fn exit_of(&mut self, step: u64) -> ExitKind {
        match self.next_event(step) {
            StepEvent::Exited { status, .. } => status,
            other => panic!("step {step}: expected its exit, got {other:?}"),
        }
    }

    /// Run a script to its end: its exit and its stdout.
    fn run(&mut self, step: u64, script: &str) -> (ExitKind, String) {
        let out = self.sh(step, script).stdout();
        (self.exit_of(step), out)
    }

    /// Kill init, as airlock does to end a session, and wait for the end.
    fn end(&mut self) -> Result<Outcome, ShimError> {
        nix::sys::signal::kill(Pid::from_raw(self.init), nix::sys::signal::SIGKILL).unwrap();
        self.join()
    }

    fn join(&mut self) -> Result<Outcome, ShimError> {
        let waiter = self
            .waiter
            .take()
            .expect("the session is still being waited for");
        let deadline = Instant::now() + PATIENCE;
        while !waiter.is_finished() {
            assert!(Instant::now() < deadline, "wait_session did not return");
            std::thread::sleep(Duration::from_millis(5));
        }
        waiter.join().expect("the waiting thread")
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if self.waiter.is_some() {
            let _ = nix::sys::signal::kill(Pid::from_raw(self.init), nix::sys::signal::SIGKILL);
        }
    }
}

#[test]
fn two_steps_share_the_sandboxs_tmp() {
    let mut live = start();
    let (status, _) = live.run(1, "echo kept > /tmp/state; echo ws > in-workspace");
    assert_eq!(status, ExitKind::Exited(0));
    let (status, out) = live.run(2, "cat /tmp/state in-workspace");
    assert_eq!(status, ExitKind::Exited(0));
    assert_eq!(out, "kept\nws\n");
    live.end().unwrap();
}

#[test]
fn a_steps_exit_status_is_its_commands_own() {
    let mut live = start();
    assert_eq!(live.run(1, "exit 3").0, ExitKind::Exited(3));
    assert_eq!(live.run(2, "kill -TERM $$").0, ExitKind::Signaled(15));
    assert_eq!(live.run(3, "true").0, ExitKind::Exited(0));
    let output = live.exec(request(4, &["surely-not-a-command"]));
    assert!(read_all(output.stderr).contains("command not found"));
    assert_eq!(live.exit_of(4), ExitKind::Exited(127));
    live.end().unwrap();
}

#[test]
fn a_step_runs_in_its_working_directory_and_a_missing_one_fails_with_125_and_says_why() {
    let mut live = start();
    live.run(1, "mkdir sub");
    let mut req = request(2, &["pwd"]);
    req.cwd = Some("sub".into());
    let out = live.exec(req).stdout();
    assert_eq!(live.exit_of(2), ExitKind::Exited(0));
    assert!(out.ends_with("/sub\n"), "{out:?}");
    let mut req = request(3, &["pwd"]);
    req.cwd = Some("/nonexistent/dir".into());
    let output = live.exec(req);
    let err = read_all(output.stderr);
    assert_eq!(live.exit_of(3), ExitKind::Exited(125));
    assert!(
        err.starts_with("airlock: cannot change to directory /nonexistent/dir"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    live.end().unwrap();
}

#[test]
fn steps_run_concurrently() {
    let mut live = start();
    let started = Instant::now();
    let a = live.sh(1, "sleep 1; echo a");
    let b = live.sh(2, "sleep 1; echo b");
    let a = std::thread::spawn(move || a.stdout());
    let b = std::thread::spawn(move || b.stdout());
    assert_eq!(live.exit_of(1), ExitKind::Exited(0));
    assert_eq!(live.exit_of(2), ExitKind::Exited(0));
    let took = started.elapsed();
    assert_eq!(a.join().unwrap(), "a\n");
    assert_eq!(b.join().unwrap(), "b\n");
    assert!(
        took < Duration::from_millis(1900),
        "one after the other: {took:?}"
    );
    live.end().unwrap();
}

#[test]
fn killing_a_step_kills_its_whole_tree_and_the_session_lives_on() {
    let mut live = start();
    // Step 1 starts a background process, says its pid and waits for it.
    let output = live.sh(1, "sleep 1000 >/dev/null 2>&1 & echo $!; wait");
    let mut lines = BufReader::new(std::fs::File::from(output.stdout));
    let mut background = String::new();
    lines.read_line(&mut background).unwrap();
    let background = background.trim().to_string();
    assert!(background.parse::<u32>().is_ok(), "{background:?}");
    // Step 2 runs across the kill.
    let survivor = live.sh(2, "sleep 0.5; echo survived");
    live.control.kill(StepId(1)).unwrap();
    assert_eq!(live.exit_of(1), ExitKind::Signaled(libc::SIGKILL));
    assert_eq!(survivor.stdout(), "survived\n");
    assert_eq!(live.exit_of(2), ExitKind::Exited(0));
    // A later step runs, and the background process is gone.
    let (status, out) = live.run(
        3,
        &format!(
            "for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 {background} 2>/dev/null || {{ echo gone; exit 0; }}; sleep 0.1; done; echo alive"
        ),
    );
    assert_eq!((status, out.as_str()), (ExitKind::Exited(0), "gone\n"));
    live.end().unwrap();
}

#[test]
fn a_background_process_of_one_step_is_still_running_during_the_next() {
    let mut live = start();
    let (status, pid) = live.run(1, "sleep 1000 >/dev/null 2>&1 & echo $!");
    assert_eq!(status, ExitKind::Exited(0));
    let (status, out) = live.run(2, &format!("kill -0 {} && echo running", pid.trim()));
    assert_eq!((status, out.as_str()), (ExitKind::Exited(0), "running\n"));
    live.end().unwrap();
}

#[test]
fn a_signal_reaches_the_steps_process_group() {
    let mut live = start();
    let output = live.sh(1, "echo ready; sleep 1000");
    let mut lines = BufReader::new(std::fs::File::from(output.stdout));
    let mut ready = String::new();
    lines.read_line(&mut ready).unwrap();
    assert_eq!(ready, "ready\n");
    live.control.signal(StepId(1), libc::SIGTERM).unwrap();
    assert_eq!(live.exit_of(1), ExitKind::Signaled(libc::SIGTERM));
    live.end().unwrap();
}

/// Ctrl-C pressed as a step starts: the signal may reach the command between
/// its fork and its exec, while it still has the shim's dispositions. It
/// must not be lost there (an ignored signal is discarded, signal(7)).
#[test]
fn a_signal_sent_as_the_step_starts_is_not_lost() {
    let mut live = start();
    for step in 1..=40 {
        let _output = live.exec(request(step, &["sleep", "1000"]));
        live.control.signal(StepId(step), libc::SIGINT).unwrap();
        assert_eq!(
            live.exit_of(step),
            ExitKind::Signaled(libc::SIGINT),
            "step {step}"
        );
    }
    live.end().unwrap();
}

#[test]
fn a_step_number_still_in_use_is_refused_with_a_reason() {
    let mut live = start();
    let first = live.sh(1, "sleep 0.5");
    let _second = live.sh(1, "true");
    match live.next_event(1) {
        StepEvent::Failed { message, .. } => {
            assert!(message.contains("still running"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    drop(first);
    assert_eq!(live.exit_of(1), ExitKind::Exited(0));
    live.end().unwrap();
}

#[test]
fn execs_are_tagged_with_their_step_down_to_grandchildren() {
    let mut live = start_with(true, |_| {});
    assert_eq!(live.run(1, "/bin/echo one; :").0, ExitKind::Exited(0));
    assert_eq!(
        live.run(2, "sh -c '/bin/true; :'; :").0,
        ExitKind::Exited(0)
    );
    live.end().unwrap();
    let observations = live.observations.take().expect("observations");
    let execs: Vec<(Vec<String>, Option<StepId>)> = observations
        .try_iter()
        .filter_map(|o| match o {
            airlock_record::AuditEvent::Exec(e) => Some((
                e.argv
                    .iter()
                    .map(|a| String::from_utf8_lossy(a.as_bytes()).into_owned())
                    .collect(),
                e.step.map(|s| StepId(s.get())),
            )),
            _ => None,
        })
        .collect();
    let step_of = |argv0: &str, arg: &str| -> Vec<Option<StepId>> {
        execs
            .iter()
            .filter(|(argv, _)| argv[0].ends_with(argv0) && argv.iter().any(|a| a == arg))
            .map(|(_, s)| *s)
            .collect()
    };
    assert_eq!(
        step_of("sh", "/bin/echo one; :"),
        [Some(StepId(1))],
        "{execs:?}"
    );
    assert_eq!(step_of("echo", "one"), [Some(StepId(1))], "{execs:?}");
    assert_eq!(
        step_of("sh", "sh -c '/bin/true; :'; :"),
        [Some(StepId(2))],
        "{execs:?}"
    );
    assert_eq!(
        step_of("sh", "/bin/true; :"),
        [Some(StepId(2))],
        "{execs:?}"
    );
    assert_eq!(step_of("true", "/bin/true"), [Some(StepId(2))], "{execs:?}");
    assert!(execs.iter().all(|(_, s)| s.is_some()), "{execs:?}");
}

#[test]
fn a_terminal_step_hands_over_its_master_before_the_command_ends() {
    let mut live = start();
    let req = StepRequest {
        terminal: Some(WindowSize { cols: 91, rows: 17 }),
        ..request(1, &["sh", "-c", "tty; stty size; echo done"])
    };
    live.control.exec(&req, StepStdio::Terminal).unwrap();
    let master = match live.next_event(1) {
        StepEvent::Terminal { master, .. } => master,
        other => panic!("expected the master first, got {other:?}"),
    };
    let reader = std::thread::spawn(move || {
        let mut file = std::fs::File::from(master);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        // EIO once every holder of the slave is gone (pty(7)).
        while let Ok(n @ 1..) = file.read(&mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&out).into_owned()
    });
    assert_eq!(live.exit_of(1), ExitKind::Exited(0));
    let out = reader.join().unwrap();
    let lines: Vec<&str> = out.lines().map(|l| l.trim_end_matches('\r')).collect();
    assert!(lines[0].starts_with("/dev/pts/"), "{out:?}");
    assert_eq!(&lines[1..], ["17 91", "done"], "{out:?}");
    // The terminal and the pipes must match.
    let err = live
        .control
        .exec(&request(2, &["true"]), StepStdio::Terminal)
        .unwrap_err();
    assert!(matches!(err, ShimError::Step(_)), "{err}");
    live.end().unwrap();
}

/// Host pids of everything below `pid` (/proc/PID/task/*/children).
fn host_descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut queue = vec![pid];
    while let Some(p) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let text = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for child in text.split_whitespace().filter_map(|c| c.parse().ok()) {
                out.push(child);
                queue.push(child);
            }
        }
    }
    out
}

#[test]
fn killing_init_ends_the_session_and_leaves_no_process_or_cgroup() {
    let mut live = start_with(false, |s| s.limits.pids = Some(256));
    let (status, _) = live.run(1, "sleep 1000 >/dev/null 2>&1 &");
    assert_eq!(status, ExitKind::Exited(0));
    let mut below = host_descendants(live.init);
    below.push(live.init);
    assert!(below.len() >= 3, "init, holder, sleep: {below:?}");
    let outcome = live.end().unwrap();
    assert_eq!(outcome.status, ExitKind::Signaled(libc::SIGKILL));
    for pid in below {
        assert_eq!(
            nix::sys::signal::kill(Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH),
            "process {pid} is still there"
        );
    }
    for cg in &live.cgroups {
        assert!(!cg.exists(), "{} is still there", cg.display());
    }
    // After the end, a step can no longer be handed over.
    assert!(
        live.control
            .exec(&request(2, &["true"]), StepStdio::Pipes(null3()))
            .is_err()
    );
}

fn null3() -> [OwnedFd; 3] {
    let null = || std::fs::File::open("/dev/null").unwrap().into();
    [null(), null(), null()]
}

#[test]
fn the_sessions_timeout_counts_from_its_start_and_ends_it() {
    let mut live = start_with(false, |s| s.limits.timeout = Some(Duration::from_secs(1)));
    let started = Instant::now();
    let (status, _) = live.run(1, "sleep 1000 >/dev/null 2>&1 &");
    assert_eq!(status, ExitKind::Exited(0));
    let outcome = live.join().unwrap();
    assert!(outcome.timed_out, "{outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_sandbox_that_is_not_a_session_refuses_steps_and_a_session_refuses_a_command() {
    let ws = workspace();
    let mut sandbox = Sandbox::spawn(spec(ws.path(), "true")).unwrap();
    assert!(matches!(
        sandbox.start_session(),
        Err(ShimError::NotASession)
    ));
    assert_eq!(sandbox.wait().unwrap().exit_code(), 0);
    let mut s = spec(ws.path(), "true");
    s.session = true;
    assert!(matches!(Sandbox::spawn(s), Err(ShimError::InvalidSpec(_))));
}

#[test]
fn step_events_name_their_step() {
    // Events of interleaved steps are told apart by their number.
    let mut live = start();
    let outputs: HashMap<u64, Output> = (1..=3)
        .map(|n| (n, live.sh(n, &format!("exit {n}"))))
        .collect();
    for n in (1..=3).rev() {
        assert_eq!(live.exit_of(n), ExitKind::Exited(n as i32));
    }
    drop(outputs);
    live.end().unwrap();
}

#[test]
fn a_step_that_kills_its_own_holder_still_gets_a_last_event() {
    let mut live = start();
    let _output = live.sh(1, "kill -9 $PPID; sleep 0.2");
    match live.next_event(1) {
        StepEvent::Failed { message, .. } => {
            assert!(message.contains("killed by signal 9"), "{message}")
        }
        other => panic!("expected the launcher's report, got {other:?}"),
    }
    assert_eq!(live.run(2, "echo on").1, "on\n");
    live.end().unwrap();
}
