//! What ran and what changed on disk, as OCSF's System Activity category:
//! execs, exits, untraced tasks and a live session's steps (Process
//! Activity, 1007), file operations (File System Activity, 1001).

use serde_json::{Map, Value, json};

use super::command_line;
use super::envelope::{Activity, Context, Event, FILE_ACTIVITY, PROCESS_ACTIVITY, base_name};
use crate::{Exec, Exit, FileChange, FileOp, OsText, StepEnd, StepStart, Untraced};

fn sha256(hash: Option<&str>) -> Value {
    match hash {
        Some(h) => json!([{"algorithm_id": 3, "algorithm": "SHA-256", "value": h}]),
        None => Value::Null,
    }
}

/// OCSF's `file` for a path inside the sandbox.
fn file_object(path: &OsText, size: Option<u64>, hash: Option<&str>) -> Value {
    let path = path.text_or_escaped();
    let folder = path.ends_with('/') && path.len() > 1;
    let mut file = Map::new();
    file.insert("name".into(), base_name(&path).into());
    file.insert("path".into(), path.as_ref().into());
    file.insert("type_id".into(), if folder { 2 } else { 1 }.into());
    file.insert(
        "type".into(),
        if folder { "Folder" } else { "Regular File" }.into(),
    );
    if let Some(size) = size {
        file.insert("size".into(), size.into());
    }
    let hashes = sha256(hash);
    if !hashes.is_null() {
        file.insert("hashes".into(), hashes);
    }
    Value::Object(file)
}

/// An exec (Process Activity, Launch): the process it started, and the
/// exec that started it as `actor.process`.
pub(super) fn exec(cx: &Context<'_>, x: &Exec) -> Value {
    let mut e = Event::new(*cx, PROCESS_ACTIVITY, Activity(1, "Launch"));
    let cmd_line = command_line(x.argv.iter().map(|a| a.text_or_escaped()));
    let path = x.path.text_or_escaped();
    let mut process = json!({
        "uid": x.exec_id.as_str(),
        "pid": x.pid,
        "cmd_line": cmd_line,
        "name": base_name(&path),
        "path": path.as_ref(),
        "file": file_object(&x.path, None, x.image.sha256.as_deref()),
        "user": {"uid": x.uid.to_string()},
        "working_directory": x.cwd.text_or_escaped().as_ref(),
    });
    if let Some(obj) = process.as_object_mut() {
        let mut parent = match &x.parent_exec_id {
            Some(p) => e.process(p),
            None => json!({}),
        };
        if let Some(p) = parent.as_object_mut() {
            p.entry("pid").or_insert(x.ppid.into());
        }
        obj.insert("parent_process".into(), parent);
    }
    e.actor(x.parent_exec_id.as_ref())
        .set("process", process)
        .keep("step", x.step.map(|s| s.get()).into())
        .keep("image", x.image.image.clone().into())
        .message(format!("exec {cmd_line}"));
    e.build()
}

/// An exit (Process Activity, Terminate), with its exit code; a signal
/// that killed it is kept in `unmapped.airlock.signal`.
pub(super) fn exit(cx: &Context<'_>, x: &Exit) -> Value {
    let mut e = Event::new(*cx, PROCESS_ACTIVITY, Activity(2, "Terminate"));
    let process = e.process(&x.exec_id);
    e.set("process", process)
        .set("exit_code", x.status.into())
        .keep("signal", x.signal.into())
        .message(match (x.status, x.signal) {
            (Some(code), _) => format!("exec {} exited {code}", x.exec_id),
            (None, Some(sig)) => format!("exec {} killed by signal {sig}", x.exec_id),
            (None, None) => format!("exec {} ended", x.exec_id),
        });
    e.build()
}

