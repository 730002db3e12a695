//! Builds the sandbox's filesystem view inside its private mount namespace:
//! everything read-only, fresh /run, /tmp, /dev and /proc, secrets hidden,
//! grants (workspace, --ro, --rw) bound back. See mount_namespaces(7).
//! About 500 lines: the mount table is built in one order that matters, and
//! reading it top to bottom is the point.
//!
//! Every mount the command can write to is either a place the observer
//! records (the workspace, --rw grants, /tmp, /dev/shm) or a kernel interface
//! that stores no file data (proc, devpts); everything else is read-only.
//! docs/architecture.md lists them; tests/record_mounts.rs checks it from
//! inside.

use std::fs;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, symlink};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::mount::{MsFlags, mount};
use nix::sys::stat::Mode;
use nix::sys::statvfs::{FsFlags, statvfs};

use crate::plan::Plan;
use crate::spec::{CA_BUNDLE_PATH, DNS_ADDR};

type Result<T> = std::result::Result<T, MountError>;

const NONE: Option<&str> = None;

/// The step of the filesystem setup that failed, as it reads before the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    MakePrivate,
    MakeReadOnly,
    Statvfs,
    Remount,
    MountTmpfs,
    MountDevpts,
    MountProc,
    /// A bind mount of this source.
    Bind(PathBuf),
    MoveDev,
    Create,
    Write,
    Mkdir,
    Symlink,
    Open,
    Chdir,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::MakePrivate => f.write_str("make private"),
            Self::MakeReadOnly => f.write_str("make read-only (recursively)"),
            Self::Statvfs => f.write_str("statvfs"),
            Self::Remount => f.write_str("remount"),
            Self::MountTmpfs => f.write_str("mount tmpfs on"),
            Self::MountDevpts => f.write_str("mount devpts on"),
            Self::MountProc => f.write_str("mount proc on"),
            Self::Bind(source) => write!(f, "bind {} on", source.display()),
            Self::MoveDev => f.write_str("move staging dev onto"),
            Self::Create => f.write_str("create"),
            Self::Write => f.write_str("write"),
            Self::Mkdir => f.write_str("mkdir"),
            Self::Symlink => f.write_str("symlink"),
            Self::Open => f.write_str("open"),
            Self::Chdir => f.write_str("chdir"),
        }
    }
}

/// Why the sandbox's filesystem view could not be built: the step, the path
/// it was applied to and the kernel's answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MountError {
    /// A system call through nix (mount(2), statvfs(2), open(2), chdir(2)).
    #[error("{step} {}: {source}", .path.display())]
    Sys {
        step: Step,
        path: PathBuf,
        #[source]
        source: Errno,
    },
    /// A file operation through std.
    #[error("{step} {}: {source}", .path.display())]
    File {
        step: Step,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("read mountinfo: {0}")]
    MountInfo(#[source] std::io::Error),
}

/// `map_err` for a nix call at `path`.
fn sys_err(step: Step, path: &Path) -> impl FnOnce(Errno) -> MountError + '_ {
    move |source| MountError::Sys {
        step,
        path: path.to_path_buf(),
        source,
    }
}

/// `map_err` for a std call at `path`.
fn file_err(step: Step, path: &Path) -> impl FnOnce(std::io::Error) -> MountError + '_ {
    move |source| MountError::File {
        step,
        path: path.to_path_buf(),
        source,
    }
}

fn mount_tmpfs(target: &Path, flags: MsFlags, data: &str) -> Result<()> {
    mount(Some("tmpfs"), target, Some("tmpfs"), flags, Some(data))
        .map_err(sys_err(Step::MountTmpfs, target))
}

fn bind(source: &Path, target: &Path, recursive: bool) -> Result<()> {
    let mut flags = MsFlags::MS_BIND;
    if recursive {
        flags |= MsFlags::MS_REC;
    }
    mount(Some(source), target, NONE, flags, NONE)
        .map_err(sys_err(Step::Bind(source.to_path_buf()), target))
}

