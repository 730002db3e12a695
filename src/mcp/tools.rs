//! The tools `airlock mcp` offers a model: their arguments (whose JSON
//! Schemas and descriptions the model reads), and what each one answers.
//! Every tool runs as a step of the connection's live session, labelled
//! with the tool's name, so the record shows which call did what.

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;

use super::answer;
use super::paths::WorkspacePath;
use super::session::{Session, Step};

/// The tools, each a step in `session`.
#[derive(Clone)]
pub(super) struct Tools {
    session: Arc<Session>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunCommand {
    /// A shell command line, run with `sh -c` (pipes, redirections, `&&` and `cd` work). Give this or `argv`, not both.
    #[serde(default)]
    command: Option<String>,
    /// A program and its arguments, run as given, without a shell. Give this or `command`, not both.
    #[serde(default)]
    argv: Option<Vec<String>>,
    /// Kill the command, and everything it started, after this many seconds. Default: no limit.
    #[serde(default)]
    timeout: Option<f64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Language {
    Python,
    Node,
    Bash,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunCode {
    /// The interpreter: python (python3), node or bash.
    language: Language,
    /// The program's source, run as a script fed on standard input.
    code: String,
    /// Kill the program, and everything it started, after this many seconds. Default: no limit.
    #[serde(default)]
    timeout: Option<f64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadFile {
    /// The file's path relative to the workspace, e.g. `src/main.py` (no absolute paths, no `..` out of it).
    path: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteFile {
    /// The file's path relative to the workspace, e.g. `src/main.py` (no absolute paths, no `..` out of it).
    path: String,
    /// The whole new content of the file (text).
    content: String,
}

#[tool_router]
impl Tools {
    pub(super) fn new(session: Arc<Session>) -> Self {
        Self { session }
    }

    #[tool(
        description = "Run a command in the sandbox, in the workspace directory. Give `command` for a shell line (run with `sh -c`) or `argv` for a program and its arguments, and optionally a `timeout` in seconds. Returns the exit code, stdout and stderr (each cut to 64 KiB, keeping the beginning and the end), and any network access the policy refused, with the rule that would allow it. A non-zero exit code is a result, not an error."
    )]
    async fn run_command(&self, Parameters(args): Parameters<RunCommand>) -> CallToolResult {
        let argv = match (args.command, args.argv) {
            (Some(command), None) if !command.trim().is_empty() => {
                vec!["sh".into(), "-c".into(), command]
            }
            (None, Some(argv)) if !argv.is_empty() => argv,
            (Some(_), Some(_)) => return answer::failed("give `command` or `argv`, not both"),
            _ => {
                return answer::failed(
                    "give the command to run: `command` (a shell line) or `argv` (a program and its arguments)",
                );
            }
        };
        let timeout = match parse_timeout(args.timeout) {
            Ok(timeout) => timeout,
            Err(e) => return answer::failed(e),
        };
        self.command(Step {
            argv,
            stdin: Vec::new(),
            timeout,
            label: "mcp:run_command",
        })
        .await
    }

    #[tool(
        description = "Run a program from its source code in the sandbox, in the workspace directory: `language` is python (python3), node or bash, and `code` is fed to the interpreter on standard input. Optionally a `timeout` in seconds. Returns the exit code, stdout and stderr (each cut to 64 KiB, keeping the beginning and the end), and any network access the policy refused, with the rule that would allow it."
    )]
    async fn run_code(&self, Parameters(args): Parameters<RunCode>) -> CallToolResult {
        let interpreter = match args.language {
            Language::Python => ["python3", "-"],
            Language::Node => ["node", "-"],
            Language::Bash => ["bash", "-s"],
        };
        let timeout = match parse_timeout(args.timeout) {
            Ok(timeout) => timeout,
            Err(e) => return answer::failed(e),
        };
        self.command(Step {
            argv: interpreter.map(str::to_owned).to_vec(),
            stdin: args.code.into_bytes(),
            timeout,
            label: "mcp:run_code",
        })
        .await
    }

    #[tool(
        description = "Read a text file of the workspace, as the sandboxed programs see it. `path` is relative to the workspace. Returns the file's content (cut to 64 KiB, keeping the beginning and the end).",
        annotations(read_only_hint = true)
    )]
    async fn read_file(&self, Parameters(args): Parameters<ReadFile>) -> CallToolResult {
        let path = match WorkspacePath::parse(&args.path) {
            Ok(path) => path,
            Err(e) => return answer::failed(e),
        };
        let step = Step {
            argv: vec!["cat".into(), "--".into(), path.argument()],
            stdin: Vec::new(),
            timeout: Some(FILE_TIMEOUT),
            label: "mcp:read_file",
        };
        match self.session.run(step).await {
            Ok(ran) if ran.report.exit_code == 0 => {
                CallToolResult::success(vec![ContentBlock::text(ran.stdout.text())])
            }
            Ok(ran) => answer::failed(format!(
                "could not read {path}: {}",
                answer::file_failure(&ran)
            )),
            Err(e) => answer::could_not_run(&e),
        }
    }

    #[tool(
        description = "Create or replace a file of the workspace with `content`, creating missing parent directories. `path` is relative to the workspace. Written inside the sandbox, as a sandboxed program would write it."
    )]
    async fn write_file(&self, Parameters(args): Parameters<WriteFile>) -> CallToolResult {
        let path = match WorkspacePath::parse(&args.path) {
            Ok(path) => path,
            Err(e) => return answer::failed(e),
        };
        let bytes = args.content.len();
        let step = Step {
            argv: vec![
                "sh".into(),
                "-c".into(),
                r#"mkdir -p -- "$2" && cat > "$1""#.into(),
                "sh".into(),
                path.argument(),
                path.parent_argument(),
            ],
            stdin: args.content.into_bytes(),
            timeout: Some(FILE_TIMEOUT),
            label: "mcp:write_file",
        };
        match self.session.run(step).await {
            Ok(ran) if ran.report.exit_code == 0 => {
                CallToolResult::success(vec![ContentBlock::text(format!(
                    "wrote {bytes} bytes to {path}"
                ))])
            }
            Ok(ran) => answer::failed(format!(
                "could not write {path}: {}",
                answer::file_failure(&ran)
            )),
            Err(e) => answer::could_not_run(&e),
        }
    }

    #[tool(
        description = "List every network access the policy refused in this session so far (requests, DNS names, connections), each with why and, where one would help, the rule to add to the policy to allow it. Only the user can change the policy: show them the rule if the access is needed.",
        annotations(read_only_hint = true)
    )]
    async fn list_denials(&self) -> CallToolResult {
        match self.session.denials().await {
            Ok((denials, dropped)) => answer::denials(&denials, dropped),
            Err(e) => answer::failed(format!(
                "airlock could not ask the session: {}",
                crate::one_line(&e)
            )),
        }
    }
}

