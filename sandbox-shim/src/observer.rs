//! The observer thread: answers every seccomp user notification of the
//! sandboxed command (always with SECCOMP_USER_NOTIF_FLAG_CONTINUE, see
//! seccomp_unotify(2)) after noting what it needs, and turns the stream into
//! [`Observation`]s. It never blocks the sandbox on anything but its own
//! bookkeeping: when reading fails, the syscall continues and we record what
//! is known.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::capture::SandboxRoot;
use crate::channel;
use crate::observation::{ExecId, FileOp, Observation, is_secret_name};
use crate::procfs::{self, Status};
use crate::sys::{self, Notification};

/// Most pidfds we keep (one per live exec) to learn deaths by signal.
const MAX_PIDFDS: usize = 512;
/// How long to wait for the last notifications once the sandbox is gone.
const TEARDOWN_GRACE: Duration = Duration::from_secs(3);
/// How long we try to learn how a process died without exit_group.
const EXIT_CODE_PATIENCE: Duration = Duration::from_millis(50);
/// Longest chain of parents we walk to find an ancestor's exec.
const MAX_ANCESTRY: usize = 64;

/// State shared with [`crate::Attributor`]: host pid -> current exec.
#[derive(Debug, Default)]
pub struct Shared {
    pub procs: HashMap<i32, ExecId>,
}

pub type SharedState = Arc<Mutex<Shared>>;

/// What the observer needs to know about the sandbox.
#[derive(Debug, Clone)]
pub struct Config {
    /// Host pid of the sandbox init.
    pub init: i32,
    /// Absolute paths where the command can write (workspace, rw grants, /tmp, /dev/shm).
    pub writable: Vec<String>,
    pub max_file_bytes: u64,
}

/// One process we know of (keyed by host tgid).
struct Proc {
    /// Its current exec (inherited from the parent when it never exec'd).
    exec: ExecId,
    /// Did this process exec itself (so its exit ends `chain`)?
    own: bool,
    /// Every exec this process went through, oldest first.
    chain: Vec<ExecId>,
    pidfd: Option<OwnedFd>,
}

struct Pending {
    op: FileOp,
    ts: SystemTime,
    seq: u64,
}

/// What a notification means, decoded before the syscall continues.
enum Action {
    Nothing,
    Exec {
        tgid: i32,
        st: Status,
        /// The parent's pid inside the sandbox.
        ppid: i32,
        path: String,
        argv: Vec<String>,
        env: Vec<String>,
        cwd: String,
        /// Opened before the syscall continues: a short-lived program may be
        /// gone (and reaped) by the time the notification is applied.
        pidfd: Option<OwnedFd>,
    },
    ExitGroup {
        tgid: i32,
        status: i32,
    },
    /// A write whose content is captured when the writer exits.
    Pend {
        writer: Writer,
        path: String,
        op: FileOp,
        /// The syscall discards the file's content (`O_TRUNC`, truncate(2)).
        truncates: bool,
    },
    /// Reported right away.
    Now {
        writer: Writer,
        path: String,
        op: FileOp,
        rename_to: Option<String>,
        mode: Option<u32>,
        content: Option<Vec<u8>>,
    },
}

impl Action {
    /// Paths whose pending content must be captured before this syscall runs:
    /// a file it deletes or truncates (`O_TRUNC`, truncate(2)), and both ends
    /// of a rename (the file moved, under the name it was written as, and the
    /// one it replaces). The syscall may still fail (a rename with
    /// `RENAME_NOREPLACE` that `mv` then retries); capturing early is harmless.
    fn captured_first(&self) -> impl Iterator<Item = &str> {
        let (first, second) = match self {
            Action::Now {
                op: FileOp::Delete,
                path,
                ..
            } => (Some(path.as_str()), None),
            Action::Now {
                op: FileOp::Rename,
                path,
                rename_to,
                ..
            } => (Some(path.as_str()), rename_to.as_deref()),
            Action::Pend {
                truncates: true,
                path,
                ..
            } => (Some(path.as_str()), None),
            _ => (None, None),
        };
        first.into_iter().chain(second)
    }
}

