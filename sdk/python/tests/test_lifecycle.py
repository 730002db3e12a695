"""Results that explain themselves and a session's life, against the real
binary: why a step was killed, connecting from a second process, listing,
changing the idle timeout, a stopped sandbox, and the CLI's hints."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict

import pytest
from conftest import eventually

import airlock
from airlock._cli import socket_path

HOG = "b = bytearray(400 << 20)"


def test_a_memory_kill_says_which_limit_did_it(options: Dict[str, Any]) -> None:
    memory = "memory limit (--memory 64M) exceeded"
    with airlock.Sandbox(memory="64M", **options) as sb:
        # The step's own process killed, and a child its shell reports.
        for argv in (["python3", "-c", HOG], ["sh", "-c", f"python3 -c '{HOG}'"]):
            r = sb.run(argv)
            assert r.exit_code == 137, (argv, r)
            assert r.reason is not None and memory in r.reason, (argv, r.reason)
        # The session lives on, and a step that ends well has no reason.
        ok = sb.run(["true"])
        assert (ok.exit_code, ok.reason) == (0, None)
        # Killed by a signal: which one.
        term = sb.run(["sh", "-c", "kill -TERM $$"])
        assert term.exit_code == 143 and term.reason == "killed by signal 15 (SIGTERM)"
        # Killed by its timeout: which limit.
        slow = sb.run(["sleep", "10"], timeout="1s")
        assert slow.timed_out and slow.reason == "killed: time limit (--timeout 1s) exceeded"
        # A program that exits 137 by itself was not killed.
        assert sb.run(["sh", "-c", "exit 137"]).reason is None


def test_the_async_sandbox_says_why_too(options: Dict[str, Any]) -> None:
    async def main() -> None:
        async with airlock.AsyncSandbox(memory="64M", **options) as sb:
            r = await sb.run(["python3", "-c", HOG])
            assert r.exit_code == 137 and r.reason is not None and "--memory 64M" in r.reason

    asyncio.run(main())


SECOND_PROCESS = """
import json, sys
import airlock
given, bin = sys.argv[1], sys.argv[2]
with airlock.Sandbox.connect(given, airlock_bin=bin) as sb:
    cell = sb.run_code("shared * 2")
    step = sb.run(["cat", "note.txt"])
    info = sb.info()
print(json.dumps({"value": cell.value, "note": step.stdout, "id": info["id"]}))
"""


def test_a_second_process_connects_by_id_prefix_or_name_and_leaves_the_session_running(
    options: Dict[str, Any], airlock_bin: str
) -> None:
    with airlock.Sandbox(name=f"connect-{time.monotonic_ns()}", **options) as sb:
        sb.run_code("shared = 21")
        sb.write_file("note.txt", "from the first\n")
        for given in (sb.session_id, sb.session_id[:10], sb.info()["name"]):
            child = subprocess.run(
                [sys.executable, "-c", SECOND_PROCESS, given, airlock_bin],
                capture_output=True,
                timeout=60,
                env={"PYTHONPATH": str(Path(airlock.__file__).parent.parent)},
            )
            assert child.returncode == 0, child.stderr.decode()
            said = json.loads(child.stdout)
            assert said == {"value": "42", "note": "from the first\n", "id": sb.session_id}, given
            # The second process left: the session is still the first's.
            assert sb.run(["true"]).exit_code == 0
        # The connected process's cells were the same interpreter's.
        assert sb.run_code("shared").execution_count == 5


def test_connecting_to_a_session_that_is_not_running_raises_session_gone(airlock_bin: str) -> None:
    with pytest.raises(airlock.SessionGoneError, match="no running session 'no-such-session'"):
        airlock.Sandbox.connect("no-such-session", airlock_bin=airlock_bin)


def test_list_shows_the_running_sessions_with_their_workspace(
    options: Dict[str, Any], airlock_bin: str
) -> None:
    with airlock.Sandbox(**options) as sb:
        listed = {s["id"]: s for s in airlock.Sandbox.list(airlock_bin=airlock_bin)}
        mine = listed[sb.session_id]
        assert mine["state"] == "ready" and mine["workspace"] == sb.workspace
        assert sb.info()["workspace"] == sb.workspace
        stopped = sb.session_id
    assert stopped not in [s["id"] for s in airlock.Sandbox.list(airlock_bin=airlock_bin)]


def test_set_timeout_changes_the_idle_timeout_from_now(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(idle_timeout="1h", **options) as sb:
        assert sb.info()["idle_timeout_ms"] == 3_600_000
        sb.set_timeout(None)
        assert sb.info()["idle_timeout_ms"] is None
        sb.set_timeout("2s")
        assert sb.info()["idle_timeout_ms"] == 2000
        # Steps keep it alive; idle past the timeout ends it.
        for _ in range(3):
            time.sleep(1)
            assert sb.run(["true"]).exit_code == 0
        began = time.monotonic()
        eventually("the idle session stops", lambda: not Path(socket_path(sb.session_id)).exists())
        assert 1.5 < time.monotonic() - began < 4
        with pytest.raises(airlock.SessionGoneError):
            sb.run(["true"])
        with pytest.raises(airlock.AirlockError, match="invalid timeout"):
            sb.set_timeout("soon")


def test_the_async_sandbox_connects_lists_and_sets_the_timeout(
    options: Dict[str, Any], airlock_bin: str
) -> None:
    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            await sb.run_code("v = 'shared'")
            assert sb.session_id in [
                s["id"] for s in await airlock.AsyncSandbox.list(airlock_bin=airlock_bin)
            ]
            async with await airlock.AsyncSandbox.connect(sb.session_id, airlock_bin=airlock_bin) as other:
                assert (await other.run_code("v")).value == "'shared'"
                await other.set_timeout(5)
            # Leaving the connected block left the session running.
            assert (await sb.info())["idle_timeout_ms"] == 5000
            await sb.stop()
            with pytest.raises(airlock.SessionGoneError):
                await sb.run(["true"])

    asyncio.run(main())


def test_a_stopped_sandbox_raises_session_gone_for_every_call(options: Dict[str, Any]) -> None:
    sb = airlock.Sandbox(**options).start()
    sb.stop()
    calls = [
        lambda: sb.run(["true"]),
        lambda: sb.run_code("1"),
        lambda: sb.restart(),
        lambda: sb.read_file("x"),
        lambda: sb.write_file("x", b""),
        lambda: sb.info(),
        lambda: sb.denials(),
        lambda: sb.set_timeout(10),
    ]
    for call in calls:
        with pytest.raises(airlock.SessionGoneError, match="was stopped"):
            call()
    sb.stop()  # stopping again is harmless


def test_a_misspelled_option_carries_the_did_you_mean_as_a_keyword(options: Dict[str, Any]) -> None:
    for wrong, right in (("memroy", "memory"), ("idle_timout", "idle_timeout"), ("polcy", "policy")):
        given = {k: v for k, v in options.items() if k != right}
        with pytest.raises(airlock.SessionStartError) as refused:
            airlock.Sandbox(**given, **{wrong: "1"}).start()
        reason = refused.value.reason
        assert f"did you mean {right}=?" in reason and "\n" not in reason, reason
