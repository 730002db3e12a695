//! `airlock policy`: check, test and describe policy files, replay
//! recorded sessions under one, and suggest one from them.

mod cases;
mod recorded;
mod replay;
pub(crate) mod request;
mod suggest;

use std::path::PathBuf;
use std::process::ExitCode;

use airlock_policy::{Ask, BodyInput, Decision, Policy, Severity};
use anyhow::{Context, bail};

use crate::policy_file;

#[derive(clap::Subcommand)]
pub(crate) enum PolicyCommand {
    /// Parse and lint a policy: errors name line, column and fix; warnings flag rules that never match.
    Check {
        file: PathBuf,
        /// Also print each rule as the proxy reads it: its hosts, the ports it covers (80 and 443 when it names none), methods and paths.
        #[arg(long)]
        explain: bool,
    },
    /// Show the decision for one request and the rule (file:line) that made it. Exit 0 allow, 1 deny, 3 ask (held for a person's approval; reason, timeout and approvers follow).
    /// With --cases, run a table of requests and expected decisions instead: exit 0 all passed, 1 any failed.
    Test {
        file: PathBuf,
        #[arg(required_unless_present = "cases")]
        method: Option<String>,
        #[arg(required_unless_present = "cases")]
        url: Option<String>,
        /// A file with the request body (for [allow.body] and [ask.body] constraints).
        #[arg(long, conflicts_with = "cases")]
        body: Option<PathBuf>,
        /// A TOML file of [[case]] tables (method, url, expect, optional body, content_type, rule, name).
        #[arg(long, value_name = "CASES.toml", conflicts_with_all = ["method", "url"])]
        cases: Option<PathBuf>,
        /// The body's content type.
        #[arg(long, default_value = "application/json", conflicts_with = "cases")]
        content_type: String,
    },
    /// Re-decide recorded sessions' DNS queries, connections, requests and MCP tool calls under FILE and print what would change. Exit 0 when nothing that went through would be denied or held, 1 when something would.
    Replay(replay::ReplayArgs),
    /// Write a policy that allows what recorded sessions (or an events file) did (MCP servers with exactly the tools called) and denies the rest; it passes `check` with no warnings. Refused requests are listed in comments at the end.
    Suggest(suggest::SuggestArgs),
    /// Print the JSON Schema of the policy format.
    Schema,
}

pub(crate) fn run(cmd: PolicyCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PolicyCommand::Check { file, explain } => check(&file, explain),
        PolicyCommand::Test {
            file,
            method,
            url,
            body,
            content_type,
            cases,
        } => match (cases, method, url) {
            (Some(cases), _, _) => cases::run(&file, &cases),
            (None, Some(method), Some(url)) => {
                test(&file, &method, &url, body.as_deref(), &content_type)
            }
            _ => bail!("give METHOD and URL, or --cases FILE"),
        },
        PolicyCommand::Replay(args) => replay::run(args),
        PolicyCommand::Suggest(args) => suggest::run(args),
        PolicyCommand::Schema => {
            println!("{}", Policy::json_schema());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn check(file: &std::path::Path, explain: bool) -> anyhow::Result<ExitCode> {
    let policy = policy_file::load(file)?;
    if explain {
        for line in policy.explain() {
            println!("{line}");
        }
    }
    let lints = policy.lint();
    for lint in &lints {
        println!("{lint}");
    }
    let errors = lints
        .iter()
        .filter(|l| l.severity == Severity::Error)
        .count();
    let warnings = lints.len() - errors;
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if errors > 0 {
        println!(
            "{}: {errors} error{} ({warnings} warning{})",
            file.display(),
            plural(errors),
            plural(warnings)
        );
        return Ok(ExitCode::FAILURE);
    }
    println!(
        "{}: ok ({warnings} warning{})",
        file.display(),
        plural(warnings)
    );
    Ok(ExitCode::SUCCESS)
}

fn test(
    file: &std::path::Path,
    method: &str,
    url: &str,
    body: Option<&std::path::Path>,
    content_type: &str,
) -> anyhow::Result<ExitCode> {
    let policy = policy_file::load(file)?;
    let target = request::Target::parse(url)?;
    let info = target.info(method);
    let (host, port) = (&target.host, target.port);
    let bytes = match body {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("reading body {}", path.display()))?)
        }
        None => None,
    };
    let body_input = bytes.as_deref().map(|b| BodyInput {
        content_types: std::slice::from_ref(&content_type),
        bytes: b,
        complete: true,
    });
    if let Some(summary) = policy.connection_summary(host, port) {
        // Nothing inside such a connection is seen, so no request-level rule applies.
        println!("allow: {summary}; requests inside it are not inspected");
        return Ok(ExitCode::SUCCESS);
    }
    let body_for_policy = if policy.needs_body(&info).is_some() {
        body_input.as_ref()
    } else {
        None
    };
    match policy.evaluate(&info, body_for_policy) {
        Decision::Allow(a) => {
            let by = a.rule.map_or_else(
                || format!("{} (default)", policy.source_name()),
                |r| r.to_string(),
            );
            match a.would_deny {
                // The denial names the rule deny mode would have applied.
                Some(d) => println!("allow (report mode; deny would say: {d}) by {by}"),
                None => println!("allow by {by}"),
            }
            if let Some(max) = a.max_requests {
                println!("quota: {max} requests per session");
            }
            Ok(ExitCode::SUCCESS)
        }
        Decision::Deny(d) => {
            let by = d.rule.map_or_else(
                || format!("{} (default: deny)", policy.source_name()),
                |r| r.to_string(),
            );
            println!("deny: {} (decided by {by})", d.reason);
            Ok(ExitCode::from(crate::exit::REFUSED))
        }
        Decision::Ask(ask) => {
            print_ask(&ask);
            Ok(ExitCode::from(crate::exit::WOULD_ASK))
        }
    }
}

/// "ask by FILE:LINE", then what the approver would be shown, one line each.
fn print_ask(ask: &Ask) {
    println!("ask by {}", ask.rule);
    println!("reason: {}", ask.reason.as_deref().unwrap_or("(none)"));
    println!("timeout: {}", ask.timeout_text());
    if ask.approvers.is_empty() {
        println!("approvers: the session's owner");
    } else {
        println!("approvers: {}", ask.approvers.join(", "));
    }
}
