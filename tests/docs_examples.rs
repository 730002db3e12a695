//! The examples in README.md and docs/mcp.md, extracted from the documents
//! and run as a newcomer would run them: the quick start with its printed
//! answer word for word, the MCP client configuration as a client starts it,
//! and every `airlock` command line a code block shows, checked against the
//! binary's own options, so that the documents cannot drift from it.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const AIRLOCK: &str = airlock_test_support::airlock_bin!();
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The fenced code blocks of a document: (the fence's language, the text).
fn code_blocks(doc: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(doc)).unwrap();
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        match (&mut open, line.trim_start().strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_owned(), String::new())),
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// A directory holding `airlock` (the binary under test), to put first on
/// PATH, as an installed airlock would be.
fn bin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(AIRLOCK, dir.path().join("airlock")).unwrap();
    dir
}

fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn the_readme_quick_start_prints_what_the_readme_says() {
    let blocks = code_blocks("README.md");
    let at = blocks
        .iter()
        .position(|(_, b)| b.contains("cargo run --release -- run "))
        .expect("the quick start block");
    // `./scripts/setup && cargo run --release -- ARGS`: the setup is done
    // (the tests run on a set-up machine) and the binary is built, so the
    // command is airlock itself with the same arguments.
    let line = blocks[at]
        .1
        .lines()
        .find(|l| l.contains("cargo run --release -- run "))
        .unwrap();
    let (_, args) = line.split_once("cargo run --release -- ").unwrap();
    let command = format!("airlock {args}");
    let expected = &blocks[at + 1].1;
    assert!(
        expected.starts_with("Airlock refused this request."),
        "the block after the quick start is its output: {expected}"
    );
    let bin = bin_dir();
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("sh")
        .args(["-c", &command])
        .current_dir(ROOT)
        .env("PATH", path_with(bin.path()))
        .env("HOME", home.path())
        .env_remove("AIRLOCK_AUDIT_DB")
        .env_remove("XDG_DATA_HOME")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{command}: {stdout}{stderr}");
    assert_eq!(
        stdout.trim_end(),
        expected.trim_end(),
        "{command}: {stderr}"
    );
}

/// The `mcpServers.airlock` entry of the JSON block in `doc`.
fn mcp_config(doc: &str) -> serde_json::Value {
    let (_, json) = code_blocks(doc)
        .into_iter()
        .find(|(lang, b)| lang == "json" && b.contains("mcpServers"))
        .unwrap_or_else(|| panic!("{doc} shows an MCP client configuration"));
    let config: serde_json::Value = serde_json::from_str(&json).unwrap();
    config["mcpServers"]["airlock"].clone()
}

#[test]
fn the_mcp_client_configuration_starts_a_server_that_answers() {
    let config = mcp_config("docs/mcp.md");
    assert_eq!(
        config,
        mcp_config("README.md"),
        "one configuration, shown twice"
    );
    // As written, with its home directory placed in a scratch one.
    let home = tempfile::tempdir().unwrap();
    let home = home.path().canonicalize().unwrap();
    let placed = |s: &str| s.replace("/home/me", home.to_str().unwrap());
    let args: Vec<String> = config["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| placed(a.as_str().unwrap()))
        .collect();
    let policy = PathBuf::from(&args[args.iter().position(|a| a == "--policy").unwrap() + 1]);
    let workspace = PathBuf::from(&args[args.iter().position(|a| a == "--workspace").unwrap() + 1]);
    std::fs::create_dir_all(policy.parent().unwrap()).unwrap();
    std::fs::write(&policy, "version = 1\ndefault = \"deny\"\n").unwrap();
    std::fs::create_dir_all(&workspace).unwrap();
    let bin = bin_dir();
    let mut server = Command::new(config["command"].as_str().unwrap())
        .args(&args)
        .env("PATH", path_with(bin.path()))
        .env("HOME", &home)
        .env_remove("AIRLOCK_AUDIT_DB")
        .env_remove("XDG_DATA_HOME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"docs","version":"1"}}}}}}"#
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    drop(stdin);
    let status = server.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut server.stderr.take().unwrap(), &mut stderr).unwrap();
    let answer: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?} / {stderr}"));
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "airlock",
        "{answer}"
    );
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(stderr, "");
}

/// `airlock WORDS... --help`: the subcommand's help, or None when WORDS
/// name none.
fn help_of(words: &[&str]) -> Option<String> {
    let out = Command::new(AIRLOCK)
        .args(words)
        .arg("--help")
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn every_airlock_command_line_in_the_docs_names_real_subcommands_and_options() {
    let mut checked = BTreeSet::new();
    for doc in ["README.md", "docs/mcp.md"] {
        for (lang, block) in code_blocks(doc) {
            if !matches!(lang.as_str(), "sh" | "console" | "") {
                continue;
            }
            // Lines continued with a backslash are one command.
            let joined = block.replace("\\\n", " ");
            for line in joined.lines() {
                let line = line.split(" #").next().unwrap().trim();
                let line = line.strip_prefix("$ ").unwrap_or(line);
                // `airlock ...`, also inside `$(...)` or after `&&`.
                for (i, _) in line.match_indices("airlock ") {
                    let before = &line[..i];
                    if !(before.is_empty()
                        || before.ends_with("$(")
                        || before.ends_with("&& ")
                        || before.ends_with("| "))
                    {
                        continue;
                    }
                    let words: Vec<&str> = line[i..]
                        .split_whitespace()
                        .skip(1)
                        .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase()))
                        .collect();
                    // The longest prefix of WORDS that is a subcommand.
                    let (path, help) = (1..=words.len().min(2))
                        .rev()
                        .find_map(|n| help_of(&words[..n]).map(|h| (words[..n].join(" "), h)))
                        .unwrap_or_else(|| panic!("{doc}: no such subcommand in {line:?}"));
                    let rest = line[i..].split(" -- ").next().unwrap();
                    for flag in rest
                        .split(|c: char| {
                            c.is_whitespace() || matches!(c, '[' | ']' | '|' | '"' | '(' | ')')
                        })
                        .filter(|w| w.starts_with("--") && w.len() > 2)
                    {
                        let flag = flag.split('=').next().unwrap();
                        assert!(
                            help.contains(&format!("{flag} "))
                                || help.contains(&format!("{flag}\n"))
                                || help.contains(&format!("{flag},")),
                            "{doc}: `airlock {path}` has no {flag} (in {line:?})"
                        );
                    }
                    checked.insert(path);
                }
            }
        }
    }
    // The reference covers the commands a newcomer meets first.
    for expected in [
        "run",
        "session start",
        "session exec",
        "approvals",
        "audit serve",
        "ca init",
        "sidecar",
    ] {
        assert!(
            checked.contains(expected),
            "{expected} is among {checked:?}"
        );
    }
}
