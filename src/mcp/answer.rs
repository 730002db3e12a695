//! What the tools answer: how a step ended, its output and what the policy
//! refused it, as text for the model and as structured content for
//! programs; and tool errors, which carry the reason.

use rmcp::model::{CallToolResult, ContentBlock};

use super::session::Ran;
use crate::session::protocol::{Denial, DenialKind};

/// A tool error, with the reason.
pub(super) fn failed(reason: impl ToString) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(reason.to_string())])
}

pub(super) fn could_not_run(e: &anyhow::Error) -> CallToolResult {
    failed(format!("airlock could not run it: {}", crate::one_line(e)))
}

/// A command's result: how it ended, its output, and what was refused.
pub(super) fn ran(ran: &Ran) -> CallToolResult {
    let mut text = ending(ran);
    for (name, stream) in [("stdout", &ran.stdout), ("stderr", &ran.stderr)] {
        match stream.total() {
            0 => text.push_str(&format!("\n{name}: (empty)")),
            _ => text.push_str(&format!("\n--- {name} ---\n{}", stream.text())),
        }
    }
    if !ran.held.is_empty() {
        text.push_str("\n--- held for a person's approval ---\n");
        for line in &ran.held {
            text.push_str(line);
            text.push('\n');
        }
    }
    if !ran.report.denials.is_empty() {
        text.push_str("\n--- refused by the policy (only the user can change it) ---\n");
        text.push_str(&denials_text(&ran.report.denials));
    }
    let structured = serde_json::json!({
        "exit_code": ran.report.exit_code,
        "timed_out": ran.report.timed_out,
        "stdout": ran.stdout.text(),
        "stderr": ran.stderr.text(),
        "denials": ran.report.denials,
        "held": ran.held,
    });
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

/// Why a file step failed: its stderr, else how it ended.
pub(super) fn file_failure(ran: &Ran) -> String {
    match ran.stderr.text().trim() {
        "" => ending(ran),
        said => said.to_owned(),
    }
}

/// The session's refusals so far.
pub(super) fn denials(denials: &[Denial], dropped: u64) -> CallToolResult {
    let mut text = match denials {
        [] => "The policy has refused nothing so far.".to_owned(),
        _ => format!(
            "The policy refused (only the user can change it):\n{}",
            denials_text(denials)
        ),
    };
    if dropped > 0 {
        text.push_str(&format!("\n({dropped} more refusals were not kept)"));
    }
    let structured = serde_json::json!({ "denials": denials, "dropped": dropped });
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

/// How the command ended, in words.
fn ending(ran: &Ran) -> String {
    let report = &ran.report;
    let mut text = match (report.timed_out, report.signal) {
        (true, _) => format!(
            "timed out after {}: killed with everything it started (exit code {}); the session lives on",
            humantime::format_duration(ran.timeout.unwrap_or_default()),
            report.exit_code
        ),
        (false, Some(signal)) => {
            format!("killed by signal {signal} (exit code {})", report.exit_code)
        }
        (false, None) => format!("exit code {}", report.exit_code),
    };
    if let Some(reason) = &report.reason {
        text.push_str(&format!(" ({reason})"));
    }
    text
}

/// One paragraph per refusal: what, why, who decided, the rule to add.
fn denials_text(denials: &[Denial]) -> String {
    let mut text = String::new();
    for denial in denials {
        let what = match (denial.kind, &denial.method, &denial.url) {
            (DenialKind::Request, Some(method), Some(url)) => format!("{method} {url}"),
            (DenialKind::Dns, ..) => format!("looking up {}", denial.host),
            _ => format!("connecting to {}", denial.host),
        };
        let times = match denial.count {
            1 => String::new(),
            n => format!(" ({n} times)"),
        };
        text.push_str(&format!(
            "- {what}{times}: {} (decided by {})\n",
            denial.reason, denial.decided_by
        ));
        if let Some(rule) = &denial.rule {
            text.push_str("  to allow it, add to the policy:\n");
            for line in rule.trim_end().lines() {
                text.push_str(&format!("    {line}\n"));
            }
        }
    }
    text
}