/// A file operation (File System Activity), by the exec that made it.
pub(super) fn file(cx: &Context<'_>, f: &FileChange) -> Value {
    let acl = f.xattr.as_ref().is_some_and(|x| x.is_acl());
    let activity = match f.op {
        FileOp::Create => Activity(1, "Create"),
        FileOp::Modify | FileOp::Truncate => Activity(3, "Update"),
        FileOp::Delete => Activity(4, "Delete"),
        FileOp::Rename => Activity(5, "Rename"),
        FileOp::Chmod => Activity(7, "Set Security"),
        FileOp::Xattr if acl => Activity(7, "Set Security"),
        FileOp::Xattr => Activity(6, "Set Attributes"),
        FileOp::Image => Activity(99, "Image"),
        FileOp::Original => Activity(99, "Original"),
    };
    let mut e = Event::new(*cx, FILE_ACTIVITY, activity);
    e.set("file", file_object(&f.path, f.size, f.sha256.as_deref()))
        .keep("op", f.op.as_str().into())
        .message(format!("{} {}", f.op.as_str(), f.path.text_or_escaped()));
    if let Some(to) = &f.rename_to {
        e.set("file_result", file_object(to, f.size, f.sha256.as_deref()))
            .keep("rename_to", to.text_or_escaped().as_ref().into());
    }
    if let Some(mode) = f.mode {
        e.keep("mode", format!("{mode:o}").into());
    }
    if let Some(x) = &f.xattr {
        e.keep("xattr", x.name.text_or_escaped().as_ref().into());
    }
    if f.identity.reconciled {
        e.keep("reconciled", true.into());
    }
    e.build()
}

/// A task the observer did not trace, which airlock killed (Process
/// Activity, Terminate; Denied, Blocked).
pub(super) fn untraced(cx: &Context<'_>, u: &Untraced) -> Value {
    let mut e = Event::new(*cx, PROCESS_ACTIVITY, Activity(2, "Terminate"));
    let comm = u.comm.text_or_escaped();
    e.outcome((2, "Denied"), (2, "Blocked"), (3, "Medium"))
        .set(
            "process",
            json!({
                "pid": u.pid,
                "name": comm.as_ref(),
                "user": {"uid": u.uid.to_string()},
                "parent_process": {"pid": u.ppid},
            }),
        )
        .message(format!(
            "untraced task {} (pid {}) killed: nothing it ran is on record",
            comm, u.pid
        ));
    e.build()
}

fn step_process(step: u64) -> Value {
    json!({"uid": format!("step-{step}")})
}

/// A live session's step began (Process Activity, Launch): the command the
/// caller asked for, with its label (untrusted text, as the caller chose).
pub(super) fn step_start(cx: &Context<'_>, s: &StepStart) -> Value {
    let mut e = Event::new(*cx, PROCESS_ACTIVITY, Activity(1, "Launch"));
    let cmd_line = command_line(s.command.iter());
    let mut process = step_process(s.step.get());
    if let Some(obj) = process.as_object_mut() {
        obj.insert("cmd_line".into(), cmd_line.clone().into());
        if let Some(name) = s.command.first() {
            obj.insert("name".into(), base_name(name).into());
        }
        if let Some(cwd) = &s.cwd {
            obj.insert("working_directory".into(), cwd.clone().into());
        }
    }
    e.set("process", process)
        .keep("step", s.step.get().into())
        .keep("label", s.label.clone().into())
        .keep("tty", s.tty.into())
        .message(format!("step {} started: {cmd_line}", s.step));
    e.build()
}

/// A live session's step ended (Process Activity, Terminate).
pub(super) fn step_end(cx: &Context<'_>, s: &StepEnd) -> Value {
    let mut e = Event::new(*cx, PROCESS_ACTIVITY, Activity(2, "Terminate"));
    e.set("process", step_process(s.step.get()))
        .set("exit_code", s.exit_status.into())
        .set("duration", (s.duration_ms.max(0.0).round() as i64).into())
        .keep("step", s.step.get().into())
        .keep("signal", s.signal.into())
        .keep("timed_out", s.timed_out.then_some(true).into())
        .keep("reason", s.reason.clone().into())
        .message(format!("step {} ended", s.step));
    e.build()
}
