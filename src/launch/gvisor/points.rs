//! gVisor's trace points as the remote sink sends them: an 8-byte header
//! (header size, message type, dropped count; little-endian) and a
//! protobuf payload. Only the fields Airlock records are decoded, by their
//! numbers in gVisor's `pkg/sentry/seccheck/points/{common,container,sentry}.proto`;
//! everything else is skipped. The sentry is not trusted (gVisor's own
//! rule for sinks): every length is checked and a malformed message is an
//! error, never a panic.

use thiserror::Error;

/// `MessageType` values (common.proto).
const MESSAGE_CONTAINER_START: u16 = 1;
const MESSAGE_SENTRY_EXEC: u16 = 3;
const MESSAGE_SENTRY_TASK_EXIT: u16 = 5;
const MESSAGE_SYSCALL_RAW: u16 = 6;
const MESSAGE_SYSCALL_OPEN: u16 = 7;
const MESSAGE_SYSCALL_CLOSE: u16 = 8;

/// The header's fixed part (wire.go `HeaderStructSize`).
const HEADER_SIZE: usize = 8;

/// How many strings one message may carry (argv and environment): more is
/// malformed, not recorded.
const MAX_STRINGS: usize = 64 * 1024;

#[derive(Debug, Error)]
pub(crate) enum PointError {
    #[error("a trace point shorter than its header ({0} bytes)")]
    Short(usize),
    #[error("a malformed trace point message ({0})")]
    Malformed(&'static str),
}

/// One trace point, as far as the record needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Point {
    /// The container's first process (`container/start`): never an execve.
    Start { cwd: Vec<u8>, argv: Vec<Vec<u8>> },
    /// A successful execve (`sentry/execve`).
    Exec(ExecPoint),
    /// An `open`, `openat` or `creat` returned (`syscall/*/exit`).
    Open(Call),
    /// A `close` returned; `fd` is the descriptor closed.
    Close(Call),
    /// A raw syscall point (`syscall/sysno/N/exit`): no paths, only that
    /// it ran and how it ended.
    Syscall(Call),
    /// A task exited (`sentry/task_exit`).
    TaskExit { tgid: i32 },
    /// A point Airlock does not record.
    Other,
}

/// A system call as its trace point tells it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Call {
    pub tgid: i32,
    pub sysno: u64,
    /// `open*`: the new descriptor (the result); `close`: the one closed.
    pub fd: i64,
    /// `open*`: the flags.
    pub flags: u32,
    /// It succeeded: no errno, a result not negative.
    pub ok: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ExecPoint {
    /// Thread id in gVisor's root pid namespace.
    pub tid: i32,
    /// Thread group (process) id.
    pub tgid: i32,
    pub uid: u32,
    /// Bytes, as Linux has them (the namespace sandbox records them so).
    pub cwd: Vec<u8>,
    pub path: Vec<u8>,
    pub argv: Vec<Vec<u8>>,
    pub env: Vec<Vec<u8>>,
}

/// A message and how many points the sentry dropped before it.
#[derive(Debug)]
pub(crate) struct Message {
    pub dropped: u32,
    pub point: Point,
}

pub(crate) fn decode(raw: &[u8]) -> Result<Message, PointError> {
    if raw.len() < HEADER_SIZE {
        return Err(PointError::Short(raw.len()));
    }
    let header_size = usize::from(u16::from_le_bytes([raw[0], raw[1]]));
    let kind = u16::from_le_bytes([raw[2], raw[3]]);
    let dropped = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
    if header_size < HEADER_SIZE || header_size > raw.len() {
        return Err(PointError::Malformed("header size"));
    }
    let payload = &raw[header_size..];
    let point = match kind {
        MESSAGE_CONTAINER_START => start(payload)?,
        MESSAGE_SENTRY_EXEC => Point::Exec(exec(payload)?),
        MESSAGE_SENTRY_TASK_EXIT => Point::TaskExit {
            tgid: group(payload)?,
        },
        MESSAGE_SYSCALL_RAW => Point::Syscall(call(payload, 4)?.call),
        MESSAGE_SYSCALL_OPEN => {
            let mut c = call(payload, 3)?;
            // The descriptor an open returns is its result.
            c.call.fd = c.result;
            Point::Open(c.call)
        }
        MESSAGE_SYSCALL_CLOSE => Point::Close(call(payload, 3)?.call),
        _ => Point::Other,
    };
    Ok(Message { dropped, point })
}

