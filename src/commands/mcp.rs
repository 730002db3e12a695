//! `airlock mcp`: a Model Context Protocol server on stdio whose tools run
//! in a live session (the work happens in `crate::mcp`).

use std::process::ExitCode;

use crate::commands::session::StartArgs;

#[derive(clap::Args)]
pub(crate) struct McpArgs {
    /// The session's options, as for `airlock session start`.
    #[command(flatten)]
    pub start: StartArgs,
}

/// The options are checked here, then handed on as given to `airlock
/// session start`, which owns their meaning.
pub(crate) fn run(_args: McpArgs) -> anyhow::Result<ExitCode> {
    let options: Vec<_> = std::env::args_os()
        .skip_while(|a| a != "mcp")
        .skip(1)
        .collect();
    Ok(crate::mcp::serve(&options).unwrap_or_else(|e| {
        eprintln!("airlock: {}", crate::one_line(&e));
        ExitCode::from(crate::exit::RUN_FAILED)
    }))
}
