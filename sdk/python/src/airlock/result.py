"""What a step gives back: its result and the policy's refusals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, List, Mapping, Optional


@dataclass(frozen=True)
class Denial:
    """One request, connection or name lookup the policy refused.

    ``rule`` is the TOML to add to the policy to allow it (to show the
    user); it is ``None`` when adding a rule would not help (a ``[[deny]]``
    rule matched, a body failed its constraints) or depends on the protocol
    (a connection: ``reason`` says what). ``host`` is ``host:port`` for a
    connection.
    """

    kind: str
    """``"request"``, ``"dns"`` or ``"connection"``."""
    host: str
    reason: str
    decided_by: str
    """The rule that refused it, or ``<policy file> (default: deny)``."""
    method: Optional[str] = None
    url: Optional[str] = None
    rule: Optional[str] = None
    step: Optional[int] = None
    """The step it is attributed to, when known."""
    count: int = 1
    """How many times the same thing was refused in that step."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Denial":
        """Build one from the protocol's JSON object; fields this version
        does not know are ignored, so newer servers stay readable."""
        return cls(
            kind=str(data.get("kind", "")),
            host=str(data.get("host") or ""),
            reason=str(data.get("reason") or ""),
            decided_by=str(data.get("decided_by") or ""),
            method=data.get("method"),
            url=data.get("url"),
            rule=data.get("rule"),
            step=data.get("step"),
            count=int(data.get("count") or 1),
        )


def denials_from_json(items: Any) -> List[Denial]:
    """The protocol's ``denials`` array (absent → none)."""
    return [Denial.from_json(item) for item in items or []]


@dataclass(frozen=True)
class Held:
    """A request of the step that an ``[[ask]]`` rule held for a person's
    decision (``airlock approve ID`` / ``airlock deny ID``), once its wait
    was over: what it was, how it ended and how long it waited."""

    approval: str
    """The approval's id, as ``airlock approvals`` listed it."""
    method: str
    url: str
    """Without its query."""
    outcome: str
    """``"approved"``, ``"denied"``, ``"expired"`` or ``"abandoned"``."""
    waited: float
    """Seconds it waited for the decision."""
    rule: Optional[str] = None
    """The ``[[ask]]`` rule that held it."""
    scope: Optional[str] = None
    """``"once"`` or ``"session"`` when approved."""
    by: Optional[str] = None
    """Who decided; ``None`` when nobody did."""
    note: Optional[str] = None
    """The decider's note (a denial's reason)."""
    step: Optional[int] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Held":
        """Build one from the protocol's JSON object; fields this version
        does not know are ignored."""
        return cls(
            approval=str(data.get("approval") or ""),
            method=str(data.get("method") or ""),
            url=str(data.get("url") or ""),
            outcome=str(data.get("outcome") or ""),
            waited=float(data.get("waited_ms") or 0) / 1000,
            rule=data.get("rule"),
            scope=data.get("scope"),
            by=data.get("by"),
            note=data.get("note"),
            step=data.get("step"),
        )


def held_from_json(items: Any) -> List[Held]:
    """The protocol's ``held`` array (absent, from an older server → none)."""
    return [Held.from_json(item) for item in items or []]


class SessionDenials(List[Denial]):
    """Every refusal of a session so far. The session keeps a bounded number
    of distinct ones; ``dropped`` counts those past it, not listed."""

    def __init__(self, denials: Iterable[Denial] = (), dropped: int = 0) -> None:
        super().__init__(denials)
        self.dropped = dropped


@dataclass(frozen=True)
class RunResult:
    """How one step ended and what it printed.

    Output is kept up to a cap per stream (see ``max_output``); past it the
    rest is read and dropped, and ``stdout_truncated``/``stderr_truncated``
    say so. Everything is in the session's audit record regardless.
    """

    exit_code: int
    """The command's status; 124 when its timeout killed it, 128+N on signal N."""
    stdout_bytes: bytes
    stderr_bytes: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    duration: float
    """Seconds, as the session measured the step."""
    step: int
    """The step's number in the session's record."""
    signal: Optional[int] = None
    reason: Optional[str] = None
    """Why airlock ended the step, when it did."""
    denials: List[Denial] = field(default_factory=list)
    """What the policy refused during this step."""
    held: List[Held] = field(default_factory=list)
    """Each request of this step an ``[[ask]]`` rule held for a person:
    how it ended and how long it waited."""

    @property
    def stdout(self) -> str:
        """``stdout_bytes`` as UTF-8 text (undecodable bytes replaced)."""
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        """``stderr_bytes`` as UTF-8 text (undecodable bytes replaced)."""
        return self.stderr_bytes.decode("utf-8", errors="replace")
