//! One chronological view of a session, indented by process tree; a live
//! session's (mode `session`) grouped by step (see [`steps`]).
//!
//! Every string in the text form goes through [`escape`]: argv, paths,
//! names, URLs and reasons come from (or are steered by) the sandboxed
//! program, and printed raw they could rewrite the reader's screen.

use crate::{
    DnsQuery, Exec, Exit, FileChange, HttpExchange, Note, Output, Resize, RuleRef, StepEnd,
    StepStart, TcpConnection, Untraced, Verdict,
};
use std::collections::HashMap;

use crate::escape;
use crate::export::jsonl;
use crate::humanize;
use crate::{
    AuditEvent, EventKind, ExecId, FileOp, OsText, Seq, SessionMode, SessionSummary, StoredEvent,
};

mod approvals;
mod mcp;
pub mod steps;

/// Depth of each event in the exec tree: an exec sits one level below its
/// parent exec, and other events one level below the exec that caused them.
pub fn depths(events: &[StoredEvent]) -> Vec<usize> {
    let mut depths = Depths::default();
    events.iter().map(|ev| depths.next(&ev.event)).collect()
}

/// [`depths`] one event at a time, for a reader that receives a running
/// session's events as they are recorded.
#[derive(Debug, Default, Clone)]
pub struct Depths {
    exec_depth: HashMap<ExecId, usize>,
}

impl Depths {
    /// The depth of `event`, which follows every event given before.
    pub fn next(&mut self, event: &AuditEvent) -> usize {
        match event {
            AuditEvent::Exec(Exec {
                exec_id,
                parent_exec_id,
                ..
            }) => {
                let d = parent_exec_id
                    .as_ref()
                    .and_then(|p| self.exec_depth.get(p))
                    .map_or(0, |d| d + 1);
                self.exec_depth.insert(exec_id.clone(), d);
                d
            }
            other => other
                .exec_id()
                .and_then(|id| self.exec_depth.get(id))
                .map_or(0, |d| d + 1),
        }
    }
}

