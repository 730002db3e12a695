"""What :class:`~airlock.Sandbox` and :class:`~airlock.AsyncSandbox` share:
their options, the session they hold, and turning calls into requests and
results into answers. Moving the bytes is theirs."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _cli, _kernel, _steps, _venv
from .errors import AirlockError, SessionGoneError
from .result import RunResult, SessionDenials, denials_from_json

DEFAULT_MAX_OUTPUT = 1 << 20
"""Bytes kept per stream (stdout, stderr) of a step by default."""
DEFAULT_MAX_FILE = 64 << 20
"""Largest file ``read_file`` returns by default."""
STOP_SETTLE_SECONDS = 5.0
"""How long ``stop`` waits for the server to remove its socket once the
session confirmed the stop (the server's last act)."""

Data = Union[bytes, bytearray, memoryview, str]


class SessionBase:
    """The session a sandbox holds; see :class:`~airlock.Sandbox`."""

    def __init__(self, airlock_bin: Optional[str], options: Mapping[str, Any]) -> None:
        self._binary = _cli.find_binary(airlock_bin)
        self._options = dict(options)
        self._keep = bool(self._options.pop("keep", False))
        # Safe by default: without a named workspace the sandbox gets a
        # fresh, empty directory, never the caller's own (which it could
        # rewrite); it is removed when the sandbox stops unless `keep=True`.
        self._temporary: Optional[str] = None
        if not self._options.get("workspace"):
            self._temporary = tempfile.mkdtemp(prefix="airlock-sandbox-")
            self._options["workspace"] = self._temporary
        # The sandbox mounts the workspace at its host path, so this is also
        # its path inside: relative `cwd`s are resolved against it.
        self._workspace: str = os.path.realpath(os.fspath(self._options["workspace"]))
        # `pip install` works as on a developer's machine: in a venv.
        self._venv = bool(self._options.pop("venv", True))
        if self._venv:
            self._options = _venv.with_session_env(self._options, self._workspace)
        self._session_id: Optional[str] = None
        self._stopped = False
        # False for a sandbox that connect() attached to a session another
        # process started: leaving its `with` block leaves the session be.
        self._owned = True
        # run_code's interpreter: the next cell's number.
        self._kernel = _kernel.KernelState()

    @property
    def session_id(self) -> str:
        """The live session's id (16 hex digits), as ``airlock session`` takes it."""
        if self._session_id is None:
            raise AirlockError("the sandbox is not started: use it in a `with` block, or call start()")
        return self._session_id

    @property
    def workspace(self) -> str:
        """The workspace's absolute path (the same inside the sandbox)."""
        return self._workspace

    def _start_argv(self) -> List[str]:
        if self._session_id is not None:
            raise AirlockError(f"the sandbox already holds session {self._session_id}")
        argv = _cli.start_argv(self._binary, self._options)
        # The session stops with this process should it die without leaving
        # the `with` block (SIGKILL, os._exit): no sandbox is left running
        # for a program that is gone.
        return argv + ["--stop-with-pid", str(os.getpid())]

    def _started(self, returncode: int, stdout: bytes, stderr: bytes) -> None:
        try:
            self._session_id = _cli.session_id_from_start(returncode, stdout, stderr)
        except BaseException:
            self._discard_workspace()
            raise

    def _attach(self, info: Mapping[str, Any]) -> None:
        """Hold the running session ``info`` describes, without owning it."""
        self._session_id = str(info["id"])
        self._owned = False

    def _discard_workspace(self) -> None:
        """Remove the workspace this sandbox made for itself, unless kept."""
        if self._temporary is not None and not self._keep:
            shutil.rmtree(self._temporary, ignore_errors=True)
            self._temporary = None

    def _socket_path(self) -> str:
        if self._stopped:
            raise SessionGoneError(f"session {self.session_id} was stopped: start a new sandbox")
        return _cli.socket_path(self.session_id)

    def _run_request(
        self,
        argv: Sequence[str],
        env: Optional[Mapping[str, str]],
        cwd: Optional[str],
        label: Optional[str],
        timeout: Optional[_steps.Timeout],
    ) -> Dict[str, Any]:
        return _steps.exec_request(
            argv, workspace=self._workspace, env=env, cwd=cwd, label=label, timeout=timeout
        )

    def _call_request(self, call: _kernel.StepCall) -> Dict[str, Any]:
        return _steps.exec_request(
            call.argv, workspace=self._workspace, label=call.label, timeout=call.timeout
        )

    def _file_request(self, argv: List[str], label: str) -> Dict[str, Any]:
        return _steps.exec_request(argv, workspace=self._workspace, label=label)

    def _venv_request(self) -> Optional[Dict[str, Any]]:
        """The step that makes the sandbox's venv, if it gets one."""
        return self._file_request(_venv.command(self._workspace), _venv.LABEL) if self._venv else None


def as_bytes(data: Data) -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


def check_file_step(what: str, path: str, result: RunResult) -> None:
    """A file step's command failing is the call failing, with its reason."""
    if result.exit_code != 0:
        said = result.stderr.strip().splitlines()
        reason = said[-1] if said else f"exit status {result.exit_code}"
        raise AirlockError(f"{what}({path!r}) failed: {reason}")


def session_denials(reply: Mapping[str, Any]) -> SessionDenials:
    """The answer to a ``denials`` request."""
    return SessionDenials(denials_from_json(reply.get("denials")), int(reply.get("dropped") or 0))
