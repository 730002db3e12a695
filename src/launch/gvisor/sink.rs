//! The record's ears inside gVisor: a `SOCK_SEQPACKET` socket that runsc's
//! remote sink connects to (named in the pod init config), and the thread
//! that turns each `container/start` and `sentry/execve` point into an
//! exec on record. ptrace cannot do this: it sees only the sentry.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use airlock_auditor::{AuditEvent, Exec, ExecId, Note, OsText, SessionRecorder};
use anyhow::Context;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    AddressFamily, Backlog, MsgFlags, SockFlag, SockType, UnixAddr, accept, bind, listen, recv,
    send, socket,
};
use serde_json::json;

use super::files::{Recorded, Tree, WriteFds};
use super::points::{self, Call, ExecPoint, Point};

/// The largest message the sink reads: an exec's argv and environment.
const MAX_MESSAGE: usize = 1 << 20;
/// How often the sink looks whether runsc gave up before connecting.
const ACCEPT_TICK_MS: u16 = 50;
/// The wire version this reader speaks (the handshake's; runsc 2022-12 sends 1).
const WIRE_VERSION: u8 = 1;
/// How many times runsc's remote sink retries a point the socket has no
/// room for before it drops it (its default is 0: the first EAGAIN drops).
/// With the default, a busy host lost execs: 163 of 200 `/bin/true` on
/// record while other sandboxes ran. Each retry waits twice as long as
/// the last, up to `SINK_BACKOFF_MAX`, in the task that fired the point:
/// the sandboxed program waits for the record, never the other way round.
/// 400 retries at the cap is several seconds: only a reader that stopped
/// reading loses points, and a note on record says how many.
const SINK_RETRIES: u32 = 400;
/// The longest wait between two tries (Go duration syntax).
const SINK_BACKOFF_MAX: &str = "10ms";

/// The system calls that change names in a directory, whose raw points
/// make airlock look at the writable mounts again: rename, renameat,
/// renameat2, unlink, unlinkat, rmdir, mkdir, mkdirat, link, linkat,
/// symlink, symlinkat, mknod, mknodat, truncate, chmod, fchmodat (x86-64).
const NAME_CALLS: [u64; 17] = [
    82, 264, 316, 87, 263, 84, 83, 258, 86, 265, 88, 266, 133, 259, 76, 90, 268,
];
/// `execve` and `execveat` (x86-64), whose raw exit points say that an
/// exec happened even when gVisor sent no `sentry/execve` point for it.
const EXEC_CALLS: [u64; 2] = [59, 322];
/// `open` flags that mean the file may be written.
const WRITE_FLAGS: u32 = 0o1 | 0o2 | 0o100 | 0o1000;

/// The file side of the record under gVisor: the writable mounts as last
/// seen, and what was recorded from them.
pub(super) struct Files {
    pub tree: Tree,
    pub recorded: Recorded,
}

/// The listening socket, before runsc connects.
pub(super) struct Sink {
    listener: OwnedFd,
}

impl Sink {
    pub(super) fn listen(path: &Path) -> anyhow::Result<Self> {
        let listener = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .context("creating the trace-point socket")?;
        let addr = UnixAddr::new(path).context("naming the trace-point socket")?;
        bind(listener.as_raw_fd(), &addr).context("binding the trace-point socket")?;
        listen(&listener, Backlog::new(1)?).context("listening for gVisor's trace points")?;
        Ok(Self { listener })
    }

    /// The pod init config that points runsc's remote sink at `path` for
    /// the points Airlock records.
    pub(super) fn pod_init_config(path: &Path, files: bool) -> serde_json::Value {
        let mut points = vec![
            json!({ "name": "container/start" }),
            json!({ "name": "sentry/execve", "context_fields": ["thread_id", "group_id", "credentials", "cwd"] }),
        ];
        for sysno in EXEC_CALLS {
            points.push(json!({ "name": format!("syscall/sysno/{sysno}/exit"), "context_fields": ["group_id"] }));
        }
        if files {
            let group = json!(["group_id"]);
            for name in ["open", "openat", "creat", "close"] {
                points.push(
                    json!({ "name": format!("syscall/{name}/exit"), "context_fields": group }),
                );
            }
            points.push(json!({ "name": "sentry/task_exit", "context_fields": group }));
            for sysno in NAME_CALLS {
                points.push(json!({ "name": format!("syscall/sysno/{sysno}/exit"), "context_fields": group }));
            }
        }
        json!({ "trace_session": {
            "name": "Default",
            "points": points,
            "sinks": [{ "name": "remote", "config": {
                "endpoint": path, "retries": SINK_RETRIES, "backoff_max": SINK_BACKOFF_MAX,
            } }],
        }})
    }

