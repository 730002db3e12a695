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

use airlock_auditor::{AuditEvent, Exec, ExecId, Note, OsText, SessionRecorder};
use anyhow::Context;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    AddressFamily, Backlog, MsgFlags, SockFlag, SockType, UnixAddr, accept, bind, listen, recv,
    send, socket,
};
use serde_json::json;

use super::points::{self, ExecPoint, Point};

/// The largest message the sink reads: an exec's argv and environment.
const MAX_MESSAGE: usize = 1 << 20;
/// How often the sink looks whether runsc gave up before connecting.
const ACCEPT_TICK_MS: u16 = 50;
/// The wire version this reader speaks (the handshake's; runsc 2022-12 sends 1).
const WIRE_VERSION: u8 = 1;

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
    pub(super) fn pod_init_config(path: &Path) -> serde_json::Value {
        json!({ "trace_session": {
            "name": "Default",
            "points": [
                { "name": "container/start" },
                { "name": "sentry/execve", "context_fields": ["thread_id", "group_id", "credentials", "cwd"] },
            ],
            "sinks": [{ "name": "remote", "config": { "endpoint": path } }],
        }})
    }

    /// Records what runsc sends until it hangs up (the sandbox ended);
    /// gives up waiting for runsc to connect once `ended` is set.
    pub(super) fn record(
        self,
        recorder: SessionRecorder,
        ended: Arc<AtomicBool>,
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
                    if let Err(e) = serve(conn.0, &recorder) {
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

fn serve(conn: RawFd, recorder: &SessionRecorder) -> anyhow::Result<()> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    // The sentry speaks first (Handshake{version}); the answer is ours.
    recv(conn, &mut buf, MsgFlags::empty()).context("reading the handshake")?;
    send(conn, &[0x08, WIRE_VERSION], MsgFlags::empty()).context("answering the handshake")?;
    let mut execs = Execs::default();
    let mut dropped_before = 0u32;
    loop {
        let n = recv(conn, &mut buf, MsgFlags::empty()).context("reading a trace point")?;
        if n == 0 {
            return Ok(());
        }
        let message = points::decode(&buf[..n])?;
        if message.dropped != dropped_before {
            // Points the sentry could not send: said on record, not hidden.
            recorder.record(AuditEvent::Note(Note {
                text: format!(
                    "gVisor dropped {} trace points (execs may be missing)",
                    message.dropped.wrapping_sub(dropped_before)
                ),
                policy: None,
            }))?;
            dropped_before = message.dropped;
        }
        if let Some(exec) = execs.of(message.point) {
            recorder.record(AuditEvent::Exec(exec))?;
        }
    }
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
            Point::Other => return None,
        };
        self.next += 1;
        Some(to_exec(ExecId::new(self.next.to_string()), exec))
    }
}

fn to_exec(exec_id: ExecId, e: ExecPoint) -> Exec {
    let mut env_names = Vec::new();
    let mut env_values_nonsecret = BTreeMap::new();
    for var in &e.env {
        let (name, value) = var.split_once('=').unwrap_or((var, ""));
        env_names.push(OsText::from(name));
        if !airlock_shim::is_secret_name(name.as_bytes()) {
            env_values_nonsecret.insert(name.to_owned(), OsText::from(value));
        }
    }
    Exec {
        exec_id,
        parent_exec_id: None,
        pid: e.tgid,
        ppid: 0,
        uid: e.uid,
        path: OsText::from(e.path.as_str()),
        argv: e.argv.iter().map(|a| OsText::from(a.as_str())).collect(),
        cwd: OsText::from(e.cwd.as_str()),
        env_names,
        env_values_nonsecret,
        step: None,
        image: Default::default(),
    }
}
