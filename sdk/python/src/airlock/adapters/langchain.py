"""A LangChain tool that runs shell commands in an Airlock sandbox::

    from airlock.adapters.langchain import sandbox_tool
    tool = sandbox_tool(sb)                      # a Sandbox or an AsyncSandbox
    agent = create_agent(model, tools=[tool])    # or bind_tools + ToolNode

It is invoked with a tool call, as agents and ``ToolNode`` invoke tools
(``tool.invoke({"name": ..., "args": {"command": ...}, "id": ..., "type":
"tool_call"})``), and answers with a ``ToolMessage``; the step is labelled
with the call's id, so the record ties each step to the model's call.
Needs ``langchain-core``.
"""

from __future__ import annotations

from typing import Annotated, Optional, Union

from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool
from pydantic import BaseModel, Field

from ..aio import AsyncSandbox
from ..sandbox import Sandbox
from ._common import DESCRIPTION, NAME, command_argv, describe, label_of


class RunArgs(BaseModel):
    """What the model passes: the command. The call's id is LangChain's to
    inject, never the model's to choose."""

    command: str = Field(description="The shell command to run (sh -c), in the workspace.")
    call_id: Annotated[Optional[str], InjectedToolCallId] = None


def sandbox_tool(
    sandbox: Union[Sandbox, AsyncSandbox], *, name: str = NAME, timeout: Optional[float] = 300.0
) -> BaseTool:
    """A tool taking ``{"command": "..."}`` and answering with
    :func:`airlock.adapters.describe`'s text; each call is one step, killed
    after ``timeout`` seconds. An :class:`AsyncSandbox`'s tool is invoked
    with ``ainvoke`` (as async agents do)."""

    def run(command: str, call_id: Optional[str] = None) -> str:
        if isinstance(sandbox, AsyncSandbox):
            raise RuntimeError("the tool of an AsyncSandbox is invoked with ainvoke")
        label = label_of(call_id, "langchain")
        return describe(sandbox.run(command_argv(command), label=label, timeout=timeout))

    async def arun(command: str, call_id: Optional[str] = None) -> str:
        if not isinstance(sandbox, AsyncSandbox):
            return run(command, call_id)
        label = label_of(call_id, "langchain")
        return describe(await sandbox.run(command_argv(command), label=label, timeout=timeout))

    return StructuredTool.from_function(
        func=run, coroutine=arun, name=name, description=DESCRIPTION, args_schema=RunArgs
    )