    /// Records what runsc sends until it hangs up (the sandbox ended);
    /// gives up waiting for runsc to connect once `ended` is set.
    pub(super) fn record(
        self,
        recorder: SessionRecorder,
        ended: Arc<AtomicBool>,
        files: Option<Files>,
    ) -> JoinHandle<()> {
        std::thread::Builder::new()
            .name("airlock-gvisor-trace".into())
            .spawn(move || {
                let mut fds = [PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
                while !ended.load(Ordering::Acquire) {
                    if poll(&mut fds, PollTimeout::from(ACCEPT_TICK_MS)).unwrap_or(0) > 0 {
                        break;
                    }
                }
                if ended.load(Ordering::Acquire) {
                    return;
                }
                if let Ok(conn) = accept(self.listener.as_raw_fd()) {
                    let conn = Conn(conn);
                    if let Err(e) = serve(conn.0, &recorder, files) {
                        let _ = recorder.record(AuditEvent::Note(Note {
                            text: format!("gVisor's trace points stopped: {e}"),
                            policy: None,
                        }));
                    }
                }
            })
            .unwrap_or_else(|_| std::thread::spawn(|| ()))
    }
}

/// An accepted connection, closed when dropped.
struct Conn(RawFd);

impl Drop for Conn {
    fn drop(&mut self) {
        let _ = nix::unistd::close(self.0);
    }
}

fn serve(conn: RawFd, recorder: &SessionRecorder, mut files: Option<Files>) -> anyhow::Result<()> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    // The sentry speaks first (Handshake{version}); the answer is ours.
    recv(conn, &mut buf, MsgFlags::empty()).context("reading the handshake")?;
    send(conn, &[0x08, WIRE_VERSION], MsgFlags::empty()).context("answering the handshake")?;
    let mut execs = Execs::default();
    let mut unexplained = UnreportedExecs::default();
    let mut dropped_before = 0u32;
    let mut write_fds = WriteFds::default();
    // Since the last look at the writable mounts: whether a point said a
    // file may have changed.
    let mut changed = false;
    // Whether a point says the writes are done (below): look once the
    // points waiting are read, so a burst costs one walk, not one a point.
    let mut look_now = false;
    loop {
        if look_now && !pending(conn) {
            if let Some(files) = &mut files {
                look(files, recorder)?;
            }
            changed = false;
            look_now = false;
        }
        let n = recv(conn, &mut buf, MsgFlags::empty()).context("reading a trace point")?;
        if n == 0 {
            // The sandbox ended: a last look, before the reconcile's.
            if let Some(files) = &mut files {
                look(files, recorder)?;
            }
            return Ok(());
        }
        let message = points::decode(&buf[..n])?;
        if message.dropped != dropped_before {
            // Points the sentry could not send: said on record, not hidden.
            recorder.record(AuditEvent::Note(Note {
                text: format!(
                    "gVisor dropped {} trace points (execs and file operations may be missing)",
                    message.dropped.wrapping_sub(dropped_before)
                ),
                policy: None,
            }))?;
            dropped_before = message.dropped;
        }
        if let Some(done) = file_change(&message.point, &mut write_fds) {
            changed = true;
            look_now |= done;
        }
        if matches!(message.point, Point::TaskExit { .. }) && changed {
            // A process that wrote and closed, then ended: its writes are done.
            look_now = true;
        }
        let is_exec = matches!(message.point, Point::Exec(_) | Point::Start { .. });
        if let (true, true, Some(files)) = (is_exec, changed, &mut files) {
            // What was written before a program starts is on record
            // before it.
            look(files, recorder)?;
            changed = false;
            look_now = false;
        }
        if unexplained.unreported(&message.point) {
            let exec = execs.unreported();
            recorder.record(AuditEvent::Note(Note {
                text: format!(
                    "gVisor did not report the program, arguments, working directory or environment of exec {}: it sends no execve point whose strings are not UTF-8; the exec is on record with them empty",
                    exec.exec_id
                ),
                policy: None,
            }))?;
            recorder.record(AuditEvent::Exec(exec))?;
        } else if let Some(exec) = execs.of(message.point) {
            recorder.record(AuditEvent::Exec(exec))?;
        }
    }
}

