//! `--isolation gvisor`: the command runs under gVisor's `runsc`, a second
//! kernel in user space, inside the network namespace of a namespace
//! sandbox that runs nothing itself. That sandbox keeps what it always
//! gave: the network namespace whose nftables send every TCP connection and
//! DNS query to the proxy, the observer's reconcile of the writable mounts
//! at the end, and the session's timeout. runsc (`--network=host`) makes
//! the sentry's sockets in that namespace, so the proxy captures them as it
//! captures a namespace sandbox's (docs/isolation.md says why).

mod bundle;
mod files;
mod points;
mod session;
mod sink;

pub(crate) use files::Recorded;
pub(crate) use session::GvisorSession;

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_auditor::SessionRecorder;
use airlock_shim::{ExitKind, Outcome, SandboxSpec};
use anyhow::{Context, bail};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use sink::Sink;

/// How often the wait looks at runsc while the sandbox lives.
const WAIT_TICK_MS: u16 = 20;

/// runsc on PATH, or the one-line refusal that says how to get it.
pub(crate) fn find_runsc() -> anyhow::Result<PathBuf> {
    find_on_path("runsc").context(
            "--isolation gvisor needs gVisor's runsc on PATH: install the Debian package runsc (apt-get install runsc), or use --isolation namespaces",
        )
}

/// The first file called `name` in a directory of PATH.
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// What runs under runsc, set aside when the plan is made: the namespace
/// sandbox gets no command and no stdio of the caller's.
pub(crate) struct GvisorRun {
    runsc: PathBuf,
    command: Vec<OsString>,
    /// The filesystem view, limits and identity (its `stdio` is None).
    spec: SandboxSpec,
    /// The command's stdin, stdout and stderr (pipes to the recorder), or
    /// None to inherit airlock's.
    stdio: Option<[OwnedFd; 3]>,
    /// The files the trace points put on record, which the reconcile
    /// need not repeat.
    recorded: Recorded,
}

impl GvisorRun {
    pub(crate) fn new(runsc: PathBuf, spec: &SandboxSpec) -> Self {
        let mut spec = spec.clone();
        spec.stdio = None;
        Self {
            runsc,
            command: std::mem::take(&mut spec.command),
            spec,
            stdio: None,
            recorded: Recorded::default(),
        }
    }

    /// What the trace points recorded, for the reconcile's records to be
    /// checked against.
    pub(crate) fn recorded(&self) -> Recorded {
        self.recorded.clone()
    }

    pub(crate) fn set_stdio(&mut self, stdio: [OwnedFd; 3]) {
        self.stdio = Some(stdio);
    }

    /// Runs the command in the network namespace of the sandbox whose
    /// init is `init` until it exits, the timeout passes, or that sandbox
    /// ends (airlock was told to stop); then removes every trace of runsc.
    /// With a `recorder`, every exec inside gVisor goes on record from
    /// gVisor's own trace points.
    pub(crate) fn run(
        self,
        init: i32,
        recorder: Option<&SessionRecorder>,
    ) -> anyhow::Result<Outcome> {
        let (container, mut runsc) = Container::prepare(&self, &self.command, init, recorder)?;
        runsc
            .arg("--bundle")
            .arg(container.bundle())
            .arg(container.id());
        if let Some([stdin, stdout, stderr]) = self.stdio {
            runsc
                .stdin(Stdio::from(stdin))
                .stdout(Stdio::from(stdout))
                .stderr(Stdio::from(stderr));
        }
        let result = runsc
            .spawn()
            .context("starting runsc")
            .and_then(|child| wait(child, init, self.spec.limits.timeout));
        // Whatever happened: no sandbox of ours outlives the session, and
        // every point the sandbox sent is on record before it ends.
        container.remove();
        let (status, timed_out) = result?;
        Ok(Outcome::of_external(
            status,
            timed_out,
            self.spec.limits.timeout,
        ))
    }
}

