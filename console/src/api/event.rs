//! One event; for an HTTP exchange, the request page.

use airlock_auditor::timeline;
use airlock_record::{AuditEvent, StoredEvent};
use airlock_record::{DnsQuery, Exec, HttpExchange, TcpConnection};
use http::Response;
use serde_json::{Value, json};

use super::resolve;
use crate::ConsoleError;
use crate::render;
use crate::respond::{self, Body};
use crate::server::State;

pub(super) fn detail(state: &State, id: &str, seq: &str) -> Result<Response<Body>, ConsoleError> {
    let id = resolve(state, id)?;
    let seq: u64 = seq
        .parse()
        .map_err(|_| ConsoleError::BadRequest(format!("{seq:?} is not an event number")))?;
    let events = state.store.events(&id, None)?;
    let ev = events
        .iter()
        .find(|ev| ev.seq.get() == seq)
        .ok_or_else(|| ConsoleError::NotFound(format!("session {id} has no event {seq}")))?;
    let exec = ev.event.exec_id().and_then(|exec_id| {
        events.iter().find_map(|e| match &e.event {
            AuditEvent::Exec(Exec {
                exec_id: this,
                argv,
                path,
                cwd,
                pid,
                ..
            }) if this == exec_id => Some(json!({
                "exec_id": this, "argv": argv, "path": path, "cwd": cwd, "pid": pid,
                "seq": e.seq,
            })),
            _ => None,
        })
    });
    let (rule_to_add, advice) = advice(state, &ev.event);
    Ok(respond::json(&json!({
        "seq": ev.seq,
        "ts_us": ev.ts_us,
        "kind": ev.kind.as_str(),
        "summary": timeline::describe(&ev.event),
        "event": without_bodies(ev)?,
        "exec": exec,
        "rule_to_add": rule_to_add,
        "advice": advice,
        "bodies": bodies(&ev.event),
    })))
}

/// The record, minus the bodies (shown rendered, beside it).
fn without_bodies(ev: &StoredEvent) -> Result<Value, ConsoleError> {
    let mut event = ev.event.clone();
    if let AuditEvent::Http(HttpExchange {
        request_body,
        response_body,
        ..
    }) = &mut event
    {
        *request_body = None;
        *response_body = None;
    }
    serde_json::to_value(&event)
        .map_err(|e| ConsoleError::BadRequest(format!("cannot encode event {}: {e}", ev.seq)))
}

fn bodies(event: &AuditEvent) -> Value {
    match event {
        AuditEvent::Http(HttpExchange {
            request_body,
            request_body_truncated,
            response_body,
            response_body_truncated,
            ..
        }) => json!({
            "request": render::bytes(request_body.as_deref(), *request_body_truncated),
            "response": render::bytes(response_body.as_deref(), *response_body_truncated),
        }),
        _ => Value::Null,
    }
}

/// For a refused request: the `[[allow]]` rule that would let it through
/// when no rule of the policy decided (nothing allowed it), else what to
/// change about the rule that refused it.
fn advice(state: &State, event: &AuditEvent) -> (Option<String>, Option<String>) {
    let (rule, reason) = match event {
        AuditEvent::Http(HttpExchange {
            decision,
            rule,
            reason,
            ..
        })
        | AuditEvent::Tcp(TcpConnection {
            decision,
            rule,
            reason,
            ..
        }) if decision == "deny" => (rule, reason.as_deref()),
        // A lookup's `rule` names the rule, or says why none applied.
        AuditEvent::Dns(DnsQuery { decision, rule, .. }) if decision == "deny" => {
            let why = rule
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            return (
                None,
                Some(format!(
                    "The name lookup was refused{why}. An [[allow]] rule for the host also lets its name resolve."
                )),
            );
        }
        _ => return (None, None),
    };
    let why = reason.map(|r| format!(" ({r})")).unwrap_or_default();
    match (event, rule) {
        (AuditEvent::Http(HttpExchange { method, url, .. }), None) => {
            match (state.rule_to_add)(method, url) {
                Some(rule) => (Some(rule), None),
                None => (
                    None,
                    Some(format!(
                        "No rule allows it{why}. Add an [[allow]] rule for it to the policy."
                    )),
                ),
            }
        }
        (_, Some(rule)) => (
            None,
            Some(format!(
                "Refused by the rule at {rule}{why}. To allow it, change that rule."
            )),
        ),
        (_, None) => (
            None,
            Some(format!(
                "No rule allows it{why}. Add an [[allow]] rule for its host to the policy."
            )),
        ),
    }
}
