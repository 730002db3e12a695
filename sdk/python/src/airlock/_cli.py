"""Driving the ``airlock`` binary: which one, how keyword arguments become
``airlock session start`` options, what its answer means, and where a
session's control socket is (docs/sessions.md, "Where a session lives")."""

from __future__ import annotations

import os
import re
import shutil
from typing import Any, List, Mapping, Optional

from .errors import SessionStartError


def find_binary(airlock_bin: Optional[str]) -> str:
    """``airlock_bin``, else ``$AIRLOCK_BIN``, else ``airlock`` on PATH."""
    chosen = airlock_bin or os.environ.get("AIRLOCK_BIN") or "airlock"
    found = shutil.which(chosen)
    if found is None:
        raise SessionStartError(
            f"airlock binary {chosen!r} not found: install airlock, "
            "or pass airlock_bin= or set AIRLOCK_BIN to its path"
        )
    return found


def start_argv(binary: str, options: Mapping[str, Any]) -> List[str]:
    """``airlock session start`` with ``options`` as command-line options.

    The mapping is generic, so every option the CLI has (now or later) is
    reachable and the CLI alone decides what is valid: ``memory="512M"`` →
    ``--memory 512M``; ``True`` → a bare flag; ``False``/``None`` → left
    out; a list → the option repeated; a dict → repeated ``KEY=VALUE``
    (for ``env``).
    """
    argv = [binary, "session", "start"]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, Mapping):
            for k, v in value.items():
                argv += [flag, f"{k}={v}"]
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [flag, _text(item)]
        else:
            argv += [flag, _text(value)]
    return argv


def _text(value: Any) -> str:
    return os.fspath(value) if isinstance(value, os.PathLike) else str(value)


def session_id_from_start(returncode: int, stdout: bytes, stderr: bytes) -> str:
    """The id ``airlock session start`` printed, or SessionStartError with
    the reason it gave."""
    session_id = stdout.decode(errors="replace").strip()
    if returncode != 0 or not session_id:
        reason = one_line_reason(stderr) or f"airlock session start exited with status {returncode}"
        raise SessionStartError(with_keyword_hint(reason))
    return session_id


_SIMILAR = re.compile(r"unexpected argument '--([\w-]+)' found \(a similar argument exists: '--([\w-]+)'\)")


def with_keyword_hint(reason: str) -> str:
    """The CLI's "did you mean" for an option, said as the keyword argument
    the caller wrote: ``memroy=`` → ``did you mean memory=?``."""
    similar = _SIMILAR.search(reason)
    if similar is None:
        return reason
    wrote, meant = (name.replace("-", "_") for name in similar.groups())
    return f"{reason} (Sandbox({wrote}=...): did you mean {meant}=?)"


def one_line_reason(stderr: bytes) -> str:
    """The line that says why: airlock's own errors are one ``airlock: ...``
    line, but option errors come from the argument parser as ``error: ...``
    followed by a usage hint, and notices may precede either."""
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines()]
    lines = [line for line in lines if line]
    for line in reversed(lines):
        if line.startswith(("airlock:", "error:")):
            return line
    return lines[-1] if lines else ""


def socket_path(session_id: str) -> str:
    """The session's control socket: ``/run/airlock`` for root, else
    ``$XDG_RUNTIME_DIR/airlock`` (when absolute), else ``/tmp/airlock-<uid>``.
    The binary is run with this process's environment, so it chose the same."""
    uid = os.geteuid()
    if uid == 0:
        directory = "/run/airlock"
    else:
        runtime = os.environ.get("XDG_RUNTIME_DIR", "")
        directory = os.path.join(runtime, "airlock") if os.path.isabs(runtime) else f"/tmp/airlock-{uid}"
    return os.path.join(directory, f"{session_id}.sock")
