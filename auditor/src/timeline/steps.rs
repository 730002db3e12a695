//! Live sessions (mode `session`): which step each event belongs to, and
//! the timeline grouped by step.
//!
//! An exec's step is the one it names (the observer knows which step's
//! exec tree a process is in), or else its parent exec's; every other
//! event of an exec (exit, file, dns, tcp, http, approvals) is its exec's;
//! output and the step records name their step. A process a step left in
//! the background stays in that step's tree, so its later events are
//! grouped under that step even when they happen during another one.

use crate::{Exec, StepEnd, StepStart};
use std::collections::{BTreeMap, HashMap};

use crate::{AuditEvent, EventKind, ExecId, SessionSummary, StepNo, StoredEvent, escape, humanize};

/// One step of a live session, as indices into the events it was taken from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepGroup {
    pub step: StepNo,
    /// Its `step_start` record; `None` if the record has none.
    pub start: Option<usize>,
    /// Its `step_end` record; `None` while the step ran on, or when the
    /// session was interrupted before it ended.
    pub end: Option<usize>,
    /// Every event of the step (its start and end records included), in
    /// seq order, which is time order.
    pub events: Vec<usize>,
}

/// A live session's events, grouped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StepGroups {
    /// Events of no step (the session's own), in seq order.
    pub session: Vec<usize>,
    /// The steps, by step number.
    pub steps: Vec<StepGroup>,
}

/// The step of each event (index-aligned with `events`), by the rules in
/// the module docs; `None` for session-level events.
pub fn step_of_each(events: &[StoredEvent]) -> Vec<Option<StepNo>> {
    let mut exec_step: HashMap<&ExecId, Option<StepNo>> = HashMap::new();
    let mut out = Vec::with_capacity(events.len());
    for ev in events {
        let step = match &ev.event {
            AuditEvent::Exec(Exec {
                exec_id,
                parent_exec_id,
                step,
                ..
            }) => {
                let step = step.or_else(|| {
                    parent_exec_id
                        .as_ref()
                        .and_then(|p| exec_step.get(p).copied().flatten())
                });
                exec_step.insert(exec_id, step);
                step
            }
            other => other.step().or_else(|| {
                other
                    .exec_id()
                    .and_then(|id| exec_step.get(id).copied().flatten())
            }),
        };
        out.push(step);
    }
    out
}

/// Groups a live session's events by step (see [`step_of_each`]).
pub fn group_by_step(events: &[StoredEvent]) -> StepGroups {
    let mut session = Vec::new();
    let mut steps: BTreeMap<StepNo, StepGroup> = BTreeMap::new();
    for (i, (ev, step)) in events.iter().zip(step_of_each(events)).enumerate() {
        let Some(step) = step else {
            session.push(i);
            continue;
        };
        let group = steps.entry(step).or_insert_with(|| StepGroup {
            step,
            start: None,
            end: None,
            events: Vec::new(),
        });
        match ev.kind {
            EventKind::StepStart if group.start.is_none() => group.start = Some(i),
            EventKind::StepEnd if group.end.is_none() => group.end = Some(i),
            _ => {}
        }
        group.events.push(i);
    }
    StepGroups {
        session,
        steps: steps.into_values().collect(),
    }
}

/// A caller's label, quoted and escaped in full (it is untrusted text:
/// a newline or an escape sequence in it must not forge a line).
fn label(text: &str) -> String {
    escape::preview(text.as_bytes(), usize::MAX)
}

/// "exit 0 after 1.2s", "timed out, killed by signal 9 after 10.0s (...)".
pub(super) fn outcome(end: &AuditEvent) -> String {
    let AuditEvent::StepEnd(StepEnd {
        exit_status,
        signal,
        timed_out,
        duration_ms,
        reason,
        ..
    }) = end
    else {
        return String::new();
    };
    let mut s = match (exit_status, signal) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "ended".to_string(),
    };
    if *timed_out {
        s = format!("timed out, {s}");
    }
    // `as` saturates (and maps NaN to 0): a nonsense duration cannot panic.
    let us = (duration_ms * 1000.0) as i64;
    s.push_str(&format!(" after {}", humanize::duration(us)));
    if let Some(r) = reason {
        s.push_str(&format!("  ({})", escape::text(r)));
    }
    s
}

/// `"label"  $ command  (cwd DIR, tty)`, each part only when recorded.
pub(super) fn start_text(start: &AuditEvent) -> String {
    let AuditEvent::StepStart(StepStart {
        label: l,
        command,
        cwd,
        tty,
        ..
    }) = start
    else {
        return String::new();
    };
    let mut s = String::new();
    if let Some(l) = l {
        s.push_str(&label(l));
        s.push_str("  ");
    }
    s.push_str(&format!("$ {}", super::command_line(command)));
    let mut details = Vec::new();
    if let Some(cwd) = cwd {
        details.push(format!("cwd {}", escape::text(cwd)));
    }
    if *tty {
        details.push("tty".to_string());
    }
    if !details.is_empty() {
        s.push_str(&format!("  ({})", details.join(", ")));
    }
    s
}

