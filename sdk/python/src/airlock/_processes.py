"""Background commands for the blocking sandbox: a step whose control
connection the handle keeps open while the caller goes on.

The step is an ordinary one (numbered, labelled, in the record). A thread
reads its frames; ``send_stdin`` writes stdin frames on the same
connection; ``kill`` sends a ``kill`` request on a connection of its own
(so that no input queued on the step's connection can hold it), which ends
the step and everything it started (as its timeout would); the step's
connection still gets the exit report. Dropping the handle leaves the step running until the session ends
(or the process that holds the handle does, whose exit hangs up).
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Dict, Iterator, Optional, Union

from . import _protocol
from ._output import OutputChunk, TextCallbacks, chunk, combine
from .errors import AirlockError, SessionGoneError, SessionNotAnsweringError

if TYPE_CHECKING:
    from .result import RunResult

_END = None
# Chunks an iterating caller may be behind by before the step waits for it
# (the session then stops reading the command's output: back-pressure).
_QUEUE_CHUNKS = 256
# How long the process list is polled for a just-started command's pid.
PID_WITHIN = 2.0

PidOf = Callable[[int], Optional[int]]
KillStep = Callable[[int], bool]


class CommandHandle:
    """A command running in the background in the sandbox (from
    ``run(..., background=True)`` or ``stream(...)``). Iterating over it
    yields its output as :class:`OutputChunk` objects until it ends."""

    def __init__(
        self,
        conn: socket.socket,
        reader: BinaryIO,
        request: Dict[str, Any],
        step: int,
        max_output: int,
        callbacks: TextCallbacks,
        pid_of: PidOf,
        kill_step: KillStep,
        describe: Callable[[Dict[str, Any]], str],
        iterate: bool,
        stdin_open: bool = True,
    ) -> None:
        self.step = step
        """The step's number in the session's record."""
        self._conn = conn
        self._reader = reader
        self._request = request
        self._describe = describe
        self._pid_of = pid_of
        self._kill_step = kill_step
        self._pid: Optional[int] = None
        self._callbacks = callbacks
        self._write = threading.Lock()
        # False once its end was sent (with the request, or by close_stdin).
        self._stdin_open = stdin_open
        self._done = threading.Event()
        self._result: Optional["RunResult"] = None
        self._error: Optional[BaseException] = None
        self._queue: Optional["queue.Queue[Optional[OutputChunk]]"] = (
            queue.Queue(_QUEUE_CHUNKS) if iterate else None
        )
        self._abandoned = threading.Event()
        self._collector = _protocol.StepCollector(
            step, max_output, on_output=combine(callbacks or None, self._enqueue if iterate else None)
        )
        self._thread = threading.Thread(target=self._read, name=f"airlock-step-{step}", daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int:
        """The command's pid inside the sandbox (as ``processes()`` lists
        it), found once asked; AirlockError when it ended before that."""
        if self._pid is None:
            deadline = time.monotonic() + PID_WITHIN
            while self._pid is None:
                self._pid = self._pid_of(self.step)
                if self._pid is not None:
                    break
                if self._done.is_set() or time.monotonic() > deadline:
                    raise AirlockError(f"step {self.step}'s command is not running: it has no pid")
                time.sleep(0.01)
        return self._pid

    def send_stdin(self, data: Union[str, bytes]) -> None:
        """Write to the command's stdin (a str as UTF-8)."""
        if not self._stdin_open or self._done.is_set():
            raise AirlockError(f"step {self.step}'s stdin is closed")
        payload = data.encode() if isinstance(data, str) else bytes(data)
        self._send(b"".join(_protocol.stdin_frames(payload, eof=False)))

    def close_stdin(self) -> None:
        """End the command's stdin (it reads EOF). Closing twice is a no-op."""
        if self._stdin_open and not self._done.is_set():
            self._stdin_open = False
            self._send(_protocol.frame(_protocol.STDIN_EOF))

    def kill(self) -> bool:
        """End the command and everything it started; True if it was still
        running. Its result (``wait()``) says ``killed`` in ``reason``."""
        if self._done.is_set():
            return False
        return self._kill_step(self.step)

    def wait(self, timeout: Optional[float] = None) -> "RunResult":
        """Its result once it ends; ``TimeoutError`` if it is still running
        after ``timeout`` seconds (it goes on)."""
        # Whoever waits has stopped iterating: let the reader go on.
        self._abandoned.set()
        if not self._done.wait(timeout):
            raise TimeoutError(f"step {self.step} is still running after {timeout}s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    @property
    def result(self) -> Optional["RunResult"]:
        """The result once the command has ended, else None."""
        return self._result if self._done.is_set() else None

    def __iter__(self) -> Iterator[OutputChunk]:
        if self._queue is None:
            raise AirlockError("iterate over the output of `stream(...)`, not of `run(..., background=True)`")
        while True:
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._done.is_set() and self._queue.empty():
                    return
                continue
            if item is _END:
                return
            yield item

    def _send(self, data: bytes) -> None:
        with self._write:
            try:
                self._conn.sendall(data)
            except OSError as e:
                raise AirlockError(f"step {self.step} has ended: {e.strerror or e}") from None

    def _enqueue(self, kind: int, payload: bytes) -> None:
        assert self._queue is not None
        item = chunk(kind, payload)
        while not self._abandoned.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _read(self) -> None:
        waits = _protocol.step_deadline(self._request)
        until = None if waits is None else time.monotonic() + waits
        try:
            self._conn.settimeout(None if until is None else max(until - time.monotonic(), 0.001))
            while True:
                kind, length = _protocol.parse_header(self._reader.read(_protocol.HEADER_SIZE) or b"")
                payload = self._reader.read(length) or b""
                if len(payload) < length:
                    raise SessionGoneError("the session closed the connection before the step ended")
                if self._collector.feed(kind, payload):
                    break
            self._callbacks.flush()
            self._result = self._collector.result
        except TimeoutError:
            self._error = SessionNotAnsweringError(self._describe(self._request))
        except BaseException as e:  # handed to whoever waits
            self._error = e
        finally:
            with self._write:
                _hang_up(self._conn)
            self._done.set()
            if self._queue is not None:
                try:
                    self._queue.put_nowait(_END)
                except queue.Full:
                    pass  # the iterator sees `_done` instead


def _hang_up(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()
