//! `airlock policy`: check, test and describe policy files.

use std::path::PathBuf;
use std::process::ExitCode;

use airlock_policy::{Ask, BodyInput, Decision, Host, Policy, RequestInfo, Scheme};
use anyhow::{Context, bail};

use crate::policy_file;

#[derive(clap::Subcommand)]
pub enum PolicyCommand {
    /// Parse and lint a policy: errors name line, column and fix; warnings flag rules that never match.
    Check { file: PathBuf },
    /// Show the decision for one request and the rule (file:line) that made it. Exit 0 allow, 1 deny, 3 ask (held for a person's approval; reason, timeout and approvers follow).
    Test {
        file: PathBuf,
        method: String,
        url: String,
        /// A file with the request body (for [allow.body] and [ask.body] constraints).
        #[arg(long)]
        body: Option<PathBuf>,
        /// The body's content type.
        #[arg(long, default_value = "application/json")]
        content_type: String,
    },
    /// Print the JSON Schema of the policy format.
    Schema,
}

pub fn run(cmd: PolicyCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PolicyCommand::Check { file } => check(&file),
        PolicyCommand::Test {
            file,
            method,
            url,
            body,
            content_type,
        } => test(&file, &method, &url, body.as_deref(), &content_type),
        PolicyCommand::Schema => {
            println!("{}", Policy::json_schema());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn check(file: &std::path::Path) -> anyhow::Result<ExitCode> {
    let policy = policy_file::load(file)?;
    let lints = policy.lint();
    for lint in &lints {
        println!("{lint}");
    }
    println!(
        "{}: ok ({} warning{})",
        file.display(),
        lints.len(),
        if lints.len() == 1 { "" } else { "s" }
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
    let uri: http::Uri = url.parse().with_context(|| {
        format!("invalid URL {url:?}; expected e.g. https://api.example.com/path")
    })?;
    let scheme = match uri.scheme_str() {
        Some("https") => Scheme::Https,
        Some("http") => Scheme::Http,
        _ => bail!("URL {url:?} needs an http:// or https:// scheme"),
    };
    let Some(host) = uri.host() else {
        bail!("URL {url:?} has no host")
    };
    let host = Host::parse(host.trim_start_matches('[').trim_end_matches(']'))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let port = uri.port_u16().unwrap_or(match scheme {
        Scheme::Https => 443,
        Scheme::Http => 80,
    });
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
    let info = RequestInfo {
        scheme,
        host: &host,
        port,
        method,
        path_and_query,
    };
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
    if let Some(summary) = policy.connection_summary(&host, port) {
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
            Ok(ExitCode::from(1))
        }
        Decision::Ask(ask) => {
            print_ask(&ask);
            Ok(ExitCode::from(3))
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
