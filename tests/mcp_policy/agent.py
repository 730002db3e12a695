"""The agent: the official MCP Python client, driven by a script of steps.

usage: agent.py URL {streamable|sse} STEP...
A step is `list`, `call:TOOL:JSON_ARGUMENTS`, `parallel:N:TOOL:JSON`
(N calls at once), or `touch:PATH` (create a file, printing nothing). Prints one JSON line per step: the tools listed, or the
call's outcome as the client reads it (is_error and text).
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client


def outcome(result):
    text = " ".join(getattr(c, "text", "") for c in result.content)
    return {"is_error": bool(getattr(result, "is_error", getattr(result, "isError", False))), "text": text}


async def call(session, tool, arguments):
    try:
        return outcome(await session.call_tool(tool, arguments))
    except Exception as e:  # a JSON-RPC error reaches the client as an exception
        return {"error": str(e)}


async def main(url, transport, steps):
    opener = sse_client(url) if transport == "sse" else streamable_http_client(url)
    async with opener as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()
            for step in steps:
                kind, _, rest = step.partition(":")
                if kind == "list":
                    tools = await session.list_tools()
                    print(json.dumps({"tools": sorted(t.name for t in tools.tools)}), flush=True)
                elif kind == "call":
                    tool, _, arguments = rest.partition(":")
                    print(json.dumps(await call(session, tool, json.loads(arguments or "{}"))), flush=True)
                elif kind == "touch":
                    open(rest, "w").close()
                elif kind == "parallel":
                    n, _, rest = rest.partition(":")
                    tool, _, arguments = rest.partition(":")
                    results = await asyncio.gather(
                        *[call(session, tool, json.loads(arguments or "{}")) for _ in range(int(n))])
                    print(json.dumps({"parallel": results}), flush=True)


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
