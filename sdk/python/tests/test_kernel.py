"""``run_code``'s persistent Python interpreter against the real binary:
state across cells, values and structured errors, timeouts that
interrupt, restart, a dead interpreter replaced, concurrent cells, and
every cell a labelled step in the record."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import subprocess
from typing import Any, Dict

import airlock


def test_a_cell_sequence_keeps_state_returns_values_and_errors_and_restart_drops_it(
    options: Dict[str, Any],
) -> None:
    with airlock.Sandbox(**options) as sb:
        define = sb.run_code("import math\nx = 41\nprint('defined')")
        assert (define.stdout, define.value, define.error, define.execution_count) == (
            "defined\n",
            None,
            None,
            1,
        )
        use = sb.run_code("import sys\nprint('to stderr', file=sys.stderr)\nmath.floor(x + 1.5)")
        assert (use.value, use.stderr, use.error, use.exit_code) == ("42", "to stderr\n", None, 0)
        assert use.text == "42" and use.execution_count == 2
        # The output of what the cell starts is its output too.
        assert sb.run_code("import os\nos.system('echo from a child')").stdout == "from a child\n"
        raised = sb.run_code("print('before')\ny = x / 0\nprint('never')")
        assert raised.stdout == "before\n" and raised.exit_code == 1
        assert raised.error is not None
        assert (raised.error.name, raised.error.value) == ("ZeroDivisionError", "division by zero")
        assert "y = x / 0" in raised.error.traceback and "<cell 4>" in raised.error.traceback
        # The interpreter's own frames are not the user's business.
        assert "_kernel_main" not in raised.error.traceback and "<string>" not in raised.error.traceback
        # A syntax error and SystemExit are errors of the cell, not the end of it.
        assert sb.run_code("def (:").error.name == "SyntaxError"  # type: ignore[union-attr]
        assert sb.run_code("raise SystemExit(3)").error.name == "SystemExit"  # type: ignore[union-attr]
        assert sb.run_code("x").value == "41", "state outlives an error"
        sb.restart()
        gone = sb.run_code("x")
        assert gone.error is not None and gone.error.name == "NameError"
        assert gone.execution_count == 1


def test_a_timeout_interrupts_the_cell_and_keeps_the_interpreter(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        sb.run_code("kept = 'yes'")
        r = sb.run_code(
            "import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.05)", timeout=1
        )
        assert r.timed_out and r.error is not None
        assert r.error.name == "KeyboardInterrupt" and "time.sleep" in r.error.traceback
        assert r.stdout == "started\n"
        assert r.duration < 2.5
        assert sb.run_code("kept").value == "'yes'", "interrupted, not killed: the state is kept"


def test_a_cell_that_swallows_the_interrupt_is_ended_and_the_interpreter_restarted(
    options: Dict[str, Any],
) -> None:
    spellings = [
        # Catches the interrupt and carries on.
        "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n"
        "    except KeyboardInterrupt:\n        pass",
        # Ignores the alarm that carries it.
        "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True: time.sleep(0.05)",
        # Blocks it.
        "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGINT})\n"
        "while True: time.sleep(0.05)",
    ]
    with airlock.Sandbox(**options) as sb:
        for code in spellings:
            sb.run_code("state = 1")
            r = sb.run_code(code, timeout=1)
            assert r.timed_out and r.error is not None and r.error.name == "TimeoutError", (code, r)
            assert "restarted" in r.error.value
            assert r.duration < 4, (code, r.duration)
            after = sb.run_code("state")
            assert after.error is not None and after.error.name == "NameError", code
            assert sb.run_code("1 + 1").value == "2"


def test_an_interpreter_that_dies_mid_cell_is_reported_and_replaced(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(memory="256M", **options) as sb:
        for code in [
            "import os\nos.kill(os.getpid(), 9)",
            "import os\nos._exit(3)",
            # Over the session's memory limit: the kernel's OOM killer.
            "hog = bytearray(1 << 30)",
        ]:
            sb.run_code("state = 1")
            r = sb.run_code(code)
            assert r.error is not None and r.error.name in ("InterpreterDied", "MemoryError"), (code, r)
            if r.error.name == "InterpreterDied":
                assert "state is lost" in r.error.value
                gone = sb.run_code("state")
                assert gone.error is not None and gone.error.name == "NameError", code
            assert sb.run_code("2 * 21").value == "42", code


def test_cells_sent_at_once_each_get_their_own_answer(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        sb.run_code("import time")
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            cells = [f"time.sleep(0.02)\nprint({i})\n{i} * 10" for i in range(12)]
            results = list(pool.map(sb.run_code, cells))
        for i, r in enumerate(results):
            assert (r.stdout, r.value, r.error) == (f"{i}\n", str(i * 10), None)
        assert sorted(r.execution_count or 0 for r in results) == list(range(2, 14))


def test_a_large_cell_and_large_output_come_through(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        big = "data = [\n" + "".join(f"    {i},\n" for i in range(40_000)) + "]\nlen(data)"
        assert len(big) > 128 << 10
        assert sb.run_code(big).value == "40000"
        r = sb.run_code("print('z' * 5000)", max_output=1000)
        assert (len(r.stdout), r.stdout_truncated) == (1000, True)


def test_every_cell_is_a_labelled_step_with_its_code_in_the_record(
    options: Dict[str, Any], airlock_bin: str
) -> None:
    with airlock.Sandbox(**options) as sb:
        sb.run_code("secret_sauce = 6 * 7")
        sb.run_code("secret_sauce")
        sb.run_code("1", label="call_9")
        record = sb.info()["audit_session"]
    timeline = subprocess.run(
        [
            airlock_bin,
            "audit",
            "timeline",
            "--json",
            "--kind",
            "step_start",
            "--audit-db",
            str(options["audit_db"]),
            record,
        ],
        check=True,
        capture_output=True,
    )
    text = json.dumps(json.loads(timeline.stdout))
    assert "sdk:run_code start python" in text
    assert "sdk:run_code cell 1" in text and "sdk:run_code cell 2" in text and "call_9" in text
    assert "secret_sauce = 6 * 7" in text, "the cell's code is in its step's command"


def test_the_async_sandbox_keeps_state_too(options: Dict[str, Any]) -> None:
    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            await sb.run_code("x = 20")
            assert (await sb.run_code("x * 2 + 2")).value == "42"
            r = await sb.run_code("import time\nwhile True: time.sleep(0.05)", timeout=1)
            assert r.timed_out and r.error is not None and r.error.name == "KeyboardInterrupt"
            await sb.restart()
            r = await sb.run_code("x")
            assert r.error is not None and r.error.name == "NameError"

    asyncio.run(main())
