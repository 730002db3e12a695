//! The wire form of a [`StepRequest`]: argv and environment exceed the
//! channel's 4096-byte messages, so the request travels in a sealed memfd
//! (memfd_create(2), fcntl(2) "File Sealing") attached to the
//! [`super::Message::Exec`] that names its step.
//!
//! Layout, little-endian: step (u64); argc (u32) then each argument as
//! length (u32) and bytes; the number of variables (u32) then each name and
//! value likewise; cwd as a flag byte (0/1) and, when 1, length and bytes;
//! terminal as a flag byte and, when 1, columns and rows (u16 each).

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

use crate::error::ShimError;
use crate::pty::WindowSize;
use crate::step::{MAX_STEP, StepError, StepId, StepRequest};

/// Largest request: far above any real command line (the kernel's own
/// limit for argv plus environment is a quarter of the stack rlimit,
/// execve(2)), and small enough that a broken sender cannot make the
/// launcher allocate without bound.
pub(crate) const MAX_REQUEST: usize = 8 << 20;

/// Why the launcher could not read a request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    #[error("read the step request: {0}")]
    Io(#[from] std::io::Error),
    #[error("the step request takes {len} bytes, more than the {MAX_REQUEST}-byte limit")]
    TooLarge { len: u64 },
    #[error("the step request is malformed: {0}")]
    Malformed(&'static str),
    #[error("the step request names {inside} but came as {outside}")]
    StepMismatch { inside: StepId, outside: StepId },
    #[error(transparent)]
    Invalid(#[from] StepError),
}

/// What both sides check: a command to run, strings that can become C
/// strings, variable names that can be names, a number that fits the
/// holder's name.
pub(crate) fn validate(request: &StepRequest) -> Result<(), StepError> {
    let step = request.step;
    if request.argv.is_empty() {
        return Err(StepError::EmptyCommand { step });
    }
    if step.0 > MAX_STEP {
        return Err(StepError::NumberTooLarge { step });
    }
    let nul = |bytes: &[u8]| bytes.contains(&0);
    if request.argv.iter().any(|a| nul(a.as_bytes())) {
        return Err(StepError::Nul {
            step,
            what: "a command argument",
        });
    }
    for (k, v) in &request.env {
        if k.is_empty() || k.as_bytes().contains(&b'=') || nul(k.as_bytes()) {
            return Err(StepError::EnvName {
                step,
                name: k.to_string_lossy().into_owned(),
            });
        }
        if nul(v.as_bytes()) {
            return Err(StepError::Nul {
                step,
                what: "an environment value",
            });
        }
    }
    if request
        .cwd
        .as_ref()
        .is_some_and(|c| nul(c.as_os_str().as_bytes()))
    {
        return Err(StepError::Nul {
            step,
            what: "the working directory",
        });
    }
    Ok(())
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Lengths beyond u32 are refused by the size check before this is sent.
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The request's bytes, validated and bounded.
pub(crate) fn encode(request: &StepRequest) -> Result<Vec<u8>, StepError> {
    validate(request)?;
    let step = request.step;
    let len = 8
        + 4
        + request.argv.iter().map(|a| 4 + a.len()).sum::<usize>()
        + 4
        + request
            .env
            .iter()
            .map(|(k, v)| 8 + k.len() + v.len())
            .sum::<usize>()
        + 1
        + request.cwd.as_ref().map_or(0, |c| 4 + c.as_os_str().len())
        + 1
        + 4;
    if len > MAX_REQUEST {
        return Err(StepError::TooLarge {
            step,
            len,
            max: MAX_REQUEST,
        });
    }
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&step.0.to_le_bytes());
    out.extend_from_slice(&(request.argv.len() as u32).to_le_bytes());
    for a in &request.argv {
        put_bytes(&mut out, a.as_bytes());
    }
    out.extend_from_slice(&(request.env.len() as u32).to_le_bytes());
    for (k, v) in &request.env {
        put_bytes(&mut out, k.as_bytes());
        put_bytes(&mut out, v.as_bytes());
    }
    match &request.cwd {
        Some(c) => {
            out.push(1);
            put_bytes(&mut out, c.as_os_str().as_bytes());
        }
        None => out.push(0),
    }
    match request.terminal {
        Some(size) => {
            out.push(1);
            out.extend_from_slice(&size.cols.to_le_bytes());
            out.extend_from_slice(&size.rows.to_le_bytes());
        }
        None => out.push(0),
    }
    Ok(out)
}

/// A cursor over the request's bytes that never reads past the end.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RequestError> {
        if self.rest.len() < n {
            return Err(RequestError::Malformed("it ends early"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], RequestError> {
        let bytes = self.take(N)?;
        bytes
            .try_into()
            .map_err(|_| RequestError::Malformed("it ends early"))
    }

    fn u32(&mut self) -> Result<usize, RequestError> {
        Ok(u32::from_le_bytes(self.array()?) as usize)
    }

    fn os(&mut self) -> Result<OsString, RequestError> {
        let len = self.u32()?;
        Ok(OsString::from_vec(self.take(len)?.to_vec()))
    }

    fn flag(&mut self) -> Result<bool, RequestError> {
        match self.take(1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(RequestError::Malformed("a flag byte is neither 0 nor 1")),
        }
    }

    /// A count of items that each take at least `min` bytes: a count the
    /// remaining bytes cannot hold is refused before anything is allocated.
    fn count(&mut self, min: usize) -> Result<usize, RequestError> {
        let n = self.u32()?;
        if n.saturating_mul(min) > self.rest.len() {
            return Err(RequestError::Malformed(
                "a count exceeds the bytes that follow",
            ));
        }
        Ok(n)
    }
}

/// Read a request back (and check it as the sender did).
pub(crate) fn decode(bytes: &[u8]) -> Result<StepRequest, RequestError> {
    let mut r = Reader { rest: bytes };
    let step = StepId(u64::from_le_bytes(r.array()?));
    let argc = r.count(4)?;
    let argv = (0..argc).map(|_| r.os()).collect::<Result<Vec<_>, _>>()?;
    let envc = r.count(8)?;
    let env = (0..envc)
        .map(|_| Ok((r.os()?, r.os()?)))
        .collect::<Result<Vec<_>, RequestError>>()?;
    let cwd = match r.flag()? {
        true => Some(PathBuf::from(r.os()?)),
        false => None,
    };
    let terminal = match r.flag()? {
        true => Some(WindowSize {
            cols: u16::from_le_bytes(r.array()?),
            rows: u16::from_le_bytes(r.array()?),
        }),
        false => None,
    };
    if !r.rest.is_empty() {
        return Err(RequestError::Malformed("bytes follow its end"));
    }
    let request = StepRequest {
        step,
        argv,
        env,
        cwd,
        terminal,
    };
    validate(&request)?;
    Ok(request)
}

/// The request in a new memfd, sealed against any change (F_SEAL_WRITE,
/// F_SEAL_SHRINK, F_SEAL_GROW, then F_SEAL_SEAL): what the launcher reads
/// is what was checked here.
pub(crate) fn to_memfd(request: &StepRequest) -> Result<OwnedFd, ShimError> {
    let bytes = encode(request)?;
    let fd = memfd_create(
        c"airlock-step",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(|e| ShimError::io("memfd_create for a step request", e))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&bytes)
        .map_err(|e| ShimError::io("write a step request", e))?;
    let seals = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SEAL;
    fcntl(&file, FcntlArg::F_ADD_SEALS(seals))
        .map_err(|e| ShimError::io("seal a step request", e))?;
    Ok(file.into())
}

/// Read and decode the request in `memfd`, at most [`MAX_REQUEST`] bytes.
/// pread(2) from offset 0: the descriptor shares the sender's file offset,
/// which stands at the end.
pub(crate) fn from_memfd(memfd: OwnedFd) -> Result<StepRequest, RequestError> {
    let file = std::fs::File::from(memfd);
    let len = file.metadata()?.len();
    if len > MAX_REQUEST as u64 {
        return Err(RequestError::TooLarge { len });
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)?;
    decode(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> StepRequest {
        StepRequest {
            step: StepId(7),
            argv: vec!["sh".into(), "-c".into(), "echo 'a b' \u{e9}".into()],
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("EMPTY".into(), "".into()),
                (
                    "BIN".into(),
                    OsString::from_vec(vec![0xff, 0xfe, b'=', b'x']),
                ),
            ],
            cwd: Some("/tmp/work dir".into()),
            terminal: Some(WindowSize {
                cols: 120,
                rows: 40,
            }),
        }
    }

    fn assert_same(a: &StepRequest, b: &StepRequest) {
        assert_eq!(a.step, b.step);
        assert_eq!(a.argv, b.argv);
        assert_eq!(a.env, b.env);
        assert_eq!(a.cwd, b.cwd);
        assert_eq!(a.terminal, b.terminal);
    }

    #[test]
    fn a_request_survives_the_round_trip_through_a_sealed_memfd() {
        let sent = request();
        let fd = to_memfd(&sent).unwrap();
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).unwrap();
        assert_eq!(
            SealFlag::from_bits_truncate(seals),
            SealFlag::F_SEAL_WRITE
                | SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_SEAL
        );
        assert_same(&from_memfd(fd).unwrap(), &sent);

        let bare = StepRequest {
            step: StepId(1),
            argv: vec!["true".into()],
            env: vec![],
            cwd: None,
            terminal: None,
        };
        assert_same(&decode(&encode(&bare).unwrap()).unwrap(), &bare);
    }

    #[test]
    fn requests_that_cannot_run_are_refused_before_sending() {
        let step = StepId(3);
        let with = |f: fn(&mut StepRequest)| {
            let mut r = request();
            r.step = step;
            f(&mut r);
            encode(&r).unwrap_err()
        };
        assert_eq!(with(|r| r.argv.clear()), StepError::EmptyCommand { step });
        assert_eq!(
            with(|r| r.argv.push("a\0b".into())),
            StepError::Nul {
                step,
                what: "a command argument"
            }
        );
        assert_eq!(
            with(|r| r.env.push(("A=B".into(), "c".into()))),
            StepError::EnvName {
                step,
                name: "A=B".into()
            }
        );
        assert_eq!(
            with(|r| r.env.push(("".into(), "c".into()))),
            StepError::EnvName {
                step,
                name: "".into()
            }
        );
        let mut big = request();
        big.step = StepId(MAX_STEP + 1);
        assert_eq!(
            encode(&big).unwrap_err(),
            StepError::NumberTooLarge {
                step: StepId(MAX_STEP + 1)
            }
        );
    }

    #[test]
    fn a_request_past_the_size_limit_fails_loudly() {
        let mut r = request();
        r.env.push(("HUGE".into(), "x".repeat(MAX_REQUEST).into()));
        let err = encode(&r).unwrap_err();
        assert!(
            matches!(err, StepError::TooLarge { len, max: MAX_REQUEST, .. } if len > MAX_REQUEST),
            "{err}"
        );
        assert!(err.to_string().contains("8388608-byte limit"), "{err}");
    }

    #[test]
    fn malformed_requests_are_errors_not_panics() {
        let good = encode(&request()).unwrap();
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(matches!(
            decode(&trailing),
            Err(RequestError::Malformed("bytes follow its end"))
        ));
        // A count that the bytes cannot hold is refused without allocating.
        let mut huge_count = 1u64.to_le_bytes().to_vec();
        huge_count.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode(&huge_count),
            Err(RequestError::Malformed(_))
        ));
        let mut bad_flag = good;
        // The terminal flag: followed by columns and rows.
        let at = bad_flag.len() - 5;
        bad_flag[at] = 7;
        assert!(decode(&bad_flag).is_err());
    }
}