/// Per-mount flags a remount must repeat: in a user namespace the kernel locks
/// nosuid/nodev/noexec/atime flags inherited from the host and refuses a
/// remount that would clear them (see mount(2), EPERM).
fn kept_flags(path: &Path) -> std::result::Result<MsFlags, Errno> {
    let st = statvfs(path)?;
    let f = st.flags();
    let mut flags = MsFlags::empty();
    for (fs, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
    ] {
        if f.contains(fs) {
            flags |= ms;
        }
    }
    Ok(flags)
}

/// Change only the read-only bit of the mount at `path`.
fn remount(path: &Path, readonly: bool) -> Result<()> {
    let mut flags = kept_flags(path).map_err(sys_err(Step::Statvfs, path))?;
    flags.set(MsFlags::MS_RDONLY, readonly);
    mount(
        NONE,
        path,
        NONE,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | flags,
        NONE,
    )
    .map_err(sys_err(Step::Remount, path))
}

/// Undo the octal escapes of /proc/self/mountinfo (see proc_pid_mountinfo(5)).
fn unescape(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = std::str::from_utf8(&b[i + 1..i + 4]).ok();
            if let Some(v) = oct.and_then(|o| u8::from_str_radix(o, 8).ok()) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(out))
}

fn mount_points() -> Result<Vec<PathBuf>> {
    let info = fs::read_to_string("/proc/self/mountinfo").map_err(MountError::MountInfo)?;
    Ok(info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape)
        .collect())
}

/// Every mount of the copied host tree becomes read-only.
///
/// First in one call for the whole tree (mount_setattr(2), AT_RECURSIVE),
/// which also reaches mounts stacked under another one at the same place
/// (a host's /dev/shm mounted twice, say): no path leads to those, but they
/// are in the sandbox's mount table and nothing there should stay writable.
/// Then mount by mount, by path, which is all that kernels before 5.12 have
/// (mount(2), MS_REMOUNT|MS_BIND) and a no-op where the first step worked.
/// /proc is skipped there: it is replaced wholesale later.
///
/// The host's /dev is covered by our own later, but not skipped: the device
/// nodes we show are bind mounts of its nodes, and a bind mount has the same
/// mount options as the mount it comes from (mount(2), "Creating a bind
/// mount"). Left read-write, it let the sandbox's uid 0, owner of the host's
/// /dev/null, chmod or touch the host's node without any capability
/// (chmod(2), utimensat(2): the owner may). Read-only, they still work as
/// devices: opening a device node for writing does not take write access to
/// its mount (the kernel's do_dentry_open() skips mnt_want_write() for
/// special files; only the inode's own attributes and names are refused).
fn remount_all_readonly() -> Result<()> {
    match crate::sys::make_tree_readonly(c"/") {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
        Err(e) => return Err(file_err(Step::MakeReadOnly, Path::new("/"))(e)),
    }
    for mp in mount_points()? {
        if mp.starts_with("/proc") {
            continue;
        }
        match kept_flags(&mp) {
            Ok(f) if f.contains(MsFlags::MS_RDONLY) => continue,
            Ok(_) => {}
            // Unreachable for us means unreachable for the command too.
            Err(Errno::EACCES | Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => continue,
            Err(e) => return Err(sys_err(Step::Statvfs, &mp)(e)),
        }
        remount(&mp, true)?;
    }
    Ok(())
}

fn write_file(path: &Path, content: &[u8]) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)
        .map_err(file_err(Step::Create, path))?;
    f.write_all(content).map_err(file_err(Step::Write, path))
}

fn mkdir_p(path: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(file_err(Step::Mkdir, path))
}

/// Make sure a mount point of the right kind exists (only possible on our own tmpfs).
fn ensure_mount_point(path: &Path, dir: bool) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    if dir {
        return mkdir_p(path);
    }
    if let Some(parent) = path.parent() {
        mkdir_p(parent)?;
    }
    write_file(path, b"")
}

