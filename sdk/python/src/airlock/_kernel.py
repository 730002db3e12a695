"""``run_code``'s interpreter, without any I/O: which steps a cell takes
(start the interpreter, send the cell, restart it) and what its answer
means. The interpreter itself is ``_kernel_main.py``, run inside the
sandbox; :class:`~airlock.Sandbox` and :class:`~airlock.AsyncSandbox` drive
the steps this module asks for (see :func:`python_cell`)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Generator, List, Optional

from . import _steps
from .errors import AirlockError, StepError
from .result import Denial, Held, RunResult

# In the sandbox's own /tmp (private to the session), so a second client of
# the same session (Sandbox.connect) finds the same interpreter.
KERNEL_DIR = "/tmp/.airlock-kernel-python"
# The client's exit status when no interpreter is running.
NOT_RUNNING = 97
# Seconds a cell's step may run past its timeout: the interpreter is sent
# an interrupt at the timeout, and answers it unless the cell is stuck
# where Python cannot interrupt it (C code that ignores signals).
INTERRUPT_GRACE = 2.0
# Past this, the code is sent on the cell's stdin instead of its command
# line (one argument may be 128 KiB, execve(2)), and is then not in the
# record's step command.
MAX_CODE_IN_ARGV = 96 << 10

# The cell's step: `$1` is the header (the client adds its pid, for the
# interpreter to write the answer to its stdout), `$2` the code (or stdin).
# The lock is the one newline in `tok`; the interpreter puts it back once it
# answered, and says it did on `out`.
# `/proc/PID/fd/N` is the interpreter's own end of `in`: gone when it is,
# so a cell never waits on an interpreter that is not there.
_CLIENT = f"""d={KERNEL_DIR}
exec 4>&1
gone() {{ echo "airlock: no python interpreter is running in this session" >&2; exit {NOT_RUNNING}; }}
read -r pid fd < "$d/pid" 2>/dev/null && [ -p "/proc/$pid/fd/$fd" ] || gone
exec 3>"/proc/$pid/fd/$fd"
read -r _ < "$d/tok" || gone
h="{{\\"client\\":$$,${{1#{{}}"
if [ "$#" -ge 2 ]; then printf '%s\\n%s' "$h" "$2" >&3; else printf '%s\\n' "$h" >&3; cat >&3; fi
exec 3>&-
read -r _ < "$d/out"
"""

# Ends the interpreter's process group, and returns once it is gone (a
# cell sent while it dies would find its pipes still there).
_RESTART = f"""read -r pid fd < {KERNEL_DIR}/pid 2>/dev/null || exit 0
kill -9 "-$pid" 2>/dev/null
i=0; while [ -e "/proc/$pid/fd/$fd" ] && [ $i -lt 200 ]; do sleep 0.01; i=$((i + 1)); done
exit 0"""


@dataclass(frozen=True)
class CellError:
    """An exception a cell raised, as Jupyter reports one."""

    name: str
    """The exception's class name: ``"ZeroDivisionError"``; ``"KeyboardInterrupt"``
    when the cell's timeout interrupted it."""
    value: str
    """``str()`` of the exception."""
    traceback: str
    """The traceback from the cell's own frames, as Python prints it."""


@dataclass(frozen=True)
class Execution:
    """What one ``run_code`` cell did."""

    stdout: str
    stderr: str
    value: Optional[str]
    """``repr()`` of the cell's last expression, when it is one and not ``None``."""
    error: Optional[CellError]
    """What the cell raised, else ``None``."""
    execution_count: Optional[int]
    """The cell's number in its interpreter (restarting starts again at 1);
    ``None`` for a language without a persistent interpreter."""
    exit_code: int
    """0 when the cell ran without an error; else 1, or the program's status
    for a language without a persistent interpreter."""
    timed_out: bool
    step: int
    """The step that ran the cell, in the session's record."""
    duration: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    denials: List[Denial] = field(default_factory=list)
    held: List[Held] = field(default_factory=list)

    @property
    def text(self) -> Optional[str]:
        """The last expression's value, as E2B's ``Execution.text`` is."""
        return self.value


@dataclass(frozen=True)
class StepCall:
    """One step a cell needs, for the sandbox to run."""

    argv: List[str]
    label: str
    stdin: Optional[bytes] = None
    timeout: Optional[float] = None
    max_output: int = 1 << 20


