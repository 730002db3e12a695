"""Each framework adapter, invoked the way its framework invokes a tool
(no model needed), against the real binary: the command runs in the
sandbox, and a refusal reaches the model with the rule to add. The
frameworks are test dependencies (scripts/test installs them): a missing
one fails here rather than skipping."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict

from conftest import Upstream

import airlock
from airlock.adapters import describe


def refused_url(upstream: Upstream) -> str:
    return f"{upstream.base}/secret/data"


def assert_refusal_explained(text: str, upstream: Upstream) -> None:
    assert "refused by the policy: GET" in text and "/secret/data" in text, text
    assert "to allow it, add to the policy:" in text and "[[allow]]" in text, text


def test_the_langchain_tool_runs_a_tool_call_in_the_sandbox(
    options: Dict[str, Any], upstream: Upstream
) -> None:
    from langchain_core.messages import ToolMessage

    from airlock.adapters.langchain import sandbox_tool

    with airlock.Sandbox(**options) as sb:
        tool = sandbox_tool(sb)
        assert tool.name == "airlock_run"
        # What the model sees: only `command` (the call id is injected).
        assert list(tool.tool_call_schema.model_json_schema()["properties"]) == ["command"]
        # How an agent (ToolNode) invokes it: with the model's tool call.
        call = {"name": tool.name, "args": {"command": "echo hi > f.txt; cat f.txt"}, "id": "call_lc1"}
        message = tool.invoke({**call, "type": "tool_call"})
        assert isinstance(message, ToolMessage) and message.tool_call_id == "call_lc1", message
        assert "exit code: 0" in str(message.content) and "hi" in str(message.content), message
        assert sb.files.download("f.txt") == b"hi\n", "it ran in the sandbox's workspace"

        curl = f"curl -sS -o /dev/null -w '%{{http_code}}' {refused_url(upstream)}"
        message = tool.invoke(
            {"name": tool.name, "args": {"command": curl}, "id": "call_lc2", "type": "tool_call"}
        )
        assert_refusal_explained(str(message.content), upstream)

    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            tool = sandbox_tool(sb)
            call = {"name": tool.name, "args": {"command": "exit 3"}, "id": "call_lc3", "type": "tool_call"}
            message = await tool.ainvoke(call)
            assert "exit code: 3" in str(message.content), message

    asyncio.run(main())


def test_the_openai_agents_function_tool_runs_in_the_sandbox(
    options: Dict[str, Any], upstream: Upstream
) -> None:
    from agents.tool_context import ToolContext

    from airlock.adapters.openai_agents import sandbox_tool

    def context(call_id: str, arguments: str) -> ToolContext[Any]:
        return ToolContext(
            context=None, tool_name="airlock_run", tool_call_id=call_id, tool_arguments=arguments
        )

    async def invoke(tool: Any, call_id: str, command: str) -> str:
        # How the runner calls a function tool: its context and the model's
        # arguments as JSON.
        arguments = json.dumps({"command": command})
        return str(await tool.on_invoke_tool(context(call_id, arguments), arguments))

    with airlock.Sandbox(**options) as sb:
        tool = sandbox_tool(sb)
        assert tool.name == "airlock_run"
        assert list(tool.params_json_schema["properties"]) == ["command"], tool.params_json_schema
        text = asyncio.run(invoke(tool, "call_oa1", "uname -s; echo err >&2"))
        assert "exit code: 0" in text and "Linux" in text and "stderr:\nerr" in text, text
        curl = f"curl -sS {refused_url(upstream)}"
        assert_refusal_explained(asyncio.run(invoke(tool, "call_oa2", curl)), upstream)

    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            text = await invoke(sandbox_tool(sb), "call_oa3", "echo async")
            assert "async" in text, text

    asyncio.run(main())


def test_the_smolagents_tool_runs_in_the_sandbox(options: Dict[str, Any], upstream: Upstream) -> None:
    from airlock.adapters.smolagents import sandbox_tool

    with airlock.Sandbox(**options) as sb:
        tool = sandbox_tool(sb)
        tool.validate_arguments()
        # How a ToolCallingAgent calls it with the model's arguments.
        text = tool(**{"command": "echo smol"}, sanitize_inputs_outputs=True)
        assert "exit code: 0" in text and "smol" in text, text
        # A CodeAgent's code calls it as a function with a dict, too.
        assert_refusal_explained(tool({"command": f"curl -sS {refused_url(upstream)}"}), upstream)


def test_describe_says_why_and_cuts_long_output(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        r = sb.run(["sh", "-c", "head -c 50000 /dev/zero | tr '\\0' x"], timeout=10)
        text = describe(r, max_text=100)
        assert "stdout (cut):" in text and len(text) < 400, text
        r = sb.run(["sleep", "5"], timeout=0.3)
        assert "exit code: 124" in describe(r), describe(r)