/// `gvisor.container.Start`: 3 cwd, 4 args.
fn start(payload: &[u8]) -> Result<Point, PointError> {
    let (mut cwd, mut argv) = (Vec::new(), Vec::new());
    for field in Fields(payload) {
        match field? {
            (3, Value::Bytes(b)) => cwd = b.to_vec(),
            (4, Value::Bytes(b)) => push(&mut argv, b)?,
            _ => {}
        }
    }
    Ok(Point::Start { cwd, argv })
}

/// `gvisor.sentry.ExecveInfo`: 1 common, 2 binary_path, 3 argv, 4 env.
fn exec(payload: &[u8]) -> Result<ExecPoint, PointError> {
    let mut e = ExecPoint::default();
    for field in Fields(payload) {
        match field? {
            (1, Value::Bytes(b)) => common(b, &mut e)?,
            (2, Value::Bytes(b)) => e.path = b.to_vec(),
            (3, Value::Bytes(b)) => push(&mut e.argv, b)?,
            (4, Value::Bytes(b)) => push(&mut e.env, b)?,
            _ => {}
        }
    }
    Ok(e)
}

/// `gvisor.common.Common`: 2 thread_id, 4 thread_group_id, 7 credentials
/// (2 effective_uid), 8 cwd.
fn common(b: &[u8], e: &mut ExecPoint) -> Result<(), PointError> {
    for field in Fields(b) {
        match field? {
            (2, Value::Varint(v)) => e.tid = v as i32,
            (4, Value::Varint(v)) => e.tgid = v as i32,
            (7, Value::Bytes(creds)) => {
                for f in Fields(creds) {
                    if let (2, Value::Varint(v)) = f? {
                        e.uid = v as u32;
                    }
                }
            }
            (8, Value::Bytes(cwd)) => e.cwd = cwd.to_vec(),
            _ => {}
        }
    }
    Ok(())
}

/// `gvisor.sentry.TaskExit` and others whose field 1 is `Common`: the
/// thread group.
fn group(payload: &[u8]) -> Result<i32, PointError> {
    let mut e = ExecPoint::default();
    for field in Fields(payload) {
        if let (1, Value::Bytes(b)) = field? {
            common(b, &mut e)?;
        }
    }
    Ok(e.tgid)
}

struct Decoded {
    call: Call,
    result: i64,
}

/// `gvisor.syscall.{Syscall,Open,Close}`: 1 common, 2 exit (1 result,
/// 2 errorno), then the syscall number (`sysno_field`: 4 in `Syscall`, 3
/// in the others), 4 fd and 7 flags in `Open` and `Close`.
fn call(payload: &[u8], sysno_field: u64) -> Result<Decoded, PointError> {
    let mut e = ExecPoint::default();
    let (mut call, mut result, mut errno) = (Call::default(), 0i64, 0i64);
    for field in Fields(payload) {
        match field? {
            (1, Value::Bytes(b)) => common(b, &mut e)?,
            (2, Value::Bytes(b)) => {
                for f in Fields(b) {
                    match f? {
                        (1, Value::Varint(v)) => result = v as i64,
                        (2, Value::Varint(v)) => errno = v as i64,
                        _ => {}
                    }
                }
            }
            (n, Value::Varint(v)) if n == sysno_field => call.sysno = v,
            (4, Value::Varint(v)) if sysno_field == 3 => call.fd = v as i64,
            (7, Value::Varint(v)) if sysno_field == 3 => call.flags = v as u32,
            _ => {}
        }
    }
    call.tgid = e.tgid;
    call.ok = errno == 0 && result >= 0;
    Ok(Decoded { call, result })
}