class KernelState:
    """What a sandbox knows of its interpreter: the next cell's number, for
    its step's label. Shared by threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 1

    def label(self) -> str:
        with self._lock:
            return f"sdk:run_code cell {self._next}"

    def answered(self, count: Optional[int]) -> None:
        with self._lock:
            self._next = (count or 0) + 1


Cell = Generator[StepCall, RunResult, Execution]


def python_cell(
    state: KernelState, code: str, timeout: Optional[_steps.Timeout], max_output: int, label: Optional[str]
) -> Cell:
    """The steps of one Python cell. Yields each :class:`StepCall` and is
    sent its :class:`RunResult`; returns the cell's :class:`Execution`."""
    seconds = None if timeout is None else _steps.timeout_ms(timeout) / 1000
    header: Dict[str, Any] = {"size": len(code.encode()), "max_output": max_output}
    if seconds is not None:
        header["timeout"] = seconds
    argv = ["sh", "-c", _CLIENT, "airlock-cell", json.dumps(header, separators=(",", ":"))]
    stdin = None
    if len(code.encode()) <= MAX_CODE_IN_ARGV:
        argv.append(code)
    else:
        stdin = code.encode()
    call = StepCall(
        argv=argv,
        label=label or state.label(),
        stdin=stdin,
        timeout=None if seconds is None else seconds + INTERRUPT_GRACE,
        # The answer carries both streams (each capped by the interpreter)
        # as JSON: room for escaping.
        max_output=max_output * 8 + (1 << 16),
    )
    result = yield call
    if result.exit_code == NOT_RUNNING and "no python interpreter is running" in result.stderr:
        yield from start()
        result = yield call
    if result.timed_out:
        # The cell did not answer its interrupt: only a fresh interpreter
        # can take the next one.
        yield restart_call()
        state.answered(0)
        return _execution(
            result,
            {
                "error": {
                    "name": "TimeoutError",
                    "value": f"the cell ran past its timeout ({seconds:g}s) and did not stop when "
                    "interrupted; the interpreter was restarted and its state is lost",
                    "traceback": "",
                },
                "timed_out": True,
            },
        )
    answer = _answer(result)
    state.answered(answer.get("execution_count"))
    return _execution(result, answer)


def start() -> Generator[StepCall, RunResult, None]:
    """Start the interpreter (its starting step ends once it is ready)."""
    source = Path(__file__).with_name("_kernel_main.py").read_text()
    started = yield StepCall(argv=["python3", "-c", source, KERNEL_DIR], label="sdk:run_code start python")
    if started.exit_code != 0:
        said = started.stderr.strip().splitlines()
        raise StepError(
            "run_code: the python interpreter did not start: "
            + (said[-1] if said else f"exit status {started.exit_code}")
        )


def restart_call() -> StepCall:
    """End the interpreter (and what it started in its process group); the
    next cell starts a fresh one."""
    return StepCall(argv=["sh", "-c", _RESTART], label="sdk:run_code restart")


def restart(state: KernelState) -> Generator[StepCall, RunResult, None]:
    yield restart_call()
    state.answered(0)


def one_shot(result: RunResult) -> Execution:
    """A program run once (node, bash): its output and status, no value."""
    return Execution(
        stdout=result.stdout,
        stderr=result.stderr,
        value=None,
        error=None,
        execution_count=None,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        step=result.step,
        duration=result.duration,
        stdout_truncated=result.stdout_truncated,
        stderr_truncated=result.stderr_truncated,
        denials=result.denials,
        held=result.held,
    )


def _answer(result: RunResult) -> Dict[str, Any]:
    if result.exit_code != 0 or result.stdout_truncated:
        said = result.stderr.strip().splitlines()
        why = result.reason or (said[-1] if said else f"exit status {result.exit_code}")
        raise StepError(f"run_code: the interpreter did not answer: {why}")
    try:
        answer = json.loads(result.stdout)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise AirlockError(f"run_code: the interpreter sent a malformed answer: {result.stdout[:200]!r}")
    return answer


def _execution(result: RunResult, answer: Dict[str, Any]) -> Execution:
    error = answer.get("error")
    return Execution(
        stdout=str(answer.get("stdout") or ""),
        stderr=str(answer.get("stderr") or ""),
        value=answer.get("value"),
        error=None
        if not error
        else CellError(str(error.get("name")), str(error.get("value")), str(error.get("traceback") or "")),
        execution_count=answer.get("execution_count"),
        exit_code=1 if error else 0,
        timed_out=bool(answer.get("timed_out")),
        step=result.step,
        duration=result.duration,
        stdout_truncated=bool(answer.get("stdout_truncated")),
        stderr_truncated=bool(answer.get("stderr_truncated")),
        denials=result.denials,
        held=result.held,
    )