/// The header line's text for one step: what ran and how it ended.
fn header(group: &StepGroup, events: &[StoredEvent]) -> String {
    let what = match group.start {
        Some(i) => start_text(&events[i].event),
        None => "(its start was not recorded)".to_string(),
    };
    let how = match group.end {
        Some(i) => outcome(&events[i].event),
        None => "did not end (still running, or the session was interrupted)".to_string(),
    };
    format!("step {}  {what}  -> {how}", group.step)
}

/// The text timeline of a live session: session-level events first, then
/// each step's header and its events, one level deeper.
pub(super) fn render_text(
    out: &mut String,
    started_us: i64,
    events: &[StoredEvent],
    kinds: Option<&[EventKind]>,
) {
    let depth = super::depths(events);
    let groups = group_by_step(events);
    for &i in &groups.session {
        if super::wanted(kinds, events[i].kind) {
            out.push_str(&super::event_line(started_us, &events[i], depth[i]));
        }
    }
    for group in &groups.steps {
        let shown = shown(group, events, kinds);
        if shown.is_empty() && !super::wanted(kinds, EventKind::StepStart) {
            continue;
        }
        // The header takes the start record's place (and its time and seq).
        let at = &events[group.start.unwrap_or(group.events[0])];
        out.push_str(&super::line(
            started_us,
            at.ts_us,
            Some(at.seq),
            &header(group, events),
        ));
        // Depth within the step: its first execs sit one level under the
        // header, whatever they descend from (the sandbox's init).
        let top = group
            .events
            .iter()
            .filter(|&&i| events[i].kind == EventKind::Exec)
            .map(|&i| depth[i])
            .min()
            .unwrap_or(0);
        for i in shown.into_iter().filter(|&i| Some(i) != group.start) {
            let d = 1 + depth[i].saturating_sub(top);
            out.push_str(&super::event_line(started_us, &events[i], d));
        }
    }
}

/// The events of `group` that the kind filter lets through.
fn shown(group: &StepGroup, events: &[StoredEvent], kinds: Option<&[EventKind]>) -> Vec<usize> {
    group
        .events
        .iter()
        .copied()
        .filter(|&i| super::wanted(kinds, events[i].kind))
        .collect()
}

/// The step's summary for the JSON timeline (its events are added by the
/// caller).
fn summary_json(
    group: &StepGroup,
    events: &[StoredEvent],
    started_us: i64,
) -> serde_json::Map<String, serde_json::Value> {
    let mut obj = serde_json::Map::new();
    obj.insert("step".into(), group.step.get().into());
    let start = group.start.map(|i| &events[i]);
    obj.insert("seq".into(), start.map(|s| s.seq.get()).into());
    obj.insert(
        "started".into(),
        start.map(|s| humanize::rfc3339(s.ts_us)).into(),
    );
    obj.insert(
        "t_rel_s".into(),
        start
            .map(|s| (s.ts_us.saturating_sub(started_us)) as f64 / 1e6)
            .into(),
    );
    if let Some(AuditEvent::StepStart(StepStart {
        label,
        command,
        cwd,
        tty,
        ..
    })) = start.map(|s| &s.event)
    {
        obj.insert("label".into(), label.clone().into());
        obj.insert("command".into(), command.clone().into());
        obj.insert("cwd".into(), cwd.clone().into());
        obj.insert("tty".into(), (*tty).into());
    }
    let end = group.end.map(|i| &events[i]);
    obj.insert("ended".into(), end.is_some().into());
    if let Some(AuditEvent::StepEnd(StepEnd {
        exit_status,
        signal,
        timed_out,
        duration_ms,
        reason,
        ..
    })) = end.map(|e| &e.event)
    {
        obj.insert("exit_status".into(), (*exit_status).into());
        obj.insert("signal".into(), (*signal).into());
        obj.insert("timed_out".into(), (*timed_out).into());
        obj.insert("duration_ms".into(), (*duration_ms).into());
        obj.insert("reason".into(), reason.clone().into());
    }
    obj
}

/// The JSON timeline of a live session (see [`super::render_json`]).
pub(super) fn render_json(
    summary: &SessionSummary,
    events: &[StoredEvent],
    depth: &[usize],
    kinds: Option<&[EventKind]>,
) -> serde_json::Value {
    let groups = group_by_step(events);
    let session: Vec<serde_json::Value> = groups
        .session
        .iter()
        .filter(|&&i| super::wanted(kinds, events[i].kind))
        .map(|&i| {
            let mut v = super::event_json(summary, &events[i], depth[i]);
            if let Some(obj) = v.as_object_mut() {
                obj.insert("step".into(), serde_json::Value::Null);
            }
            v
        })
        .collect();
    let mut steps_out = Vec::new();
    for group in &groups.steps {
        let shown = shown(group, events, kinds);
        if shown.is_empty() && !super::wanted(kinds, EventKind::StepStart) {
            continue;
        }
        let items: Vec<serde_json::Value> = shown
            .into_iter()
            .map(|i| {
                let mut v = super::event_json(summary, &events[i], depth[i]);
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("step".into(), group.step.get().into());
                }
                v
            })
            .collect();
        let mut obj = summary_json(group, events, summary.started_us);
        obj.insert("events".into(), items.into());
        steps_out.push(serde_json::Value::Object(obj));
    }
    serde_json::json!({
        "session": summary.id,
        "started": humanize::rfc3339(summary.started_us),
        "command": summary.info.command,
        "mode": summary.info.mode,
        "events": session,
        "steps": steps_out,
    })
}
