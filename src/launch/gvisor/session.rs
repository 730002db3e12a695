//! A live session under gVisor: one long-lived runsc container holds the
//! session (its first process only waits, so the sandbox, its filesystem
//! view and its trace-point session live as long as the session does), and
//! each step is a `runsc exec` into it with the step's own argv,
//! environment, working directory and stdio. The step's end is runsc exec's
//! end; a kill stops then kills the step's whole process tree inside the
//! sentry; the session's end deletes the container whatever happened.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use airlock_auditor::SessionRecorder;
use airlock_shim::{ExitKind, SandboxSpec, StepEvent, StepId, StepRequest, StepStdio};
use anyhow::{Context, bail};

use super::{Container, GvisorRun, bundle, exit_kind};

/// The session's first process, PID 1 of gVisor's kernel: it holds the
/// container and reaps what steps leave (orphans are reparented to it, and
/// the shell's `wait` takes any child's end, wait3(2)), so a killed step's
/// processes are gone, not zombies.
const HOLDER: [&str; 3] = ["/bin/sh", "-c", "sleep infinity & wait"];
/// What each step's command is started through (see `exec`).
const STEP_LAUNCHER: &str = "/usr/bin/env";
/// How long runsc may take to start the session's container.
const RUNNING_WITHIN: Duration = Duration::from_secs(30);
/// How long a kill waits for runsc to say which process a step's is.
const PID_WITHIN: Duration = Duration::from_secs(2);
/// Rounds of "stop every process of the tree, look again" before the kill:
/// a stopped process cannot fork, so the tree stops growing.
const STOP_ROUNDS: usize = 4;

/// A live session's runsc container, taking steps.
pub(crate) struct GvisorSession {
    container: Container,
    /// The filesystem view and identity every step shares.
    spec: SandboxSpec,
    events: Mutex<Sender<StepEvent>>,
    /// Each running step's pid file (runsc writes the sentry's pid of the
    /// step's first process there).
    pid_files: Mutex<HashMap<StepId, PathBuf>>,
    /// `runsc run`, in the foreground: reaped when the session stops.
    holder: Mutex<Option<Child>>,
}

