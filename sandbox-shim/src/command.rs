//! The command process: drops identity and capabilities, asks to be traced
//! when observed, installs seccomp and execs. What fails here is told on the
//! command's own stderr, with a shell's exit code: airlock is not listening
//! on the control channel for it any more.

use std::ffi::{CString, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use nix::errno::Errno;
use nix::sched::{CloneFlags, unshare};
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;
use nix::unistd::{AccessFlags, Gid, Uid, access};

use crate::channel::{self, ChannelError, Message};
use crate::child::{IdMapError, write_id_maps};
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
}

impl CommandError {
    /// 125 when the sandbox failed, 126 when the program cannot run, 127 when
    /// it is not there (the codes of sh(1), "Exit Status", and of env(1)).
    fn exit_code(&self) -> i32 {
        match self {
            CommandError::Setup(_) => 125,
            CommandError::CannotExecute { .. } | CommandError::ExecReturned { .. } => 126,
            CommandError::NotFound { .. }
            | CommandError::NotInPath { .. }
            | CommandError::NulInPath => 127,
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
}

/// The command process; never returns.
pub(crate) fn run(plan: &Plan, observe: Option<&OwnedFd>, terminal: Option<&OwnedFd>) -> ! {
    let error = match exec_command(plan, observe, terminal) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    let line = format!("airlock: {error}\n");
    let _ = nix::unistd::write(std::io::stderr(), line.as_bytes());
    sys::exit_now(error.exit_code())
}

enum Never {}

fn exec_command(
    plan: &Plan,
    observe: Option<&OwnedFd>,
    terminal: Option<&OwnedFd>,
) -> Result<Never, CommandError> {
    sys::reset_signals();
    if let Some(slave) = terminal {
        // First, while still privileged in the sandbox: TIOCSCTTY needs the
        // new session, and the error below then reaches the terminal.
        crate::pty::attach(slave).map_err(SetupStepError::AttachTerminal)?;
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
    let program = resolve(&plan.argv[0], &plan.search_path)?;
    match (plan.observe, observe) {
        (None, _) => {
            sys::install_seccomp(&crate::seccomp::filter_with(false, plan.allow_unix_sockets))
                .map_err(SetupStepError::Seccomp)?
        }
        (Some(_), Some(obs)) => {
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
        // Fail closed: observation was asked for but there is no observer.
        (Some(_), None) => return Err(SetupStepError::ObserverMissing.into()),
    }
    let err = nix::unistd::execve(&program, &plan.argv, &plan.envp).err();
    let name = plan.argv[0].to_string_lossy().into_owned();
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
