"""Output as it comes: ``on_stdout``/``on_stderr`` callbacks and the
iterator form, blocking and asyncio, against the real binary."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, List, Tuple

import airlock

# Prints, waits, prints: a caller that only saw output at the end would
# see both lines at once, after the pause.
SLOW = ["sh", "-c", "echo one; echo err >&2; sleep 0.6; echo two"]


def test_callbacks_get_output_while_the_command_runs_and_the_result_keeps_it_all(
    options: Dict[str, Any],
) -> None:
    seen: List[Tuple[float, str, str]] = []
    with airlock.Sandbox(**options) as sb:
        begun = time.monotonic()
        r = sb.run(
            SLOW,
            on_stdout=lambda text: seen.append((time.monotonic(), "out", text)),
            on_stderr=lambda text: seen.append((time.monotonic(), "err", text)),
        )
        ended = time.monotonic()
        assert (r.exit_code, r.stdout, r.stderr) == (0, "one\ntwo\n", "err\n"), r
        assert "".join(t for _, s, t in seen if s == "out") == "one\ntwo\n"
        assert "".join(t for _, s, t in seen if s == "err") == "err\n"
        first = next(at for at, _, text in seen if "one" in text)
        assert first - begun < ended - begun - 0.4, "the first line came before the command ended"

        # A character split across two writes (two frames) arrives whole.
        pieces: List[str] = []
        r = sb.run(["sh", "-c", r"printf '\303'; sleep 0.2; printf '\251!'"], on_stdout=pieces.append)
        assert "".join(pieces) == "\u00e9!" and len(pieces) >= 1, pieces
        assert "\ufffd" not in "".join(pieces)


def test_the_iterator_yields_chunks_before_the_command_ends(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        begun = time.monotonic()
        chunks = []
        stream = sb.stream(SLOW)
        for chunk in stream:
            chunks.append((time.monotonic() - begun, chunk))
        took = time.monotonic() - begun
        out = b"".join(c.data for _, c in chunks if c.stream == "stdout")
        err = b"".join(c.data for _, c in chunks if c.stream == "stderr")
        assert (out, err) == (b"one\ntwo\n", b"err\n"), chunks
        assert chunks[0][0] < took - 0.4, "the first chunk came before the command ended"
        r = stream.wait()
        assert (r.exit_code, r.stdout) == (0, "one\ntwo\n"), r
        # Its input is what it was given, then EOF (never left open).
        assert b"".join(c.data for c in sb.stream(["cat"], stdin="fed\n")) == b"fed\n"
        assert [c.text for c in sb.stream(["cat"])] == []


def test_the_async_sandbox_streams_too(options: Dict[str, Any]) -> None:
    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            begun = asyncio.get_running_loop().time()
            seen: List[Tuple[float, str]] = []
            r = await sb.run(SLOW, on_stdout=lambda t: seen.append((asyncio.get_running_loop().time(), t)))
            ended = asyncio.get_running_loop().time()
            assert "".join(t for _, t in seen) == "one\ntwo\n" and r.stderr == "err\n", (seen, r)
            assert seen[0][0] - begun < ended - begun - 0.4, seen

            stream = sb.stream(SLOW)
            chunks = [chunk async for chunk in stream]
            assert b"".join(c.data for c in chunks if c.stream == "stdout") == b"one\ntwo\n", chunks
            assert stream.result is not None and stream.result.exit_code == 0
            assert (await stream.wait()).stdout == "one\ntwo\n"

    asyncio.run(main())
