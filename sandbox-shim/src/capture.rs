//! Reading files as the sandbox sees them, from the host: through the sandbox
//! init's root (/proc/<pid>/root, see proc_pid_root(5)) with openat2(2)
//! RESOLVE_IN_ROOT, so absolute symlinks and the private /tmp resolve inside
//! the sandbox, never on the host.

use std::fs::{File, Metadata};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use sha2::{Digest, Sha256};

/// The sandbox's `/`, held open for the observer's lifetime.
#[derive(Debug)]
pub struct SandboxRoot {
    root: OwnedFd,
}

/// Size, hash and (small enough) content of one file.
#[derive(Debug, Default)]
pub struct Captured {
    pub size: Option<u64>,
    pub sha256: Option<String>,
    pub content: Option<Vec<u8>>,
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

impl SandboxRoot {
    pub fn open(init_pid: i32) -> Option<SandboxRoot> {
        let root = nix::fcntl::open(
            format!("/proc/{init_pid}/root").as_str(),
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .ok()?;
        Some(SandboxRoot { root })
    }

    /// O_PATH handle of `path` (absolute inside the sandbox), following symlinks inside it.
    fn lookup(&self, path: &str) -> Option<File> {
        let relative = path.trim_start_matches('/');
        let relative = if relative.is_empty() { "." } else { relative };
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        openat2(&self.root, relative, how).ok().map(File::from)
    }

    pub fn metadata(&self, path: &str) -> Option<Metadata> {
        self.lookup(path)?.metadata().ok()
    }

    pub fn exists(&self, path: &str) -> bool {
        self.lookup(path).is_some()
    }

    /// What execve(2) would accept: a regular file with an execute bit.
    pub fn is_executable(&self, path: &str) -> bool {
        self.metadata(path)
            .is_some_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }

    /// Size of anything; sha256 and content of regular files we can read.
    /// Content only when the whole file is at most `max_content` bytes.
    pub fn capture(&self, path: &str, max_content: u64) -> Captured {
        let Some(handle) = self.lookup(path) else {
            return Captured::default();
        };
        let Ok(meta) = handle.metadata() else {
            return Captured::default();
        };
        if !meta.is_file() {
            return Captured {
                size: (!meta.is_dir()).then_some(meta.len()),
                ..Captured::default()
            };
        }
        // Re-open the O_PATH handle for reading: only now that we know it is a
        // regular file (opening a FIFO or device could block or have effects).
        let Ok(mut file) = File::open(format!("/proc/self/fd/{}", handle.as_raw_fd())) else {
            return Captured {
                size: Some(meta.len()),
                ..Captured::default()
            };
        };
        let mut hasher = Sha256::new();
        let mut content = Vec::new();
        let mut total: u64 = 0;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    hasher.update(&buf[..n]);
                    total += n as u64;
                    if total <= max_content {
                        content.extend_from_slice(&buf[..n]);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    return Captured {
                        size: Some(meta.len()),
                        ..Captured::default()
                    };
                }
            }
        }
        Captured {
            size: Some(total),
            sha256: Some(hex(&hasher.finalize())),
            content: (total <= max_content).then_some(content),
        }
    }
}
