//! One chronological view of a session, indented by process tree.

use std::collections::HashMap;

use crate::export::jsonl;
use crate::humanize;
use crate::{AuditEvent, EventKind, ExecId, SessionSummary, StoredEvent};

/// Depth of each event in the exec tree: an exec sits one level below its
/// parent exec, and other events one level below the exec that caused them.
pub fn depths(events: &[StoredEvent]) -> Vec<usize> {
    let mut exec_depth: HashMap<&ExecId, usize> = HashMap::new();
    let mut out = Vec::with_capacity(events.len());
    for ev in events {
        let d = match &ev.event {
            AuditEvent::Exec {
                exec_id,
                parent_exec_id,
                ..
            } => {
                let d = parent_exec_id
                    .as_ref()
                    .and_then(|p| exec_depth.get(p))
                    .map_or(0, |d| d + 1);
                exec_depth.insert(exec_id, d);
                d
            }
            other => other
                .exec_id()
                .and_then(|id| exec_depth.get(id))
                .map_or(0, |d| d + 1),
        };
        out.push(d);
    }
    out
}

fn quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

fn decision(decision: &str, rule: &Option<String>) -> String {
    match rule {
        Some(r) => format!("[{decision} by {r}]"),
        None => format!("[{decision}]"),
    }
}

/// A one-line description of an event (without time or indentation).
pub fn describe(event: &AuditEvent) -> String {
    match event {
        AuditEvent::Exec {
            argv,
            path,
            pid,
            cwd,
            ..
        } => {
            let cmd = if argv.is_empty() {
                quote(path)
            } else {
                argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
            };
            format!("exec  {cmd}  (pid {pid}, {path}, cwd {cwd})")
        }
        AuditEvent::Exit {
            exec_id,
            status,
            signal,
        } => match (status, signal) {
            (Some(s), _) => format!("exit  {exec_id} status {s}"),
            (None, Some(sig)) => format!("exit  {exec_id} killed by signal {sig}"),
            (None, None) => format!("exit  {exec_id}"),
        },
        AuditEvent::File {
            path,
            op,
            size,
            sha256,
            rename_to,
            mode,
            content_over_cap,
            ..
        } => {
            let mut s = format!("file  {:<8} {path}", op.as_str());
            if let Some(to) = rename_to {
                s.push_str(&format!(" -> {to}"));
            }
            let mut details = Vec::new();
            if let Some(sz) = size {
                details.push(humanize::size(*sz));
            }
            if let Some(h) = sha256 {
                details.push(format!("sha256 {}", h.chars().take(12).collect::<String>()));
            }
            if let Some(m) = mode {
                details.push(format!("mode {m:o}"));
            }
            if *content_over_cap {
                details.push("hash only".into());
            }
            if !details.is_empty() {
                s.push_str(&format!("  ({})", details.join(", ")));
            }
            s
        }
        AuditEvent::Dns {
            name,
            qtype,
            answer,
            decision: d,
            rule,
            ..
        } => {
            let ans = if answer.is_empty() {
                "-".to_string()
            } else {
                answer.join(", ")
            };
            format!("dns   {name} {qtype} -> {ans}  {}", decision(d, rule))
        }
        AuditEvent::Tcp {
            dst,
            host,
            decision: d,
            rule,
            reason,
            bytes_up,
            bytes_down,
            ..
        } => {
            let host = host.as_ref().map(|h| format!(" ({h})")).unwrap_or_default();
            let reason = reason
                .as_ref()
                .map(|r| format!("  ({})", r.escape_debug()))
                .unwrap_or_default();
            format!(
                "tcp   {dst}{host}  {}  up {} down {}{reason}",
                decision(d, rule),
                humanize::size(*bytes_up),
                humanize::size(*bytes_down)
            )
        }
        AuditEvent::Http {
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
        } => {
            let status = status.map_or("-".to_string(), |s| s.to_string());
            let mut s = format!(
                "http  {method} {url} -> {status}  {}  up {} down {}",
                decision(d, rule),
                humanize::size(*bytes_up),
                humanize::size(*bytes_down)
            );
            if let Some(ms) = ms_total {
                s.push_str(&format!(" in {ms:.0}ms"));
            }
            if let Some(r) = reason {
                s.push_str(&format!("  ({r})"));
            }
            if let Some(ws) = websocket {
                s.push_str(&websocket_line(ws));
            }
            s
        }
        AuditEvent::Output { stream, data } => {
            let text = String::from_utf8_lossy(data);
            let first: String = text.lines().next().unwrap_or("").chars().take(60).collect();
            format!(
                "out   {} {}: {first:?}",
                match stream {
                    crate::OutputStream::Stdout => "stdout",
                    crate::OutputStream::Stderr => "stderr",
                },
                humanize::size(data.len() as u64)
            )
        }
        AuditEvent::Note { text } => format!("note  {text}"),
        AuditEvent::Resize { cols, rows } => format!("term  resized to {cols}x{rows}"),
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
        ws.closed_by
    );
    if let Some(code) = ws.close_code {
        s.push_str(&format!(" {code}"));
    }
    if let Some(reason) = &ws.close_reason {
        s.push_str(&format!(" ({reason})"));
    }
    if let Some(error) = &ws.error {
        s.push_str(&format!("  [{error}]"));
    }
    for m in &ws.messages {
        let arrow = if m.direction == "to_client" {
            "<-"
        } else {
            "->"
        };
        let text = String::from_utf8_lossy(&m.payload);
        let preview: String = text.chars().take(60).collect();
        s.push_str(&format!(
            "\n      {arrow} {} {}: {preview:?}{}",
            m.opcode,
            humanize::size(m.bytes),
            if m.truncated { " (truncated)" } else { "" }
        ));
    }
    s
}