/// One runsc container of ours: its private state directory (bundle and
/// runsc's root), the trace sink's thread, and its removal.
pub(super) struct Container {
    runsc: PathBuf,
    state: TempDir,
    root: PathBuf,
    id: String,
    ended: Arc<AtomicBool>,
    /// Set by the first `remove`: the rest find nothing to do.
    removed: AtomicBool,
    tracing: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Container {
    /// The bundle for `command` in the network namespace of `init`, the
    /// trace sink listening when there is a `recorder`, and the `runsc
    /// ... run` command line up to its `--bundle` (the caller adds its
    /// own flags, the bundle and the id).
    fn prepare(
        run: &GvisorRun,
        command: &[OsString],
        init: i32,
        recorder: Option<&SessionRecorder>,
    ) -> anyhow::Result<(Self, Command)> {
        let state = TempDir::new()?;
        let bundle_dir = state.path().join("bundle");
        let root = state.path().join("root");
        std::fs::create_dir_all(&root).context("creating runsc's state directory")?;
        let netns = PathBuf::from(format!("/proc/{init}/ns/net"));
        bundle::write(&bundle_dir, &run.spec, command, &netns)?;
        let id = format!("airlock-{}", crate::random_id::random_id()?);
        let mut runsc = Command::new(&run.runsc);
        runsc.arg(format!("--root={}", root.display()));
        let ended = Arc::new(AtomicBool::new(false));
        let tracing = match recorder {
            Some(recorder) => {
                let socket = state.path().join("trace.sock");
                let config = state.path().join("pod-init.json");
                let sink = Sink::listen(&socket)?;
                // File operations are followed when the observer records
                // files (its max_file_bytes is the content cap).
                let files = run.spec.observe.as_ref().map(|observe| {
                    let roots = files::writable_roots(&run.spec.workspace, &run.spec.rw);
                    sink::Files {
                        tree: files::Tree::scan(roots, observe.max_file_bytes),
                        recorded: run.recorded.clone(),
                    }
                });
                if files.as_ref().is_some_and(|f| !f.tree.followed()) {
                    recorder.record(airlock_auditor::AuditEvent::Note(airlock_auditor::Note {
                        text: "the writable mounts hold too many files to follow under gVisor: files are recorded by the reconcile at the end only".into(),
                        policy: None,
                    }))?;
                }
                let config_json = Sink::pod_init_config(&socket, files.is_some());
                std::fs::write(&config, config_json.to_string())
                    .context("writing runsc's pod init config")?;
                runsc.arg(format!("--pod-init-config={}", config.display()));
                Some(sink.record(recorder.clone(), ended.clone(), files))
            }
            None => None,
        };
        runsc.arg("--network=host").arg("run");
        let container = Self {
            runsc: run.runsc.clone(),
            state,
            root,
            id,
            ended,
            removed: AtomicBool::new(false),
            tracing: std::sync::Mutex::new(tracing),
        };
        Ok((container, runsc))
    }

    fn bundle(&self) -> PathBuf {
        self.state.path().join("bundle")
    }

    fn id(&self) -> &str {
        &self.id
    }

    /// Where per-step files (process specs, pid files) are kept.
    fn state(&self) -> &Path {
        self.state.path()
    }

    /// runsc with this container's state root, for a subcommand.
    fn runsc(&self) -> Command {
        let mut runsc = Command::new(&self.runsc);
        runsc
            .arg(format!("--root={}", self.root.display()))
            .stdin(Stdio::null());
        runsc
    }

    /// Deletes the container whatever its state (killing all it runs),
    /// then waits for the trace sink to have put every point on record.
    fn remove(&self) {
        if self.removed.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = self
            .runsc()
            .args(["delete", "--force", &self.id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        self.ended.store(true, Ordering::Release);
        let tracing = self.tracing.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = tracing {
            let _ = thread.join();
        }
        // A session's container is held in an Arc that may never drop.
        self.state.remove();
    }
}

/// runsc's exit, and whether the timeout ended it. The sandbox's init
/// dying first (a stop signal to airlock, an audit failure) ends runsc too.
fn wait(
    mut child: Child,
    init: i32,
    timeout: Option<Duration>,
) -> anyhow::Result<(ExitKind, bool)> {
    let init_fd = airlock_shim::pidfd_open(nix::unistd::Pid::from_raw(init))
        .context("watching the sandbox's init")?;
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut timed_out = false;
    loop {
        if let Some(status) = child.try_wait().context("waiting for runsc")? {
            return Ok((exit_kind(status), timed_out));
        }
        let past_deadline = deadline.is_some_and(|d| Instant::now() >= d);
        let mut fds = [PollFd::new(init_fd.as_fd(), PollFlags::POLLIN)];
        let init_ended = poll(&mut fds, PollTimeout::from(WAIT_TICK_MS))
            .map(|n| n > 0)
            .unwrap_or(false);
        if (past_deadline || init_ended) && !timed_out {
            timed_out = past_deadline;
            child.kill().context("stopping runsc")?;
        }
    }
}

fn exit_kind(status: std::process::ExitStatus) -> ExitKind {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitKind::Exited(code),
        (None, Some(sig)) => ExitKind::Signaled(sig),
        (None, None) => ExitKind::Exited(1),
    }
}

/// A private directory for the bundle and runsc's state, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<Self> {
        let base =
            std::env::temp_dir().join(format!("airlock-gvisor-{}", crate::random_id::random_id()?));
        std::fs::create_dir(&base).map_err(|e| {
            anyhow::anyhow!(
                "creating runsc's state directory {}: {e}; set TMPDIR to a writable directory",
                base.display()
            )
        })?;
        // Only root (airlock) reads runsc's state and the bundle.
        std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        Ok(Self(base))
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        self.remove();
    }
}

/// What OCI's config (JSON text) cannot say, refused before the session
/// starts: the command's arguments and the mounts' paths must be UTF-8.
/// The bundle checks every name again as it writes the config; refused
/// there, a session would stay on record as unfinished for a command
/// that never ran.
pub(crate) fn refuse_unsayable<'a>(
    command: &[OsString],
    paths: impl IntoIterator<Item = &'a Path>,
) -> anyhow::Result<()> {
    for arg in command {
        bundle::argument_text(arg)?;
    }
    for path in paths {
        bundle::path_text(path)?;
    }
    Ok(())
}

/// What --isolation gvisor cannot mean the same way, refused up front.
pub(crate) fn refuse_unmatched(tty: bool, pids: Option<u64>) -> anyhow::Result<()> {
    if pids.is_some() {
        bail!(
            "--pids cannot mean the same under --isolation gvisor: the cgroup would count gVisor's own threads (its kernel runs as host threads), not the command's processes; leave --pids out (--memory and --cpus bound the whole sandbox), or use --isolation namespaces"
        );
    }
    if tty {
        bail!(
            "--isolation gvisor cannot run the command on a pseudo-terminal yet (runsc would need its console socket); use --no-tty, or --isolation namespaces"
        );
    }
    Ok(())
}
