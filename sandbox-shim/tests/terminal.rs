//! `SandboxSpec::terminal`: the command runs on a pty of the sandbox's own
//! devpts instance, as session leader, and the caller gets the master.

use std::io::Read;

use airlock_shim::Sandbox;
use airlock_shim::pty::{self, WindowSize};
use airlock_test_support::shim::{spec, workspace};

/// Everything the command wrote to its terminal, until the pty hangs up.
fn read_to_hangup(master: std::os::fd::OwnedFd) -> String {
    let mut file = std::fs::File::from(master);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // EIO: every holder of the slave is gone (pty(7)).
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn the_command_leads_a_session_on_a_pty_of_the_sandbox_and_the_caller_gets_the_master() {
    let ws = workspace();
    let mut spec = spec(
        ws.path(),
        "tty; test -c \"$(tty)\" && echo exists; stty size; \
         ps -o pid=,sid=,tpgid= -p $$ | awk '{print ($1 == $2 && $1 == $3) ? \"leader\" : \"not-leader\"}'",
    );
    spec.terminal = true;
    let mut sandbox = Sandbox::spawn(spec).expect("spawn");
    let master = sandbox.take_terminal().expect("the master is handed over");
    assert!(
        sandbox.take_terminal().is_none(),
        "the master is handed over once"
    );
    pty::set_window_size(&master, WindowSize { cols: 91, rows: 17 }).unwrap();
    let reader = std::thread::spawn(move || read_to_hangup(master));
    sandbox.release().unwrap();
    let outcome = sandbox.wait().unwrap();
    assert_eq!(outcome.exit_code(), 0);
    let out = reader.join().unwrap();
    let lines: Vec<&str> = out.lines().map(|l| l.trim_end_matches('\r')).collect();
    assert!(lines[0].starts_with("/dev/pts/"), "{out:?}");
    assert_eq!(&lines[1..], ["exists", "17 91", "leader"], "{out:?}");
}

#[test]
fn without_a_terminal_no_master_is_handed_over() {
    let ws = workspace();
    let mut sandbox = Sandbox::spawn(spec(ws.path(), "true")).expect("spawn");
    assert!(sandbox.take_terminal().is_none());
    sandbox.release().unwrap();
    assert_eq!(sandbox.wait().unwrap().exit_code(), 0);
}
