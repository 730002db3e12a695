"""Held requests, from a supervising process or a UI: list what ``[[ask]]``
rules hold and decide each one. The SDK runs the CLI that does the same
(``airlock approvals --json``, ``airlock approve``, ``airlock deny``), so
who may decide and what the record says are the CLI's: the decision is
recorded with who made it and the note.

These need no sandbox object: :func:`approvals`, :func:`approve` and
:func:`deny` work from any process of the session's owner (or root); the
sandbox's own methods name its session.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from . import _cli
from .errors import AirlockError

SCOPES = ("once", "session")


@dataclass(frozen=True)
class Approval:
    """A request an ``[[ask]]`` rule holds until a person decides."""

    id: str
    """What :func:`approve`/:func:`deny` take."""
    session: str
    method: str
    url: str
    rule: str
    """The ``[[ask]]`` rule that holds it."""
    reason: Optional[str]
    """The rule's reason, shown to approvers."""
    requested_at: float
    """When it was held, seconds since the epoch."""
    expires_at: float
    """When it is denied unless decided."""
    body_bytes: int
    body_sha256: str
    """What is approved is this exact body."""
    headers: List[Tuple[str, str]] = field(default_factory=list)
    """As sent; secrets shown as ``[secret:NAME]``."""
    step: Optional[int] = None
    """The step whose process sent it, when known."""
    label: Optional[str] = None
    """That step's label (an agent's tool-call id)."""
    command: List[str] = field(default_factory=list)
    """The sending process's command line, when known."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Approval":
        """From one object of ``airlock approvals --json``; fields this
        version does not know are ignored."""
        sender = data.get("sender") or {}
        return cls(
            id=str(data.get("id") or ""),
            session=str(data.get("session") or ""),
            method=str(data.get("method") or ""),
            url=str(data.get("url") or ""),
            rule=str(data.get("rule") or ""),
            reason=data.get("reason"),
            requested_at=float(data.get("requested_at_us") or 0) / 1e6,
            expires_at=float(data.get("expires_at_us") or 0) / 1e6,
            body_bytes=int(data.get("body_bytes") or 0),
            body_sha256=str(data.get("body_sha256") or ""),
            headers=[(str(k), str(v)) for k, v in data.get("headers") or []],
            step=sender.get("step"),
            label=sender.get("label"),
            command=[str(part) for part in sender.get("command") or []],
        )


def list_argv(binary: str, session: Optional[str]) -> List[str]:
    argv = [binary, "approvals", "--json"]
    return argv + ["--session", session] if session else argv


def approve_argv(binary: str, approval: str, scope: str, note: Optional[str]) -> List[str]:
    if scope not in SCOPES:
        raise AirlockError(
            f"scope {scope!r}: use 'once' (this request) or 'session' (the rest of its session)"
        )
    argv = [binary, "approve", "--scope", scope]
    return argv + (["--note", note] if note is not None else []) + ["--", approval]


def deny_argv(binary: str, approval: str, note: Optional[str]) -> List[str]:
    argv = [binary, "deny"]
    return argv + (["--note", note] if note is not None else []) + ["--", approval]


def parse_list(returncode: int, stdout: bytes, stderr: bytes) -> List[Approval]:
    checked(returncode, stderr, "airlock approvals")
    try:
        items = json.loads(stdout)
    except ValueError:
        raise AirlockError(f"airlock approvals printed no JSON: {stdout[:200]!r}") from None
    return [Approval.from_json(item) for item in items if isinstance(item, dict)]


def checked(returncode: int, stderr: bytes, what: str) -> None:
    if returncode != 0:
        raise AirlockError(_cli.one_line_reason(stderr) or f"{what} exited with status {returncode}")


def run_cli(argv: Sequence[str]) -> Tuple[int, bytes, bytes]:
    done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True)
    return done.returncode, done.stdout, done.stderr


async def run_cli_async(argv: Sequence[str]) -> Tuple[int, bytes, bytes]:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await process.communicate()
    assert process.returncode is not None
    return process.returncode, stdout, stderr


def approvals(session: Optional[str] = None, *, airlock_bin: Optional[str] = None) -> List[Approval]:
    """The requests held now, oldest first: of ``session`` (an id, a prefix
    of one, or a name), else of every running session of this user."""
    return parse_list(*run_cli(list_argv(_cli.find_binary(airlock_bin), session)))


def approve(
    approval: str, *, scope: str = "once", note: Optional[str] = None, airlock_bin: Optional[str] = None
) -> None:
    """Let held request ``approval`` go: ``scope="once"`` for this request,
    ``"session"`` for the later ones the same rule matches with the same
    method, host, port and path. ``note`` goes in the record."""
    code, _, stderr = run_cli(approve_argv(_cli.find_binary(airlock_bin), approval, scope, note))
    checked(code, stderr, "airlock approve")


def deny(approval: str, note: Optional[str] = None, *, airlock_bin: Optional[str] = None) -> None:
    """Refuse held request ``approval``: its client gets a 403 that shows
    ``note``, and the record keeps it."""
    code, _, stderr = run_cli(deny_argv(_cli.find_binary(airlock_bin), approval, note))
    checked(code, stderr, "airlock deny")


class ApprovalCalls:
    """The approval methods of :class:`~airlock.Sandbox`."""

    _binary: str

    @property
    def session_id(self) -> str:
        raise NotImplementedError

    def approvals(self) -> List[Approval]:
        """The requests of this session that ``[[ask]]`` rules hold now."""
        return parse_list(*run_cli(list_argv(self._binary, self.session_id)))

    def approve(self, approval: str, *, scope: str = "once", note: Optional[str] = None) -> None:
        """Approve a held request; see :func:`airlock.approve`."""
        code, _, stderr = run_cli(approve_argv(self._binary, approval, scope, note))
        checked(code, stderr, "airlock approve")

    def deny(self, approval: str, note: Optional[str] = None) -> None:
        """Deny a held request; see :func:`airlock.deny`."""
        code, _, stderr = run_cli(deny_argv(self._binary, approval, note))
        checked(code, stderr, "airlock deny")


class AsyncApprovalCalls:
    """The approval methods of :class:`~airlock.AsyncSandbox`."""

    _binary: str

    @property
    def session_id(self) -> str:
        raise NotImplementedError

    async def approvals(self) -> List[Approval]:
        """See :meth:`airlock.Sandbox.approvals`."""
        return parse_list(*await run_cli_async(list_argv(self._binary, self.session_id)))

    async def approve(self, approval: str, *, scope: str = "once", note: Optional[str] = None) -> None:
        """See :func:`airlock.approve`."""
        code, _, stderr = await run_cli_async(approve_argv(self._binary, approval, scope, note))
        checked(code, stderr, "airlock approve")

    async def deny(self, approval: str, note: Optional[str] = None) -> None:
        """See :func:`airlock.deny`."""
        code, _, stderr = await run_cli_async(deny_argv(self._binary, approval, note))
        checked(code, stderr, "airlock deny")
