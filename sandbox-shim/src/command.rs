//! The command process: drops identity and capabilities, asks to be traced
//! when observed, installs seccomp and execs. What fails here is told on the
//! command's own stderr, with a shell's exit code: airlock is not listening
//! on the control channel for it any more. `airlock run`'s command and each
//! step of a session (`launcher.rs`) go the same way.

use std::ffi::{CString, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sched::{CloneFlags, unshare};
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;
use nix::unistd::{AccessFlags, Gid, Uid, access};

use crate::channel::{self, ChannelError, Message};
use crate::idmap::{IdMapError, write_id_maps};
use crate::plan::{Identity, Plan};
use crate::sys;

/// Why the command could not be started. It says so on its stderr (the
/// only place left to say it) and exits with the code a shell would use.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    #[error("sandbox setup failed: {0}")]
    Setup(#[from] SetupStepError),
    #[error("{name}: command not found")]
    NotFound { name: String },
    #[error("{}: command not found in the sandbox PATH", .name.display())]
    NotInPath { name: PathBuf },
    #[error("PATH entry contains a NUL byte")]
    NulInPath,
    #[error("{name}: cannot execute: {source}")]
    CannotExecute {
        name: String,
        #[source]
        source: Errno,
    },
    #[error("{name}: cannot execute")]
    ExecReturned { name: String },
    #[error("cannot change to directory {}: {source}: pass a directory that exists in the sandbox", .path.display())]
    Cwd {
        path: PathBuf,
        #[source]
        source: Errno,
    },
}

impl CommandError {
    /// 125 when the sandbox failed, 126 when the program cannot run, 127 when
    /// it is not there (the codes of sh(1), "Exit Status", and of env(1)).
    fn exit_code(&self) -> i32 {
        match self {
            Self::Setup(_) | Self::Cwd { .. } => 125,
            Self::CannotExecute { .. } | Self::ExecReturned { .. } => 126,
            Self::NotFound { .. } | Self::NotInPath { .. } | Self::NulInPath => 127,
        }
    }
}

/// The step of the command's own setup that failed. The text is the
/// kernel's answer alone, as the command has always printed it.
#[derive(Debug, thiserror::Error)]
enum SetupStepError {
    #[error("attach the terminal: {0}")]
    AttachTerminal(#[source] std::io::Error),
    #[error(transparent)]
    Rlimit(Errno),
    #[error(transparent)]
    Capabilities(std::io::Error),
    #[error(transparent)]
    SwitchUser(Errno),
    #[error(transparent)]
    UserNamespace(Errno),
    #[error(transparent)]
    IdMap(#[from] IdMapError),
    #[error(transparent)]
    NoNewPrivs(Errno),
    #[error(transparent)]
    Seccomp(std::io::Error),
    #[error(transparent)]
    Pidfd(std::io::Error),
    #[error(transparent)]
    Channel(#[from] ChannelError),
    #[error(
        "the auditor could not trace the command (ptrace(2) was refused: inside a container, allow ptrace; or pass --no-audit to run without a record)"
    )]
    NotTraced,
    #[error("observer channel missing")]
    ObserverMissing,
    #[error("new session: {0}")]
    Setsid(#[source] Errno),
}

/// What to run and how: `airlock run`'s command from the plan, a step's
/// from its request.
pub(crate) struct Launch<'a> {
    pub argv: &'a [CString],
    pub envp: &'a [CString],
    pub search_path: &'a OsStr,
    /// Change here (as the command's user) before exec; None: stay in init's
    /// working directory, the workspace.
    pub cwd: Option<&'a Path>,
    /// The pty slave to attach (which makes the command a session leader).
    pub terminal: Option<&'a OwnedFd>,
    /// Without a terminal: lead a new session (and so a process group of
    /// its own, which a step's signals are sent to). setsid(2).
    pub own_session: bool,
    pub tracing: Tracing<'a>,
}

/// How an observed command comes to be traced.
pub(crate) enum Tracing<'a> {
    /// Ask the observer over its channel (`airlock run`'s command).
    Ask(Option<&'a OwnedFd>),
    /// A step's command: forked by a traced holder, it was traced from its
    /// first instruction (PTRACE_O_TRACEFORK, ptrace(2)); checked, not asked.
    Inherited,
}

impl<'a> Launch<'a> {
    /// `airlock run`'s command.
    pub(crate) fn of_plan(
        plan: &'a Plan,
        observe: Option<&'a OwnedFd>,
        terminal: Option<&'a OwnedFd>,
    ) -> Self {
        Launch {
            argv: &plan.argv,
            envp: &plan.envp,
            search_path: &plan.search_path,
            cwd: None,
            terminal,
            own_session: false,
            tracing: Tracing::Ask(observe),
        }
    }
}

/// The command process; never returns.
pub(crate) fn run(plan: &Plan, launch: &Launch<'_>) -> ! {
    let error = match exec_command(plan, launch) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    let line = format!("airlock: {error}\n");
    let _ = nix::unistd::write(std::io::stderr(), line.as_bytes());
    sys::exit_now(error.exit_code())
}

enum Never {}

fn exec_command(plan: &Plan, launch: &Launch<'_>) -> Result<Never, CommandError> {
    sys::reset_signals();
    if let Some(slave) = launch.terminal {
        // First, while still privileged in the sandbox: TIOCSCTTY needs the
        // new session, and the error below then reaches the terminal.
        crate::pty::attach(slave).map_err(SetupStepError::AttachTerminal)?;
    } else if launch.own_session {
        nix::unistd::setsid().map_err(SetupStepError::Setsid)?;
    }
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if let Some(bytes) = plan.rlimit_memory {
        setrlimit(Resource::RLIMIT_AS, bytes, bytes).map_err(SetupStepError::Rlimit)?;
    }
    if let Some(n) = plan.rlimit_nproc {
        setrlimit(Resource::RLIMIT_NPROC, n, n).map_err(SetupStepError::Rlimit)?;
    }
    let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(63);
    match plan.identity {
        Identity::Root => {
            sys::drop_all_capabilities(last_cap).map_err(SetupStepError::Capabilities)?
        }
        Identity::Switch(u) => {
            sys::drop_bounding_and_ambient(last_cap).map_err(SetupStepError::Capabilities)?;
            let gid = Gid::from_raw(u.gid);
            let uid = Uid::from_raw(u.uid);
            nix::unistd::setgroups(&[gid]).map_err(SetupStepError::SwitchUser)?;
            nix::unistd::setresgid(gid, gid, gid).map_err(SetupStepError::SwitchUser)?;
            nix::unistd::setresuid(uid, uid, uid).map_err(SetupStepError::SwitchUser)?;
            sys::clear_capability_sets().map_err(SetupStepError::Capabilities)?;
        }
        Identity::Unprivileged { uid, gid } => {
            // Nested user namespace: the command is the invoking uid again and
            // holds no capability over the sandbox's namespaces.
            unshare(CloneFlags::CLONE_NEWUSER).map_err(SetupStepError::UserNamespace)?;
            write_id_maps(&format!("{uid} 0 1"), &format!("{gid} 0 1"), false)
                .map_err(SetupStepError::IdMap)?;
            sys::drop_all_capabilities(last_cap).map_err(SetupStepError::Capabilities)?;
        }
    }
    nix::sys::prctl::set_no_new_privs().map_err(SetupStepError::NoNewPrivs)?;
    if let Some(dir) = launch.cwd {
        // As the command's user, so its permissions decide.
        nix::unistd::chdir(dir).map_err(|source| CommandError::Cwd {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let argv0 = launch.argv.first().ok_or_else(|| CommandError::NotFound {
        name: String::new(),
    })?;
    let program = resolve(argv0, launch.search_path)?;
    match (plan.observe, &launch.tracing) {
        (None, _) => {
            sys::install_seccomp(&crate::seccomp::filter_with(false, plan.allow_unix_sockets))
                .map_err(SetupStepError::Seccomp)?
        }
        (Some(_), Tracing::Ask(Some(obs))) => {
            // Be traced before anything of the command runs: the observer
            // attaches to the process behind this pidfd (the kernel names it
            // in the observer's PID namespace) and answers. The filter's
            // SECCOMP_RET_TRACE stops need the tracer, and our execve is the
            // first thing it sees.
            let me = sys::pidfd_open(nix::unistd::Pid::this()).map_err(SetupStepError::Pidfd)?;
            channel::send(obs, &Message::TraceMe(me)).map_err(SetupStepError::Channel)?;
            match channel::recv(obs) {
                Ok(Some(Message::Traced)) => {}
                _ => {
                    return Err(SetupStepError::NotTraced.into());
                }
            }
            sys::install_seccomp(&crate::seccomp::filter_with(true, plan.allow_unix_sockets))
                .map_err(SetupStepError::Seccomp)?;
        }
        (Some(_), Tracing::Inherited) => {
            // Fail closed if the tracer is somehow not there. TracerPid in
            // /proc/self/status cannot tell: the tracer is outside this PID
            // namespace, so it reads 0 either way (proc_pid_status(5) gives
            // pids as the /proc mount's namespace sees them). PTRACE_TRACEME
            // fails with EPERM for a process that is already traced
            // (ptrace(2), ERRORS); when it succeeds instead, nobody but our
            // own parent traces us and we stop here.
            if nix::sys::ptrace::traceme() != Err(Errno::EPERM) {
                return Err(SetupStepError::NotTraced.into());
            }
            sys::install_seccomp(&crate::seccomp::filter_with(true, plan.allow_unix_sockets))
                .map_err(SetupStepError::Seccomp)?;
        }
        // Fail closed: observation was asked for but there is no observer.
        (Some(_), Tracing::Ask(None)) => return Err(SetupStepError::ObserverMissing.into()),
    }
    let err = nix::unistd::execve(&program, launch.argv, launch.envp).err();
    let name = argv0.to_string_lossy().into_owned();
    Err(match err {
        Some(Errno::ENOENT) => CommandError::NotFound { name },
        Some(source) => CommandError::CannotExecute { name, source },
        None => CommandError::ExecReturned { name },
    })
}

/// argv[0] through PATH, like execvp(3), but against the sandbox's PATH.
fn resolve(argv0: &CString, search: &OsStr) -> Result<CString, CommandError> {
    let bytes = argv0.as_bytes();
    if bytes.contains(&b'/') {
        return Ok(argv0.clone());
    }
    for dir in std::env::split_paths(search) {
        let candidate: PathBuf = dir.join(OsStr::from_bytes(bytes));
        if candidate.is_file() && access(candidate.as_path(), AccessFlags::X_OK).is_ok() {
            return CString::new(candidate.as_os_str().as_bytes())
                .map_err(|_| CommandError::NulInPath);
        }
    }
    Err(CommandError::NotInPath {
        name: PathBuf::from(OsStr::from_bytes(bytes)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_before_and_carry_a_shells_exit_code() {
        let cases = [
            (
                CommandError::from(SetupStepError::Rlimit(Errno::EINVAL)),
                125,
                "sandbox setup failed: EINVAL: Invalid argument",
            ),
            (
                SetupStepError::ObserverMissing.into(),
                125,
                "sandbox setup failed: observer channel missing",
            ),
            (
                CommandError::NotFound {
                    name: "nope".into(),
                },
                127,
                "nope: command not found",
            ),
            (
                CommandError::NotInPath {
                    name: "nope".into(),
                },
                127,
                "nope: command not found in the sandbox PATH",
            ),
            (
                CommandError::CannotExecute {
                    name: "/x".into(),
                    source: Errno::EACCES,
                },
                126,
                "/x: cannot execute: EACCES: Permission denied",
            ),
        ];
        for (error, code, text) in cases {
            assert_eq!(error.exit_code(), code, "{error}");
            assert_eq!(error.to_string(), text);
        }
    }

    #[test]
    fn a_command_missing_from_path_is_not_found() {
        let argv0 = CString::new("surely-not-a-command").unwrap();
        let err = resolve(&argv0, OsStr::new("/nonexistent")).unwrap_err();
        assert_eq!(err.exit_code(), 127);
    }
}