impl GvisorSession {
    /// Starts the holder in the network namespace of the sandbox whose init
    /// is `init`; each step's end is said on `events`. With a `recorder`,
    /// every exec and file operation of every step goes on record from the
    /// one trace-point session of the container.
    pub(crate) fn start(
        run: GvisorRun,
        init: i32,
        recorder: Option<&SessionRecorder>,
        events: Sender<StepEvent>,
    ) -> anyhow::Result<Self> {
        let holder: Vec<OsString> = HOLDER.iter().map(OsString::from).collect();
        let (container, runsc) = Container::prepare(&run, &holder, init, recorder)?;
        let said = container.state().join("runsc-run.err");
        let said_file = std::fs::File::create(&said).context("creating runsc's error file")?;
        // runsc in the foreground, airlock's child, not `--detach`ed: its
        // sandbox dies with it, and with setpriv's PR_SET_PDEATHSIG it dies
        // with this thread, so even a server killed outright leaves no
        // container running.
        let setpriv = super::find_on_path("setpriv").context(
            "a live session under --isolation gvisor needs setpriv, so that runsc dies with airlock: install the Debian package util-linux",
        )?;
        let mut command = Command::new(setpriv);
        command.args(["--pdeathsig", "KILL", "--"]);
        command.arg(runsc.get_program()).args(runsc.get_args());
        command
            .arg("--bundle")
            .arg(container.bundle())
            .arg(container.id())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(said_file));
        let child = command.spawn().context("starting runsc for the session")?;
        let session = Self {
            container,
            spec: run.spec,
            events: Mutex::new(events),
            pid_files: Mutex::new(HashMap::new()),
            holder: Mutex::new(Some(child)),
        };
        // Dropped on failure: the container is deleted.
        session.wait_running(&said)?;
        Ok(session)
    }

    /// Until runsc says the holder runs; the reason runsc gave if it ended.
    fn wait_running(&self, said: &Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + RUNNING_WITHIN;
        loop {
            let ended = self
                .holder
                .lock()
                .ok()
                .and_then(|mut h| h.as_mut().and_then(|c| c.try_wait().ok().flatten()));
            if ended.is_some() {
                let said = std::fs::read_to_string(said).unwrap_or_default();
                bail!(
                    "runsc could not start the session's container: {}",
                    said.lines().last().unwrap_or("no reason given").trim()
                );
            }
            let state = self
                .container
                .runsc()
                .arg("state")
                .arg(self.container.id())
                .stderr(Stdio::null())
                .output()
                .context("asking runsc for the container's state")?;
            if String::from_utf8_lossy(&state.stdout).contains("\"running\"") {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "runsc did not start the session's container within {}s: check system load",
                    RUNNING_WITHIN.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs one step: `runsc exec` with the step's process spec and stdio.
    /// Returns once it is started; its end arrives as a [`StepEvent`].
    pub(crate) fn exec(&self, request: &StepRequest, stdio: StepStdio) -> anyhow::Result<()> {
        let step = request.step;
        let StepStdio::Pipes([stdin, stdout, stderr]) = stdio else {
            bail!(
                "a terminal step (-t) cannot run under --isolation gvisor yet: runsc exec would need its console socket relayed; run it without -t, or start the session with --isolation namespaces"
            );
        };
        if request.argv.is_empty() {
            bail!("no command given: pass one after `--`");
        }
        let cwd = match &request.cwd {
            Some(cwd) => self.spec.workspace.join(cwd),
            None => self.spec.workspace.clone(),
        };
        // runsc exec's first process is started by gVisor's kernel without
        // an execve, so no trace point names it: env's execve of the
        // step's command (PATH searched as the step's environment says) is
        // one, and puts it on record.
        let argv: Vec<OsString> = [OsString::from(STEP_LAUNCHER), OsString::from("--")]
            .into_iter()
            .chain(request.argv.iter().cloned())
            .collect();
        let process = bundle::step_process(&self.spec, &argv, &request.env, &cwd)?;
        // In the private state directory: the environment never shows on
        // a host command line.
        let spec_file = self.container.state().join(format!("step-{}.json", step.0));
        let pid_file = self.container.state().join(format!("step-{}.pid", step.0));
        std::fs::write(&spec_file, process.to_string())
            .context("writing the step's process for runsc")?;
        let child = self
            .container
            .runsc()
            .arg("exec")
            .arg(format!("--process={}", spec_file.display()))
            .arg(format!("--internal-pid-file={}", pid_file.display()))
            .arg(self.container.id())
            .stdin(Stdio::from(stdin))
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr))
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_file(&spec_file);
                return Err(e).context("starting runsc exec");
            }
        };
        self.pid_files().insert(step, pid_file.clone());
        let events = self.events.lock().map(|e| e.clone());
        let events = events.map_err(|_| anyhow::anyhow!("the session's step events are gone"))?;
        std::thread::Builder::new()
            .name(format!("airlock-gv-{}", step.0))
            .spawn(move || {
                let status = wait_step(child);
                let _ = std::fs::remove_file(&spec_file);
                let _ = events.send(StepEvent::Exited { step, status });
            })
            .context("starting the step's waiter")?;
        Ok(())
    }

    /// SIGKILL the step's whole tree inside the sentry: every process is
    /// stopped first, round by round, so none forks out of reach; then all
    /// are killed. On a thread of its own: runsc takes milliseconds per call.
    pub(crate) fn kill(self: &std::sync::Arc<Self>, step: StepId) {
        let session = self.clone();
        let _ = std::thread::Builder::new()
            .name("airlock-gv-kill".into())
            .spawn(move || session.kill_tree(step));
    }

    /// Send `signal` to every process of the step's tree (Ctrl-C forwarding).
    pub(crate) fn signal(self: &std::sync::Arc<Self>, step: StepId, signal: i32) {
        let session = self.clone();
        let _ = std::thread::Builder::new()
            .name("airlock-gv-signal".into())
            .spawn(move || {
                let Some(root) = session.pid_of(step) else {
                    return;
                };
                let tree = tree_of(&session.table(), root);
                session.signal_all(&tree, &signal.to_string());
            });
    }

    /// The step has ended: it has no pid to kill any more.
    pub(crate) fn ended(&self, step: StepId) {
        if let Some(file) = self.pid_files().remove(&step) {
            let _ = std::fs::remove_file(file);
        }
    }

    /// Deletes the container (and everything still running in it), then
    /// waits until every trace point is on record. Idempotent.
    pub(crate) fn stop(&self) {
        // The holder killed first (runsc's own delete of a container whose
        // runsc runs in the foreground waits seconds for it); its end is
        // the container's, and runsc run returns.
        let holder = self.holder.lock().ok().and_then(|mut h| h.take());
        if let Some(mut holder) = holder {
            let _ = self
                .container
                .runsc()
                .args(["kill", "--all", self.container.id(), "KILL"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = holder.wait();
        }
        self.container.remove();
    }

    fn kill_tree(&self, step: StepId) {
        let Some(root) = self.pid_of(step) else {
            return;
        };
        let mut stopped = BTreeSet::new();
        for _ in 0..STOP_ROUNDS {
            let tree = tree_of(&self.table(), root);
            let new: Vec<i32> = tree.difference(&stopped).copied().collect();
            if new.is_empty() {
                break;
            }
            self.signal_all(&new.iter().copied().collect(), "STOP");
            stopped.extend(new);
        }
        self.signal_all(&stopped, "KILL");
    }

    /// The step's first process, by the sentry's numbering.
    fn pid_of(&self, step: StepId) -> Option<i32> {
        let file = self.pid_files().get(&step).cloned()?;
        let deadline = Instant::now() + PID_WITHIN;
        loop {
            if let Some(pid) = std::fs::read_to_string(&file)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                return Some(pid);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every process in the container: (pid, parent pid), from `runsc ps`.
    fn table(&self) -> Vec<(i32, i32)> {
        let output = self
            .container
            .runsc()
            .arg("ps")
            .arg(self.container.id())
            .stderr(Stdio::null())
            .output();
        let Ok(output) = output else {
            return Vec::new();
        };
        parse_ps(&String::from_utf8_lossy(&output.stdout))
    }

    /// One `runsc kill --pid` per process, all at once.
    fn signal_all(&self, pids: &BTreeSet<i32>, signal: &str) {
        let children: Vec<Child> = pids
            .iter()
            .filter_map(|pid| {
                self.container
                    .runsc()
                    .arg("kill")
                    .arg(format!("--pid={pid}"))
                    .arg(self.container.id())
                    .arg(signal)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .ok()
            })
            .collect();
        for mut child in children {
            let _ = child.wait();
        }
    }

    fn pid_files(&self) -> std::sync::MutexGuard<'_, HashMap<StepId, PathBuf>> {
        self.pid_files.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for GvisorSession {
    fn drop(&mut self) {
        self.stop();
    }
}

/// runsc exec's exit is the step's: its status, or 128 + the signal that
/// killed it (runsc says a signal no other way; a command that exits 129
/// to 192 itself reads as killed by a signal).
fn wait_step(mut child: Child) -> ExitKind {
    match child.wait() {
        Ok(status) => match exit_kind(status) {
            ExitKind::Exited(code) if (129..=192).contains(&code) => ExitKind::Signaled(code - 128),
            other => other,
        },
        Err(_) => ExitKind::Exited(i32::from(crate::exit::RUN_FAILED)),
    }
}

/// `runsc ps`'s table: `UID PID PPID C TTY STIME TIME CMD`.
fn parse_ps(table: &str) -> Vec<(i32, i32)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace().skip(1);
            let pid = fields.next()?.parse().ok()?;
            let ppid = fields.next()?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// `root` and every process descended from it, when it is still there.
fn tree_of(table: &[(i32, i32)], root: i32) -> BTreeSet<i32> {
    let mut tree = BTreeSet::new();
    if !table.iter().any(|(pid, _)| *pid == root) {
        return tree;
    }
    tree.insert(root);
    loop {
        let before = tree.len();
        for (pid, ppid) in table {
            if tree.contains(ppid) {
                tree.insert(*pid);
            }
        }
        if tree.len() == before {
            return tree;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steps_tree_is_its_process_and_every_descendant_but_nothing_else() {
        let table = parse_ps(
            "UID PID PPID C TTY STIME TIME CMD\n\
             0 1 0 0 ? 00:33 0s sleep\n\
             0 5 0 0 ? 00:33 0s sh\n\
             0 6 5 0 ? 00:33 0s sleep\n\
             0 9 6 0 ? 00:33 0s sleep\n\
             0 7 0 0 ? 00:33 0s sh\n\
             0 8 1 0 ? 00:33 0s orphan\n",
        );
        assert_eq!(tree_of(&table, 5), BTreeSet::from([5, 6, 9]));
        assert_eq!(tree_of(&table, 7), BTreeSet::from([7]));
        assert!(tree_of(&table, 42).is_empty(), "an ended step has no tree");
    }
}
