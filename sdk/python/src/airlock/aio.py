"""The asyncio sandbox: the same session as :class:`~airlock.Sandbox`, with
every call a coroutine. Each step is its own control connection, so steps
run concurrently (``asyncio.gather``)."""

from __future__ import annotations

import asyncio
import os
import time
from types import TracebackType
from typing import (
    Any,
    Awaitable,
    Dict,
    Generator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
    cast,
    overload,
)

from . import _cli, _kernel, _lifecycle, _procfs, _protocol, _steps, _venv
from ._aio_processes import AsyncCommandHandle, AsyncStream
from ._approvals import AsyncApprovalCalls
from ._files import AsyncFiles
from ._kernel import Execution
from ._output import OnText, TextCallbacks
from ._session import (
    DEFAULT_MAX_FILE,
    DEFAULT_MAX_OUTPUT,
    STOP_SETTLE_SECONDS,
    Data,
    SessionBase,
    as_bytes,
    check_file_step,
    session_denials,
)
from .errors import AirlockError, OutputLimitError, SessionGoneError, SessionNotAnsweringError, StepError
from .result import RunResult, SessionDenials

T = TypeVar("T")

# Answer lines (a session's denials, say) may be longer than asyncio's
# default 64 KiB line limit.
_LINE_LIMIT = 16 << 20


