//! The backstop for tasks the observer does not trace (issue 29, item 1).
//! The seccomp filter leaves a sandboxed program no way to make one, so
//! these tests make one the only way left: a host process enters the
//! sandbox's PID namespace (nsenter, setns(2)) while the command runs. The
//! backstop must kill it, and what it forks, and put each on record; the
//! command's own tasks, its zombies and threads included, must never be.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use airlock_record::AuditEvent;
use airlock_shim::{ObserveSpec, Sandbox};
use airlock_test_support::shim::{spec, workspace};

/// One UntracedKilled record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Killed {
    pid: i32,
    ppid: i32,
    comm: String,
    traced_exec: bool,
}

fn killed(obs: &[AuditEvent]) -> Vec<Killed> {
    obs.iter()
        .filter_map(|o| match o {
            AuditEvent::Untraced(u) => Some(Killed {
                pid: u.pid,
                ppid: u.ppid,
                comm: String::from_utf8_lossy(u.comm.as_bytes()).into_owned(),
                traced_exec: u.exec_id.is_some(),
            }),
            _ => None,
        })
        .collect()
}

/// How an intruder ended, and how long it lived.
struct Intruder {
    status: std::process::ExitStatus,
    lived: Duration,
}

/// Runs `script` observed; while it runs, `intruder` (argv), if any, enters
/// the sandbox's PID namespace through nsenter. Returns how the intruder
/// ended and every observation.
fn observe(script: &str, intruder: Option<&[&str]>) -> (Option<Intruder>, Vec<AuditEvent>) {
    let ws = workspace();
    let mut s = spec(ws.path(), script);
    s.observe = Some(ObserveSpec {
        max_file_bytes: 1 << 20,
    });
    let mut sb = Sandbox::spawn(s).expect("spawn sandbox");
    let rx = sb.take_observations().expect("observations");
    sb.release().expect("release");
    // The command is traced once its first exec is on record.
    let first = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("first record");
    assert!(matches!(first, AuditEvent::Exec(_)), "{first:?}");
    let intruder = intruder.map(|argv| {
        let started = Instant::now();
        let mut child = Command::new("nsenter")
            .arg("-t")
            .arg(sb.pid().to_string())
            .args(["-p", "--"])
            .args(argv)
            .stdin(Stdio::null())
            .spawn()
            .expect("nsenter (util-linux) is needed");
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                break child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        Intruder {
            status,
            lived: started.elapsed(),
        }
    });
    let out = sb.wait().expect("wait");
    assert_eq!(out.exit_code(), 0, "the command itself is not harmed");
    let mut obs = vec![first];
    obs.extend(rx.try_iter());
    (intruder, obs)
}

#[test]
fn a_task_that_entered_the_sandbox_untraced_is_killed_and_on_record() {
    use std::os::unix::process::ExitStatusExt;
    let (intruder, obs) = observe("sleep 3", Some(&["sleep", "30"]));
    let Intruder { status, lived } = intruder.unwrap();
    // nsenter forks the intruder into the namespace and dies of its signal.
    assert!(
        status.signal() == Some(libc::SIGKILL) || status.code() == Some(128 + libc::SIGKILL),
        "the intruder was not killed: {status:?}"
    );
    assert!(
        lived < Duration::from_secs(2),
        "killed only after {lived:?}"
    );
    let k = killed(&obs);
    assert_eq!(k.len(), 1, "{k:?}");
    // Its parent (nsenter) is outside the namespace, and no traced exec made it.
    assert_eq!(
        (k[0].ppid, k[0].comm.as_str(), k[0].traced_exec),
        (0, "sleep", false),
        "{k:?}"
    );
    assert!(k[0].pid > 1, "{k:?}");
}

#[test]
fn an_untraced_task_and_everything_it_forks_are_killed_each_on_record() {
    // The intruder forks two more before anything can see it.
    let (intruder, obs) = observe(
        "sleep 3",
        Some(&["sh", "-c", "sleep 30 & sleep 31 & exec sleep 32"]),
    );
    let lived = intruder.unwrap().lived;
    assert!(
        lived < Duration::from_secs(3),
        "killed only after {lived:?}"
    );
    let k = killed(&obs);
    let mut names: Vec<&str> = k.iter().map(|k| k.comm.as_str()).collect();
    names.sort();
    // Usually the shell has forked and exec'd before a sweep sees it: three
    // sleeps. On a loaded machine a sweep may find the shell first: then it
    // dies with what it had forked so far, each on record.
    let expected = if names.contains(&"sh") {
        names.iter().all(|n| ["sh", "sleep"].contains(n)) && names.len() <= 3
    } else {
        names == ["sleep", "sleep", "sleep"]
    };
    assert!(expected, "{k:?}");
    let mut pids: Vec<i32> = k.iter().map(|k| k.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), k.len(), "each task once: {k:?}");
    // Whichever is killed first, the others are its orphans (init's) or
    // still its children: none descends from a traced exec.
    assert!(k.iter().all(|k| !k.traced_exec && k.pid > 1), "{k:?}");
}

#[test]
fn traced_forks_threads_and_unreaped_zombies_are_never_taken_for_untraced() {
    // Zombies the observer already reaped wait for their real parent with
    // no tracer; threads come and go; nothing of it is untraced.
    let script = "for i in 1 2 3 4 5 6 7 8; do (exit 0) & done; sleep 0.5; wait; \
                  python3 -c 'import threading, os\n\
                  ts = [threading.Thread(target=os.getpid) for _ in range(50)]\n\
                  [t.start() for t in ts]; [t.join() for t in ts]' 2>/dev/null; \
                  for i in $(seq 30); do /bin/true; done";
    let (_, obs) = observe(script, None);
    assert_eq!(
        killed(&obs),
        [],
        "a task of the command was taken for untraced"
    );
}
