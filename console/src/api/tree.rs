//! The process tree: every exec with its parent, start and end.

use airlock_record::{Exec, Exit};
use std::collections::HashMap;

use airlock_record::{AuditEvent, EventKind};
use http::Response;
use serde::Serialize;
use serde_json::json;

use super::resolve;
use crate::ConsoleError;
use crate::respond::{self, Body};
use crate::server::State;

#[derive(Debug, Serialize)]
struct Node {
    exec_id: String,
    parent: Option<String>,
    seq: u64,
    pid: i32,
    /// Names in their printed form (see `airlock_auditor::OsText`), as the
    /// CLI prints them: two different names never look the same.
    path: String,
    argv: Vec<String>,
    cwd: String,
    started_us: i64,
    ended_us: Option<i64>,
    duration_ms: Option<f64>,
    exit_status: Option<i32>,
    signal: Option<i32>,
    step: Option<u64>,
}

pub(super) fn of(state: &State, id: &str) -> Result<Response<Body>, ConsoleError> {
    let id = resolve(state, id)?;
    let events = state
        .store
        .events(&id, Some(&[EventKind::Exec, EventKind::Exit]))?;
    let mut nodes: Vec<Node> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for ev in &events {
        match &ev.event {
            AuditEvent::Exec(Exec {
                exec_id,
                parent_exec_id,
                pid,
                path,
                argv,
                cwd,
                step,
                ..
            }) => {
                index.insert(exec_id.as_str().to_owned(), nodes.len());
                nodes.push(Node {
                    exec_id: exec_id.as_str().to_owned(),
                    parent: parent_exec_id.as_ref().map(|p| p.as_str().to_owned()),
                    seq: ev.seq.get(),
                    pid: *pid,
                    path: path.to_string(),
                    argv: argv.iter().map(ToString::to_string).collect(),
                    cwd: cwd.to_string(),
                    started_us: ev.ts_us,
                    ended_us: None,
                    duration_ms: None,
                    exit_status: None,
                    signal: None,
                    step: step.map(|s| s.get()),
                });
            }
            AuditEvent::Exit(Exit {
                exec_id,
                status,
                signal,
            }) => {
                if let Some(node) = index.get(exec_id.as_str()).map(|&i| &mut nodes[i]) {
                    node.ended_us = Some(ev.ts_us);
                    node.duration_ms = Some((ev.ts_us - node.started_us) as f64 / 1000.0);
                    node.exit_status = *status;
                    node.signal = *signal;
                }
            }
            _ => {}
        }
    }
    Ok(respond::json(&json!({ "execs": nodes })))
}
