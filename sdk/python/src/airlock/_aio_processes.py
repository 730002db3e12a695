"""Background commands for the asyncio sandbox: the same step kept open as
:mod:`airlock._processes` describes, read by a task instead of a thread."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Optional,
    Union,
)

from . import _protocol
from ._output import OutputChunk, TextCallbacks, chunk, combine
from .errors import AirlockError, SessionGoneError, SessionNotAnsweringError

if TYPE_CHECKING:
    from .result import RunResult

_QUEUE_CHUNKS = 256
PID_WITHIN = 2.0

AsyncPidOf = Callable[[int], Awaitable[Optional[int]]]
AsyncKillStep = Callable[[int], Awaitable[bool]]


class AsyncCommandHandle:
    """A command running in the background in an :class:`~airlock.AsyncSandbox`
    (from ``await run(..., background=True)``); see
    :class:`~airlock.CommandHandle`. ``async for chunk in handle`` yields
    its output when it came from ``stream(...)``."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: Dict[str, Any],
        step: int,
        max_output: int,
        callbacks: TextCallbacks,
        pid_of: AsyncPidOf,
        kill_step: AsyncKillStep,
        describe: Callable[[Dict[str, Any]], str],
        iterate: bool,
        stdin_open: bool = True,
    ) -> None:
        self.step = step
        """The step's number in the session's record."""
        self._reader = reader
        self._writer = writer
        self._request = request
        self._describe = describe
        self._pid_of = pid_of
        self._kill_step = kill_step
        self._pid: Optional[int] = None
        self._callbacks = callbacks
        # False once its end was sent (with the request, or by close_stdin).
        self._stdin_open = stdin_open
        self._done = asyncio.Event()
        self._result: Optional["RunResult"] = None
        self._error: Optional[BaseException] = None
        self._queue: Optional["asyncio.Queue[Optional[OutputChunk]]"] = (
            asyncio.Queue(_QUEUE_CHUNKS) if iterate else None
        )
        self._abandoned = False
        self._collector = _protocol.StepCollector(step, max_output)
        self._listener = combine(callbacks or None)
        self._feeder: Optional["asyncio.Future[None]"] = None
        self._input: Optional[socket.socket] = None
        self._task = asyncio.ensure_future(self._read())

    async def pid(self) -> int:
        """The command's pid inside the sandbox; see :attr:`airlock.CommandHandle.pid`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PID_WITHIN
        while self._pid is None:
            self._pid = await self._pid_of(self.step)
            if self._pid is not None:
                break
            if self._done.is_set() or loop.time() > deadline:
                raise AirlockError(f"step {self.step}'s command is not running: it has no pid")
            await asyncio.sleep(0.01)
        return self._pid

    async def send_stdin(self, data: Union[str, bytes]) -> None:
        """Write to the command's stdin (a str as UTF-8)."""
        if not self._stdin_open or self._done.is_set():
            raise AirlockError(f"step {self.step}'s stdin is closed")
        payload = data.encode() if isinstance(data, str) else bytes(data)
        await self._send(b"".join(_protocol.stdin_frames(payload, eof=False)))

    def feed_later(self, data: bytes) -> None:
        """Write ``data`` then EOF from a task of its own."""

        async def feed() -> None:
            try:
                await self.send_stdin(data)
                await self.close_stdin()
            except AirlockError:
                pass  # it ended before taking all its input

        self._feeder = asyncio.ensure_future(feed())

    async def close_stdin(self) -> None:
        """End the command's stdin (it reads EOF)."""
        if self._stdin_open and not self._done.is_set():
            self._stdin_open = False
            await self._send(_protocol.frame(_protocol.STDIN_EOF))

    async def kill(self) -> bool:
        """End the command and everything it started; True if it was still running."""
        if self._done.is_set():
            return False
        return await self._kill_step(self.step)

    async def wait(self, timeout: Optional[float] = None) -> "RunResult":
        """Its result once it ends; ``asyncio.TimeoutError`` past ``timeout``
        seconds (it goes on)."""
        # Whoever waits has stopped iterating: what is queued goes, so the
        # reader is never held by a queue nobody reads.
        self._abandoned = True
        while self._queue is not None and not self._queue.empty():
            self._queue.get_nowait()
        await asyncio.wait_for(asyncio.shield(self._done.wait()), timeout)
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    @property
    def result(self) -> Optional["RunResult"]:
        return self._result if self._done.is_set() else None

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[OutputChunk]:
        if self._queue is None:
            raise AirlockError("iterate over the output of `stream(...)`, not of `run(..., background=True)`")
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item

    async def _send(self, data: bytes) -> None:
        # Through a socket of its own (a dup of the connection), not the
        # stream's transport: input the step no longer takes fails with
        # EPIPE once it ended, and on the transport that would also fail
        # the reads of the exit report already received.
        if self._input is None:
            self._input = _input_socket(self._writer)
        try:
            await asyncio.get_running_loop().sock_sendall(self._input, data)
        except OSError as e:
            raise AirlockError(f"step {self.step} has ended: {e.strerror or e}") from None

    async def _frames(self) -> None:
        while True:
            head = await _read(self._reader, _protocol.HEADER_SIZE)
            kind, length = _protocol.parse_header(head)
            payload = await _read(self._reader, length)
            if len(payload) < length:
                raise SessionGoneError("the session closed the connection before the step ended")
            if kind in (_protocol.STDOUT, _protocol.STDERR):
                if self._listener is not None:
                    self._listener(kind, payload)
                if self._queue is not None and not self._abandoned:
                    await self._queue.put(chunk(kind, payload))
            if self._collector.feed(kind, payload):
                return

    async def _read(self) -> None:
        try:
            await asyncio.wait_for(self._frames(), _protocol.step_deadline(self._request))
            self._callbacks.flush()
            self._result = self._collector.result
        except asyncio.TimeoutError:
            self._error = SessionNotAnsweringError(self._describe(self._request))
        except asyncio.CancelledError:
            self._error = SessionGoneError(f"step {self.step}'s reader was cancelled")
            raise
        except Exception as e:  # handed to whoever waits
            self._error = e
        finally:
            self._writer.transport.abort()
            if self._input is not None:
                self._input.close()
            self._done.set()
            if self._queue is not None:
                try:
                    self._queue.put_nowait(None)
                except asyncio.QueueFull:
                    pass


class AsyncStream:
    """``async for chunk in sb.stream([...])``: starts the step on first use;
    ``result`` once the output has ended (or ``await wait()``)."""

    def __init__(self, start: Callable[[], Awaitable[AsyncCommandHandle]]) -> None:
        self._start = start
        self._handle: Optional[AsyncCommandHandle] = None

    async def handle(self) -> AsyncCommandHandle:
        """The started step (started now if it was not)."""
        if self._handle is None:
            self._handle = await self._start()
        return self._handle

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[OutputChunk]:
        handle = await self.handle()
        async for item in handle:
            yield item

    async def wait(self) -> "RunResult":
        return await (await self.handle()).wait()

    @property
    def result(self) -> Optional["RunResult"]:
        return None if self._handle is None else self._handle.result


async def _read(reader: asyncio.StreamReader, n: int) -> bytes:
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError as e:
        return e.partial


def _input_socket(writer: asyncio.StreamWriter) -> socket.socket:
    connection = writer.get_extra_info("socket")
    dup = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(connection.fileno()))
    dup.setblocking(False)
    return dup
