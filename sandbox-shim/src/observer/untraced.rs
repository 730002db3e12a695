//! The backstop for a task the observer does not trace: it would run
//! without a single record. The seccomp filter refuses every known way to
//! make one (`CLONE_UNTRACED`, `clone3`, `ptrace`, io_uring); this fails
//! closed for the ones nobody knows yet, and for a task put into the
//! sandbox's PID namespace from outside (setns(2) by a host process).
//!
//! A sweep lists every task of the sandbox's PID namespace from the host's
//! /proc and kills (SIGKILL, through a pidfd, so a reused pid is never hit)
//! the process of every live task whose tracer is not the observer thread,
//! then sends an [`Observation::UntracedKilled`]. It runs on a thread of its
//! own, every [`PERIOD`], from the moment the command is traced until the
//! last tracee is gone, plus once at that moment.
//!
//! What may be untraced, and why no race with the tracer's own attaching:
//! - The sandbox init (PID 1 inside) is airlock's own helper and never
//!   traced; it is the only one exempt.
//! - A child of a traced task is traced from its creation: the kernel
//!   attaches it (ptrace_init_task) under the same lock that makes its pid
//!   visible, so /proc never shows it untraced, whether or not its first
//!   stop has reached the observer yet (ptrace(2), PTRACE_O_TRACEFORK).
//! - A traced task that the observer has already reaped can stay a zombie
//!   until its real parent waits for it, with no tracer any more: zombies
//!   run nothing and are skipped.
//!
//! Cost: a task seen traced stays traced (the observer never detaches, and
//! ptrace(2) is refused in the sandbox), so it is looked up once. So is a
//! process seen outside the namespace. Both caches drop every pid a sweep
//! no longer lists, so a reused pid is looked at again: fooling them would
//! need the host's whole pid range to wrap between two sweeps.

use nix::unistd::Pid;
use std::collections::HashSet;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use airlock_record::{AuditEvent, Untraced};

use super::SharedState;
use crate::observation::ExecSeq;
use crate::{procfs, sys};

/// How often the sandbox is swept: how long a task that got past the
/// filter can run before it is killed. A sweep costs about 0.15 ms, mostly
/// waking up and listing /proc; 50 ms keeps an idle session's backstop
/// near half a percent of one core.
const PERIOD: Duration = Duration::from_millis(50);

/// A namespace's identity: the device and inode of its /proc/PID/ns link.
type NsId = (u64, u64);

fn pid_ns_of(pid: Pid) -> Option<NsId> {
    let meta = std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok()?;
    Some((meta.dev(), meta.ino()))
}