/// One argument as a shell would need it, after escaping (so a quote that
/// this adds is never itself escaped, and an escaped argument always
/// contains a backslash and is always quoted).
fn quote(arg: &[u8]) -> String {
    let arg = escape::bytes(arg);
    if !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        arg.into_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// A command line as shell words, each escaped and quoted as in [`describe`].
pub fn command_line<T: AsRef<[u8]>>(argv: &[T]) -> String {
    argv.iter()
        .map(|a| quote(a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn decision(decision: Verdict, rule: Option<&str>) -> String {
    match rule {
        Some(r) => format!("[{decision} by {}]", escape::text(r)),
        None => format!("[{decision}]"),
    }
}

fn short_hash(h: &str) -> String {
    h.chars().take(12).collect()
}

/// A one-line description of an event (without time or indentation).
pub fn describe(event: &AuditEvent) -> String {
    match event {
        AuditEvent::Exec(Exec {
            argv,
            path,
            pid,
            cwd,
            image,
            ..
        }) => {
            let cmd = if argv.is_empty() {
                quote(path.as_bytes())
            } else {
                command_line(argv)
            };
            let mut s = format!("exec  {cmd}  (pid {pid}, {}", path.escaped());
            if let Some(h) = &image.sha256 {
                s.push_str(&format!(" sha256 {}", escape::text(&short_hash(h))));
            }
            if let Some(script) = &image.script {
                s.push_str(&format!(", script {}", script.path.escaped()));
            }
            if let Some(loaded) = &image.loaded {
                s.push_str(&format!(", loads {}", loaded.path.escaped()));
            }
            s.push_str(&format!(", cwd {})", cwd.escaped()));
            s
        }
        AuditEvent::Exit(Exit {
            exec_id,
            status,
            signal,
        }) => match (status, signal) {
            // "exec 1 exited 0": the id named as one, so that it does not
            // read as an exit code.
            (Some(s), _) => format!("exit  exec {exec_id} exited {s}"),
            (None, Some(sig)) => format!("exit  exec {exec_id} killed by signal {sig}"),
            (None, None) => format!("exit  exec {exec_id} ended"),
        },
        AuditEvent::File(FileChange {
            path,
            op,
            size,
            sha256,
            rename_to,
            mode,
            content_over_cap,
            content_over_budget,
            identity,
            xattr,
            ..
        }) => {
            let mut s = format!("file  {:<8} {}", op.as_str(), path.escaped());
            if let Some(to) = rename_to {
                s.push_str(&format!(" -> {}", to.escaped()));
            }
            if let Some(x) = xattr {
                s.push_str(&format!("  {}", x.name.escaped()));
                if x.removed {
                    s.push_str(" removed");
                }
            }
            let mut details = Vec::new();
            if let Some(sz) = size {
                details.push(humanize::size(*sz));
            }
            if let Some(h) = sha256 {
                details.push(format!("sha256 {}", escape::text(&short_hash(h))));
            }
            if let Some(m) = mode {
                details.push(format!("mode {m:o}"));
            }
            if let Some(acl) = xattr.as_ref().and_then(|x| x.acl.as_ref()) {
                // An ACL is a permission change: say what it grants.
                details.push(format!("acl: {}", escape::text(acl)));
            }
            if *content_over_cap {
                details.push("hash only".into());
            }
            if *content_over_budget {
                details.push("hash only (over the budget)".into());
            }
            if identity.names.len() > 1 {
                let names: Vec<String> = identity
                    .names
                    .iter()
                    .map(|n| n.escaped().into_owned())
                    .collect();
                details.push(format!("also named {}", names.join(", ")));
            }
            if *op == FileOp::Original && mode.is_none() && xattr.is_none() {
                details.push("missed: what it held before the session is not on record".into());
            }
            if identity.reconciled {
                // No observed syscall explains this change: found at the end.
                details.push("found at session end".into());
            }
            if !details.is_empty() {
                s.push_str(&format!("  ({})", details.join(", ")));
            }
            s
        }
        AuditEvent::Dns(DnsQuery {
            name,
            qtype,
            answer,
            decision: d,
            rule,
            ..
        }) => {
            let ans = if answer.is_empty() {
                "-".to_string()
            } else {
                escape::text(&answer.join(", ")).into_owned()
            };
            format!(
                "dns   {} {} -> {ans}  {}",
                escape::text(name),
                escape::text(qtype),
                decision(*d, rule.as_deref())
            )
        }
        AuditEvent::Tcp(TcpConnection {
            dst,
            host,
            decision: d,
            rule,
            reason,
            bytes_up,
            bytes_down,
            ..
        }) => {
            let host = host
                .as_ref()
                .map(|h| format!(" ({})", escape::text(h)))
                .unwrap_or_default();
            let reason = reason
                .as_ref()
                .map(|r| format!("  ({})", escape::text(r)))
                .unwrap_or_default();
            format!(
                "tcp   {}{host}  {}  up {} down {}{reason}",
                escape::text(dst),
                decision(*d, rule.as_ref().map(RuleRef::as_str)),
                humanize::size(*bytes_up),
                humanize::size(*bytes_down)
            )
        }
        AuditEvent::Http(HttpExchange {
            method,
            url,
            status,
            decision: d,
            rule,
            reason,
            bytes_up,
            bytes_down,
            ms_total,
            websocket,
            ..
        }) => {
            let status = status.map_or("-".to_string(), |s| s.to_string());
            let mut s = format!(
                "http  {} {} -> {status}  {}  up {} down {}",
                escape::text(method),
                escape::text(url),
                decision(*d, rule.as_ref().map(RuleRef::as_str)),
                humanize::size(*bytes_up),
                humanize::size(*bytes_down)
            );
            if let Some(ms) = ms_total {
                s.push_str(&format!(" in {ms:.0}ms"));
            }
            if let Some(r) = reason {
                s.push_str(&format!("  ({})", escape::text(r)));
            }
            if let Some(ws) = websocket {
                s.push_str(&websocket_line(ws));
            }
            s
        }
        AuditEvent::Output(Output { stream, data, .. }) => {
            let line = data.split(|b| *b == b'\n').next().unwrap_or_default();
            format!(
                "out   {} {}: {}",
                match stream {
                    crate::OutputStream::Stdout => "stdout",
                    crate::OutputStream::Stderr => "stderr",
                },
                humanize::size(data.len() as u64),
                escape::preview(line, PREVIEW_CHARS)
            )
        }
        AuditEvent::Note(Note { text, .. }) => format!("note  {}", escape::text(text)),
        AuditEvent::Untraced(Untraced {
            pid,
            ppid,
            uid,
            comm,
            ..
        }) => format!(
            "kill  untraced task pid {pid} ({}) uid {uid}, parent {ppid}: the observer did not trace it, so nothing it ran is on record",
            comm.escaped()
        ),
        AuditEvent::Resize(Resize { cols, rows }) => format!("term  resized to {cols}x{rows}"),
        AuditEvent::StepStart(StepStart { step, .. }) => {
            format!("step  {step} start  {}", steps::start_text(event))
        }
        AuditEvent::StepEnd(StepEnd { step, .. }) => {
            format!("step  {step} end: {}", steps::outcome(event))
        }
        AuditEvent::ApprovalRequested(held) => format!("ask   {}", approvals::requested(held)),
        AuditEvent::ApprovalDecided(decision) => {
            format!("ask   {}", approvals::decided(decision))
        }
        AuditEvent::McpCall(call) => mcp::describe(call),
    }
}

/// "  websocket: 3 up / 2 down, closed by client 1000 (bye)" and, per
/// message, "    -> text 5B "hello"".
fn websocket_line(ws: &crate::WebSocketRecord) -> String {
    let mut s = format!(
        "\n      websocket  {} msgs up {}, {} msgs down {}, closed by {}",
        ws.messages_to_upstream,
        humanize::size(ws.bytes_to_upstream),
        ws.messages_to_client,
        humanize::size(ws.bytes_to_client),
        escape::text(&ws.closed_by)
    );
    if let Some(code) = ws.close_code {
        s.push_str(&format!(" {code}"));
    }
    if let Some(reason) = &ws.close_reason {
        s.push_str(&format!(" ({})", escape::text(reason)));
    }
    if let Some(error) = &ws.error {
        s.push_str(&format!("  [{}]", escape::text(error)));
    }
    for m in &ws.messages {
        let arrow = if m.direction == "to_client" {
            "<-"
        } else {
            "->"
        };
        s.push_str(&format!(
            "\n      {arrow} {} {}: {}{}",
            escape::text(&m.opcode),
            humanize::size(m.bytes),
            escape::preview(&m.payload, PREVIEW_CHARS),
            if m.truncated { " (truncated)" } else { "" }
        ));
    }
    s
}

/// How much of a line of output or a message payload a timeline line shows.
const PREVIEW_CHARS: usize = 60;

fn wanted(kinds: Option<&[EventKind]>, k: EventKind) -> bool {
    kinds.is_none_or(|ks| ks.contains(&k))
}

/// One timeline line: time since the start, clock time, seq (blank when
/// there is none), then `text`.
fn line(started_us: i64, ts_us: i64, seq: Option<Seq>, text: &str) -> String {
    format!(
        "{:>10} {} {:>6} {text}\n",
        humanize::relative(ts_us.saturating_sub(started_us)),
        humanize::clock(ts_us),
        seq.map(|s| format!("#{s}")).unwrap_or_default(),
    )
}

/// An event's line, indented `depth` levels.
fn event_line(started_us: i64, ev: &StoredEvent, depth: usize) -> String {
    let text = format!("{}{}", "  ".repeat(depth), describe(&ev.event));
    line(started_us, ev.ts_us, Some(ev.seq), &text)
}

fn step_count(steps: Option<u64>) -> String {
    match steps {
        Some(1) => "1 step".to_string(),
        Some(n) => format!("{n} steps"),
        None => "steps unknown".to_string(),
    }
}

/// The command a session ran, as the sessions list shows it. A live
/// session's own command line is airlock's internal `session serve --id
/// ...`, which says nothing to a reader: it is shown by its mode, step
/// count and name (`--name`), or without one by its first step's command
/// when the caller has it; the serve line stays in the session's details.
pub fn session_title(summary: &SessionSummary, first_step: Option<&[String]>) -> String {
    if summary.info.mode != SessionMode::Session {
        return command_line(&summary.info.command);
    }
    let steps = step_count(summary.steps);
    match (session_name(&summary.info.command), first_step) {
        (Some(name), _) => format!("[session {}, {steps}]", quote(name.as_bytes())),
        (None, Some(first)) if !first.is_empty() => {
            format!("[session, {steps}] {}", command_line(first))
        }
        _ => format!("[session, {steps}]"),
    }
}

/// A live session's `--name`, from its recorded command line.
pub fn session_name(command: &[OsText]) -> Option<OsText> {
    // Only airlock's own options: a `--` would start a command.
    let own = command.iter().take_while(|a| **a != "--");
    let mut next_is_name = false;
    for arg in own {
        if std::mem::take(&mut next_is_name) {
            return Some(arg.clone());
        }
        match arg.as_bytes().strip_prefix(b"--name=") {
            Some(name) => return Some(OsText::from(name)),
            None => next_is_name = *arg == "--name",
        }
    }
    None
}

/// The human timeline. `events` must be all of the session's events (the
/// process tree needs the execs); `kinds` filters what is shown.
pub fn render_text(
    summary: &SessionSummary,
    events: &[StoredEvent],
    kinds: Option<&[EventKind]>,
) -> String {
    let events = &crate::collapse_exchanges(events)[..];
    let mut out = String::new();
    out.push_str(&format!(
        "session {}  started {} UTC  command: {}\n",
        summary.id,
        humanize::short_time(summary.started_us),
        command_line(&summary.info.command)
    ));
    let info = &summary.info;
    let limits = info.limits_summary();
    out.push_str(&format!(
        "policy {} (sha256 {})  limits: {}  airlock {} on {}\n",
        if info.policy_name.is_empty() {
            "(none)".into()
        } else {
            escape::text(&info.policy_name)
        },
        info.policy_sha256(),
        if limits.is_empty() {
            "none".into()
        } else {
            escape::text(&limits)
        },
        escape::text(&info.airlock_version),
        escape::text(&info.host)
    ));
    if let Some(note) = &summary.info.capabilities_note {
        out.push_str(&format!("note: {}\n", escape::text(note)));
    }
    if summary.info.mode == SessionMode::Session {
        out.push_str(&format!(
            "live session: {} (the session's own events first, then each step with its events)\n",
            step_count(summary.steps)
        ));
        steps::render_text(&mut out, summary.started_us, events, kinds);
    } else {
        for (ev, d) in events.iter().zip(depths(events)) {
            if wanted(kinds, ev.kind) {
                out.push_str(&event_line(summary.started_us, ev, d));
            }
        }
    }
    match (&summary.end, summary.ended_us) {
        (Some(end), Some(t)) => out.push_str(&format!(
            "{:>10} {}        session ended: {} after {}\n",
            humanize::relative(t.saturating_sub(summary.started_us)),
            humanize::clock(t),
            escape::text(&end.describe()),
            humanize::duration(t.saturating_sub(summary.started_us))
        )),
        _ => out.push_str("(session did not finish: crashed or still running)\n"),
    }
    out
}

/// One event of the JSON timeline: its JSONL object plus `depth` and
/// `t_rel_s`.
fn event_json(summary: &SessionSummary, ev: &StoredEvent, depth: usize) -> serde_json::Value {
    let mut v = jsonl::event_json(&summary.id, ev);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("depth".into(), depth.into());
        obj.insert(
            "t_rel_s".into(),
            ((ev.ts_us.saturating_sub(summary.started_us)) as f64 / 1e6).into(),
        );
    }
    v
}

/// The timeline as JSON: the JSONL objects plus `depth` and `t_rel_s`. A
/// live session's (mode `session`) also has `mode` and `steps`: `events`
/// holds the session-level events, and each step its summary (label,
/// command, exit) and its own `events`; every event there carries its
/// `step`.
pub fn render_json(
    summary: &SessionSummary,
    events: &[StoredEvent],
    kinds: Option<&[EventKind]>,
) -> serde_json::Value {
    let events = &crate::collapse_exchanges(events)[..];
    let depth = depths(events);
    if summary.info.mode == SessionMode::Session {
        return steps::render_json(summary, events, &depth, kinds);
    }
    let items: Vec<serde_json::Value> = events
        .iter()
        .zip(depth)
        .filter(|(ev, _)| wanted(kinds, ev.kind))
        .map(|(ev, d)| event_json(summary, ev, d))
        .collect();
    serde_json::json!({
        "session": summary.id,
        "started": humanize::rfc3339(summary.started_us),
        "command": summary.info.command,
        "events": items,
    })
}

#[cfg(test)]
mod tests;
