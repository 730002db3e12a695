"""A smolagents tool that runs shell commands in an Airlock sandbox::

    from smolagents import ToolCallingAgent
    from airlock.adapters.smolagents import sandbox_tool
    agent = ToolCallingAgent(tools=[sandbox_tool(sb)], model=model)

Agents call it as they call every tool (``tool(command=...,
sanitize_inputs_outputs=True)``). Needs ``smolagents``. (CrewAI has more
users, but its current release pins ``openai<3`` and ``mcp<2``, which the
OpenAI Agents SDK and Airlock's own MCP tests cannot share one environment
with.)
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from smolagents import Tool  # type: ignore[import-untyped]

from ..sandbox import Sandbox
from ._common import DESCRIPTION, NAME, command_argv, describe


class SandboxTool(Tool):  # type: ignore[misc]  # smolagents has no type information
    """The tool; build it with :func:`sandbox_tool`."""

    name = NAME
    description = DESCRIPTION
    inputs: Dict[str, Dict[str, Any]] = {
        "command": {"type": "string", "description": "The shell command to run (sh -c), in the workspace."}
    }
    output_type = "string"

    def __init__(self, sandbox: Sandbox, timeout: Optional[float] = 300.0) -> None:
        super().__init__()
        self._sandbox = sandbox
        self._timeout = timeout

    def forward(self, command: str) -> str:
        result = self._sandbox.run(command_argv(command), label=f"smolagents:{NAME}", timeout=self._timeout)
        return describe(result)


def sandbox_tool(sandbox: Sandbox, *, timeout: Optional[float] = 300.0) -> SandboxTool:
    """A tool taking ``command`` and answering with
    :func:`airlock.adapters.describe`'s text; each call is one step, killed
    after ``timeout`` seconds."""
    return SandboxTool(sandbox, timeout)
