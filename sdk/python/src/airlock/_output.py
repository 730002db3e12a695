"""Output as it arrives: the chunks the iterator form yields, and the
``on_stdout``/``on_stderr`` callbacks (text, decoded across chunk ends)."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Callable, Dict, Optional

from . import _protocol

OnText = Callable[[str], None]
"""An ``on_stdout``/``on_stderr`` callback: each piece of text as it comes."""

_STREAMS = {_protocol.STDOUT: "stdout", _protocol.STDERR: "stderr"}


@dataclass(frozen=True)
class OutputChunk:
    """One piece of a step's output, as the session relayed it."""

    stream: str
    """``"stdout"`` or ``"stderr"``."""
    data: bytes

    @property
    def text(self) -> str:
        """``data`` as UTF-8 (undecodable bytes replaced; a character split
        across two chunks is replaced in each: use the callbacks for text)."""
        return self.data.decode("utf-8", errors="replace")


def chunk(kind: int, payload: bytes) -> OutputChunk:
    return OutputChunk(_STREAMS.get(kind, "stdout"), payload)


class TextCallbacks:
    """Calls ``on_stdout``/``on_stderr`` with text decoded incrementally, so a
    character split across two frames arrives whole."""

    def __init__(self, on_stdout: Optional[OnText], on_stderr: Optional[OnText]) -> None:
        self._calls: Dict[int, OnText] = {}
        self._decoders: Dict[int, "codecs.IncrementalDecoder"] = {}
        for kind, call in ((_protocol.STDOUT, on_stdout), (_protocol.STDERR, on_stderr)):
            if call is not None:
                self._calls[kind] = call
                self._decoders[kind] = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def __bool__(self) -> bool:
        return bool(self._calls)

    def __call__(self, kind: int, payload: bytes) -> None:
        call = self._calls.get(kind)
        if call is not None:
            text = self._decoders[kind].decode(payload)
            if text:
                call(text)

    def flush(self) -> None:
        """The end of the output: what an incomplete character left over."""
        for kind, decoder in self._decoders.items():
            text = decoder.decode(b"", final=True)
            if text:
                self._calls[kind](text)


def combine(*listeners: Optional[_protocol.OnOutput]) -> Optional[_protocol.OnOutput]:
    """One listener calling each given one in turn (None when none is)."""
    present = [listener for listener in listeners if listener]
    if not present:
        return None

    def each(kind: int, payload: bytes) -> None:
        for listener in present:
            listener(kind, payload)

    return each
