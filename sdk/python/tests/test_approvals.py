"""Held requests from the SDK: ``approvals()`` lists what ``[[ask]]`` rules
hold, and ``approve``/``deny`` decide them, from the sandbox's own process
or from a second SDK client (a supervising process); blocking and asyncio,
against the real binary and a real upstream."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest
from conftest import Upstream

import airlock


def ask(options: Dict[str, Any], upstream: Upstream) -> Path:
    policy = Path(options["policy"])
    policy.write_text(
        policy.read_text() + f'\n[[ask]]\nhost = "api.test"\nport = {upstream.port}\nmethods = ["GET"]\n'
        'paths = ["/held/**"]\nreason = "a person looks first"\n'
    )
    return policy


def held_by(sb: airlock.Sandbox, marker: str) -> airlock.Approval:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [a for a in sb.approvals() if marker in a.url]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"the request to {marker} was never held")


SUPERVISOR = """
import sys, time, airlock
session, marker = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    held = [a for a in airlock.approvals(session=session) if marker in a.url]
    if held:
        airlock.approve(held[0].id, note="fine by the supervisor")
        print(held[0].id)
        break
    time.sleep(0.05)
else:
    sys.exit("never held")
"""


def test_a_held_request_is_seen_from_the_sdk_and_approved_from_a_second_sdk_client(
    options: Dict[str, Any], upstream: Upstream, airlock_bin: str
) -> None:
    policy = ask(options, upstream)
    marker = f"held/sup-{os.getpid()}"
    with airlock.Sandbox(**options) as sb:
        step = sb.run(["curl", "-sS", f"{upstream.base}/{marker}?q=1"], background=True, label="call_9")
        seen = held_by(sb, marker)
        assert (seen.method, seen.url) == ("GET", f"{upstream.base}/{marker}?q=1"), seen
        assert (seen.step, seen.label) == (step.step, "call_9"), seen
        assert str(policy) in seen.rule and seen.reason == "a person looks first", seen
        assert seen.expires_at > seen.requested_at > 0, seen
        assert step.result is None, "the request waits, and so does the step"

        # A second SDK client: another process that holds no sandbox.
        env = dict(os.environ, AIRLOCK_BIN=airlock_bin)
        supervisor = subprocess.run(
            [sys.executable, "-c", SUPERVISOR, sb.session_id, marker], env=env, capture_output=True, text=True
        )
        assert supervisor.returncode == 0, supervisor.stderr
        assert supervisor.stdout.strip() == seen.id

        r = step.wait(timeout=30)
        assert r.stdout == f"hello from /{marker}?q=1", r
        [held] = r.held
        assert (held.approval, held.outcome, held.note) == (seen.id, "approved", "fine by the supervisor"), (
            held
        )
        assert sb.approvals() == [], "nothing is held any more"


def test_the_sandbox_denies_and_refuses_bad_decisions(options: Dict[str, Any], upstream: Upstream) -> None:
    ask(options, upstream)
    marker = f"held/deny-{os.getpid()}"
    with airlock.Sandbox(**options) as sb:
        curl = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", f"{upstream.base}/{marker}"]
        step = sb.run(curl, background=True)
        seen = held_by(sb, marker)
        with pytest.raises(airlock.AirlockError, match="scope"):
            sb.approve(seen.id, scope="forever")
        sb.deny(seen.id, "not today")
        r = step.wait(timeout=30)
        assert r.stdout == "403", r
        assert [(h.approval, h.outcome, h.note) for h in r.held] == [(seen.id, "denied", "not today")]
        assert f"/{marker}" not in upstream.paths, "the denied request never left"
        # Decided already, unknown, and ids spelled as options (never taken as one).
        for decide in [
            lambda: sb.approve(seen.id),
            lambda: sb.deny("no-such-request"),
            lambda: sb.approve("--help"),
            lambda: sb.deny("--note=x"),
            lambda: airlock.approve("--scope=session"),
        ]:
            with pytest.raises(airlock.AirlockError) as refused:
                decide()
            assert refused.value.reason.startswith(("airlock:", "error:")), refused.value.reason


def test_the_async_sandbox_lists_and_approves(options: Dict[str, Any], upstream: Upstream) -> None:
    ask(options, upstream)
    marker = f"held/async-{os.getpid()}"

    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            step = await sb.run(["curl", "-sS", f"{upstream.base}/{marker}"], background=True)
            found: List[airlock.Approval] = []
            for _ in range(600):
                found = [a for a in await sb.approvals() if marker in a.url]
                if found:
                    break
                await asyncio.sleep(0.05)
            assert found and found[0].step == step.step, found
            await sb.approve(found[0].id, scope="session")
            r = await step.wait(timeout=30)
            assert r.stdout == f"hello from /{marker}", r
            assert [(h.outcome, h.scope) for h in r.held] == [("approved", "session")]

    asyncio.run(main())
