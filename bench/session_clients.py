#!/usr/bin/env python3
"""A live session's step round trip as agent frameworks make it: one
``sb.run(["/bin/true"])`` of the Python SDK (in-process, over the control
socket), or one ``run_command`` tool call through the official MCP client
to ``airlock mcp`` (stdio). Prints one JSON sample per timed run, in the
format of ``airlock-bench time``, for bench/run's samples file.

Needs the SDK (``pip install ./sdk/python``) and, for ``mcp``, the ``mcp``
package; bench/run --install puts both in a venv and runs this with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Callable, List

CASE = "session-call"


def sample(contender: str, run: int, ms: float, command: str) -> str:
    return json.dumps(
        {
            "case": CASE,
            "contender": contender,
            "run": run,
            "params": {"command": command},
            "metrics": {"wall_ms": ms},
        }
    )


def session_options(args: argparse.Namespace) -> List[str]:
    """`airlock session start` options, as both clients pass them."""
    options = ["--workspace", args.workspace, "--idle-timeout", "10m"]
    if args.audit_db:
        options += ["--audit-db", args.audit_db, "--audit-key", args.audit_key]
    else:
        options.append("--no-audit")
    return options


def timed(runs: int, warmup: int, call: Callable[[], None]) -> List[float]:
    times = []
    for i in range(warmup + runs):
        began = time.perf_counter()
        call()
        if i >= warmup:
            times.append((time.perf_counter() - began) * 1e3)
    return times


def bench_sdk(args: argparse.Namespace) -> List[float]:
    import airlock

    options = {"workspace": args.workspace, "idle_timeout": "10m"}
    if args.audit_db:
        options.update(audit_db=args.audit_db, audit_key=args.audit_key)
    else:
        options["no_audit"] = True

    with airlock.Sandbox(airlock_bin=args.airlock, **options) as sb:

        def call() -> None:
            result = sb.run(["/bin/true"])
            if result.exit_code != 0:
                raise SystemExit(f"sb.run(['/bin/true']) exited {result.exit_code}: {result.stderr}")

        return timed(args.runs, args.warmup, call)


async def bench_mcp_async(args: argparse.Namespace) -> List[float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    server = StdioServerParameters(command=args.airlock, args=["mcp", *session_options(args)])
    times = []
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for i in range(args.warmup + args.runs):
                began = time.perf_counter()
                result = await session.call_tool("run_command", {"argv": ["/bin/true"]})
                ms = (time.perf_counter() - began) * 1e3
                if result.is_error:
                    raise SystemExit(f"run_command failed: {result.content}")
                if i >= args.warmup:
                    times.append(ms)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("client", choices=["sdk", "mcp"])
    parser.add_argument("--airlock", required=True, help="the airlock binary")
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--audit-db")
    parser.add_argument("--audit-key")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    if bool(args.audit_db) != bool(args.audit_key):
        parser.error("give --audit-db and --audit-key together (or neither, for --no-audit)")
    if args.client == "sdk":
        times = bench_sdk(args)
        contender, command = "airlock-sdk", 'sb.run(["/bin/true"])'
    else:
        times = asyncio.run(bench_mcp_async(args))
        contender, command = "airlock-mcp", 'run_command {"argv": ["/bin/true"]}'
    for run, ms in enumerate(times, start=1):
        print(sample(contender, run, ms, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
