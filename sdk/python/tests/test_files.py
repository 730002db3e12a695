"""``sandbox.files``: list, exists, remove, rename, mkdir, upload and
download (bytes and streams), each a step inside the sandbox, never a call
on the host's filesystem; blocking and asyncio, against the real binary."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

import airlock


def test_each_file_call_works_in_the_workspace(options: Dict[str, Any]) -> None:
    workspace = Path(options["workspace"])
    big = bytes(range(256)) * 12_000  # 3 MiB: several frames each way
    with airlock.Sandbox(**options) as sb:
        files = sb.files
        files.mkdir("a/b")
        files.mkdir("a/b")  # already there: fine
        files.upload("a/b/text.txt", "text\n")
        files.upload("a/b/bytes.bin", b"\x00\x01")
        files.upload("a/big.bin", io.BytesIO(big))
        files.upload("-n", b"dash")
        sb.run(["ln", "-s", "b/text.txt", "a/link"])
        sb.run(["ln", "-s", "nowhere", "a/dangling"])
        assert (workspace / "a" / "big.bin").read_bytes() == big

        top = {(e.name, e.path, e.type) for e in files.list()}
        # .venv: the sandbox's own Python environment (see test_venv.py).
        assert top == {("a", "a", "dir"), ("-n", "-n", "file"), (".venv", ".venv", "dir")}, top
        deep = {e.path: (e.type, e.size) for e in files.list("a", depth=2)}
        assert deep == {
            "a/b": ("dir", deep["a/b"][1]),
            "a/b/text.txt": ("file", 5),
            "a/b/bytes.bin": ("file", 2),
            "a/big.bin": ("file", len(big)),
            "a/link": ("symlink", deep["a/link"][1]),
            "a/dangling": ("symlink", deep["a/dangling"][1]),
        }, deep

        assert files.exists("a/b/text.txt") and files.exists("a/b") and files.exists("-n")
        assert files.exists("a/dangling"), "a dangling symlink is something"
        assert not files.exists("a/missing")

        assert files.download("a/b/text.txt") == b"text\n"
        assert files.download("-n") == b"dash"
        sink = io.BytesIO()
        assert files.download("a/big.bin", sink) == len(big)
        assert sink.getvalue() == big
        with pytest.raises(airlock.OutputLimitError):
            files.download("a/big.bin", max_size=1000)

        files.rename("a/b/text.txt", "renamed.txt")
        assert files.download("renamed.txt") == b"text\n" and not files.exists("a/b/text.txt")
        files.remove("a/link")
        assert files.exists("a/b/bytes.bin"), "removing a link leaves its target"
        files.remove("a")
        assert not files.exists("a") and not (workspace / "a").exists()

        for call in [
            lambda: files.remove("a"),
            lambda: files.download("missing"),
            lambda: files.download("missing", io.BytesIO()),
            lambda: files.rename("missing", "x"),
            lambda: files.list("renamed.txt"),
        ]:
            with pytest.raises(airlock.AirlockError):
                call()
        for outside in ["/etc", "../x", "sub/../../x", ""]:
            for call in outside_calls(files, outside):
                with pytest.raises(airlock.AirlockError):
                    call()
        assert files.download("renamed.txt") == b"text\n", "nothing above touched it"


def outside_calls(files: airlock.Files, outside: str) -> List[Callable[[], object]]:
    """Every file call, each given a path outside the workspace."""
    return [
        lambda: files.list(outside or "/"),
        lambda: files.exists(outside),
        lambda: files.remove(outside),
        lambda: files.rename(outside, "y"),
        lambda: files.rename("renamed.txt", outside),
        lambda: files.mkdir(outside),
        lambda: files.upload(outside, b"x"),
        lambda: files.download(outside),
    ]


def test_a_planted_symlink_never_makes_the_host_follow_it(options: Dict[str, Any], tmp_path: Path) -> None:
    secrets = tmp_path / "host-secrets"
    secrets.mkdir()
    token = secrets / "token"
    token.write_text("host secret\n")
    before = sorted(p.name for p in secrets.iterdir())
    # What a hostile program could leave in the workspace: a link to a
    # host directory outside the sandbox's view, and one to a host file.
    workspace = Path(options["workspace"])
    (workspace / "evil").symlink_to(secrets)
    (workspace / "tok").symlink_to(token)
    with airlock.Sandbox(hide=[secrets], **options) as sb:
        files = sb.files
        attempts = [
            lambda: files.list("evil"),
            lambda: files.download("tok"),
            lambda: files.download("evil/token"),
            lambda: files.download("evil/token", io.BytesIO()),
            lambda: files.upload("evil/planted", b"x"),
            lambda: files.upload("evil/token", io.BytesIO(b"overwritten\n")),
            lambda: files.mkdir("evil/made"),
            lambda: files.remove("evil/token"),
            lambda: files.rename("evil/token", "stolen"),
            lambda: files.rename("renamed", "evil/token"),
        ]
        for attempt in attempts:
            try:
                got = attempt()
            except airlock.AirlockError:
                continue  # refused is as good as kept away
            assert not (isinstance(got, bytes) and b"host secret" in got), got
            assert not (isinstance(got, list) and any(e.name == "token" for e in got)), got
        assert not files.exists("evil/token"), "the sandbox does not see the host's file"
        # The link itself is the sandbox's to remove and rename.
        files.rename("tok", "tok2")
        files.remove("tok2")
        files.remove("evil")
    assert token.read_text() == "host secret\n"
    assert sorted(p.name for p in secrets.iterdir()) == before
    assert not (workspace / "tok").exists() and not (workspace / "evil").is_symlink()


def test_the_async_sandbox_has_the_file_calls_too(options: Dict[str, Any]) -> None:
    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            files = sb.files
            await files.mkdir("d")
            await files.upload("d/f.bin", io.BytesIO(b"y" * (2 << 20)))
            assert [(e.path, e.type, e.size) for e in await files.list("d")] == [("d/f.bin", "file", 2 << 20)]
            assert await files.exists("d/f.bin") and not await files.exists("d/g")
            sink = io.BytesIO()
            assert await files.download("d/f.bin", sink) == 2 << 20
            assert await files.download("d/f.bin", max_size=3 << 20) == sink.getvalue()
            await files.rename("d/f.bin", "d/g.bin")
            await files.remove("d")
            assert not await files.exists("d")
            with pytest.raises(airlock.AirlockError):
                await files.remove("d")

    asyncio.run(main())
