"""An OpenAI Agents SDK function tool that runs shell commands in an
Airlock sandbox::

    from agents import Agent
    from airlock.adapters.openai_agents import sandbox_tool
    agent = Agent(name="coder", tools=[sandbox_tool(sb)])  # Sandbox or AsyncSandbox

The runner invokes it as it invokes every function tool
(``on_invoke_tool(ToolContext, arguments_json)``); the step is labelled
with the tool call's id. Needs ``openai-agents``.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from agents import FunctionTool, RunContextWrapper, function_tool
from agents.tool_context import ToolContext

from ..aio import AsyncSandbox
from ..sandbox import Sandbox
from ._common import DESCRIPTION, NAME, command_argv, describe, label_of


def sandbox_tool(
    sandbox: Union[Sandbox, AsyncSandbox], *, name: str = NAME, timeout: Optional[float] = 300.0
) -> FunctionTool:
    """A function tool taking ``{"command": "..."}`` and answering with
    :func:`airlock.adapters.describe`'s text; each call is one step, killed
    after ``timeout`` seconds. A blocking sandbox's step runs on a worker
    thread, so the event loop goes on."""

    async def airlock_run(ctx: RunContextWrapper[Any], command: str) -> str:
        """Run a shell command in the sandbox.

        Args:
            command: The shell command to run (sh -c), in the workspace.
        """
        call_id = ctx.tool_call_id if isinstance(ctx, ToolContext) else None
        label = label_of(call_id, "openai-agents")
        if isinstance(sandbox, AsyncSandbox):
            return describe(await sandbox.run(command_argv(command), label=label, timeout=timeout))
        import asyncio

        result = await asyncio.to_thread(sandbox.run, command_argv(command), label=label, timeout=timeout)
        return describe(result)

    tool = function_tool(airlock_run, name_override=name, description_override=DESCRIPTION)
    assert isinstance(tool, FunctionTool)
    return tool
