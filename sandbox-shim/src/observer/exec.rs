//! What the kernel executed, read at the PTRACE_EVENT_EXEC stop: after the
//! exec succeeded and before the new image runs its first instruction
//! (ptrace(2) "execve(2) under ptrace"). At that moment the process has one
//! thread and has not run any code of its own, so /proc/PID/exe, cmdline and
//! environ are the kernel's answer (proc_pid_exe(5), proc_pid_cmdline(5)),
//! not arguments read before the syscall that a sibling thread could swap.

use nix::unistd::Pid;
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;

use super::resolve::{self, Viewer};
use crate::capture::{self, Captured};
use airlock_record::{ExecFile, ExecImage};

use crate::observation::ImageKind;
use crate::procfs::{self, Status};

/// auxv entry holding the filename execve(2) was given (getauxval(3)).
const AT_EXECFN: u64 = 31;
/// Longest cmdline or environ we keep (the kernel allows a quarter of the
/// stack limit; a record does not need more).
const MAX_STRINGS_BYTES: u64 = 1 << 20;
/// Dynamic loader options that take a value (ld.so(8)).
const LOADER_OPTIONS_WITH_VALUE: [&str; 7] = [
    "--library-path",
    "--preload",
    "--argv0",
    "--audit",
    "--inhibit-rpath",
    "--glibc-hwcaps-prepend",
    "--glibc-hwcaps-mask",
];

/// One successful exec, as the kernel performed it.
#[derive(Debug)]
pub(super) struct Executed {
    pub status: Status,
    /// readlink(/proc/PID/exe): the resolved path, or `/memfd:NAME (deleted)`,
    /// or `PATH (deleted)`.
    pub path: Vec<u8>,
    pub image: ExecImage,
    /// The image's bytes when it has no path on disk to restore it from.
    pub pathless: Option<Captured>,
    pub argv: Vec<Vec<u8>>,
    pub env: Vec<Vec<u8>>,
    pub cwd: Vec<u8>,
}

/// SHA-256 of files by identity and change times, so the same binary is
/// hashed once however often it runs.
#[derive(Debug, Default)]
pub(super) struct Hashes {
    known: HashMap<Identity, String>,
}

/// A file's identity and change times: (dev, ino, mtime, mtime ns, ctime,
/// ctime ns, size). Any write changes ctime (inode(7)).
type Identity = (u64, u64, i64, i64, i64, i64, u64);

impl Hashes {
    fn sha256(&mut self, file: &File, max_content: u64) -> (Option<String>, Option<Captured>) {
        let Ok(meta) = file.metadata() else {
            return (None, None);
        };
        let key = (
            meta.dev(),
            meta.ino(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec(),
            meta.len(),
        );
        if let Some(hash) = self.known.get(&key) {
            return (Some(hash.clone()), None);
        }
        let captured = file
            .try_clone()
            .ok()
            .and_then(|f| capture::read_all(f, max_content));
        let hash = captured.as_ref().and_then(|c| c.sha256.clone());
        if let Some(h) = &hash {
            self.known.insert(key, h.clone());
        }
        (hash, captured)
    }
}

fn split_nul(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

fn read_limited(path: String) -> Vec<u8> {
    let mut out = Vec::new();
    if let Ok(f) = File::open(path) {
        let _ = f.take(MAX_STRINGS_BYTES).read_to_end(&mut out);
    }
    out
}

/// The filename execve(2) was given, from the new image's auxiliary vector.
fn exec_filename(tgid: Pid) -> Option<Vec<u8>> {
    let auxv = std::fs::read(format!("/proc/{tgid}/auxv")).ok()?;
    let addr = auxv.chunks_exact(16).find_map(|pair| {
        let key = u64::from_ne_bytes(pair[..8].try_into().ok()?);
        let value = u64::from_ne_bytes(pair[8..].try_into().ok()?);
        (key == AT_EXECFN).then_some(value)
    })?;
    let mem = procfs::open_mem(tgid)?;
    procfs::read_cstr(&mem, addr)
}

fn kind_of(path: &[u8]) -> ImageKind {
    if path.starts_with(b"/memfd:") {
        ImageKind::Memfd
    } else if path.ends_with(b" (deleted)") {
        ImageKind::Deleted
    } else {
        ImageKind::File
    }
}

fn is_loader(path: &[u8]) -> bool {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    name.starts_with(b"ld-linux") || name.starts_with(b"ld-musl") || name == b"ld.so"
}

/// The program ld.so was asked to load: its first argument that is not an option.
fn loader_target(argv: &[Vec<u8>]) -> Option<&[u8]> {
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        if LOADER_OPTIONS_WITH_VALUE
            .iter()
            .any(|o| o.as_bytes() == arg.as_slice())
        {
            args.next();
        } else if !arg.starts_with(b"--") {
            return Some(arg);
        }
    }
    None
}

/// For a `#!` script the kernel rewrites argv to `interpreter [arg] script
/// args...` with `script` the filename execve was given (binfmt_script, see
/// execve(2) "Interpreter scripts"); only then is the file worth opening.
fn may_be_script(argv: &[Vec<u8>], filename: &[u8]) -> bool {
    argv.iter().skip(1).take(2).any(|a| a == filename)
}

/// A file the tracee named, resolved in its view and hashed.
fn file_ref(viewer: Viewer, name: &[u8], hashes: &mut Hashes) -> Option<(ExecFile, File)> {
    let resolved = resolve::resolve(viewer, libc::AT_FDCWD, name, true)?;
    let handle = resolved.open()?;
    let file = File::open(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&handle)
    ))
    .ok()?;
    let (sha256, _) = hashes.sha256(&file, 0);
    Some((
        ExecFile {
            path: resolved.path.into(),
            sha256,
        },
        file,
    ))
}