/// Execs gVisor reported (a `sentry/execve` point) whose `execve` has not
/// returned yet: an `execve` that returns with none waiting was an exec
/// gVisor could not report. Its execve point is serialized as protobuf,
/// whose strings must be UTF-8: a program run with an argument, a working
/// directory or an environment that is not (a hostile program's way to
/// run unseen) gets no point at all, and no dropped count either. The raw
/// `execve` exit point carries no process here (runsc sends raw points
/// without their context), so they are matched by count, in order: each
/// task's exec point comes before its own return.
#[derive(Default)]
struct UnreportedExecs(std::collections::VecDeque<Instant>);

/// How long a reported exec waits for its `execve` to return: past it, the
/// task died in between (killed mid-exec), and waiting on would let that
/// exec stand in for an unreported one.
const EXEC_RETURN_WITHIN: Duration = Duration::from_secs(2);

impl UnreportedExecs {
    /// Follows `point`; true when it is the successful return of an
    /// `execve` that gVisor did not report.
    fn unreported(&mut self, point: &Point) -> bool {
        match point {
            Point::Exec(_) => {
                self.0.push_back(Instant::now());
                false
            }
            Point::Syscall(Call {
                sysno, ok: true, ..
            }) if EXEC_CALLS.contains(sysno) => {
                while self
                    .0
                    .front()
                    .is_some_and(|at| at.elapsed() > EXEC_RETURN_WITHIN)
                {
                    self.0.pop_front();
                }
                self.0.pop_front().is_none()
            }
            _ => false,
        }
    }
}

/// Whether a point says a file in a writable mount may have changed, and
/// if so whether the change is complete. The close of a descriptor
/// opened for writing is not: a shell's `echo hi > f` dups it onto stdout
/// and closes it before writing, so the look waits for a later point. The
/// exit of a process that held one, and a successful call that changes
/// names, are.
fn file_change(point: &Point, write_fds: &mut WriteFds) -> Option<bool> {
    match point {
        Point::Open(Call {
            tgid,
            fd,
            flags,
            ok: true,
            ..
        }) if flags & WRITE_FLAGS != 0 => {
            write_fds.opened(*tgid, *fd);
            Some(false)
        }
        Point::Close(Call { tgid, fd, .. }) => write_fds.closed(*tgid, *fd).then_some(false),
        Point::TaskExit { tgid } => write_fds.exited(*tgid).then_some(true),
        Point::Syscall(Call {
            sysno, ok: true, ..
        }) => NAME_CALLS.contains(sysno).then_some(true),
        _ => None,
    }
}

/// Whether another point is already waiting: looking once after a burst
/// costs one walk of the writable mounts, not one per point.
fn pending(conn: RawFd) -> bool {
    let mut byte = [0u8; 1];
    recv(conn, &mut byte, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT).is_ok_and(|n| n > 0)
}

/// Records what changed in the writable mounts since the last look. No
/// exec is named: the points arrive after the fact, and by the time airlock
/// looks, another process may have changed files too (a wrong name on
/// record is worse than none).
fn look(files: &mut Files, recorder: &SessionRecorder) -> anyhow::Result<()> {
    for change in files.tree.changes(None) {
        files.recorded.note(&change);
        recorder.record(AuditEvent::File(change))?;
    }
    Ok(())
}

/// Exec ids for the session's execs under gVisor, in order. A process's
/// parent is not in the points, so none is named.
#[derive(Default)]
struct Execs {
    next: u64,
}

impl Execs {
    fn of(&mut self, point: Point) -> Option<Exec> {
        let exec = match point {
            Point::Start { cwd, argv } => {
                ExecPoint {
                    // gVisor's init: pid 1 of its namespace.
                    tid: 1,
                    tgid: 1,
                    path: argv.first().cloned().unwrap_or_default(),
                    cwd,
                    argv,
                    ..ExecPoint::default()
                }
            }
            Point::Exec(e) => e,
            _ => return None,
        };
        Some(self.next(exec))
    }

