//! Size, SHA-256 and (small enough) content of one file, read through a
//! descriptor the observer already holds: never by looking a name up again,
//! so what is captured is the inode the kernel named.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;

use sha2::{Digest, Sha256};

/// Size, hash and (small enough) content of one file.
#[derive(Debug, Default, Clone)]
pub(crate) struct Captured {
    pub size: Option<u64>,
    pub sha256: Option<String>,
    pub content: Option<Vec<u8>>,
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// SHA-256 (hex) of bytes already in memory (a symlink's target).
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Capture what `handle` (an O_PATH or readable descriptor) refers to: size
/// of anything, SHA-256 and content of a regular file, content only when
/// the whole file is at most `max_content` bytes. A regular file is
/// re-opened read-only through /proc/self/fd (proc_pid_fd(5)) only after
/// fstat said it is one: opening a FIFO or device could block or have
/// effects.
pub(crate) fn capture(handle: &File, max_content: u64) -> Captured {
    let Ok(meta) = handle.metadata() else {
        return Captured::default();
    };
    if !meta.is_file() {
        return Captured {
            size: (!meta.is_dir()).then_some(meta.len()),
            ..Captured::default()
        };
    }
    let Ok(file) = File::open(format!("/proc/self/fd/{}", handle.as_raw_fd())) else {
        return Captured {
            size: Some(meta.len()),
            ..Captured::default()
        };
    };
    read_all(file, max_content).unwrap_or(Captured {
        size: Some(meta.len()),
        ..Captured::default()
    })
}

/// SHA-256 (hex) of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Size, hash and (up to `max_content` bytes) content of a value in hand,
/// such as an extended attribute's.
pub(crate) fn bytes(value: Vec<u8>, max_content: u64) -> Captured {
    let size = value.len() as u64;
    Captured {
        size: Some(size),
        sha256: Some(sha256(&value)),
        content: (size <= max_content).then_some(value),
    }
}

/// Hash (and keep up to `max_content` bytes of) a readable file from its start.
pub(crate) fn read_all(mut file: File, max_content: u64) -> Option<Captured> {
    file.seek(SeekFrom::Start(0)).ok()?;
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
            Err(_) => return None,
        }
    }
    Some(Captured {
        size: Some(total),
        sha256: Some(hex(&hasher.finalize())),
        content: (total <= max_content).then_some(content),
    })
}
