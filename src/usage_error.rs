//! clap's errors as airlock's one line: `airlock: ` and the problem, clap's
//! tips on the same line, and where to read more. Not clap's usage line:
//! it lists the options the error was about (a misspelt `--polcy` shows as
//! `airlock run --policy <FILE> <COMMAND>...`) and reads as if they were
//! required.

use std::ffi::OsString;

/// One line for an error clap reports on stderr; `command` is the program's
/// command tree and `args` its arguments, to name the subcommand whose
/// `--help` to read.
pub(crate) fn one_line(e: &clap::Error, command: &clap::Command, args: &[OsString]) -> String {
    let rendered = e.render().to_string();
    let mut problem = String::new();
    let mut tips: Vec<&str> = Vec::new();
    for line in rendered.lines() {
        let trimmed = line.trim();
        if let Some(first) = line.strip_prefix("error: ") {
            problem.push_str(first);
        } else if let Some(tip) = trimmed.strip_prefix("tip: ") {
            tips.push(tip);
        } else if trimmed.starts_with("Usage: ") || trimmed.starts_with("For more information") {
            // The usage and clap's pointer to --help: said once below.
            break;
        } else if !trimmed.is_empty() {
            // The names clap lists under "were not provided:".
            problem.push(' ');
            problem.push_str(trimmed);
        }
    }
    let mut line = format!("airlock: {problem}");
    for tip in tips {
        line.push_str(&format!(" ({tip})"));
    }
    line.push_str(&format!("; see `{} --help`", subcommand(command, args)));
    line
}

/// `airlock audit verify` for `airlock audit verify --bogus x`: the
/// leading arguments that name subcommands.
fn subcommand(command: &clap::Command, args: &[OsString]) -> String {
    let mut path = vec![command.get_name().to_owned()];
    let mut at = command;
    for arg in args.iter().skip(1) {
        let Some(next) = arg.to_str().and_then(|a| at.find_subcommand(a)) else {
            break;
        };
        path.push(next.get_name().to_owned());
        at = next;
    }
    path.join(" ")
}