    /// An exec gVisor did not report, from its `execve`'s return: that it
    /// happened is all that is known.
    fn unreported(&mut self) -> Exec {
        self.next(ExecPoint::default())
    }

    fn next(&mut self, exec: ExecPoint) -> Exec {
        self.next += 1;
        to_exec(ExecId::new(self.next.to_string()), exec)
    }
}

fn to_exec(exec_id: ExecId, e: ExecPoint) -> Exec {
    let mut env_names = Vec::new();
    let mut env_values_nonsecret = BTreeMap::new();
    for var in &e.env {
        let (name, value) = match var.iter().position(|&b| b == b'=') {
            Some(i) => (&var[..i], &var[i + 1..]),
            None => (var.as_slice(), &b""[..]),
        };
        // As the namespace sandbox's observer: a JSON object's keys are
        // text, so a name that is not UTF-8 keeps its name, not its value.
        if !airlock_shim::is_secret_name(name)
            && let Ok(text) = std::str::from_utf8(name)
        {
            env_values_nonsecret.insert(text.to_owned(), OsText::from(value));
        }
        env_names.push(OsText::from(name));
    }
    Exec {
        exec_id,
        parent_exec_id: None,
        pid: e.tgid,
        ppid: 0,
        uid: e.uid,
        path: OsText::from(e.path),
        argv: e.argv.into_iter().map(OsText::from).collect(),
        cwd: OsText::from(e.cwd),
        env_names,
        env_values_nonsecret,
        step: None,
        image: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn execve_returned(ok: bool) -> Point {
        Point::Syscall(Call {
            sysno: 59,
            ok,
            ..Call::default()
        })
    }

    /// An exec point's strings go on record as the bytes gVisor gave, as
    /// the namespace sandbox records them: no two argvs that differ in a
    /// byte become one text; a secret-looking variable keeps only its
    /// name, and a name that is not UTF-8 (no JSON key) only its name.
    #[test]
    fn an_exec_point_goes_on_record_byte_for_byte_with_secret_values_left_out() {
        let exec = to_exec(
            ExecId::new("1".to_owned()),
            ExecPoint {
                tgid: 7,
                cwd: b"/w/d\xfe".to_vec(),
                path: b"/w/ev\xffil".to_vec(),
                argv: vec![b"ev\xffil".to_vec(), b"arg\xfc".to_vec()],
                env: vec![
                    b"API_TOKEN=s3cret".to_vec(),
                    b"K\xfb=plain".to_vec(),
                    b"V=v\xfa".to_vec(),
                ],
                ..ExecPoint::default()
            },
        );
        assert_eq!(exec.path, OsText::from(&b"/w/ev\xffil"[..]));
        assert_ne!(exec.path, OsText::from("/w/ev\u{fffd}il"));
        assert_eq!(exec.argv[1], OsText::from(&b"arg\xfc"[..]));
        assert_eq!(exec.cwd, OsText::from(&b"/w/d\xfe"[..]));
        assert_eq!(
            exec.env_names,
            [
                OsText::from("API_TOKEN"),
                OsText::from(&b"K\xfb"[..]),
                OsText::from("V")
            ]
        );
        assert_eq!(
            exec.env_values_nonsecret.keys().collect::<Vec<_>>(),
            ["V"],
            "the token's value and the value of a name that is not text are left out"
        );
        assert_eq!(exec.env_values_nonsecret["V"], OsText::from(&b"v\xfa"[..]));
    }

    /// Each reported exec is matched by its own return, in order; a return
    /// with no report waiting is an exec gVisor did not report, and a
    /// failed execve is no exec at all.
    #[test]
    fn an_execve_that_returns_unreported_is_told_apart_from_reported_ones() {
        let mut execs = UnreportedExecs::default();
        let reported = Point::Exec(ExecPoint::default());
        assert!(!execs.unreported(&reported));
        assert!(!execs.unreported(&reported));
        assert!(!execs.unreported(&execve_returned(true)));
        assert!(!execs.unreported(&execve_returned(false)));
        assert!(!execs.unreported(&execve_returned(true)));
        assert!(execs.unreported(&execve_returned(true)));
        assert!(!execs.unreported(&execve_returned(false)));
    }
}
