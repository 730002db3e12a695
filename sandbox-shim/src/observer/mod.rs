//! The observer: a thread of airlock that traces the sandboxed command and
//! all its descendants with ptrace(2) and turns what the kernel reports into
//! [`Observation`]s.
//!
//! - Execs: the PTRACE_EVENT_EXEC stop after every successful execve, where
//!   the kernel's own answer is read (`exec`). Failed execs are not recorded.
//! - Exits: the wait status of every traced process (exit code or signal).
//! - Files: the seccomp filter returns SECCOMP_RET_TRACE for file-changing
//!   syscalls; at that seccomp stop the call is decoded (`syscalls`), the
//!   tracee is resumed to its syscall-exit stop, and only a call that
//!   succeeded is recorded, by inode (`files`).
//! - At the end, once every traced process is gone, what is still open is
//!   captured and every writable mount is reconciled with the record
//!   (`reconcile`), through descriptors held since the start (`writable`).
//! - Tasks it does not trace: none should exist (the seccomp filter refuses
//!   the ways to make one); a backstop thread kills any it finds in the
//!   sandbox and records it (`untraced`).
//!
//! Modules: `trace` classifies wait statuses, `procs` keeps which exec
//! each process runs, `resolve` resolves path arguments as the kernel would
//! for the tracee, `view` keeps what the record says each path holds,
//! `xattrs` reads extended attributes and `acl` decodes POSIX ACLs.

mod acl;
mod exec;
mod files;
mod name;
mod originals;
mod procs;
mod reconcile;
mod resolve;
mod syscalls;
mod trace;
mod untraced;
mod view;
mod writable;
mod xattrs;

use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::channel;
use airlock_record::{AuditEvent, Exec, Exit, Note, OsText, StepNo};

use crate::observation::{ExecSeq, FileOp, is_secret_name};
use crate::step::StepId;
use crate::sys;
use files::{FileRecord, Files};
use procs::Procs;
use resolve::Viewer;
use trace::Stop;
use untraced::{Backstop, Sweep};

/// State shared with [`crate::Attributor`]: host pid -> current exec.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub procs: HashMap<Pid, Published>,
}

/// What the attributor may know of a process: its current exec, and the
/// session step it belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Published {
    pub exec: ExecSeq,
    pub step: Option<StepId>,
}

pub(crate) type SharedState = Arc<Mutex<Shared>>;

/// What the observer needs to know about the sandbox.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Host pid of the sandbox init.
    pub init: Pid,
    pub max_file_bytes: u64,
}

/// The observer's state: one value, owned by its thread.
struct Observer {
    cfg: Config,
    tx: Sender<AuditEvent>,
    procs: Procs,
    files: Files,
    hashes: exec::Hashes,
    /// Traced syscalls between their seccomp stop and their exit, by tid.
    in_flight: HashMap<Pid, (syscalls::Call, [u64; 6])>,
    /// When the command started, on the clock inode times use.
    since: SystemTime,
}

/// Start the observer thread; it ends once every traced process is gone and
/// the last records are sent, dropping `tx`.
pub(crate) fn spawn(
    chan: OwnedFd,
    cfg: Config,
    tx: Sender<AuditEvent>,
    shared: SharedState,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    // Before the command can run: the writable mounts are held from here on.
    let mounts = writable::Mounts::open(cfg.init);
    std::thread::Builder::new()
        .name("airlock-observer".into())
        .spawn(move || {
            let mut obs = Observer {
                files: Files::new(mounts, cfg.max_file_bytes, tx.clone()),
                procs: Procs::new(shared.clone(), cfg.init),
                cfg,
                tx,
                hashes: exec::Hashes::default(),
                in_flight: HashMap::new(),
                since: SystemTime::now(),
            };
            // Only this thread may use ptrace on the tracees (ptrace(2)):
            // it attaches, waits and resumes.
            if let Some(backstop) = obs.attach(&chan, shared) {
                obs.trace();
                backstop.finish();
            }
            obs.files.finish(obs.since);
        })
}

/// Why the backstop for untraced tasks could not start.
#[derive(Debug, thiserror::Error)]
enum BackstopError {
    #[error("the observer cannot read the PID namespace of the sandbox's init (host pid {0})")]
    Namespace(Pid),
    #[error("the observer cannot start its backstop thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Host pid behind a pidfd (the "Pid:" line of its fdinfo, proc_pid_fdinfo(5)).
fn pid_of(pidfd: &OwnedFd) -> Option<Pid> {
    use std::os::fd::AsRawFd;
    let text =
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_fd().as_raw_fd())).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse().ok())
        .filter(|pid: &i32| *pid > 0)
        .map(Pid::from_raw)
}