fn wanted(kinds: Option<&[EventKind]>, k: EventKind) -> bool {
    kinds.is_none_or(|ks| ks.contains(&k))
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
        summary
            .info
            .command
            .iter()
            .map(|a| quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    let info = &summary.info;
    let limits = info.limits_summary();
    out.push_str(&format!(
        "policy {} (sha256 {})  limits: {}  airlock {} on {}\n",
        if info.policy_name.is_empty() {
            "(none)"
        } else {
            &info.policy_name
        },
        info.policy_sha256(),
        if limits.is_empty() { "none" } else { &limits },
        info.airlock_version,
        info.host
    ));
    if let Some(note) = &summary.info.capabilities_note {
        out.push_str(&format!("note: {note}\n"));
    }
    let depth = depths(events);
    for (ev, d) in events.iter().zip(depth) {
        if !wanted(kinds, ev.kind) {
            continue;
        }
        out.push_str(&format!(
            "{:>10} {} {:>6} {}{}\n",
            humanize::relative(ev.ts_us.saturating_sub(summary.started_us)),
            humanize::clock(ev.ts_us),
            format!("#{}", ev.seq),
            "  ".repeat(d),
            describe(&ev.event)
        ));
    }
    match (&summary.end, summary.ended_us) {
        (Some(end), Some(t)) => out.push_str(&format!(
            "{:>10} {}        session ended: {} after {}\n",
            humanize::relative(t.saturating_sub(summary.started_us)),
            humanize::clock(t),
            end.describe(),
            humanize::duration(t.saturating_sub(summary.started_us))
        )),
        _ => out.push_str("(session did not finish: crashed or still running)\n"),
    }
    out
}

/// The timeline as JSON: the JSONL objects plus `depth` and `t_rel_s`.
pub fn render_json(
    summary: &SessionSummary,
    events: &[StoredEvent],
    kinds: Option<&[EventKind]>,
) -> serde_json::Value {
    let events = &crate::collapse_exchanges(events)[..];
    let depth = depths(events);
    let items: Vec<serde_json::Value> = events
        .iter()
        .zip(depth)
        .filter(|(ev, _)| wanted(kinds, ev.kind))
        .map(|(ev, d)| {
            let mut v = jsonl::event_json(&summary.id, ev);
            if let Some(obj) = v.as_object_mut() {
                obj.insert("depth".into(), d.into());
                obj.insert(
                    "t_rel_s".into(),
                    ((ev.ts_us.saturating_sub(summary.started_us)) as f64 / 1e6).into(),
                );
            }
            v
        })
        .collect();
    serde_json::json!({
        "session": summary.id,
        "started": humanize::rfc3339(summary.started_us),
        "command": summary.info.command,
        "events": items,
    })
}