/// Is `pid` in airlock's own PID namespace? Its NSpid line (readable by
/// anyone, unlike the ns link of another user's process) has one level
/// then. The sandbox's tasks always have two or more.
fn in_our_pid_ns(pid: Pid) -> bool {
    let Some(text) = procfs::status_text(&format!("/proc/{pid}/status")) else {
        return false;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .is_some_and(|v| v.split_whitespace().count() == 1)
}

/// The fields of /proc/TGID/task/TID/status the sweep needs (proc_pid_status(5)).
#[derive(Debug, Clone, PartialEq, Eq)]
struct TaskStatus {
    /// Its name, byte for byte (/proc/.../comm; the status file's Name
    /// line is escaped).
    comm: Vec<u8>,
    state: char,
    /// The tracer's tid as the host sees it; 0 for none.
    tracer: i32,
    /// Host pid of the parent.
    ppid: Pid,
    /// pid inside the innermost PID namespace (last NSpid field).
    ns_pid: i32,
    uid: u32,
}

impl TaskStatus {
    fn parse(text: &str) -> Option<Self> {
        let mut st = Self {
            comm: Vec::new(),
            state: '?',
            tracer: -1,
            ppid: Pid::from_raw(0),
            ns_pid: 0,
            uid: 0,
        };
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let mut fields = value.split_whitespace();
            match key {
                "State" => st.state = fields.next()?.chars().next()?,
                "TracerPid" => st.tracer = fields.next()?.parse().ok()?,
                "PPid" => st.ppid = Pid::from_raw(fields.next()?.parse().ok()?),
                "NSpid" => st.ns_pid = fields.next_back()?.parse().ok()?,
                "Uid" => st.uid = fields.next()?.parse().ok()?,
                _ => {}
            }
        }
        (st.tracer >= 0).then_some(st)
    }

    fn read(tgid: Pid, tid: Pid) -> Option<Self> {
        let mut st = Self::parse(&procfs::status_text(&format!(
            "/proc/{tgid}/task/{tid}/status"
        ))?)?;
        if let Ok(mut comm) = std::fs::read(format!("/proc/{tgid}/task/{tid}/comm")) {
            if comm.last() == Some(&b'\n') {
                comm.pop();
            }
            st.comm = comm;
        }
        Some(st)
    }

    /// A zombie or a task being torn down: it runs nothing any more.
    fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Everything one sweep needs, and what it learnt from the previous ones.
pub(super) struct Sweep {
    /// The sandbox's PID namespace.
    ns: NsId,
    /// Host pid of the sandbox init, the one task that is never traced.
    init: Pid,
    /// The observer thread's tid: the TracerPid of every traced task.
    tracer: Pid,
    shared: SharedState,
    tx: Sender<AuditEvent>,
    /// Tasks (host tids) seen traced by the observer.
    traced: HashSet<Pid>,
    /// Processes (host pids) seen outside the sandbox's PID namespace.
    outside: HashSet<Pid>,
}

impl Sweep {
    /// None when the sandbox's PID namespace cannot be read (init gone).
    pub(super) fn new(
        init: Pid,
        tracer: Pid,
        shared: SharedState,
        tx: Sender<AuditEvent>,
    ) -> Option<Self> {
        Some(Self {
            ns: pid_ns_of(init)?,
            init,
            tracer,
            shared,
            tx,
            traced: HashSet::new(),
            outside: HashSet::new(),
        })
    }

    /// One pass over the host's /proc; returns how many tasks were killed.
    pub(super) fn run(&mut self) -> usize {
        let mut killed = 0;
        let mut seen_tasks = HashSet::new();
        let processes = procfs::processes();
        for &pid in &processes {
            if pid == self.init || self.outside.contains(&pid) {
                continue;
            }
            match pid_ns_of(pid) {
                Some(ns) if ns == self.ns => {}
                Some(_) => {
                    self.outside.insert(pid);
                    continue;
                }
                // Gone, a zombie, or another user's process (an unprivileged
                // airlock may not read its ns link; it can read every one
                // of the sandbox's, being root or owning its user namespace).
                None => {
                    if in_our_pid_ns(pid) {
                        self.outside.insert(pid);
                    }
                    continue;
                }
            }
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for task in tasks.flatten() {
                let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                    continue;
                };
                let tid = Pid::from_raw(tid);
                seen_tasks.insert(tid);
                if self.traced.contains(&tid) {
                    continue;
                }
                match TaskStatus::read(pid, tid) {
                    Some(st) if st.tracer == self.tracer.as_raw() => {
                        self.traced.insert(tid);
                    }
                    Some(st) if !st.is_dead() && self.kill(pid, tid) => {
                        self.report(pid, tid, &st);
                        killed += 1;
                    }
                    _ => {}
                }
            }
        }
        let listed: HashSet<Pid> = processes.into_iter().collect();
        self.outside.retain(|p| listed.contains(p));
        self.traced.retain(|t| seen_tasks.contains(t));
        killed
    }

    /// SIGKILL the process `tgid` if, once we hold a pidfd on it, it is
    /// still in the sandbox and its task `tid` still live and untraced.
    ///
    /// Both are read again after the pidfd is open: the pid may have been
    /// freed and handed to a host process, or to another sandbox's traced
    /// one, since the sweep listed it. While the process behind the pidfd
    /// lives (a zombie included) nothing else can hold its pid, so what is
    /// read names it; if it is gone, the kill fails and hits nobody.
    fn kill(&self, tgid: Pid, tid: Pid) -> bool {
        let Ok(pidfd) = sys::pidfd_open(tgid) else {
            return false;
        };
        let inside = pid_ns_of(tgid) == Some(self.ns);
        let untraced = || {
            TaskStatus::read(tgid, tid)
                .is_some_and(|st| st.tracer != self.tracer.as_raw() && !st.is_dead())
        };
        inside && untraced() && sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL).is_ok()
    }

    fn report(&self, tgid: Pid, tid: Pid, st: &TaskStatus) {
        let thread = tid != tgid;
        let ppid = if st.ppid == self.init {
            1
        } else if pid_ns_of(st.ppid) == Some(self.ns) {
            procfs::status(st.ppid).map(|s| s.ns_pid).unwrap_or(0)
        } else {
            0
        };
        // A thread belongs to its own process's exec; a process, until it
        // execs, to its parent's.
        let responsible = if thread { tgid } else { st.ppid };
        let exec_id = self
            .shared
            .lock()
            .ok()
            .and_then(|s| s.procs.get(&responsible).map(|p| p.exec));
        let _ = self.tx.send(AuditEvent::Untraced(Untraced {
            exec_id: exec_id.map(ExecSeq::id),
            pid: st.ns_pid,
            ppid,
            uid: st.uid,
            comm: st.comm.clone().into(),
        }));
    }
}

