"""The blocking sandbox: one live session, driven over its control socket."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from types import TracebackType
from typing import (
    Any,
    Dict,
    Generator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Type,
    TypeVar,
    Union,
    cast,
    overload,
)

from . import _cli, _kernel, _lifecycle, _procfs, _protocol, _steps, _venv
from ._approvals import ApprovalCalls
from ._files import Files
from ._kernel import Execution
from ._output import OnText, TextCallbacks
from ._processes import CommandHandle
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


class Sandbox(SessionBase, ApprovalCalls):
    """A live Airlock session: one sandbox kept across many steps.

    Without ``workspace`` the sandbox gets a fresh, empty directory
    (:attr:`workspace` says where), removed when it stops unless
    ``keep=True``: a host directory is mounted only when it is named.

    Every other keyword argument is an ``airlock session start`` option, dashes
    written as underscores: ``Sandbox(policy="policy.toml", workspace=".",
    memory="512M", upstream_ca=["ca.pem"], resolve=["host:127.0.0.1"])``;
    ``isolation="gvisor"`` runs the session under gVisor's kernel.
    ``True`` is a bare flag and a list repeats the option; the CLI checks
    them (an unknown or bad one raises :class:`SessionStartError` with its
    reason). ``airlock_bin`` picks the binary (default ``$AIRLOCK_BIN``,
    else ``airlock`` on PATH).

    Use it as a context manager: the session starts on entry and is stopped
    on exit, an exception included. Each call is its own control
    connection, so threads may share one sandbox and run steps at once.
    """

    def __init__(self, *, airlock_bin: Optional[str] = None, **options: Any) -> None:
        super().__init__(airlock_bin, options)

    def __enter__(self) -> "Sandbox":
        # A sandbox connect() attached is running already.
        return self if self._session_id is not None and not self._owned else self.start()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        # A session connect() found is its starter's to stop.
        if self._owned:
            self.stop()

    @classmethod
    def connect(cls, session: str, *, airlock_bin: Optional[str] = None) -> "Sandbox":
        """The running session ``session`` (its id, a unique prefix, or its
        name), started by this or another process, e.g. from
        ``sb.session_id``. Leaving its ``with`` block leaves the session
        running; :meth:`stop` stops it."""
        found = _lifecycle.find(cls.list(airlock_bin=airlock_bin), session)
        attached = cls(airlock_bin=airlock_bin, workspace=found.get("workspace") or "/")
        attached._attach(found)
        return attached

    @classmethod
    def list(cls, *, airlock_bin: Optional[str] = None) -> List[Dict[str, Any]]:
        """The running sessions of this user (``airlock session ls --json``):
        each with its ``id``, ``name``, ``state``, ``workspace``..."""
        done = subprocess.run(
            _lifecycle.list_argv(_cli.find_binary(airlock_bin)), stdin=subprocess.DEVNULL, capture_output=True
        )
        return _lifecycle.parse_list(done.returncode, done.stdout, done.stderr)

    def set_timeout(self, seconds: Optional[_steps.Timeout]) -> None:
        """Stop the session after ``seconds`` (or ``"30m"``) without a step
        running, counted from now (its ``idle_timeout``); ``None`` or 0:
        never."""
        self._ask_at(self._socket_path(), _lifecycle.set_idle_timeout_request(seconds))

    def start(self) -> "Sandbox":
        """Bring the session up (``airlock session start``); returns once it
        takes steps."""
        done = subprocess.run(self._start_argv(), stdin=subprocess.DEVNULL, capture_output=True)
        self._started(done.returncode, done.stdout, done.stderr)
        self._make_venv()
        return self

    def _make_venv(self) -> None:
        request = self._venv_request()
        if request is None:
            return
        try:
            check_file_step("venv", _venv.path(self.workspace), self._step(request, None, DEFAULT_MAX_OUTPUT))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """End every process in the sandbox and close its record. A session
        already gone (stopped, timed out, killed) is left as it is. A
        workspace the sandbox made for itself is removed (``keep=True``
        keeps it)."""
        try:
            self._stop()
        finally:
            self._discard_workspace()

    def _stop(self) -> None:
        if self._session_id is None or self._stopped:
            return
        path = self._socket_path()
        self._stopped = True
        try:
            self._ask_at(path, {"op": "stop"})
        except SessionGoneError:
            return
        deadline = time.monotonic() + STOP_SETTLE_SECONDS
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)

    @overload
    def run(
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
    def run(
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
    ) -> CommandHandle: ...

    def run(
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
    ) -> Union[RunResult, CommandHandle]:
        """Run one step and wait for it to end.

        ``argv`` is the command and its arguments (no shell: use
        ``["sh", "-c", script]`` for one). ``stdin`` is fed to it (else it
        reads EOF); ``env`` is set on top of the session's environment;
        ``cwd`` is relative to the workspace (or absolute inside the
        sandbox; default: the workspace); ``label`` is recorded with the
        step (an agent's tool-call id); ``timeout`` (seconds, or ``"30s"``)
        kills the command and everything it started (``timed_out``, exit
        124; the session lives on). Each of stdout and stderr is kept up to
        ``max_output`` bytes.

        A non-zero exit is a result, not an error (125 with airlock's reason
        on stderr when it could not start the command, e.g. a missing
        ``cwd``); :class:`StepError` means the session refused the step or
        failed it while it ran.

        ``on_stdout``/``on_stderr`` are called with the output's text as it
        arrives (and it is still kept in the result). ``background=True``
        returns at once with a :class:`CommandHandle` (``wait``, ``kill``,
        ``send_stdin``, ``pid``); its stdin stays open for ``send_stdin``
        unless ``stdin`` is given.
        """
        request = self._run_request(argv, env, cwd, label, timeout)
        data = None if stdin is None else as_bytes(stdin)
        callbacks = TextCallbacks(on_stdout, on_stderr)
        if background:
            return self._background(request, data, max_output, callbacks, iterate=False)
        result = self._step(request, data, max_output, on_output=callbacks or None)
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
    ) -> CommandHandle:
        """Start one step and iterate over its output as it comes:
        ``for chunk in sb.stream([...])`` yields :class:`OutputChunk` objects
        (``stream``, ``data``, ``text``); ``wait()`` then gives the result.
        Its stdin is ``stdin`` (else EOF). The arguments are :meth:`run`'s."""
        request = self._run_request(argv, env, cwd, label, timeout)
        data = b"" if stdin is None else as_bytes(stdin)
        return self._background(request, data, max_output, TextCallbacks(None, None), iterate=True)

    def processes(self, *, label: str = "sdk:processes") -> List[_procfs.Process]:
        """What runs in the sandbox now, each process with the step it
        belongs to, read from the sandbox's /proc by a step of its own
        (which is left out, as are airlock's init and step holders)."""
        request = self._file_request(_procfs.command(), label)
        result = self._step(request, None, _procfs.LISTING_MAX)
        check_file_step("processes", "/proc", result)
        return _procfs.parse(result.stdout_bytes, result.step)

    @property
    def files(self) -> Files:
        """The workspace's files: ``list``, ``exists``, ``remove``,
        ``rename``, ``mkdir``, ``upload``, ``download``, each a step in the
        sandbox."""
        return Files(self)

    def run_code(
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
        """Run a cell of ``language`` code and return its :class:`Execution`.

        ``"python"`` runs in a persistent interpreter inside the session, as
        a Jupyter kernel does: variables and imports persist from cell to
        cell, the last expression's ``repr`` is ``value``, and an exception
        is ``error`` (name, value, traceback). It starts with the first
        cell; ``timeout`` interrupts the cell (``KeyboardInterrupt``) and
        keeps the interpreter, unless the cell ignores the interrupt for 2 s
        more (then it is restarted). Each cell is a step labelled
        ``sdk:run_code cell N`` (or ``label``), its code in the step's
        command. ``env`` and ``cwd`` are not taken for Python (the
        interpreter's are its start's).

        ``"node"`` and ``"bash"`` run the program once (no state kept), on
        stdin, with :meth:`run`'s other arguments.
        """
        if language == "python":
            if env or cwd is not None:
                raise AirlockError(
                    "run_code: env and cwd are not taken for python (the interpreter keeps its own); "
                    "set os.environ or call os.chdir in a cell"
                )
            return self._drive(_kernel.python_cell(self._kernel, code, timeout, max_output, label))
        request = self._run_request(_steps.code_command(language), env, cwd, label, timeout)
        return _kernel.one_shot(self._step(request, code.encode(), max_output))

    def restart(self) -> None:
        """Restart ``run_code``'s Python interpreter: its state is dropped,
        and the next cell starts a fresh one."""
        self._drive(_kernel.restart(self._kernel))

    def _drive(self, steps: Generator[_kernel.StepCall, RunResult, T]) -> T:
        """Run the steps ``steps`` asks for, sending each its result."""
        try:
            call = next(steps)
            while True:
                result = self._step(self._call_request(call), call.stdin, call.max_output)
                call = steps.send(result)
        except StopIteration as done:
            return cast(T, done.value)

    def write_file(self, path: str, data: Data, *, label: str = "sdk:write_file") -> None:
        """Write ``data`` to ``path`` (relative to the workspace), making its
        directories. The sandbox writes it, with its own view of the
        filesystem, so a symlink planted in the workspace cannot redirect
        the write to the host."""
        request = self._file_request(_steps.write_file_command(path), label)
        check_file_step("write_file", path, self._step(request, as_bytes(data), DEFAULT_MAX_OUTPUT))

    def read_file(
        self, path: str, *, max_size: int = DEFAULT_MAX_FILE, label: str = "sdk:read_file"
    ) -> bytes:
        """The content of ``path`` (relative to the workspace), read by the
        sandbox with its own view of the filesystem (a symlink pointing out
        of it reaches only what the sandbox may see). Over ``max_size``
        bytes raises :class:`OutputLimitError`."""
        request = self._file_request(_steps.read_file_command(path), label)
        try:
            result = self._step(request, None, max_size, strict=True)
        except OutputLimitError:
            raise OutputLimitError(f"read_file({path!r}): larger than max_size ({max_size} bytes)") from None
        check_file_step("read_file", path, result)
        return result.stdout_bytes

    def denials(self) -> SessionDenials:
        """Everything the policy refused in this session so far."""
        return session_denials(self._ask_at(self._socket_path(), {"op": "denials"}))

    def info(self) -> Dict[str, Any]:
        """The session's state: the fields of ``airlock session ls --json``."""
        return dict(self._ask_at(self._socket_path(), {"op": "info"}).get("session") or {})

    def _ask_at(self, path: str, request: Dict[str, Any]) -> Dict[str, Any]:
        with _connect(path, self.session_id) as conn:
            conn.settimeout(_protocol.ANSWER_TIMEOUT)
            try:
                conn.sendall(_protocol.request_line(request))
                return _protocol.parse_reply(conn.makefile("rb").readline())
            except TimeoutError:
                raise SessionNotAnsweringError(_protocol.not_answering(self.session_id, request)) from None

    def _background(
        self,
        request: Dict[str, Any],
        stdin: Optional[bytes],
        max_output: int,
        callbacks: TextCallbacks,
        iterate: bool,
    ) -> CommandHandle:
        conn = _connect(self._socket_path(), self.session_id)
        # Small input goes with the request, its end too; more is fed by a
        # thread, so that a command that does not read it holds nobody.
        sent_with_request = stdin is not None and len(stdin) <= _protocol.MAX_FRAME
        try:
            conn.settimeout(_protocol.first_answer_within(request))
            first = _protocol.request_line(request)
            if sent_with_request:
                first += b"".join(_protocol.stdin_frames(stdin))
            conn.sendall(first)
            reader = conn.makefile("rb")
            reply = _protocol.parse_reply(reader.readline(), StepError)
        except TimeoutError:
            _hang_up(conn)
            conn.close()
            raise SessionNotAnsweringError(_protocol.not_answering(self.session_id, request)) from None
        except BaseException:
            _hang_up(conn)
            conn.close()
            raise
        handle = CommandHandle(
            conn,
            reader,
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
            threading.Thread(target=_feed_handle, args=(handle, stdin), daemon=True).start()
        return handle

    def _kill_step(self, step: int) -> bool:
        """Kill a running step by a request of its own (see _processes)."""
        try:
            self._ask_at(self._socket_path(), {"op": "kill", "step": step})
        except SessionGoneError:
            return False
        except AirlockError as e:
            if "is not running" in e.reason:
                return False
            raise
        return True

    def _pid_of_step(self, step: int) -> Optional[int]:
        return _procfs.pid_of_step(self.processes(label=f"sdk:pid of step {step}"), step)

    def _step(
        self,
        request: Dict[str, Any],
        stdin: Optional[_protocol.Stdin],
        max_output: int,
        strict: bool = False,
        on_output: Optional[_protocol.OnOutput] = None,
    ) -> RunResult:
        # Never held by a session that stopped answering: a bound on its
        # first answer, and on the step's end past its timeout.
        waits = _protocol.step_deadline(request)
        until = None if waits is None else time.monotonic() + waits
        with _connect(self._socket_path(), self.session_id) as conn:
            conn.settimeout(_protocol.first_answer_within(request))
            feeder = None
            try:
                conn.sendall(_protocol.request_line(request))
                reader = conn.makefile("rb")
                reply = _protocol.parse_reply(reader.readline(), StepError)
                collector = _protocol.StepCollector(int(reply["step"]), max_output, strict, on_output)
                conn.settimeout(None if until is None else max(until - time.monotonic(), 0.001))
                # Stdin is written by its own thread so that a command busy
                # writing output before it reads its input cannot deadlock us.
                feeder = threading.Thread(target=_feed_stdin, args=(conn, stdin), daemon=True)
                feeder.start()
                while True:
                    kind, length = _protocol.parse_header(reader.read(_protocol.HEADER_SIZE))
                    payload = reader.read(length)
                    if len(payload) < length:
                        raise SessionGoneError("the session closed the connection before the step ended")
                    if collector.feed(kind, payload):
                        break
            except TimeoutError:
                raise SessionNotAnsweringError(_protocol.not_answering(self.session_id, request)) from None
            finally:
                # Unblocks the feeder if the command stopped reading; leaving
                # early (an error) hangs up, which ends the step.
                _hang_up(conn)
                if feeder is not None:
                    feeder.join()
        assert collector.result is not None
        return collector.result


def _connect(path: str, session_id: str) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except (FileNotFoundError, ConnectionRefusedError) as e:
        conn.close()
        raise SessionGoneError(f"session {session_id} is no longer running ({path}: {e.strerror})") from None
    except OSError:
        conn.close()
        raise
    return conn


def _feed_handle(handle: CommandHandle, data: bytes) -> None:
    try:
        handle.send_stdin(data)
        handle.close_stdin()
    except AirlockError:
        pass  # it ended before taking all its input


def _feed_stdin(conn: socket.socket, data: Optional[_protocol.Stdin]) -> None:
    try:
        for chunk in _protocol.stdin_frames(data):
            conn.sendall(chunk)
    except OSError:
        # The step ended (or we hung up) before taking all its input.
        pass


def _hang_up(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        # The session hung up first.
        pass
