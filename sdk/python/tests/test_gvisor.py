"""``Sandbox(isolation="gvisor")`` and ``AsyncSandbox(isolation="gvisor")``
against the real binary and real runsc: the session runs under gVisor's
kernel, and ``run``, ``run_code`` and the file calls work as they do in a
namespace sandbox, with the same one way out. Fails, never skips, when
runsc is missing (``scripts/setup`` installs it)."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Dict

from conftest import Upstream

import airlock


def test_a_gvisor_sandbox_runs_steps_code_and_files_under_gvisors_kernel(
    options: Dict[str, Any], upstream: Upstream
) -> None:
    with airlock.Sandbox(isolation="gvisor", **options) as sb:
        kernel = sb.run(["sh", "-c", "uname -r; dmesg | head -1"])
        assert kernel.exit_code == 0, kernel
        assert os.uname().release not in kernel.stdout, kernel
        assert "gVisor" in kernel.stdout, kernel
        allowed = sb.run(["curl", "-sS", f"{upstream.base}/allowed/gv"])
        assert (allowed.exit_code, allowed.stdout) == (0, "hello from /allowed/gv"), allowed
        refused = sb.run(["curl", "-sS", "-w", "\n%{http_code}", f"{upstream.base}/admin"])
        assert refused.stdout.endswith("\n403"), refused
        assert "/admin" not in upstream.paths, "the refused request never left"
        # run_code's interpreter keeps its state from cell to cell.
        first = sb.run_code("import platform\nx = 20")
        assert first.error is None, first
        second = sb.run_code("x + 22")
        assert (second.error, second.value) == (None, "42"), second
        # The file calls are steps: written and read by the sandbox.
        sb.write_file("notes/gv.txt", "written under gVisor\n")
        assert sb.read_file("notes/gv.txt") == b"written under gVisor\n"
        on_host = os.path.join(sb.workspace, "notes", "gv.txt")
        with open(on_host, encoding="utf-8") as f:
            assert f.read() == "written under gVisor\n"
        assert sb.files.exists("notes/gv.txt")


def test_an_async_gvisor_sandbox_runs_steps_and_files(options: Dict[str, Any]) -> None:
    async def main() -> None:
        async with airlock.AsyncSandbox(isolation="gvisor", **options) as sb:
            a, b = await asyncio.gather(
                sb.run(["sh", "-c", "uname -r"]), sb.run(["sh", "-c", "echo two"])
            )
            assert a.exit_code == 0 and a.stdout.strip() != os.uname().release, a
            assert (b.exit_code, b.stdout) == (0, "two\n"), b
            await sb.write_file("a.txt", b"async")
            assert await sb.read_file("a.txt") == b"async"
            cell = await sb.run_code("1 + 1")
            assert cell.value == "2", cell

    asyncio.run(main())


def test_an_unknown_isolation_fails_to_start_with_the_clis_reason(options: Dict[str, Any]) -> None:
    try:
        with airlock.Sandbox(isolation="kata", **options):
            raise AssertionError("a sandbox started under isolation='kata'")
    except airlock.SessionStartError as e:
        assert "namespaces" in str(e) and "gvisor" in str(e), e
