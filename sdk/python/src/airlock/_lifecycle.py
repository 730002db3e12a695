"""A session's life seen from any process, without any I/O: listing the
running sessions, finding one to connect to by id, prefix or name, and
changing its idle timeout."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from . import _steps
from .errors import AirlockError, SessionGoneError


def list_argv(binary: str) -> List[str]:
    return [binary, "session", "ls", "--json"]


def parse_list(returncode: int, stdout: bytes, stderr: bytes) -> List[Dict[str, Any]]:
    """``airlock session ls --json``'s answer: one dict per session."""
    if returncode != 0:
        said = stderr.decode(errors="replace").strip().splitlines()
        raise AirlockError(said[-1] if said else f"airlock session ls exited with status {returncode}")
    try:
        sessions = json.loads(stdout)
    except ValueError:
        sessions = None
    if not isinstance(sessions, list):
        raise AirlockError(f"airlock session ls sent a malformed list: {stdout[:200]!r}")
    return [dict(s) for s in sessions if isinstance(s, dict)]


def find(sessions: List[Dict[str, Any]], given: str) -> Dict[str, Any]:
    """The session ``given`` names, as the CLI takes one: its id, its name,
    or a unique prefix of its id."""
    if not given:
        raise AirlockError("connect: give a session id, a unique prefix of one, or its name")
    for match in (
        [s for s in sessions if s.get("id") == given],
        [s for s in sessions if s.get("name") == given],
        [s for s in sessions if str(s.get("id", "")).startswith(given)],
    ):
        if len(match) == 1:
            return match[0]
        if len(match) > 1:
            ids = ", ".join(str(s.get("id")) for s in match)
            raise AirlockError(f"connect: {given!r} matches several sessions ({ids}): give more of the id")
    raise SessionGoneError(
        f"connect: no running session {given!r}: Sandbox.list() (or `airlock session ls`) shows them"
    )


def set_idle_timeout_request(seconds: Optional[_steps.Timeout]) -> Dict[str, Any]:
    """Stop the session after ``seconds`` without a step running, counted
    from now; ``None`` or ``0``: never."""
    if seconds is None or seconds == 0 or seconds == "0":
        return {"op": "set_idle_timeout", "idle_timeout_ms": None}
    return {"op": "set_idle_timeout", "idle_timeout_ms": _steps.timeout_ms(seconds)}
