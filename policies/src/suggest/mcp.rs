//! MCP tool rules in a drafted policy: for each MCP server (host, port and
//! path) the recorded messages went to, the `mcp` table of the rule that
//! allows its POSTs names exactly the tools that were called and the other
//! methods that were sent, as a path rule names exactly the paths that
//! were requested. Nothing more: no glob, no tool that was refused, and a
//! tool a person approved stays a person's decision (listed, not allowed).

use std::collections::{BTreeMap, BTreeSet};

use super::draft::NotSuggested;
use super::toml_string;
use crate::mcp::KNOWN_METHODS;

/// What went through to one server (its rules' endpoint and path glob).
#[derive(Debug, Default)]
pub(super) struct McpSeen {
    /// Tool → calls.
    pub(super) tools: BTreeMap<String, u64>,
    /// Methods other than `tools/call`.
    pub(super) methods: BTreeSet<String>,
}

impl McpSeen {
    /// The rule's `mcp = { ... }` line, and a comment with the counts.
    pub(super) fn render(&self) -> String {
        let calls: Vec<String> = self
            .tools
            .iter()
            .map(|(tool, n)| format!("{tool} ×{n}"))
            .collect();
        let mut out = String::new();
        if !calls.is_empty() {
            out.push_str(&format!(
                "# MCP tools called: {}\n",
                super::draft::comment(&calls.join(", "))
            ));
        }
        let tools: Vec<String> = self.tools.keys().map(|t| toml_string(t)).collect();
        // `initialize` always: no client starts a session without it, so a
        // record that lacks it began after it (the lint says as much).
        let mut methods = self.methods.clone();
        methods.insert("initialize".to_owned());
        let methods: Vec<String> = methods.iter().map(|m| toml_string(m)).collect();
        out.push_str(&format!(
            "mcp = {{ tools = [{}], methods = [{}] }}\n",
            tools.join(", "),
            methods.join(", ")
        ));
        out
    }
}

/// Whether a rule can name `tool` so that it allows that tool and no
/// other: tool names in rules are globs (`*`, `?`), compared exactly, and
/// may not be empty or hold whitespace or control characters; nor, here,
/// characters a reviewer cannot see.
pub(super) fn exact_tool(tool: &str) -> Result<(), NotSuggested> {
    // An invisible character (a direction override, a zero-width space)
    // would make the rule read as another tool's to its reviewer.
    let invisible = |c: char| matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}' | '\u{2028}' | '\u{2029}');
    if tool.is_empty()
        || tool.contains(['*', '?'])
        || tool
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || invisible(c))
    {
        return Err(NotSuggested::ToolName);
    }
    Ok(())
}

/// Whether a rule can name `method` (`methods` lists MCP's own methods,
/// spelled exactly; `tools/call` is granted by `tools`).
pub(super) fn known_method(method: &str) -> Result<(), NotSuggested> {
    if method == "tools/call" || !KNOWN_METHODS.contains(&method) {
        return Err(NotSuggested::McpMethod);
    }
    Ok(())
}