impl Observer {
    /// Wait for the command to ask to be traced, attach, start the
    /// backstop for untraced tasks, and let the command go on. Without the
    /// backstop the command hears nothing back and fails closed.
    fn attach(&mut self, chan: &OwnedFd, shared: SharedState) -> Option<Backstop> {
        let Ok(Some(channel::Message::TraceMe(pidfd))) = channel::recv(chan) else {
            return None;
        };
        let pid = pid_of(&pidfd)?;
        // The command then hears nothing back and fails closed.
        sys::trace_seize(pid).ok()?;
        self.procs.tgid_of(pid);
        let backstop = match self.start_backstop(shared) {
            Ok(backstop) => backstop,
            Err(why) => {
                // Fail closed: the command is traced now, so this thread's
                // end kills it (PTRACE_O_EXITKILL) before its first
                // instruction. The record says why, not only "signal 9".
                let _ = self.tx.send(AuditEvent::Note(Note {
                    text: format!("the command was killed before it ran: {why}"),
                    policy: None,
                }));
                return None;
            }
        };
        // The session's changes start now: setup is done and nothing of
        // the command has run (it waits for this answer).
        self.since = sys::coarse_now();
        match channel::send(chan, &channel::Message::Traced) {
            Ok(()) => Some(backstop),
            Err(_) => {
                backstop.finish();
                None
            }
        }
    }

    fn start_backstop(&self, shared: SharedState) -> Result<Backstop, BackstopError> {
        // The tracer of every tracee is this thread.
        let sweep = Sweep::new(
            self.cfg.init,
            nix::unistd::gettid(),
            shared,
            self.tx.clone(),
        )
        .ok_or(BackstopError::Namespace(self.cfg.init))?;
        Backstop::start(sweep).map_err(BackstopError::Thread)
    }

    /// Handle every stop until no tracee is left.
    fn trace(&mut self) {
        while let Ok(Some((tid, status))) = sys::wait_tracee() {
            match trace::classify(status) {
                Stop::Exited { code } => self.thread_ended(tid, Some(code), None),
                Stop::Killed { signal } => self.thread_ended(tid, None, Some(signal)),
                Stop::Exec => {
                    self.on_exec(tid);
                    sys::trace_resume(tid, 0);
                }
                Stop::Fork { thread_maybe } => {
                    self.on_fork(tid, thread_maybe);
                    sys::trace_resume(tid, 0);
                }
                Stop::Seccomp => self.on_syscall_entry(tid),
                Stop::SyscallExit => {
                    self.on_syscall_exit(tid);
                    sys::trace_resume(tid, 0);
                }
                Stop::Paused => sys::trace_listen(tid),
                Stop::Event => {
                    // Most often a new child's first stop, which may come
                    // before its parent's fork event: know it from here on.
                    self.procs.tgid_of(tid);
                    sys::trace_resume(tid, 0);
                }
                Stop::Signal { signal } => {
                    let signal = match self.reaches(tid) {
                        true => signal,
                        false => 0,
                    };
                    sys::trace_resume(tid, signal);
                }
            }
        }
    }

    /// Whether the signal `tid` is stopped for may be delivered. One that a
    /// process sent to airlock's own helpers (init serving a session, the
    /// holders) is dropped: a step shares their uid, so kill(2) lets it
    /// signal them, and their stop or death would hold the session. This is
    /// what the kernel does for an untraced init (pid_namespaces(7)), and
    /// tracing takes away.
    fn reaches(&mut self, tid: Pid) -> bool {
        let tgid = self.procs.tgid_of(tid);
        !(self.procs.is_helper(tgid) && sys::trace_signal_sent_by_process(tid))
    }

    fn thread_ended(&mut self, tid: Pid, status: Option<i32>, signal: Option<i32>) {
        self.in_flight.remove(&tid);
        let Some((tgid, proc)) = self.procs.exited(tid) else {
            return;
        };
        for exec_id in proc.chain.iter().rev() {
            let _ = self.tx.send(AuditEvent::Exit(Exit {
                exec_id: exec_id.id(),
                status,
                signal,
            }));
        }
        self.files.process_gone(tgid);
    }

