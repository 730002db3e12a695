//! Reading what a sandboxed process is doing from the host side of /proc:
//! strings in its memory (/proc/<pid>/mem, see proc_pid_mem(5)), its status,
//! cwd and descriptors. Everything returns None rather than failing: the
//! process may be gone by the time we look.

use std::fs::File;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::FileExt;

use nix::unistd::Pid;

/// Longest string we copy out of a process (MAX_ARG_STRLEN, see execve(2)).
const MAX_STRING: usize = 128 * 1024;

pub(crate) fn open_mem(tid: Pid) -> Option<File> {
    File::open(format!("/proc/{tid}/mem")).ok()
}

/// A NUL-terminated string at `addr` in the target's memory.
pub(crate) fn read_cstr(mem: &File, addr: u64) -> Option<Vec<u8>> {
    if addr == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    let mut at = addr;
    while out.len() < MAX_STRING {
        // Stay inside one page per read: the next page may be unmapped.
        let page_left = 4096 - (at % 4096) as usize;
        let want = page_left.min(buf.len());
        let n = mem.read_at(&mut buf[..want], at).ok()?;
        if n == 0 {
            return None;
        }
        if let Some(end) = buf[..n].iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..n]);
        at = at.checked_add(n as u64)?;
    }
    Some(out)
}

pub(crate) fn read_u64(mem: &File, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    mem.read_exact_at(&mut b, addr).ok()?;
    Some(u64::from_ne_bytes(b))
}

/// The fields of /proc/<pid>/status we need (see proc_pid_status(5)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Status {
    pub tgid: Pid,
    /// Host pid of the parent.
    pub ppid: Pid,
    /// pid in the innermost PID namespace (last NSpid field).
    pub ns_pid: i32,
    /// Real uid as the host sees it.
    pub uid: u32,
}

pub(crate) fn status(pid: Pid) -> Option<Status> {
    let text = status_text(&format!("/proc/{pid}/status"))?;
    let mut st = Status {
        tgid: Pid::from_raw(0),
        ppid: Pid::from_raw(0),
        ns_pid: 0,
        uid: 0,
    };
    let pid = |v: Option<&str>| v?.parse().ok().map(Pid::from_raw);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let mut fields = value.split_whitespace();
        match key {
            "Tgid" => st.tgid = pid(fields.next())?,
            "PPid" => st.ppid = pid(fields.next())?,
            "Uid" => st.uid = fields.next()?.parse().ok()?,
            "NSpid" => st.ns_pid = fields.next_back()?.parse().ok()?,
            _ => {}
        }
    }
    (st.tgid.as_raw() > 0).then_some(st)
}

/// A status file (proc_pid_status(5)) as text. Read as bytes: its Name line
/// is the task's comm, which a program sets to any bytes (prctl(2)
/// PR_SET_NAME, or the name of the file it executes), and a task must not
/// be able to hide from the observer by making its status unreadable as
/// UTF-8. The numeric fields read here are ASCII whatever the name.
pub(crate) fn status_text(path: &str) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn link(path: String) -> Option<Vec<u8>> {
    let mut target = std::fs::read_link(path).ok()?.into_os_string().into_vec();
    if target.ends_with(b" (deleted)") {
        target.truncate(target.len() - b" (deleted)".len());
    }
    Some(target)
}

pub(crate) fn cwd(tid: Pid) -> Option<Vec<u8>> {
    link(format!("/proc/{tid}/cwd"))
}

pub(crate) fn fd_path(tid: Pid, fd: i32) -> Option<Vec<u8>> {
    link(format!("/proc/{tid}/fd/{fd}"))
}

/// Children of every thread of `pid` (/proc/<pid>/task/*/children, see proc(5)).
pub(crate) fn children(pid: Pid) -> Vec<Pid> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse().ok().map(Pid::from_raw)),
            );
        }
    }
    out
}

/// A process's state letter and parent, from /proc/<pid>/stat (proc_pid_stat(5)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub state: char,
    pub ppid: Pid,
}

impl Stat {
    /// Dead already (a zombie, or being torn down): it can no longer fork
    /// and needs no signal.
    pub(crate) fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// The state and ppid fields of a stat line. The command name between
/// the parentheses may itself hold ')' and spaces, so the fields are read
/// after the last ')'.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok().map(Pid::from_raw)?;
    Some(Stat { state, ppid })
}

/// Where a process's argument strings lie in its memory: the arg_start and
/// arg_end fields (48 and 49) of a stat line, read after the last ')' as
/// [`parse_stat`] does (the first field there is the 3rd).
fn parse_arg_area(text: &str) -> Option<std::ops::Range<usize>> {
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(48 - 3);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    (start < end).then_some(start..end)
}

/// This process's argument area (what /proc/<pid>/cmdline shows).
pub(crate) fn own_arg_area() -> Option<std::ops::Range<usize>> {
    parse_arg_area(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

pub(crate) fn stat(pid: Pid) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process (thread-group leader) this /proc shows.
pub(crate) fn processes() -> Vec<Pid> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .map(Pid::from_raw)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_after_the_last_parenthesis() {
        assert_eq!(
            parse_stat("42 (a) b) (c) S 7 42 42 0 -1"),
            Some(Stat {
                state: 'S',
                ppid: Pid::from_raw(7)
            })
        );
        assert!(parse_stat("42 (x) Z 1").unwrap().is_dead());
        assert_eq!(parse_stat("42 (x"), None);
        let me = stat(Pid::this()).expect("own stat");
        assert_eq!(me.ppid, nix::unistd::getppid());
        assert!(processes().contains(&Pid::this()));
    }

    #[test]
    fn the_argument_area_is_fields_48_and_49() {
        let fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        let line = format!("42 (a) b) {}", fields.join(" "));
        assert_eq!(parse_arg_area(&line), Some(48..49));
        assert_eq!(parse_arg_area("42 (x) S 1"), None);
        let own = own_arg_area().expect("own argument area");
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap();
        assert_eq!(own.len(), cmdline.len());
    }

    #[test]
    fn own_status_and_memory_are_readable() {
        let me = Pid::this();
        let st = status(me).expect("status");
        assert_eq!(st.tgid, me);
        let text = std::ffi::CString::new("hello").unwrap();
        let mem = open_mem(me).expect("mem");
        assert_eq!(
            read_cstr(&mem, text.as_ptr() as u64).as_deref(),
            Some(&b"hello"[..])
        );
    }
}
