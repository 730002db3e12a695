//! Held requests (`[[ask]]` rules) in the timeline: one line when a request
//! is held, one when its wait ends, linked by the approval's id (what
//! `airlock approve ID` takes).
//!
//! Every recorded string here is untrusted: the method, URL and headers
//! are the sandboxed program's, and the note and the decider's name came
//! from whoever answered. Free text a person typed (the rule's reason, the
//! note) is quoted in full with [`escape::preview`], so a `"` or newline in
//! it cannot end the quote and forge the rest of the line.

use crate::{ApprovalDecided, ApprovalRequested, escape, humanize};

/// A recorded millisecond count as a duration, however large.
fn duration_ms(ms: u64) -> String {
    let us = i64::try_from(ms.saturating_mul(1000)).unwrap_or(i64::MAX);
    humanize::duration(us)
}

fn quoted(text: &str) -> String {
    escape::preview(text.as_bytes(), usize::MAX)
}

/// `approval ID requested: POST URL (rule FILE:LINE: "reason") — waits up
/// to 2m00s[ for APPROVERS]`.
pub(super) fn requested(held: &ApprovalRequested) -> String {
    let ApprovalRequested {
        approval,
        method,
        url,
        rule,
        reason,
        timeout_ms,
        approvers,
        ..
    } = held;
    let rule = match reason {
        Some(r) => format!("rule {}: {}", escape::text(rule.as_str()), quoted(r)),
        None => format!("rule {}", escape::text(rule.as_str())),
    };
    let mut s = format!(
        "approval {} requested: {} {} ({rule}) — waits up to {}",
        escape::text(approval),
        escape::text(method),
        escape::text(url),
        duration_ms(*timeout_ms)
    );
    // Empty means the session's owner, which is the default and not worth
    // a word on every line.
    if !approvers.is_empty() {
        let names: Vec<String> = approvers
            .iter()
            .map(|a| escape::text(a).into_owned())
            .collect();
        s.push_str(&format!(" for {}", names.join(", ")));
    }
    s
}

/// `approval ID approved once by WHO after 4.2s: "note"`, `... denied by
/// WHO after ...`, `... expired after 2m00s: nobody decided`.
pub(super) fn decided(decision: &ApprovalDecided) -> String {
    let ApprovalDecided {
        approval,
        outcome,
        scope,
        by,
        note,
        waited_ms,
        ..
    } = decision;
    let mut s = format!(
        "approval {} {}",
        escape::text(approval),
        escape::text(outcome)
    );
    match scope.as_deref() {
        Some("once") => s.push_str(" once"),
        Some("session") => s.push_str(" for the session"),
        // An unknown scope is shown as recorded rather than dropped.
        Some(other) => s.push_str(&format!(" ({})", escape::text(other))),
        None => {}
    }
    if let Some(by) = by {
        s.push_str(&format!(" by {}", escape::text(by)));
    }
    s.push_str(&format!(" after {}", duration_ms(*waited_ms)));
    match (note, outcome.as_str()) {
        (Some(n), _) => s.push_str(&format!(": {}", quoted(n))),
        (None, "expired") => s.push_str(": nobody decided"),
        (None, "abandoned") => {
            s.push_str(": the client went away or the session ended first");
        }
        (None, _) => {}
    }
    s
}