    fn on_fork(&mut self, tid: Pid, thread_maybe: bool) {
        let Some(child) = sys::trace_event_message(tid)
            .and_then(|m| i32::try_from(m).ok())
            .map(Pid::from_raw)
        else {
            return;
        };
        let parent = self.procs.tgid_of(tid);
        let thread = thread_maybe && crate::procfs::status(child).is_some_and(|s| s.tgid == parent);
        self.procs.forked(tid, child, thread);
        if !thread {
            // The child inherits what the parent holds now, not what it
            // once opened (a shell's `> f` is closed before its next fork).
            self.files.check_holder(parent);
            self.files.forked(parent, child);
        }
    }

    fn on_exec(&mut self, tgid: Pid) {
        let former = sys::trace_event_message(tgid)
            .and_then(|m| i32::try_from(m).ok())
            .map(Pid::from_raw)
            .unwrap_or(tgid);
        if former != tgid {
            self.in_flight.remove(&former);
        }
        // A child whose fork event has not come yet inherits its parent's exec.
        self.procs.tgid_of(tgid);
        // Close-on-exec descriptors are gone now.
        self.files.check_holder(tgid);
        let (exec_id, parent) = self.procs.exec_started(tgid, former);
        let Some(done) = exec::read(tgid, self.cfg.max_file_bytes, &mut self.hashes) else {
            return;
        };
        let ppid = if done.status.ppid == self.cfg.init {
            1
        } else {
            crate::procfs::status(done.status.ppid)
                .map(|s| s.ns_pid)
                .unwrap_or(0)
        };
        let mut env_names = Vec::with_capacity(done.env.len());
        let mut env_values_nonsecret = BTreeMap::new();
        for kv in &done.env {
            let (k, v) = match kv.iter().position(|&b| b == b'=') {
                Some(i) => (&kv[..i], &kv[i + 1..]),
                None => (kv.as_slice(), &b""[..]),
            };
            // A JSON object's keys are text: a variable whose name is not
            // UTF-8 keeps its name (in env_names) and not its value.
            if !is_secret_name(k)
                && let Ok(name) = std::str::from_utf8(k)
            {
                env_values_nonsecret.insert(name.to_owned(), OsText::from(v));
            }
            env_names.push(k.to_vec());
        }
        let path = done.path.clone();
        let _ = self.tx.send(AuditEvent::Exec(Exec {
            exec_id: exec_id.id(),
            parent_exec_id: parent.map(ExecSeq::id),
            pid: done.status.ns_pid,
            ppid,
            uid: done.status.uid,
            path: done.path.into(),
            argv: done.argv.into_iter().map(OsText::from).collect(),
            cwd: done.cwd.into(),
            env_names: env_names.into_iter().map(OsText::from).collect(),
            env_values_nonsecret,
            step: self.procs.step_of(tgid).map(|s| StepNo(s.0)),
            image: done.image,
        }));
        if let Some(captured) = done.pathless {
            self.files.emit(FileRecord {
                captured,
                ..FileRecord::now(Some(exec_id), path, FileOp::Image)
            });
        }
    }

    fn on_syscall_entry(&mut self, tid: Pid) {
        let Ok(sys::SyscallStop::Entry { nr, args }) = sys::syscall_stop(tid) else {
            sys::trace_resume(tid, 0);
            return;
        };
        let tgid = self.procs.tgid_of(tid);
        // What it let go of since its last stop is captured before it
        // changes anything else.
        self.files.check_holder(tgid);
        let viewer = Viewer { tid, tgid };
        let files = &self.files;
        let Some(mut entry) = syscalls::entry(viewer, nr, args, files.tracking(), &|key| {
            files.wants_original(key)
        }) else {
            sys::trace_resume(tid, 0);
            return;
        };
        for path in &entry.destroys {
            self.files.before_destroy(path);
        }
        if let Some(key) = entry.truncates {
            self.files.before_truncate(key);
        }
        // What a pre-existing file held, before the call changes it.
        let exec = self.procs.exec_of(tgid);
        for original in std::mem::take(&mut entry.originals) {
            self.files.keep_original(exec, original);
        }
        self.in_flight.insert(tid, (entry.call, args));
        sys::trace_to_syscall_exit(tid);
    }

    fn on_syscall_exit(&mut self, tid: Pid) {
        let Some((call, args)) = self.in_flight.remove(&tid) else {
            return;
        };
        let Ok(sys::SyscallStop::Exit { value, failed }) = sys::syscall_stop(tid) else {
            return;
        };
        if failed {
            return;
        }
        let tgid = self.procs.tgid_of(tid);
        let who = syscalls::Caller {
            tid,
            tgid,
            exec: self.procs.exec_of(tgid),
        };
        syscalls::succeeded(&mut self.files, who, call, value, args);
    }
}