/// Who made a file syscall, resolved before it continues (the process may be
/// gone afterwards).
struct Writer {
    tgid: i32,
    exec: Option<ExecId>,
    /// A forked child never seen before: remember it under `exec`.
    new_child: bool,
}

struct Observer {
    cfg: Config,
    tx: Sender<Observation>,
    shared: SharedState,
    root: Option<SandboxRoot>,
    listener: Option<OwnedFd>,
    chan: Option<OwnedFd>,
    procs: HashMap<i32, Proc>,
    pending: HashMap<(Option<ExecId>, String), Pending>,
    next_exec: u64,
    seq: u64,
    /// Live pidfds held in `procs`.
    pidfds: usize,
}

/// Start the observer thread; it ends once the sandbox is gone, dropping `tx`.
pub fn spawn(
    chan: OwnedFd,
    cfg: Config,
    tx: Sender<Observation>,
    shared: SharedState,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("airlock-observer".into())
        .spawn(move || {
            let mut obs = Observer {
                root: SandboxRoot::open(cfg.init),
                cfg,
                tx,
                shared,
                listener: None,
                chan: Some(chan),
                procs: HashMap::new(),
                pending: HashMap::new(),
                next_exec: 1,
                seq: 0,
                pidfds: 0,
            };
            obs.run();
        })
}

const AT_FDCWD: i32 = libc::AT_FDCWD;

fn arg_i32(v: u64) -> i32 {
    v as u32 as i32
}

