//! Validating an allow or ask rule's `mcp` table.

use toml::Spanned;

use super::message::KNOWN_METHODS;
use super::name_glob::NameGlob;
use crate::body::BodyConstraints;
use crate::error::{PolicyError, SourceMap};
use crate::raw::{RawMcp, Strings};

/// One tool entry of a rule: a name or glob, and its conditions.
#[derive(Debug, Clone)]
pub(crate) struct ToolGrant {
    pub glob: NameGlob,
    pub max_calls: Option<u64>,
    pub arguments: Option<BodyConstraints>,
    /// 0-based position among the rule's entries (`tools` first): names
    /// the entry's call quota.
    pub index: usize,
}

impl ToolGrant {
    fn canonical(&self) -> String {
        format!(
            "{}:{:?}:{}",
            self.glob.as_str(),
            self.max_calls,
            self.arguments
                .as_ref()
                .map_or(String::new(), BodyConstraints::canonical)
        )
    }
}

/// A validated `mcp` table of an allow rule.
#[derive(Debug, Clone)]
pub(crate) struct McpAllow {
    pub tools: Vec<ToolGrant>,
    /// Methods other than `tools/call` the server may be sent.
    pub methods: Vec<String>,
}

impl McpAllow {
    /// For the rule's key.
    pub(crate) fn canonical(&self) -> String {
        let tools: Vec<String> = self.tools.iter().map(ToolGrant::canonical).collect();
        format!(
            "|mcp={}|methods={}",
            tools.join(","),
            self.methods.join(",")
        )
    }
}

/// A validated `mcp` table of an ask rule: the tool calls it holds.
#[derive(Debug, Clone)]
pub(crate) struct McpAsk {
    pub tools: Vec<ToolGrant>,
}

impl McpAsk {
    pub(crate) fn canonical(&self) -> String {
        let tools: Vec<String> = self.tools.iter().map(ToolGrant::canonical).collect();
        format!("|mcp={}", tools.join(","))
    }
}

pub(crate) fn compile_allow(
    map: &SourceMap,
    mcp: &Spanned<RawMcp>,
) -> Result<McpAllow, PolicyError> {
    let raw = mcp.get_ref();
    let tools = tools(map, raw, true)?;
    let methods = match &raw.methods {
        None => KNOWN_METHODS
            .iter()
            .filter(|m| **m != "tools/call")
            .map(|m| (*m).to_owned())
            .collect(),
        Some(list) => methods(map, list)?,
    };
    Ok(McpAllow { tools, methods })
}

pub(crate) fn compile_ask(map: &SourceMap, mcp: &Spanned<RawMcp>) -> Result<McpAsk, PolicyError> {
    let raw = mcp.get_ref();
    if let Some(methods) = &raw.methods {
        return Err(map.error(
            methods.span(),
            "`methods` cannot be set on an ask rule's mcp table: an ask rule holds tool calls only; restrict methods on the allow rule's mcp table",
        ));
    }
    let tools = tools(map, raw, false)?;
    if tools.is_empty() {
        return Err(map.error(
            mcp.span(),
            "this ask rule's mcp table names no tool, so it would hold nothing; add `tools = [\"NAME\"]`",
        ));
    }
    Ok(McpAsk { tools })
}

fn tools(map: &SourceMap, raw: &RawMcp, allow: bool) -> Result<Vec<ToolGrant>, PolicyError> {
    let mut out = Vec::new();
    for written in raw.tools.iter().flat_map(|l| l.get_ref()) {
        let glob = tool_name(map, written)?;
        out.push(ToolGrant {
            glob,
            max_calls: None,
            arguments: None,
            index: out.len(),
        });
    }
    for table in &raw.tool {
        let table = table.get_ref();
        let glob = tool_name(map, &table.name)?;
        if let Some(max) = &table.max_calls {
            if !allow {
                return Err(map.error(
                    max.span(),
                    "`max_calls` cannot be set on an ask rule: a person decides each call; set it on the allow rule's tool",
                ));
            }
            if *max.get_ref() == 0 {
                return Err(map.error(
                    max.span(),
                    "`max_calls = 0` allows no call; remove the tool instead",
                ));
            }
        }
        let arguments = table
            .arguments
            .as_ref()
            .map(|body| {
                BodyConstraints::compile(body.get_ref())
                    .map_err(|(span, message)| map.error(span, message))
            })
            .transpose()?;
        out.push(ToolGrant {
            glob,
            max_calls: table.max_calls.as_ref().map(|m| *m.get_ref()),
            arguments,
            index: out.len(),
        });
    }
    Ok(out)
}

fn tool_name(map: &SourceMap, written: &Spanned<String>) -> Result<NameGlob, PolicyError> {
    let name = written.get_ref();
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(map.error(
            written.span(),
            format!(
                "tool name {name:?} is empty or has whitespace or control characters; write the tool's exact name, like \"transfer\", or a glob like \"list_*\""
            ),
        ));
    }
    Ok(NameGlob::new(name))
}

fn methods(map: &SourceMap, list: &Strings) -> Result<Vec<String>, PolicyError> {
    let mut out: Vec<String> = Vec::new();
    for written in list.get_ref() {
        let method = written.get_ref();
        if method == "tools/call" {
            return Err(map.error(
                written.span(),
                "\"tools/call\" is granted by `tools` (and `[[...mcp.tool]]`), not `methods`; remove it",
            ));
        }
        if !KNOWN_METHODS.contains(&method.as_str()) {
            return Err(map.error(
                written.span(),
                format!(
                    "unknown MCP method {method:?}; write it exactly as MCP does, one of: {}",
                    KNOWN_METHODS
                        .iter()
                        .filter(|m| **m != "tools/call")
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        if !out.contains(method) {
            out.push(method.clone());
        }
    }
    Ok(out)
}
