//! Which program each traced process runs: every thread we trace maps to its
//! process (thread group), every process to the exec responsible for it,
//! its own or, until it execs, its parent's.

use nix::unistd::Pid;
use std::collections::HashMap;

use super::{Published, SharedState};
use crate::observation::ExecSeq;
use crate::procfs;
use crate::step::{self, StepId};

/// One traced process (keyed by its host tgid).
#[derive(Debug, Default)]
pub(super) struct Proc {
    /// Its current exec (inherited from the parent until it execs itself).
    pub exec: Option<ExecSeq>,
    /// Every exec this process went through itself, oldest first; they all
    /// end with it.
    pub chain: Vec<ExecSeq>,
    /// The session step it belongs to, inherited like `exec`.
    pub step: Option<StepId>,
    /// One of airlock's own processes in the sandbox: init serving a
    /// session's steps, or a holder it forked. Never inherited.
    pub helper: bool,
}

#[derive(Debug)]
pub(super) struct Procs {
    procs: HashMap<Pid, Proc>,
    /// Host tid -> host tgid, for every traced thread that is not a leader.
    threads: HashMap<Pid, Pid>,
    next_exec: u64,
    shared: SharedState,
    /// Host pid of the sandbox's init.
    init: Pid,
}

impl Procs {
    pub(super) fn new(shared: SharedState, init: Pid) -> Self {
        Self {
            procs: HashMap::new(),
            threads: HashMap::new(),
            next_exec: 1,
            shared,
            init,
        }
    }

    fn publish(&self, tgid: Pid) {
        if let Ok(mut s) = self.shared.lock() {
            let published = self
                .procs
                .get(&tgid)
                .and_then(|p| p.exec.map(|exec| Published { exec, step: p.step }));
            match published {
                Some(published) => s.procs.insert(tgid, published),
                None => s.procs.remove(&tgid),
            };
        }
    }

    /// The process `tid` belongs to, registering a thread or process we had
    /// not heard of (a new child can stop before its parent's fork event).
    pub(super) fn tgid_of(&mut self, tid: Pid) -> Pid {
        if self.procs.contains_key(&tid) {
            return tid;
        }
        if let Some(tgid) = self.threads.get(&tid) {
            return *tgid;
        }
        let status = procfs::status(tid);
        let tgid = status.map(|s| s.tgid).unwrap_or(tid);
        if tgid != tid {
            self.threads.insert(tid, tgid);
            return tgid;
        }
        let exec = status
            .and_then(|s| self.procs.get(&s.ppid))
            .and_then(|p| p.exec);
        let step = status.and_then(|s| self.step_for_child_of(s.ppid));
        self.procs.insert(
            tgid,
            Proc {
                exec,
                chain: Vec::new(),
                step,
                // Init asks to be traced itself when it serves a session.
                helper: tgid == self.init,
            },
        );
        self.publish(tgid);
        tgid
    }

    pub(super) fn exec_of(&self, tgid: Pid) -> Option<ExecSeq> {
        self.procs.get(&tgid).and_then(|p| p.exec)
    }

    /// Whether `tgid` is one of airlock's helpers (see [`Proc::helper`]).
    pub(super) fn is_helper(&self, tgid: Pid) -> bool {
        self.procs.get(&tgid).is_some_and(|p| p.helper)
    }

    pub(super) fn step_of(&self, tgid: Pid) -> Option<StepId> {
        self.procs.get(&tgid).and_then(|p| p.step)
    }

    /// The step a new child of `parent` (a tgid) belongs to: the parent's
    /// own, or, for a parent with none, the step whose holder the parent is
    /// (its name, set before it forks the step's command). A process that
    /// belongs to a step keeps it whatever it renames itself to.
    fn step_for_child_of(&self, parent: Pid) -> Option<StepId> {
        if let Some(step) = self.step_of(parent) {
            return Some(step);
        }
        let comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).ok()?;
        step::step_of_holder_name(&comm)
    }

    /// `parent` (a tid) created `child`: a thread of the same process, or a
    /// new process running its parent's exec until it execs itself.
    pub(super) fn forked(&mut self, parent: Pid, child: Pid, thread: bool) {
        let ptgid = self.tgid_of(parent);
        if thread {
            self.procs.remove(&child);
            self.threads.insert(child, ptgid);
            return;
        }
        let exec = self.exec_of(ptgid);
        let step = self.step_for_child_of(ptgid);
        // Only what init itself forks is a helper (a holder): by the fork
        // event, never by a parent pid, which an orphan's child made with
        // CLONE_PARENT would share.
        let helper = ptgid == self.init && self.is_helper(ptgid);
        let entry = self.procs.entry(child).or_default();
        entry.helper = helper;
        if entry.chain.is_empty() {
            entry.exec = exec;
        }
        if entry.step.is_none() {
            entry.step = step;
        }
        self.publish(child);
    }

    /// Process `tgid` has just exec'd (its former thread `former` is gone):
    /// a new exec id, and the exec it descends from (this process's previous
    /// image, or the one it inherited).
    pub(super) fn exec_started(&mut self, tgid: Pid, former: Pid) -> (ExecSeq, Option<ExecSeq>) {
        if former != tgid {
            self.threads.remove(&former);
        }
        // execve(2) ends every other thread of the process.
        self.threads.retain(|_, t| *t != tgid);
        let id = ExecSeq(self.next_exec);
        self.next_exec += 1;
        let proc = self.procs.entry(tgid).or_default();
        let parent = proc.exec;
        proc.exec = Some(id);
        proc.chain.push(id);
        self.publish(tgid);
        (id, parent)
    }

    /// Thread `tid` is gone; when it was a process's leader, that process is
    /// gone and is returned (its exec chain ends now).
    pub(super) fn exited(&mut self, tid: Pid) -> Option<(Pid, Proc)> {
        if self.threads.remove(&tid).is_some() {
            return None;
        }
        let proc = self.procs.remove(&tid)?;
        self.threads.retain(|_, t| *t != tid);
        if let Ok(mut s) = self.shared.lock() {
            s.procs.remove(&tid);
        }
        Some((tid, proc))
    }
}
