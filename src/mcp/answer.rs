//! What the tools answer: how a step ended, its output and what the policy
//! refused it, as text for the model and as structured content for
//! programs; and tool errors, which carry the reason.

use rmcp::model::{CallToolResult, ContentBlock};

use super::session::Ran;
use crate::session::protocol::{Denial, DenialKind, ExitReport};

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
    ending_of(&ran.report, ran.timeout)
}

/// The session's reason says why airlock killed a step ("killed: memory
/// limit (--memory 64M) exceeded"); it replaces the bare signal, and a
/// timeout keeps its own wording, so no kill is told twice.
fn ending_of(report: &ExitReport, timeout: Option<std::time::Duration>) -> String {
    let code = report.exit_code;
    match (&report.reason, report.signal) {
        _ if report.timed_out => {
            let mut text = format!(
                "timed out after {}: killed with everything it started (exit code {code}); the session lives on",
                humantime::format_duration(timeout.unwrap_or_default()),
            );
            // Anything else said of it (the sandbox did not confirm the end).
            if let Some(reason) = report.reason.as_ref().filter(|r| !r.starts_with("killed")) {
                text.push_str(&format!(" ({reason})"));
            }
            text
        }
        (Some(reason), _) => format!("{reason} (exit code {code})"),
        (None, Some(signal)) => format!("killed by signal {signal} (exit code {code})"),
        (None, None) => format!("exit code {code}"),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn report(code: i32, signal: Option<i32>, timed_out: bool, reason: Option<&str>) -> ExitReport {
        ExitReport {
            exit_code: code,
            status: None,
            signal,
            timed_out,
            duration_ms: 1.0,
            reason: reason.map(str::to_owned),
            denials: Vec::new(),
            held: Vec::new(),
        }
    }

    #[test]
    fn a_kill_is_told_once_in_the_sessions_words() {
        let memory = "killed: memory limit (--memory 64M) exceeded";
        assert_eq!(
            ending_of(&report(137, Some(9), false, Some(memory)), None),
            format!("{memory} (exit code 137)")
        );
        assert_eq!(
            ending_of(&report(137, None, false, Some(memory)), None),
            format!("{memory} (exit code 137)")
        );
        assert_eq!(
            ending_of(&report(143, Some(15), false, None), None),
            "killed by signal 15 (exit code 143)"
        );
        assert_eq!(
            ending_of(&report(3, None, false, None), None),
            "exit code 3"
        );
        let timed = "killed: time limit (--timeout 1s) exceeded";
        let one = Some(std::time::Duration::from_secs(1));
        assert_eq!(
            ending_of(&report(124, Some(9), true, Some(timed)), one),
            "timed out after 1s: killed with everything it started (exit code 124); the session lives on"
        );
        let stuck = "the sandbox did not confirm the end of step 3";
        assert!(
            ending_of(&report(124, Some(9), true, Some(stuck)), one)
                .ends_with(&format!("({stuck})"))
        );
    }
}