impl Tools {
    /// A command's step, run and answered.
    async fn command(&self, step: Step) -> CallToolResult {
        match self.session.run(step).await {
            Ok(ran) => answer::ran(&ran),
            Err(e) => answer::could_not_run(&e),
        }
    }
}

// What the model is told about the server as a whole; it names itself
// `airlock` with this binary's version (rmcp would say its own).
#[tool_handler(
    name = "airlock",
    instructions = "Tools to run commands and code in a sandbox: a Linux machine kept for this whole conversation, whose working directory is the user's workspace. Files, installed packages and background processes persist between calls. Network access is limited by the user's policy: what it does not allow is refused (HTTP 403, or a refused connection), and each result lists the refusals with the rule that would allow them; only the user can change the policy. Everything done here is recorded."
)]
impl ServerHandler for Tools {}

/// Bound on a file step: `cat` of a workspace file ends at once, unless
/// the sandboxed program made the path a FIFO nobody writes to.
const FILE_TIMEOUT: Duration = Duration::from_secs(60);

/// `timeout` in seconds: positive and finite.
fn parse_timeout(seconds: Option<f64>) -> Result<Option<Duration>, String> {
    seconds
        .map(|s| {
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| format!("timeout must be a positive number of seconds, not {s}"))
        })
        .transpose()
}