fn push(list: &mut Vec<Vec<u8>>, b: &[u8]) -> Result<(), PointError> {
    if list.len() >= MAX_STRINGS {
        return Err(PointError::Malformed("too many strings"));
    }
    list.push(b.to_vec());
    Ok(())
}

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one protobuf message, in order.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), PointError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        Some(self.field())
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<(u64, Value<'a>), PointError> {
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => self.skip(8)?,
            2 => {
                let len =
                    usize::try_from(self.varint()?).map_err(|_| PointError::Malformed("length"))?;
                if len > self.0.len() {
                    return Err(PointError::Malformed("length past the end"));
                }
                let (bytes, rest) = self.0.split_at(len);
                self.0 = rest;
                Value::Bytes(bytes)
            }
            5 => self.skip(4)?,
            _ => return Err(PointError::Malformed("wire type")),
        };
        Ok((key >> 3, value))
    }

    fn skip(&mut self, n: usize) -> Result<Value<'a>, PointError> {
        if n > self.0.len() {
            return Err(PointError::Malformed("fixed field past the end"));
        }
        self.0 = &self.0[n..];
        Ok(Value::Fixed)
    }

    fn varint(&mut self) -> Result<u64, PointError> {
        let mut value = 0u64;
        for (i, byte) in self.0.iter().enumerate().take(10) {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(value);
            }
        }
        Err(PointError::Malformed("varint"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `sentry/execve` message as runsc 0.0~20221219 sent it (captured
    /// from a real sandbox, environment shortened).
    const EXEC: &[u8] = b"\x08\x00\x03\x00\x00\x00\x00\x00\n\x10\x10\x02 \x02:\x00B\x08/tmp/gvt\x12\x0c/usr/bin/cat\x1a\x03cat\x1a\r/etc/hostname\"\x06HOME=/";

    #[test]
    fn a_captured_exec_point_decodes_to_its_path_argv_and_process() {
        let m = decode(EXEC).unwrap();
        assert_eq!(m.dropped, 0);
        assert_eq!(
            m.point,
            Point::Exec(ExecPoint {
                tid: 2,
                tgid: 2,
                uid: 0,
                cwd: "/tmp/gvt".into(),
                path: "/usr/bin/cat".into(),
                argv: vec!["cat".into(), "/etc/hostname".into()],
                env: vec!["HOME=/".into()],
            })
        );
    }

    /// Linux's arguments are bytes, and so is the record of them: an
    /// argument that is not UTF-8 (were gVisor to send one) keeps its bytes.
    #[test]
    fn an_exec_points_strings_are_kept_byte_for_byte() {
        let mut raw = EXEC.to_vec();
        // argv[0], "cat", sits before argv[1] and the environment.
        let argv0 = raw.len() - b"cat\x1a\r/etc/hostname\"\x06HOME=/".len();
        assert_eq!(&raw[argv0..argv0 + 3], b"cat");
        raw[argv0 + 1] = 0xff;
        let Point::Exec(e) = decode(&raw).unwrap().point else {
            panic!("not an exec")
        };
        assert_eq!(e.argv[0], b"c\xfft");
        assert_eq!(e.path, b"/usr/bin/cat");
    }

    /// `syscall/openat/exit` of `echo hi > new` (O_WRONLY|O_CREAT|O_TRUNC,
    /// fd 3), `syscall/close/exit` of fd 3, and a raw `renameat2` exit, as
    /// runsc 0.0~20221219 sent them.
    const OPEN: &[u8] = b"\x08\x00\x07\x00\x00\x00\x00\x00\n\x04\x10\x01 \x01\x12\x02\x08\x03\x18\x81\x02 \x9c\xff\xff\xff\xff\xff\xff\xff\xff\x012\x03new8\xc1\x04@\xb6\x03";
    const CLOSE: &[u8] =
        b"\x08\x00\x08\x00\x00\x00\x00\x00\n\x02 \x01\x12\x00\x18\x03 \x03*\x13[err: FD not found]";
    const RENAME: &[u8] = b"\x08\x00\x06\x00\x00\x00\x00\x00\x12\x00 \xbc\x02(\x9c\xff\xff\xff\x0f0\xce\xb5\x9b\xed\xaa\xfd\x1f8\x9c\xff\xff\xff\x0f@\xd2\xb5\x9b\xed\xaa\xfd\x1fH\x01";

    #[test]
    fn captured_open_close_and_raw_syscall_points_decode_to_their_process_descriptor_and_outcome() {
        let open = decode(OPEN).unwrap().point;
        assert_eq!(
            open,
            Point::Open(Call {
                tgid: 1,
                sysno: 257,
                fd: 3,
                flags: 0o1101,
                ok: true
            })
        );
        let close = decode(CLOSE).unwrap().point;
        assert_eq!(
            close,
            Point::Close(Call {
                tgid: 1,
                sysno: 3,
                fd: 3,
                flags: 0,
                ok: true
            })
        );
        let Point::Syscall(rename) = decode(RENAME).unwrap().point else {
            panic!("not a raw syscall point");
        };
        assert_eq!((rename.sysno, rename.ok), (316, true));
    }

    #[test]
    fn a_hostile_message_is_an_error_never_a_panic() {
        for cut in 0..EXEC.len() {
            let _ = decode(&EXEC[..cut]);
        }
        let mut huge = EXEC.to_vec();
        huge[8 + 1] = 0xff;
        assert!(decode(&huge).is_err());
        for cut in 0..OPEN.len() {
            let _ = decode(&OPEN[..cut]);
        }
        assert!(decode(b"\x02\x00\x03\x00\x00\x00\x00\x00").is_err());
        assert!(
            decode(b"\x08\x00\x03\x00\x00\x00\x00\x00\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
                .is_err()
        );
    }
}