/// The sweeping thread; [`Backstop::finish`] stops it after a last sweep.
pub(super) struct Backstop {
    stop: Sender<()>,
    thread: std::thread::JoinHandle<Sweep>,
}

impl Backstop {
    /// Sweep every [`PERIOD`] on a thread of its own until `finish`.
    pub(super) fn start(mut sweep: Sweep) -> std::io::Result<Self> {
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("airlock-backstop".into())
            .spawn(move || {
                sweep.run();
                wait_and_sweep(&mut sweep, &stopped);
                sweep
            })?;
        Ok(Self { stop, thread })
    }

    /// Stop sweeping, then sweep once more: a task that outlived every
    /// traced one is still found.
    pub(super) fn finish(self) {
        drop(self.stop);
        if let Ok(mut sweep) = self.thread.join() {
            sweep.run();
        }
    }
}

fn wait_and_sweep(sweep: &mut Sweep, stopped: &Receiver<()>) {
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(PERIOD) {
        sweep.run();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sweep listed a pid in the sandbox, and by the time it kills,
    /// the pid names a process outside it (freed and reused): that one
    /// lives. Here the "sandbox" is a namespace no process is in, so every
    /// process is such a stranger.
    #[test]
    fn a_pid_that_now_names_a_process_outside_the_sandbox_is_not_killed() {
        let mut stranger = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = Pid::from_raw(stranger.id() as i32);
        let (tx, _rx) = std::sync::mpsc::channel();
        let sweep = Sweep {
            ns: (0, 0),
            init: Pid::from_raw(1),
            tracer: nix::unistd::gettid(),
            shared: SharedState::default(),
            tx,
            traced: HashSet::new(),
            outside: HashSet::new(),
        };
        assert!(!sweep.kill(pid, pid));
        assert_eq!(stranger.try_wait().expect("wait"), None, "still running");
        // The same process, taken for one inside: killed (the check above
        // is the namespace's, not a kill that fails anyway).
        let inside = Sweep {
            ns: pid_ns_of(pid).expect("its namespace"),
            ..sweep
        };
        assert!(inside.kill(pid, pid));
        let status = stranger.wait().expect("wait");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
    }

    #[test]
    fn a_status_gives_the_tracer_state_and_parent() {
        let text = "Name:\tmy prog: x\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t7\n\
                    Pid:\t7\nPPid:\t3\nTracerPid:\t0\nUid:\t65534\t65534\t65534\t65534\n\
                    NSpid:\t7\t4\n";
        let st = TaskStatus::parse(text).expect("parsed");
        assert_eq!((st.state, st.tracer, st.ns_pid, st.uid), ('S', 0, 4, 65534));
        assert_eq!(st.ppid.as_raw(), 3);
        assert!(!st.is_dead());
        let zombie = text.replace("S (sleeping)", "Z (zombie)");
        assert!(TaskStatus::parse(&zombie).unwrap().is_dead());
        // Without TracerPid nothing can be said: not read as "untraced".
        assert_eq!(TaskStatus::parse("Name:\tx\nState:\tR\n"), None);
    }
}