/// Populate a fresh /dev on a staging tmpfs, then move it over the host's /dev.
/// `setup` makes it read-only once everything under it is in place.
fn setup_dev(staging: &Path) -> Result<()> {
    mkdir_p(staging)?;
    mount_tmpfs(
        staging,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "mode=0755,size=64k",
    )?;
    for dev in ["null", "zero", "full", "random", "urandom", "tty"] {
        let target = staging.join(dev);
        write_file(&target, b"")?;
        bind(&Path::new("/dev").join(dev), &target, false)?;
    }
    let pts = staging.join("pts");
    mkdir_p(&pts)?;
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(sys_err(Step::MountDevpts, &pts))?;
    let shm = staging.join("shm");
    mkdir_p(&shm)?;
    mount_tmpfs(
        &shm,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=1777,size=64m",
    )?;
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let path = staging.join(link);
        symlink(target, &path).map_err(file_err(Step::Symlink, &path))?;
    }
    mount(Some(staging), "/dev", NONE, MsFlags::MS_MOVE, NONE)
        .map_err(sys_err(Step::MoveDev, Path::new("/dev")))
}

/// Cover a path: empty tmpfs over a directory, /dev/null over anything else.
fn cover(path: &Path) -> Result<()> {
    if path.is_dir() {
        mount_tmpfs(
            path,
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            "mode=0755,size=1m",
        )
    } else {
        bind(Path::new("/dev/null"), path, false)
    }
}

/// Fresh procfs for the new PID namespace, with Docker's masks: kernel-wide
/// writable files read-only, information leaks covered (see proc(5)).
fn setup_proc() -> Result<()> {
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        NONE,
    )
    .map_err(sys_err(Step::MountProc, Path::new("/proc")))?;
    for p in [
        "/proc/sys",
        "/proc/sysrq-trigger",
        "/proc/irq",
        "/proc/bus",
        "/proc/fs",
        // Init, which serves a session's steps, shares their uid, and
        // raising a process's OOM score needs no privilege (proc(5)): a
        // step would make init the first process the OOM killer takes.
        "/proc/1/oom_score_adj",
        "/proc/1/oom_adj",
    ] {
        let p = Path::new(p);
        if p.exists() {
            bind(p, p, true)?;
            remount(p, true)?;
        }
    }
    for p in [
        "/proc/kcore",
        "/proc/keys",
        "/proc/timer_list",
        "/proc/sched_debug",
        "/proc/acpi",
        "/proc/scsi",
    ] {
        let p = Path::new(p);
        if p.exists() {
            cover(p)?;
            if p.is_dir() {
                remount(p, true)?;
            }
        }
    }
    Ok(())
}

fn open_path(path: &Path) -> Result<OwnedFd> {
    open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).map_err(sys_err(Step::Open, path))
}

