"""``airlock.AsyncSandbox`` against the real binary: concurrent steps, the
same calls as the blocking sandbox, cancellation and teardown."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Dict, Optional

import pytest
from conftest import Upstream, alive, eventually, listed_sessions

import airlock
from airlock._cli import socket_path


def test_two_steps_run_concurrently(options: Dict[str, Any]) -> None:
    # The waiter only succeeds if the creator runs while it waits.
    waiter = "for i in $(seq 200); do [ -e /tmp/flag ] && echo seen && exit 0; sleep 0.05; done; exit 1"

    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            waited, created = await asyncio.gather(
                sb.run(["sh", "-c", waiter], label="waiter"),
                sb.run(["sh", "-c", "sleep 0.3; touch /tmp/flag"], label="creator"),
            )
            assert (waited.exit_code, waited.stdout, created.exit_code) == (0, "seen\n", 0)
            assert waited.step != created.step

    asyncio.run(main())


def test_the_async_calls_match_the_blocking_ones(options: Dict[str, Any], upstream: Upstream) -> None:
    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            r = await sb.run(["curl", "-sS", f"{upstream.base}/allowed/x"])
            assert (r.exit_code, r.stdout) == (0, "hello from /allowed/x")
            r = await sb.run(["curl", "-sS", f"{upstream.base}/private"])
            assert [d.url for d in r.denials] == [f"{upstream.base}/private"]
            assert await sb.denials() == r.denials
            assert (await sb.run_code("print(6 * 7)")).stdout == "42\n"
            await sb.write_file("a/b.txt", b"async")
            assert await sb.read_file("a/b.txt") == b"async"
            r = await sb.run(["sleep", "30"], timeout=0.5)
            assert (r.timed_out, r.exit_code) == (True, 124)
            assert (await sb.info())["id"] == sb.session_id

    asyncio.run(main())


@pytest.mark.parametrize("stdin", [None, b"x" * (4 << 20)], ids=["no-input", "input-waiting"])
def test_cancelling_a_call_kills_its_step(options: Dict[str, Any], stdin: Optional[bytes]) -> None:
    """With input the command never reads, feeding it blocks: the session
    must still notice that the client went away."""

    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            script = "echo $$ > /tmp/pid; exec sleep 300"
            step = asyncio.ensure_future(sb.run(["sh", "-c", script], stdin=stdin))
            for _ in range(200):
                if (await sb.run(["test", "-s", "/tmp/pid"])).exit_code == 0:
                    break
                await asyncio.sleep(0.05)
            step.cancel()
            with pytest.raises(asyncio.CancelledError):
                await step
            check = (
                "for i in $(seq 100); do "
                "kill -0 $(cat /tmp/pid) 2>/dev/null || { echo gone; exit; }; sleep 0.05; done"
            )
            assert (await sb.run(["sh", "-c", check])).stdout == "gone\n"

    asyncio.run(main())


def test_an_exception_in_the_block_still_stops_the_session(options: Dict[str, Any], airlock_bin: str) -> None:
    seen: Dict[str, Any] = {}

    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            seen["id"] = sb.session_id
            seen["server"] = (await sb.info())["pids"]["server"]
            raise RuntimeError("agent crashed")

    with pytest.raises(RuntimeError, match="agent crashed"):
        asyncio.run(main())
    assert not Path(socket_path(seen["id"])).exists()
    assert seen["id"] not in [s["id"] for s in listed_sessions(airlock_bin)]
    eventually("the session's server ends", lambda: not alive(seen["server"]))


def test_a_bad_option_is_refused_with_the_cli_reason(options: Dict[str, Any]) -> None:
    async def main() -> None:
        await airlock.AsyncSandbox(memory="lots", **options).start()

    with pytest.raises(airlock.SessionStartError, match="lots"):
        asyncio.run(main())
