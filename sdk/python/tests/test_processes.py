"""Background commands (``run(..., background=True)``: wait, kill,
send_stdin, pid) and ``processes()``, blocking and asyncio, against the
real binary."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

import pytest
from conftest import eventually

import airlock

# Ways a program tries to outlive its kill: its own session (setsid), a
# SIGTERM it ignores, a double fork that leaves an orphan, a process that
# renames itself as one of airlock's step holders.
SURVIVORS = [
    "setsid sleep 1001 &",
    "sh -c 'trap \"\" TERM HUP INT; sleep 1002' &",
    "sh -c 'sleep 1003 & exit 0' &",
    "sh -c 'printf airlock:s999 > /proc/self/comm; sleep 1004' &",
]


def survivors(processes: List[airlock.Process]) -> List[airlock.Process]:
    return [p for p in processes if p.argv in (["sleep", f"100{i}"] for i in range(1, 5))]


def test_a_killed_background_command_ends_with_everything_it_started(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        handle = sb.run(["sh", "-c", " ".join(SURVIVORS) + " cat"], background=True, label="call_bg")
        assert handle.result is None
        with pytest.raises(TimeoutError):
            handle.wait(timeout=0.3)
        eventually("all four started", lambda: len(survivors(sb.processes())) == 4)
        assert {p.step for p in survivors(sb.processes())} == {handle.step}

        assert handle.kill() is True
        r = handle.wait(timeout=10)
        assert (r.exit_code, r.signal, r.timed_out) == (137, 9, False), r
        assert r.reason and "kill" in r.reason and "disconnected" not in r.reason, r.reason
        assert r.step == handle.step
        assert survivors(sb.processes()) == [], "nothing it started outlived the kill"
        assert handle.kill() is False, "killing what ended is a no-op"
        with pytest.raises(airlock.AirlockError, match="stdin is closed"):
            handle.send_stdin("late\n")
        # The session lives on.
        assert sb.run(["echo", "still here"]).stdout == "still here\n"


def test_send_stdin_reaches_a_background_command_as_it_runs(options: Dict[str, Any]) -> None:
    script = 'while read -r line; do echo "got:$line"; done; echo eof'
    with airlock.Sandbox(**options) as sb:
        seen: List[str] = []
        handle = sb.run(["sh", "-c", script], background=True, on_stdout=seen.append)
        handle.send_stdin("one\n")
        handle.send_stdin(b"two\n")
        handle.close_stdin()
        handle.close_stdin()
        r = handle.wait(timeout=10)
        assert (r.exit_code, r.stdout) == (0, "got:one\ngot:two\neof\n"), r
        assert "".join(seen) == r.stdout
        # Input given up front is written, then closed.
        given = sb.run(["cat"], stdin="given\n", background=True)
        with pytest.raises(airlock.AirlockError, match="stdin is closed"):
            given.send_stdin("more\n")
        assert given.wait(timeout=10).stdout == "given\n"
        big = b"x" * (3 << 20)
        r = sb.run(["wc", "-c"], stdin=big, background=True).wait(timeout=30)
        assert r.stdout.strip() == str(len(big)), r
        # Input a command never reads holds neither the call nor the kill.
        deaf = sb.run(["sleep", "30"], stdin=big, background=True)
        assert deaf.kill() and deaf.wait(timeout=10).signal == 9


def test_processes_lists_what_runs_with_its_step_and_pid(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        left = sb.run(["sh", "-c", "sleep 998 >/dev/null 2>&1 &"])
        handle = sb.run(["sleep", "997"], background=True)
        pid = handle.pid
        listed = sb.processes()
        by_pid = {p.pid: p for p in listed}
        assert by_pid[pid].argv == ["sleep", "997"] and by_pid[pid].step == handle.step, listed
        [orphan] = [p for p in listed if p.argv == ["sleep", "998"]]
        assert orphan.step == left.step, "what an ended step left running stays its own"
        names = {p.name for p in listed}
        assert "airlock:init" not in names and not any(n.startswith("airlock:s") for n in names), names
        assert not any("/proc/" in p.command for p in listed), "the listing leaves itself out"
        # A process that names itself like a holder is still listed, under
        # its real step.
        fake = sb.run(["sh", "-c", "printf airlock:s999 > /proc/self/comm; sleep 996"], background=True)
        fake_pid = fake.pid
        faked = {p.pid: p for p in sb.processes()}
        assert faked[fake_pid].name == "airlock:s999" and faked[fake_pid].step == fake.step, faked
        fake.kill()
        handle.kill()
        handle.wait(timeout=10)
        assert pid not in {p.pid for p in sb.processes()}
        with pytest.raises(airlock.AirlockError, match="no pid"):
            _ = sb.run(["true"], background=True).pid


def test_a_process_named_to_confuse_the_listing_is_listed_as_it_is(options: Dict[str, Any]) -> None:
    # A shell that names itself with a newline, parentheses (stat's
    # delimiters) and a fake listing line, and one whose command line is
    # 1 MiB in 64 arguments.
    odd = "printf ') x (\\nP 1\\n' > /proc/self/comm; sleep 995; :"
    long = ["sh", "-c", 'sleep 994; : "$@"', "sh"] + ["y" * (16 << 10)] * 64
    with airlock.Sandbox(**options) as sb:
        named = sb.run(["sh", "-c", odd], background=True)
        big = sb.run(long, background=True)
        eventually("both started", lambda: len([p for p in sb.processes() if p.name == "sleep"]) == 2)
        listed = sb.processes()
        [sleeper] = [p for p in listed if p.argv == ["sleep", "995"]]
        weird = {p.pid: p for p in listed}[sleeper.ppid]
        assert weird.name == ") x (\nP 1\n"[:15] and weird.step == named.step, weird
        [huge] = [p for p in listed if p.argv[:3] == long[:3]]
        assert huge.step == big.step and len(huge.command) <= 4096, len(huge.command)
        assert 1 not in {p.pid for p in listed}, "the fake `P 1` line is no process"
        assert named.kill() and big.kill()


def test_a_background_command_keeps_its_timeout(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        r = sb.run(["sleep", "30"], background=True, timeout=0.5).wait(timeout=10)
        assert (r.exit_code, r.timed_out) == (124, True), r


def test_the_async_sandbox_has_background_commands_and_processes(options: Dict[str, Any]) -> None:
    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            seen: List[str] = []
            handle = await sb.run(["sh", "-c", SURVIVORS[0] + " cat"], background=True, on_stdout=seen.append)
            pid = await handle.pid()
            listed = await sb.processes()
            assert {p.pid: p.step for p in listed}[pid] == handle.step, listed
            await handle.send_stdin("hello\n")
            for _ in range(500):
                if seen:
                    break
                await asyncio.sleep(0.01)
            assert await handle.kill() is True
            r = await handle.wait(timeout=10)
            assert (r.signal, r.stdout) == (9, "hello\n") and r.reason and "kill" in r.reason, r
            assert survivors(await sb.processes()) == []

            echo = await sb.run(["cat"], background=True)
            await echo.send_stdin("back\n")
            await echo.close_stdin()
            assert (await echo.wait(timeout=10)).stdout == "back\n"
            big = b"x" * (3 << 20)
            counted = await sb.run(["wc", "-c"], stdin=big, background=True)
            assert (await counted.wait(timeout=30)).stdout.strip() == str(len(big))
            deaf = await asyncio.wait_for(sb.run(["sleep", "30"], stdin=big, background=True), 5)
            with pytest.raises(airlock.AirlockError, match="stdin is closed"):
                await (await sb.run(["cat"], stdin="x", background=True)).send_stdin("y")
            assert await deaf.kill() and (await deaf.wait(timeout=10)).signal == 9

    asyncio.run(main())