fn lossy(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

impl Observer {
    fn run(&mut self) {
        let mut gone_at: Option<Instant> = None;
        loop {
            if self.chan.is_none() {
                let since = *gone_at.get_or_insert_with(Instant::now);
                if self.listener.is_none() || since.elapsed() > TEARDOWN_GRACE {
                    break;
                }
            }
            let (listener_ev, chan_ev, fired) = {
                let mut fds = Vec::new();
                if let Some(c) = &self.chan {
                    fds.push(PollFd::new(c.as_fd(), PollFlags::POLLIN));
                }
                if let Some(l) = &self.listener {
                    fds.push(PollFd::new(l.as_fd(), PollFlags::POLLIN));
                }
                let mut pids = Vec::new();
                for (tgid, p) in &self.procs {
                    if let Some(fd) = &p.pidfd {
                        fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                        pids.push(*tgid);
                    }
                }
                let timeout = if self.chan.is_none() {
                    PollTimeout::from(200u16)
                } else {
                    PollTimeout::from(1000u16)
                };
                match poll(&mut fds, timeout) {
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => break,
                }
                let mut it = fds
                    .iter()
                    .map(|f| f.revents().unwrap_or(PollFlags::empty()));
                let chan_ev = if self.chan.is_some() {
                    it.next().unwrap_or(PollFlags::empty())
                } else {
                    PollFlags::empty()
                };
                let listener_ev = if self.listener.is_some() {
                    it.next().unwrap_or(PollFlags::empty())
                } else {
                    PollFlags::empty()
                };
                let fired: Vec<i32> = pids
                    .into_iter()
                    .zip(it)
                    .filter(|(_, ev)| !ev.is_empty())
                    .map(|(p, _)| p)
                    .collect();
                (listener_ev, chan_ev, fired)
            };
            if listener_ev.contains(PollFlags::POLLIN) {
                self.serve_one();
            } else if !listener_ev.is_empty() {
                // POLLHUP: no task uses the filter any more.
                self.listener = None;
            }
            for tgid in fired {
                self.died_without_exit_group(tgid);
            }
            if !chan_ev.is_empty() {
                self.on_channel();
            }
        }
        self.finish();
    }

    fn on_channel(&mut self) {
        let Some(chan) = &self.chan else { return };
        match channel::recv(chan) {
            Ok(Some(msg)) => match msg.tag {
                channel::LISTENER => {
                    if let Some(fd) = msg.fds.into_iter().next() {
                        sys::notif_sync_wakeup(fd.as_fd());
                        self.listener = Some(fd);
                    }
                }
                channel::COMMAND_DONE => {
                    self.drain();
                    self.flush(|_, _| true);
                    if let Some(chan) = &self.chan {
                        let _ = channel::send(chan, channel::FLUSHED, b"", &[]);
                    }
                }
                _ => {}
            },
            Ok(None) | Err(_) => self.chan = None,
        }
    }

    /// Answer whatever notifications are already queued.
    fn drain(&mut self) {
        for _ in 0..100_000 {
            let ready = match &self.listener {
                Some(l) => {
                    let mut fds = [PollFd::new(l.as_fd(), PollFlags::POLLIN)];
                    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
                        && fds[0]
                            .revents()
                            .is_some_and(|r| r.contains(PollFlags::POLLIN))
                }
                None => false,
            };
            if !ready {
                return;
            }
            self.serve_one();
        }
    }

    fn serve_one(&mut self) {
        let Some(listener) = self.listener.take() else {
            return;
        };
        if let Ok(n) = sys::notif_recv(listener.as_fd()) {
            let action = self.decode(&n);
            // Pending writes are captured when their writer's process ends,
            // which for a shell's `> f` is when the shell ends. A version the
            // syscall is about to destroy or move is captured now, while the
            // notification holds the syscall (seccomp_unotify(2)).
            let paths: Vec<String> = action.captured_first().map(str::to_owned).collect();
            if !paths.is_empty() {
                self.flush(|_, pending| paths.iter().any(|p| p == pending));
            }
            let valid = sys::notif_id_valid(listener.as_fd(), n.id);
            sys::notif_continue(listener.as_fd(), n.id);
            if valid {
                self.apply(action);
            }
        }
        self.listener = Some(listener);
    }

    fn emit(&self, o: Observation) {
        let _ = self.tx.send(o);
    }

    // ------------------------------------------------------------ decoding

    fn tgid_of(&self, tid: i32) -> Option<(i32, Option<Status>)> {
        if self.procs.contains_key(&tid) {
            return Some((tid, None));
        }
        let st = procfs::status(tid)?;
        Some((st.tgid, Some(st)))
    }

    fn writable(&self, path: &str) -> bool {
        self.cfg.writable.iter().any(|w| {
            path == w
                || (path.starts_with(w.as_str()) && path.as_bytes().get(w.len()) == Some(&b'/'))
        })
    }

    /// `path` of a *at() call, absolute.
    fn at_path(tid: i32, dirfd: i32, path: &[u8]) -> Option<String> {
        let p = String::from_utf8_lossy(path);
        if p.starts_with('/') {
            return Some(procfs::absolute("/", &p));
        }
        let base = if dirfd == AT_FDCWD {
            procfs::cwd(tid)?
        } else {
            procfs::fd_path(tid, dirfd)?
        };
        if p.is_empty() {
            return Some(base);
        }
        Some(procfs::absolute(&base, &p))
    }

    fn decode(&self, n: &Notification) -> Action {
        let a = n.args;
        let tid = n.tid;
        let Some(mem) = procfs::open_mem(tid) else {
            return Action::Nothing;
        };
        let path_at = |dirfd: i32, addr: u64| -> Option<String> {
            Self::at_path(tid, dirfd, &procfs::read_cstr(&mem, addr)?)
        };
        let nr = n.nr as libc::c_long;
        let o_trunc = libc::O_TRUNC as u64;
        let (dirfd, addr, truncates) = match nr {
            libc::SYS_execve | libc::SYS_execveat => {
                let (dirfd, p, argv, envp, flags) = if nr == libc::SYS_execve {
                    (AT_FDCWD, a[0], a[1], a[2], 0)
                } else {
                    (arg_i32(a[0]), a[1], a[2], a[3], a[4])
                };
                let Some(raw) = procfs::read_cstr(&mem, p) else {
                    return Action::Nothing;
                };
                let Some(cwd) = procfs::cwd(tid) else {
                    return Action::Nothing;
                };
                let path = if raw.is_empty() && flags & libc::AT_EMPTY_PATH as u64 != 0 {
                    procfs::fd_path(tid, dirfd).unwrap_or_default()
                } else {
                    Self::at_path(tid, dirfd, &raw)
                        .unwrap_or_else(|| procfs::absolute(&cwd, &lossy(raw)))
                };
                if let Some(root) = &self.root
                    && !root.is_executable(&path)
                {
                    // A PATH probe that will fail with ENOENT/EACCES.
                    return Action::Nothing;
                }
                let Some(st) = procfs::status(tid) else {
                    return Action::Nothing;
                };
                let ppid = if st.ppid == self.cfg.init {
                    1
                } else {
                    procfs::status(st.ppid).map(|s| s.ns_pid).unwrap_or(0)
                };
                let has_pidfd = self.procs.get(&st.tgid).is_some_and(|p| p.pidfd.is_some());
                let pidfd = if has_pidfd || self.pidfds >= MAX_PIDFDS {
                    None
                } else {
                    sys::pidfd_open(st.tgid).ok()
                };
                return Action::Exec {
                    tgid: st.tgid,
                    st,
                    ppid,
                    pidfd,
                    path,
                    argv: procfs::read_str_array(&mem, argv),
                    env: procfs::read_str_array(&mem, envp),
                    cwd,
                };
            }
            libc::SYS_exit_group => {
                let Some((tgid, _)) = self.tgid_of(tid) else {
                    return Action::Nothing;
                };
                return Action::ExitGroup {
                    tgid,
                    status: (a[0] & 0xff) as i32,
                };
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_open => (AT_FDCWD, a[0], a[1] & o_trunc != 0),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_creat => (AT_FDCWD, a[0], true),
            libc::SYS_openat => (arg_i32(a[0]), a[1], a[2] & o_trunc != 0),
            libc::SYS_openat2 => {
                let flags = procfs::read_u64(&mem, a[2]).unwrap_or(0);
                let write = (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) as u64;
                if flags & write == 0 {
                    return Action::Nothing;
                }
                (arg_i32(a[0]), a[1], flags & o_trunc != 0)
            }
            _ => return self.decode_other(n, &path_at),
        };
        let Some(path) = path_at(dirfd, addr) else {
            return Action::Nothing;
        };
        if !self.writable(&path) {
            return Action::Nothing;
        }
        let Some(writer) = self.writer(tid) else {
            return Action::Nothing;
        };
        let existed = self.root.as_ref().is_some_and(|r| r.exists(&path));
        Action::Pend {
            writer,
            path,
            op: if existed {
                FileOp::Modify
            } else {
                FileOp::Create
            },
            truncates,
        }
    }

    /// Everything but exec, exit and open.
    fn decode_other(
        &self,
        n: &Notification,
        path_at: &dyn Fn(i32, u64) -> Option<String>,
    ) -> Action {
        let a = n.args;
        let tid = n.tid;
        let nr = n.nr as libc::c_long;
        let fd_path = |fd: u64| procfs::fd_path(tid, arg_i32(fd));
        let mut rename_to = None;
        let mut mode = None;
        let mut content = None;
        let mut pend = false;
        let (op, path) = match nr {
            #[cfg(target_arch = "x86_64")]
            libc::SYS_rename => {
                rename_to = path_at(AT_FDCWD, a[1]);
                (FileOp::Rename, path_at(AT_FDCWD, a[0]))
            }
            libc::SYS_renameat | libc::SYS_renameat2 => {
                rename_to = path_at(arg_i32(a[2]), a[3]);
                // RENAME_NOREPLACE onto an existing name fails with EEXIST
                // (rename(2)); `mv` tries it first, then renames for real.
                // Recording the failed try would move the file twice.
                let no_replace =
                    nr == libc::SYS_renameat2 && a[4] & u64::from(libc::RENAME_NOREPLACE) != 0;
                if no_replace
                    && let (Some(root), Some(to)) = (self.root.as_ref(), rename_to.as_deref())
                    && root.exists(to)
                {
                    return Action::Nothing;
                }
                (FileOp::Rename, path_at(arg_i32(a[0]), a[1]))
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_unlink => (FileOp::Delete, path_at(AT_FDCWD, a[0])),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_rmdir => (FileOp::Delete, path_at(AT_FDCWD, a[0]).map(|p| p + "/")),
            libc::SYS_unlinkat => {
                let p = path_at(arg_i32(a[0]), a[1]);
                let dir = a[2] & libc::AT_REMOVEDIR as u64 != 0;
                (FileOp::Delete, p.map(|p| if dir { p + "/" } else { p }))
            }
            libc::SYS_truncate => {
                pend = true;
                (FileOp::Truncate, path_at(AT_FDCWD, a[0]))
            }
            libc::SYS_ftruncate => {
                pend = true;
                (FileOp::Truncate, fd_path(a[0]))
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_chmod => {
                mode = Some(a[1] as u32);
                (FileOp::Chmod, path_at(AT_FDCWD, a[0]))
            }
            libc::SYS_fchmod => {
                mode = Some(a[1] as u32);
                (FileOp::Chmod, fd_path(a[0]))
            }
            libc::SYS_fchmodat | crate::seccomp::SYS_FCHMODAT2 => {
                mode = Some(a[2] as u32);
                (FileOp::Chmod, path_at(arg_i32(a[0]), a[1]))
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_mkdir => {
                mode = Some(a[1] as u32);
                (FileOp::Create, path_at(AT_FDCWD, a[0]).map(|p| p + "/"))
            }
            libc::SYS_mkdirat => {
                mode = Some(a[2] as u32);
                (
                    FileOp::Create,
                    path_at(arg_i32(a[0]), a[1]).map(|p| p + "/"),
                )
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_link => {
                pend = true;
                (FileOp::Create, path_at(AT_FDCWD, a[1]))
            }
            libc::SYS_linkat => {
                pend = true;
                (FileOp::Create, path_at(arg_i32(a[2]), a[3]))
            }
            #[cfg(target_arch = "x86_64")]
            libc::SYS_symlink => {
                content = procfs::open_mem(tid).and_then(|m| procfs::read_cstr(&m, a[0]));
                (FileOp::Create, path_at(AT_FDCWD, a[1]))
            }
            libc::SYS_symlinkat => {
                content = procfs::open_mem(tid).and_then(|m| procfs::read_cstr(&m, a[0]));
                (FileOp::Create, path_at(arg_i32(a[1]), a[2]))
            }
            _ => return Action::Nothing,
        };
        let Some(path) = path else {
            return Action::Nothing;
        };
        let relevant = self.writable(path.trim_end_matches('/'))
            || rename_to.as_deref().is_some_and(|p| self.writable(p));
        if !relevant {
            return Action::Nothing;
        }
        let Some(writer) = self.writer(tid) else {
            return Action::Nothing;
        };
        if pend {
            Action::Pend {
                writer,
                path,
                op,
                truncates: op == FileOp::Truncate,
            }
        } else {
            Action::Now {
                writer,
                path,
                op,
                rename_to,
                mode,
                content,
            }
        }
    }

    // ------------------------------------------------------------ bookkeeping

    fn set_proc(&mut self, tgid: i32, p: Proc) {
        if let Ok(mut s) = self.shared.lock() {
            s.procs.insert(tgid, p.exec);
        }
        self.pidfds += usize::from(p.pidfd.is_some());
        if let Some(old) = self.procs.insert(tgid, p) {
            self.pidfds = self.pidfds.saturating_sub(usize::from(old.pidfd.is_some()));
        }
    }

    fn remove_proc(&mut self, tgid: i32) -> Option<Proc> {
        if let Ok(mut s) = self.shared.lock() {
            s.procs.remove(&tgid);
        }
        let p = self.procs.remove(&tgid)?;
        self.pidfds = self.pidfds.saturating_sub(usize::from(p.pidfd.is_some()));
        Some(p)
    }

    /// The exec of the nearest known ancestor, walking up from `pid`.
    fn ancestor_exec(&self, mut pid: i32) -> Option<ExecId> {
        for _ in 0..MAX_ANCESTRY {
            if pid <= 1 || pid == self.cfg.init {
                return None;
            }
            if let Some(p) = self.procs.get(&pid) {
                return Some(p.exec);
            }
            pid = procfs::status(pid)?.ppid;
        }
        None
    }

    /// The process behind thread `tid` and the exec responsible for it.
    fn writer(&self, tid: i32) -> Option<Writer> {
        let (tgid, st) = self.tgid_of(tid)?;
        if let Some(p) = self.procs.get(&tgid) {
            return Some(Writer {
                tgid,
                exec: Some(p.exec),
                new_child: false,
            });
        }
        let ppid = match st {
            Some(s) if s.tgid == tgid => s.ppid,
            _ => procfs::status(tgid)?.ppid,
        };
        let exec = self.ancestor_exec(ppid);
        Some(Writer {
            tgid,
            exec,
            new_child: exec.is_some(),
        })
    }

    /// The writer's exec, remembering a forked child for the next time.
    fn exec_of_writer(&mut self, w: Writer) -> Option<ExecId> {
        if let (true, Some(exec)) = (w.new_child, w.exec) {
            self.set_proc(
                w.tgid,
                Proc {
                    exec,
                    own: false,
                    chain: Vec::new(),
                    pidfd: None,
                },
            );
        }
        w.exec
    }

    fn apply(&mut self, action: Action) {
        let ts = SystemTime::now();
        match action {
            Action::Nothing => {}
            Action::Exec {
                tgid,
                st,
                ppid,
                path,
                argv,
                env,
                cwd,
                pidfd,
            } => self.on_exec(tgid, st, ppid, path, argv, env, cwd, pidfd, ts),
            Action::ExitGroup { tgid, status } => self.process_exited(tgid, Some(status), None),
            Action::Pend {
                writer, path, op, ..
            } => {
                let exec = self.exec_of_writer(writer);
                self.seq += 1;
                let seq = self.seq;
                let entry = self
                    .pending
                    .entry((exec, path))
                    .or_insert(Pending { op, ts, seq });
                // Create stays Create; an explicit truncate outranks a plain write.
                if entry.op == FileOp::Modify && op == FileOp::Truncate {
                    entry.op = op;
                }
            }
            Action::Now {
                writer,
                path,
                op,
                rename_to,
                mode,
                content,
            } => {
                let exec_id = self.exec_of_writer(writer);
                self.emit(Observation::File {
                    exec_id,
                    path,
                    op,
                    size: None,
                    sha256: None,
                    content,
                    rename_to,
                    mode,
                    ts,
                });
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_exec(
        &mut self,
        tgid: i32,
        st: Status,
        ppid: i32,
        path: String,
        argv: Vec<String>,
        env: Vec<String>,
        cwd: String,
        new_pidfd: Option<OwnedFd>,
        ts: SystemTime,
    ) {
        let (parent, mut chain, pidfd) = match self.remove_proc(tgid) {
            Some(p) if p.own => (Some(p.exec), p.chain, p.pidfd),
            Some(p) => (Some(p.exec), Vec::new(), None),
            None => (self.ancestor_exec(st.ppid), Vec::new(), None),
        };
        let exec_id = ExecId(self.next_exec);
        self.next_exec += 1;
        chain.push(exec_id);
        let pidfd = pidfd.or(new_pidfd);
        self.set_proc(
            tgid,
            Proc {
                exec: exec_id,
                own: true,
                chain,
                pidfd,
            },
        );
        let mut env_names = Vec::with_capacity(env.len());
        let mut env_values_nonsecret = Vec::new();
        for kv in env {
            let (k, v) = kv.split_once('=').unwrap_or((kv.as_str(), ""));
            if !is_secret_name(k) {
                env_values_nonsecret.push((k.to_string(), v.to_string()));
            }
            env_names.push(k.to_string());
        }
        self.emit(Observation::Exec {
            exec_id,
            parent,
            pid: st.ns_pid,
            ppid,
            uid: st.uid,
            path,
            argv,
            cwd,
            env_names,
            env_values_nonsecret,
            ts,
        });
    }

    /// Wait status of a process that ended without exit_group: from its pidfd
    /// once reaped, or from /proc while it is a zombie; a few tries cover the
    /// moment in between.
    fn exit_code_of(&self, tgid: i32) -> Option<i32> {
        let pidfd = self.procs.get(&tgid)?.pidfd.as_ref()?;
        let start = Instant::now();
        while start.elapsed() < EXIT_CODE_PATIENCE {
            if let Some(code) = sys::pidfd_exit_code(pidfd.as_fd()) {
                return Some(code);
            }
            if let Some(code) = procfs::zombie_exit_code(tgid) {
                return Some(code);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }

    fn died_without_exit_group(&mut self, tgid: i32) {
        let (status, signal) = match self.exit_code_of(tgid) {
            Some(code) if libc::WIFSIGNALED(code) => (None, Some(libc::WTERMSIG(code))),
            Some(code) => (Some(libc::WEXITSTATUS(code)), None),
            None => (None, None),
        };
        self.process_exited(tgid, status, signal);
    }

    /// A process ended: every exec it went through ends with it, and the
    /// files they wrote are captured now.
    fn process_exited(&mut self, tgid: i32, status: Option<i32>, signal: Option<i32>) {
        let Some(p) = self.remove_proc(tgid) else {
            return;
        };
        if !p.own {
            return;
        }
        let ts = SystemTime::now();
        for exec_id in p.chain.iter().rev() {
            self.emit(Observation::Exit {
                exec_id: *exec_id,
                status,
                signal,
                ts,
            });
        }
        self.flush(|exec, _| exec.is_some_and(|e| p.chain.contains(&e)));
    }

    /// Capture and report the pending files `which` selects by the exec they
    /// are attributed to and their path, in the order they were written.
    fn flush(&mut self, which: impl Fn(Option<ExecId>, &str) -> bool) {
        let mut keys: Vec<_> = self
            .pending
            .iter()
            .filter(|((exec, path), _)| which(*exec, path))
            .map(|(k, p)| (p.seq, k.clone()))
            .collect();
        keys.sort();
        for (_, key) in keys {
            let Some(p) = self.pending.remove(&key) else {
                continue;
            };
            let (exec_id, path) = key;
            let captured = self
                .root
                .as_ref()
                .map(|r| r.capture(&path, self.cfg.max_file_bytes))
                .unwrap_or_default();
            self.emit(Observation::File {
                exec_id,
                path,
                op: p.op,
                size: captured.size,
                sha256: captured.sha256,
                content: captured.content,
                rename_to: None,
                mode: None,
                ts: p.ts,
            });
        }
    }

    /// The sandbox is gone: whatever never reported an exit ends now.
    fn finish(&mut self) {
        let tgids: Vec<i32> = self.procs.keys().copied().collect();
        for tgid in tgids {
            self.died_without_exit_group(tgid);
        }
        self.flush(|_, _| true);
    }
}