class AsyncSandbox(SessionBase, AsyncApprovalCalls):
    """A live Airlock session for asyncio code; see :class:`~airlock.Sandbox`
    for the options. Use it as ``async with AsyncSandbox(...) as sb:``.

    Cancelling a call hangs up its control connection, which kills the
    step and everything it started.
    """

    def __init__(self, *, airlock_bin: Optional[str] = None, **options: Any) -> None:
        super().__init__(airlock_bin, options)

    async def __aenter__(self) -> "AsyncSandbox":
        # A sandbox connect() attached is running already.
        return self if self._session_id is not None and not self._owned else await self.start()

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        # A session connect() found is its starter's to stop.
        if self._owned:
            await self.stop()

    @classmethod
    async def connect(cls, session: str, *, airlock_bin: Optional[str] = None) -> "AsyncSandbox":
        """The running session ``session``; see :meth:`airlock.Sandbox.connect`."""
        found = _lifecycle.find(await cls.list(airlock_bin=airlock_bin), session)
        attached = cls(airlock_bin=airlock_bin, workspace=found.get("workspace") or "/")
        attached._attach(found)
        return attached

    @classmethod
    async def list(cls, *, airlock_bin: Optional[str] = None) -> List[Dict[str, Any]]:
        """The running sessions; see :meth:`airlock.Sandbox.list`."""
        process = await asyncio.create_subprocess_exec(
            *_lifecycle.list_argv(_cli.find_binary(airlock_bin)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await process.communicate()
        assert process.returncode is not None
        return _lifecycle.parse_list(process.returncode, stdout, stderr)

    async def set_timeout(self, seconds: Optional[_steps.Timeout]) -> None:
        """Change the idle timeout; see :meth:`airlock.Sandbox.set_timeout`."""
        await self._ask_at(self._socket_path(), _lifecycle.set_idle_timeout_request(seconds))

    async def start(self) -> "AsyncSandbox":
        """Bring the session up (``airlock session start``)."""
        process = await asyncio.create_subprocess_exec(
            *self._start_argv(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await process.communicate()
        assert process.returncode is not None
        self._started(process.returncode, stdout, stderr)
        await self._make_venv()
        return self

    async def _make_venv(self) -> None:
        request = self._venv_request()
        if request is None:
            return
        try:
            check_file_step("venv", _venv.path(self.workspace), await self._step(request, None, DEFAULT_MAX_OUTPUT))
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """End every process in the sandbox and close its record. A session
        already gone is left as it is. A workspace the sandbox made for
        itself is removed (``keep=True`` keeps it)."""
        try:
            await self._stop()
        finally:
            self._discard_workspace()

    async def _stop(self) -> None:
        if self._session_id is None or self._stopped:
            return
        path = self._socket_path()
        self._stopped = True
        try:
            await self._ask_at(path, {"op": "stop"})
        except SessionGoneError:
            return
        deadline = time.monotonic() + STOP_SETTLE_SECONDS
        while os.path.exists(path) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    @overload
    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: Optional[Data] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        label: Optional[str] = None,
        timeout: Optional[_steps.Timeout] = None,
        max_output: int = DEFAULT_MAX_OUTPUT,
        on_stdout: Optional[OnText] = None,
        on_stderr: Optional[OnText] = None,
        background: Literal[False] = False,
    ) -> RunResult: ...

    @overload
    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: Optional[Data] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        label: Optional[str] = None,
        timeout: Optional[_steps.Timeout] = None,
        max_output: int = DEFAULT_MAX_OUTPUT,
        on_stdout: Optional[OnText] = None,
        on_stderr: Optional[OnText] = None,
        background: Literal[True],
    ) -> AsyncCommandHandle: ...

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: Optional[Data] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        label: Optional[str] = None,
        timeout: Optional[_steps.Timeout] = None,
        max_output: int = DEFAULT_MAX_OUTPUT,
        on_stdout: Optional[OnText] = None,
        on_stderr: Optional[OnText] = None,
        background: bool = False,
    ) -> Union[RunResult, AsyncCommandHandle]:
        """Run one step; see :meth:`airlock.Sandbox.run` (callbacks and
        ``background=True`` included: then an :class:`AsyncCommandHandle`)."""
        request = self._run_request(argv, env, cwd, label, timeout)
        data = None if stdin is None else as_bytes(stdin)
        callbacks = TextCallbacks(on_stdout, on_stderr)
        if background:
            return await self._background(request, data, max_output, callbacks, iterate=False)
        result = await self._step(request, data, max_output, on_output=callbacks or None)
        callbacks.flush()
        return result

    def stream(
        self,
        argv: Sequence[str],
        *,
        stdin: Optional[Data] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        label: Optional[str] = None,
        timeout: Optional[_steps.Timeout] = None,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> AsyncStream:
        """``async for chunk in sb.stream([...])``: the step's output as it
        comes; see :meth:`airlock.Sandbox.stream`. The step starts on the
        first iteration (or ``await stream.handle()``)."""
        request = self._run_request(argv, env, cwd, label, timeout)
        data = b"" if stdin is None else as_bytes(stdin)
        return AsyncStream(
            lambda: self._background(request, data, max_output, TextCallbacks(None, None), iterate=True)
        )

    async def processes(self, *, label: str = "sdk:processes") -> List[_procfs.Process]:
        """What runs in the sandbox now; see :meth:`airlock.Sandbox.processes`."""
        request = self._file_request(_procfs.command(), label)
        result = await self._step(request, None, _procfs.LISTING_MAX)
        check_file_step("processes", "/proc", result)
        return _procfs.parse(result.stdout_bytes, result.step)

    @property
    def files(self) -> AsyncFiles:
        """The workspace's files; see :attr:`airlock.Sandbox.files`."""
        return AsyncFiles(self)

    async def run_code(
        self,
        code: str,
        language: str = "python",
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        label: Optional[str] = None,
        timeout: Optional[_steps.Timeout] = None,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> Execution:
        """Run a cell in ``language``; see :meth:`airlock.Sandbox.run_code`."""
        if language == "python":
            if env or cwd is not None:
                raise AirlockError(
                    "run_code: env and cwd are not taken for python (the interpreter keeps its own); "
                    "set os.environ or call os.chdir in a cell"
                )
            return await self._drive(_kernel.python_cell(self._kernel, code, timeout, max_output, label))
        request = self._run_request(_steps.code_command(language), env, cwd, label, timeout)
        return _kernel.one_shot(await self._step(request, code.encode(), max_output))

    async def restart(self) -> None:
        """Restart ``run_code``'s Python interpreter; see :meth:`airlock.Sandbox.restart`."""
        await self._drive(_kernel.restart(self._kernel))

    async def _drive(self, steps: Generator[_kernel.StepCall, RunResult, T]) -> T:
        """Run the steps ``steps`` asks for, sending each its result."""
        try:
            call = next(steps)
            while True:
                result = await self._step(self._call_request(call), call.stdin, call.max_output)
                call = steps.send(result)
        except StopIteration as done:
            return cast(T, done.value)

    async def write_file(self, path: str, data: Data, *, label: str = "sdk:write_file") -> None:
        """Write a workspace file through the sandbox; see :meth:`airlock.Sandbox.write_file`."""
        request = self._file_request(_steps.write_file_command(path), label)
        result = await self._step(request, as_bytes(data), DEFAULT_MAX_OUTPUT)
        check_file_step("write_file", path, result)

    async def read_file(
        self, path: str, *, max_size: int = DEFAULT_MAX_FILE, label: str = "sdk:read_file"
    ) -> bytes:
        """Read a workspace file through the sandbox; see :meth:`airlock.Sandbox.read_file`."""
        request = self._file_request(_steps.read_file_command(path), label)
        try:
            result = await self._step(request, None, max_size, strict=True)
        except OutputLimitError:
            raise OutputLimitError(f"read_file({path!r}): larger than max_size ({max_size} bytes)") from None
        check_file_step("read_file", path, result)
        return result.stdout_bytes

    async def denials(self) -> SessionDenials:
        """Everything the policy refused in this session so far."""
        return session_denials(await self._ask_at(self._socket_path(), {"op": "denials"}))

    async def info(self) -> Dict[str, Any]:
        """The session's state: the fields of ``airlock session ls --json``."""
        return dict((await self._ask_at(self._socket_path(), {"op": "info"})).get("session") or {})

    async def _ask_at(self, path: str, request: Dict[str, Any]) -> Dict[str, Any]:
        reader, writer = await _connect(path, self.session_id)
        try:
            writer.write(_protocol.request_line(request))
            await writer.drain()
            line = await _within(reader.readline(), _protocol.ANSWER_TIMEOUT, self.session_id, request)
            return _protocol.parse_reply(line)
        finally:
            await _close(writer)

    async def _background(
        self,
        request: Dict[str, Any],
        stdin: Optional[bytes],
        max_output: int,
        callbacks: TextCallbacks,
        iterate: bool,
    ) -> AsyncCommandHandle:
        reader, writer = await _connect(self._socket_path(), self.session_id)
        # Small input goes with the request, its end too; more is fed by a
        # task, so that a command that does not read it holds nobody.
        sent_with_request = stdin is not None and len(stdin) <= _protocol.MAX_FRAME
        try:
            first = _protocol.request_line(request)
            if sent_with_request:
                first += b"".join(_protocol.stdin_frames(stdin))
            writer.write(first)
            await writer.drain()
            waits = _protocol.first_answer_within(request)
            line = await _within(reader.readline(), waits, self.session_id, request)
            reply = _protocol.parse_reply(line, StepError)
        except BaseException:
            writer.transport.abort()
            await _close(writer)
            raise
        handle = AsyncCommandHandle(
            reader,
            writer,
            request,
            int(reply["step"]),
            max_output,
            callbacks,
            self._pid_of_step,
            self._kill_step,
            lambda r: _protocol.not_answering(self.session_id, r),
            iterate,
            stdin_open=not sent_with_request,
        )
        if stdin is not None and not sent_with_request:
            handle.feed_later(stdin)
        return handle

    async def _kill_step(self, step: int) -> bool:
        try:
            await self._ask_at(self._socket_path(), {"op": "kill", "step": step})
        except SessionGoneError:
            return False
        except AirlockError as e:
            if "is not running" in e.reason:
                return False
            raise
        return True

    async def _pid_of_step(self, step: int) -> Optional[int]:
        return _procfs.pid_of_step(await self.processes(label=f"sdk:pid of step {step}"), step)

    async def _step(
        self,
        request: Dict[str, Any],
        stdin: Optional[_protocol.Stdin],
        max_output: int,
        strict: bool = False,
        on_output: Optional[_protocol.OnOutput] = None,
    ) -> RunResult:
        reader, writer = await _connect(self._socket_path(), self.session_id)
        feeder: Optional["asyncio.Task[None]"] = None
        ended = False
        try:
            # Without input, its end goes with the request: written later, it
            # could meet a step that already ended and closed the connection,
            # and the broken pipe would fail the reads of what it answered.
            first = _protocol.request_line(request)
            if stdin is None:
                first += b"".join(_protocol.stdin_frames(None))
            writer.write(first)
            await writer.drain()
            line = await _within(reader.readline(), _protocol.first_answer_within(request), self.session_id, request)
            reply = _protocol.parse_reply(line, StepError)
            collector = _protocol.StepCollector(int(reply["step"]), max_output, strict, on_output)
            # Stdin is written by its own task so that a command busy writing
            # output before it reads its input cannot deadlock us.
            if stdin is not None:
                feeder = asyncio.ensure_future(_feed_stdin(writer, stdin))

            async def frames() -> None:
                while True:
                    kind, length = _protocol.parse_header(await _read(reader, _protocol.HEADER_SIZE))
                    payload = await _read(reader, length)
                    if len(payload) < length:
                        raise SessionGoneError("the session closed the connection before the step ended")
                    if collector.feed(kind, payload):
                        return

            # Never held by a session that stopped answering.
            await _within(frames(), _protocol.step_deadline(request), self.session_id, request)
            ended = True
        finally:
            if feeder is not None:
                feeder.cancel()
            if not ended:
                # Leaving early (an error, a cancellation) hangs up, which
                # ends the step: at once, not once the stdin still queued
                # here has been sent (close() would wait for that, and a
                # command that does not read would never let it go).
                writer.transport.abort()
            await _close(writer)
        assert collector.result is not None
        return collector.result


async def _connect(path: str, session_id: str) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        return await asyncio.open_unix_connection(path, limit=_LINE_LIMIT)
    except (FileNotFoundError, ConnectionRefusedError) as e:
        raise SessionGoneError(f"session {session_id} is no longer running ({path}: {e.strerror})") from None


async def _within(
    work: "Awaitable[T]", seconds: Optional[float], session_id: str, request: Dict[str, Any]
) -> "T":
    """``work``'s result, or :class:`SessionNotAnsweringError` past ``seconds``."""
    try:
        return await asyncio.wait_for(work, seconds)
    except asyncio.TimeoutError:
        raise SessionNotAnsweringError(_protocol.not_answering(session_id, request)) from None


async def _read(reader: asyncio.StreamReader, n: int) -> bytes:
    """``n`` bytes, or fewer if the session hung up (the caller says so)."""
    try:
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError as e:
        return e.partial


async def _feed_stdin(writer: asyncio.StreamWriter, data: Optional[_protocol.Stdin]) -> None:
    try:
        for chunk in _protocol.stdin_frames(data):
            writer.write(chunk)
            await writer.drain()
    except OSError:
        # The step ended before taking all its input.
        pass


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