/// Run inside the new mount namespace, before the command exists.
pub(crate) fn setup(plan: &Plan) -> Result<()> {
    mount(NONE, "/", NONE, MsFlags::MS_REC | MsFlags::MS_PRIVATE, NONE)
        .map_err(sys_err(Step::MakePrivate, Path::new("/")))?;
    // Grab the grants before anything is covered (the workspace may live under /tmp or ~).
    let grant_fds = plan
        .grants
        .iter()
        .map(|g| open_path(&g.path))
        .collect::<Result<Vec<_>>>()?;

    remount_all_readonly()?;

    let run = Path::new("/run");
    mkdir_p(run).ok();
    mount_tmpfs(
        run,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=0755,size=16m",
    )?;
    let airlock_run = run.join("airlock");
    mkdir_p(&airlock_run)?;
    let resolv = airlock_run.join("resolv.conf");
    let dns_ip = DNS_ADDR.ip();
    write_file(
        &resolv,
        format!("nameserver {dns_ip}\noptions edns0\n").as_bytes(),
    )?;

    mount_tmpfs(
        Path::new("/tmp"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        &format!("mode=1777,size={}", plan.limits.tmp_bytes),
    )?;
    setup_dev(&airlock_run.join("dev"))?;
    if let Some(target) = &plan.resolv_target {
        // A resolv.conf symlinked into /run now points into our fresh /run.
        if target.starts_with(run) {
            ensure_mount_point(target, false)?;
        }
        if target.exists() {
            bind(&resolv, target, false)?;
            remount(target, true)?;
        }
    }
    if let Some(host_entries) = &plan.hosts {
        // The sandbox's hostname resolves locally, as on any machine
        // (git, sudo and Python's getfqdn look it up): otherwise the lookup
        // goes to the proxy's resolver, the record shows a refused name,
        // and the refusal notice advises allowing the sandbox's own name.
        let hosts = airlock_run.join("hosts");
        let mut text = host_entries.clone();
        if !text.is_empty() && !text.ends_with(b"\n") {
            text.push(b'\n');
        }
        text.extend_from_slice(format!("127.0.1.1\t{}\n", plan.hostname).as_bytes());
        write_file(&hosts, &text)?;
        let target = Path::new(crate::plan::HOSTS_FILE);
        bind(&hosts, target, false)?;
        remount(target, true)?;
    }
    if let Some(pem) = &plan.ca_bundle {
        let ca = Path::new(CA_BUNDLE_PATH);
        write_file(ca, pem)?;
        for target in &plan.ca_targets {
            bind(ca, target, false)?;
            remount(target, true)?;
        }
    }

    // Hide: outermost first; anything under an already covered path is gone anyway.
    let mut covered: Vec<&Path> = Vec::new();
    for h in &plan.hides {
        // Not there (e.g. under the fresh /tmp) means not visible; grants may
        // bring it back, and the pass after the grants covers it then.
        if h.path.starts_with(run)
            || covered.iter().any(|c| h.path.starts_with(c))
            || h.path.symlink_metadata().is_err()
        {
            continue;
        }
        cover(&h.path)?;
        covered.push(&h.path);
    }
    // Grants come back on top, parents first, from the descriptors opened above.
    for (g, fd) in plan.grants.iter().zip(&grant_fds) {
        let src = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        ensure_mount_point(&g.path, src.is_dir())?;
        bind(&src, &g.path, true)?;
        remount(&g.path, !g.writable)?;
    }
    // Secrets inside a granted tree stay hidden unless granted themselves;
    // forced hides (CA key dirs, --hide) win over any grant.
    for h in &plan.hides {
        let inside_grant = plan.grants.iter().any(|g| h.path.starts_with(&g.path));
        let granted = plan.grants.iter().any(|g| g.path.starts_with(&h.path));
        if inside_grant && (h.forced || !granted) && h.path.exists() {
            cover(&h.path)?;
            if h.path.is_dir() {
                remount(&h.path, true)?;
            }
        }
    }
    for c in &covered {
        // A grant of exactly this path sits on top now; leave it alone.
        if c.is_dir() && !plan.grants.iter().any(|g| g.path == *c) {
            remount(c, true)?;
        }
    }
    remount(run, true)?;
    // /dev stores no file of the command's: its nodes, /dev/pts and /dev/shm
    // are mounts of their own, which this remount leaves alone (mount(2):
    // MS_REMOUNT|MS_BIND changes the flags of this one mount only). Writable,
    // it was a place to stash files that no record saw. It is populated by
    // now, grants' mount points under it included, so it goes read-only last.
    // A grant of /dev itself sits on top and keeps its own mode.
    let dev = Path::new("/dev");
    if !plan.grants.iter().any(|g| g.path == dev) {
        remount(dev, true)?;
    }
    setup_proc()?;
    nix::unistd::chdir(&plan.workspace).map_err(sys_err(Step::Chdir, &plan.workspace))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::{MountError, Step, sys_err};

    #[test]
    fn errors_name_the_step_and_the_path() {
        let e = sys_err(Step::Bind(PathBuf::from("/a")), Path::new("/b"))(nix::errno::Errno::EPERM);
        assert_eq!(
            e.to_string(),
            "bind /a on /b: EPERM: Operation not permitted"
        );
        let e = MountError::File {
            step: Step::Mkdir,
            path: PathBuf::from("/x"),
            source: std::io::Error::from_raw_os_error(libc::EROFS),
        };
        assert_eq!(
            e.to_string(),
            "mkdir /x: Read-only file system (os error 30)"
        );
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(super::unescape("/a\\040b\\134c"), PathBuf::from("/a b\\c"));
    }
}
