"""The session control protocol (docs/sessions.md), without any I/O.

A client sends one JSON request line and reads one JSON answer line; after
an ``exec`` both sides exchange frames: a type byte, a big-endian u32
length (at most 1 MiB) and the payload. The sync and async sandboxes both
speak it through these helpers and differ only in how bytes move.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple, Type, Union

from .errors import AirlockError, OutputLimitError, SessionGoneError, StepError
from .result import RunResult, denials_from_json, held_from_json

MAX_FRAME = 1 << 20
HEADER_SIZE = 5

# Client to session.
STDIN = 0x00
STDIN_EOF = 0x01
SIGNAL = 0x03
KILL = 0x04
# Session to client.
STDOUT = 0x11
STDERR = 0x12
EXIT = 0x13
ERROR = 0x14

_HEADER = struct.Struct(">BI")


# Seconds past a step's timeout that a caller waits for its end, as
# `airlock session exec` does: the session answers a killed step within a
# second even when the sandbox does not confirm it, so only a session that
# is not answering at all runs this out.
ANSWER_GRACE = 3.0
# Seconds to wait for a session's answer to a request without a timeout of
# its own (info, denials, the first line of a step).
ANSWER_TIMEOUT = 10.0


def step_deadline(request: Dict[str, Any]) -> Optional[float]:
    """How long (seconds) a caller waits for this step's end, or None."""
    timeout_ms = request.get("timeout_ms")
    if timeout_ms is None:
        return None
    return float(timeout_ms) / 1000.0 + ANSWER_GRACE


def first_answer_within(request: Dict[str, Any]) -> float:
    """How long (seconds) a caller waits for the session's first answer to
    a step: a session that answers at all answers at once."""
    waits = step_deadline(request)
    return ANSWER_TIMEOUT if waits is None else min(waits, ANSWER_TIMEOUT)


def not_answering(session_id: str, request: Dict[str, Any]) -> str:
    waited = step_deadline(request)
    bound = f"within its timeout and {ANSWER_GRACE:g}s more" if waited is not None else f"within {ANSWER_TIMEOUT:g}s"
    return (
        f"session {session_id} is not answering: the step did not end {bound}; "
        f"stop the session with `airlock session stop {session_id}`"
    )


def request_line(request: Dict[str, Any]) -> bytes:
    """One request: a JSON object on one line."""
    return json.dumps(request, separators=(",", ":")).encode() + b"\n"


def parse_reply(line: bytes, refused: Type[AirlockError] = AirlockError) -> Dict[str, Any]:
    """An answer line, raising ``refused`` with the session's reason when it
    says ``{"ok": false}``. An empty line means the session hung up."""
    if not line:
        raise SessionGoneError("the session closed the connection without answering")
    reply = _json_object(line)
    if not reply.get("ok"):
        raise refused(str(reply.get("error") or "the session refused without a reason"))
    return reply


def frame(kind: int, payload: bytes = b"") -> bytes:
    return _HEADER.pack(kind, len(payload)) + payload


Stdin = Union[bytes, Iterable[bytes]]
"""A step's input: bytes, or chunks of them as they come (a stream)."""


def stdin_frames(data: Optional[Stdin], eof: bool = True) -> Iterator[bytes]:
    """``data`` as stdin frames (each within the frame limit), then EOF
    unless ``eof`` is False (a background step's input stays open)."""
    chunks: Iterable[bytes]
    if data is None:
        chunks = ()
    elif isinstance(data, (bytes, bytearray, memoryview)):
        chunks = (bytes(data),)
    else:
        chunks = data
    for chunk in chunks:
        view = memoryview(chunk)
        for start in range(0, len(view), MAX_FRAME):
            yield frame(STDIN, bytes(view[start : start + MAX_FRAME]))
    if eof:
        yield frame(STDIN_EOF)


OnOutput = Callable[[int, bytes], None]
"""Called with each output frame's type (``STDOUT`` or ``STDERR``) and
bytes as they arrive, before the cap on what is kept."""


def parse_header(head: bytes) -> Tuple[int, int]:
    """A frame header's type and payload length; a short header means the
    session hung up mid-step."""
    if len(head) < HEADER_SIZE:
        raise SessionGoneError("the session closed the connection before the step ended")
    kind, length = _HEADER.unpack(head)
    if length > MAX_FRAME:
        raise AirlockError(f"the session sent a frame of {length} bytes, over the 1 MiB limit")
    return kind, length


class StepCollector:
    """Gathers one step's frames into a :class:`RunResult`.

    Each stream keeps at most ``max_output`` bytes; the rest is dropped and
    flagged, unless ``strict``, in which case going over raises
    :class:`OutputLimitError` so the caller can hang up (which kills the step).
    """

    def __init__(
        self, step: int, max_output: int, strict: bool = False, on_output: Optional[OnOutput] = None
    ) -> None:
        self.step = step
        self._on_output = on_output
        self._max = max_output
        self._strict = strict
        self._kept = {STDOUT: bytearray(), STDERR: bytearray()}
        self._truncated = {STDOUT: False, STDERR: False}
        self.result: Optional[RunResult] = None

    def feed(self, kind: int, payload: bytes) -> bool:
        """Take one frame; True once the step has ended (``result`` is set)."""
        if kind in self._kept:
            if self._on_output is not None:
                self._on_output(kind, payload)
            self._keep(kind, payload)
            return False
        if kind == EXIT:
            self.result = self._finish(_json_object(payload))
            return True
        if kind == ERROR:
            raise StepError(str(_json_object(payload).get("error") or "airlock failed the step"))
        raise AirlockError(f"the session sent an unknown frame type {kind:#04x}")

    def _keep(self, kind: int, payload: bytes) -> None:
        kept = self._kept[kind]
        room = self._max - len(kept)
        if len(payload) > room:
            if self._strict:
                raise OutputLimitError(f"the output is over the {self._max}-byte limit")
            self._truncated[kind] = True
        kept += payload[: max(room, 0)]

    def _finish(self, report: Dict[str, Any]) -> RunResult:
        return RunResult(
            exit_code=int(report["exit_code"]),
            stdout_bytes=bytes(self._kept[STDOUT]),
            stderr_bytes=bytes(self._kept[STDERR]),
            stdout_truncated=self._truncated[STDOUT],
            stderr_truncated=self._truncated[STDERR],
            timed_out=bool(report.get("timed_out")),
            duration=float(report.get("duration_ms") or 0) / 1000,
            step=self.step,
            signal=report.get("signal"),
            reason=report.get("reason"),
            denials=denials_from_json(report.get("denials")),
            held=held_from_json(report.get("held")),
        )


def _json_object(data: bytes) -> Dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise AirlockError(f"the session sent a malformed message: {data[:200]!r}")
    return value
