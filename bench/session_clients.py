#!/usr/bin/env python3
"""A live session's step round trip as agent frameworks make it: one
``sb.run(["/bin/true"])`` of the Python SDK (in-process, over the control
socket), one ``sb.run_code("x + 1")`` cell of its persistent interpreter
(``sdk-code``), ``Sandbox()`` from start to its first result
(``sdk-start``), or one ``run_command`` tool call through the official MCP
client to ``airlock mcp`` (stdio). Prints one JSON sample per timed run, in
the format of ``airlock-bench time``, for bench/run's samples file.

Needs the SDK (``pip install ./sdk/python``) and, for ``mcp``, the ``mcp``
package; bench/run --install puts both in a venv and runs this with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any, Callable, Dict, List

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


def sdk_options(args: argparse.Namespace) -> Dict[str, Any]:
    options: Dict[str, Any] = {"workspace": args.workspace, "idle_timeout": "10m"}
    if args.audit_db:
        options.update(audit_db=args.audit_db, audit_key=args.audit_key)
    else:
        options["no_audit"] = True
    return options


def bench_sdk_code(args: argparse.Namespace) -> List[float]:
    """A cell of run_code's persistent interpreter, once it is running (its
    start is the first warm-up call's)."""
    import airlock

    with airlock.Sandbox(airlock_bin=args.airlock, **sdk_options(args)) as sb:
        sb.run_code("x = 41")

        def call() -> None:
            cell = sb.run_code("x + 1")
            if cell.value != "42":
                raise SystemExit(f"run_code('x + 1') gave {cell!r}")

        return timed(args.runs, args.warmup, call)


def bench_sdk_start(args: argparse.Namespace) -> List[float]:
    """``Sandbox()`` from nothing to its first result: the session's start
    and one step (its stop is not counted)."""
    import airlock

    times = []
    for i in range(args.warmup + args.runs):
        began = time.perf_counter()
        sb = airlock.Sandbox(airlock_bin=args.airlock, **sdk_options(args)).start()
        try:
            result = sb.run(["/bin/true"])
            ms = (time.perf_counter() - began) * 1e3
        finally:
            sb.stop()
        if result.exit_code != 0:
            raise SystemExit(f"sb.run(['/bin/true']) exited {result.exit_code}: {result.stderr}")
        if i >= args.warmup:
            times.append(ms)
    return times


def bench_sdk(args: argparse.Namespace) -> List[float]:
    import airlock

    with airlock.Sandbox(airlock_bin=args.airlock, **sdk_options(args)) as sb:

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
    parser.add_argument("client", choices=["sdk", "sdk-code", "sdk-start", "mcp"])
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
    elif args.client == "sdk-code":
        times = bench_sdk_code(args)
        contender, command = "airlock-sdk-code", 'sb.run_code("x + 1")'
    elif args.client == "sdk-start":
        times = bench_sdk_start(args)
        contender, command = "airlock-sdk-start", 'Sandbox().start(); sb.run(["/bin/true"])'
    else:
        times = asyncio.run(bench_mcp_async(args))
        contender, command = "airlock-mcp", 'run_command {"argv": ["/bin/true"]}'
    for run, ms in enumerate(times, start=1):
        print(sample(contender, run, ms, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