fn same_file(a: &File, b: &File) -> bool {
    match (a.metadata(), b.metadata()) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

fn starts_with_shebang(file: &File) -> bool {
    let mut head = [0u8; 2];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut head, 0).is_ok() && &head == b"#!"
}

/// Read the exec that process `tgid` (host pid) has just performed.
pub(super) fn read(tgid: Pid, max_content: u64, hashes: &mut Hashes) -> Option<Executed> {
    let status = procfs::status(tgid)?;
    let path = std::fs::read_link(format!("/proc/{tgid}/exe"))
        .ok()?
        .into_os_string()
        .into_vec();
    let kind = kind_of(&path);
    let exe = File::open(format!("/proc/{tgid}/exe")).ok();
    let (sha256, captured) = match &exe {
        Some(f) => hashes.sha256(
            f,
            if kind == ImageKind::File {
                0
            } else {
                max_content
            },
        ),
        None => (None, None),
    };
    let pathless = match kind {
        ImageKind::File => None,
        // A cached hash means we read these bytes before: read them again
        // for this exec's record.
        _ => captured.or_else(|| {
            exe.as_ref()
                .and_then(|f| f.try_clone().ok())
                .and_then(|f| capture::read_all(f, max_content))
        }),
    };
    let argv = split_nul(&read_limited(format!("/proc/{tgid}/cmdline")));
    let env = split_nul(&read_limited(format!("/proc/{tgid}/environ")));
    let cwd = procfs::cwd(tgid).unwrap_or_default();
    let viewer = Viewer { tid: tgid, tgid };
    let mut script = None;
    if let (Some(exe), Some(name)) = (&exe, exec_filename(tgid))
        && may_be_script(&argv, &name)
        && let Some((found, file)) = file_ref(viewer, &name, hashes)
        && !same_file(exe, &file)
        && starts_with_shebang(&file)
    {
        script = Some(found);
    }
    let loaded = is_loader(&path)
        .then(|| loader_target(&argv))
        .flatten()
        .and_then(|target| file_ref(viewer, target, hashes))
        .map(|(found, _)| found);
    Some(Executed {
        status,
        image: ExecImage {
            image: Some(kind.as_str().to_owned()),
            sha256,
            script,
            loaded,
        },
        path,
        pathless,
        argv,
        env,
        cwd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loader_targets_skip_options() {
        let argv: Vec<Vec<u8>> = [
            "/lib64/ld-linux-x86-64.so.2",
            "--library-path",
            "/x",
            "--inhibit-cache",
            "./prog",
            "arg",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        assert_eq!(loader_target(&argv), Some(&b"./prog"[..]));
        assert!(is_loader(b"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"));
        assert!(!is_loader(b"/usr/bin/python3"));
    }

    #[test]
    fn image_kinds() {
        assert_eq!(kind_of(b"/memfd:x (deleted)"), ImageKind::Memfd);
        assert_eq!(kind_of(b"/ws/prog (deleted)"), ImageKind::Deleted);
        assert_eq!(kind_of(b"/usr/bin/true"), ImageKind::File);
    }
}
