"""``pip install`` works in a sandbox on Debian 12, whose Python is
"externally managed" (PEP 668): each sandbox gets a venv in its workspace
that ``pip`` and ``python3`` use. The package installed is a wheel made
here and installed with ``--no-index``: the machine has no internet."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import zipfile
from pathlib import Path
from typing import Any, Dict

import airlock

NAME = "hello_airlock"


def make_wheel(directory: Path) -> Path:
    """A pure-Python wheel of ``hello_airlock`` 1.0 (module ``hello_airlock``,
    ``GREETING = "hi"``), written by hand: no build backend needed."""
    files = {
        f"{NAME}/__init__.py": b'GREETING = "hi"\n',
        f"{NAME}-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: hello-airlock\nVersion: 1.0\n",
        f"{NAME}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: airlock-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in files.items()
    ]
    record.append(f"{NAME}-1.0.dist-info/RECORD,,")
    files[f"{NAME}-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = directory / f"{NAME}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return wheel


def install_argv(wheels: str) -> list:
    return ["pip", "install", "--no-index", "--find-links", wheels, "hello-airlock"]


def test_pip_install_works_in_a_sandbox_and_python_finds_the_package(options: Dict[str, Any], tmp_path: Path) -> None:
    del options["workspace"]  # the README's case: a fresh workspace
    with airlock.Sandbox(**options) as sb:
        sb.files.upload(f"wheels/{NAME}-1.0-py3-none-any.whl", make_wheel(tmp_path).read_bytes())
        r = sb.run(install_argv("wheels"))
        assert r.exit_code == 0, r.stderr
        assert "Successfully installed hello-airlock-1.0" in r.stdout, r.stdout
        # Every way a program reaches Python sees it: python3, python, pip3,
        # `python3 -m pip`, and the run_code interpreter.
        r = sb.run(["python3", "-c", f"import {NAME}; print({NAME}.GREETING, {NAME}.__file__)"])
        assert r.exit_code == 0, r.stderr
        assert r.stdout.startswith(f"hi {sb.workspace}/.venv/lib/"), r.stdout
        assert sb.run(["python", "-c", f"import {NAME}"]).exit_code == 0
        assert "hello-airlock" in sb.run(["pip3", "list"]).stdout
        assert "hello-airlock" in sb.run(["python3", "-m", "pip", "list"]).stdout
        assert sb.run_code(f"import {NAME}\n{NAME}.GREETING").value == "'hi'"
        # The host's packages are still there (the venv sees the system's).
        assert sb.run(["python3", "-c", "import pip"]).exit_code == 0
        assert Path(sb.workspace, ".venv", "pyvenv.cfg").is_file()


def test_without_the_venv_debian_refuses_pip_install_as_the_issue_saw(options: Dict[str, Any], tmp_path: Path) -> None:
    """What the venv is for: the system's pip refuses (PEP 668) and the
    system's site-packages are read-only in the sandbox anyway."""
    with airlock.Sandbox(venv=False, **options) as sb:
        sb.files.upload(f"wheels/{NAME}-1.0-py3-none-any.whl", make_wheel(tmp_path).read_bytes())
        r = sb.run(install_argv("wheels"))
        assert r.exit_code != 0
        assert "externally-managed-environment" in r.stderr, r.stderr
        assert not Path(sb.workspace, ".venv").exists()


def test_a_workspace_that_has_a_venv_keeps_it(options: Dict[str, Any]) -> None:
    venv = Path(options["workspace"], ".venv")
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = true\n# mine\n")
    with airlock.Sandbox(**options) as sb:
        assert sb.run(["true"]).exit_code == 0
    assert (venv / "pyvenv.cfg").read_text().endswith("# mine\n")
    assert not (venv / "bin").exists(), "nothing was added to the caller's venv"


def test_a_path_the_caller_sets_is_kept(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(env={"PATH": "/usr/bin:/bin"}, **options) as sb:
        assert sb.run(["sh", "-c", "echo $PATH"]).stdout == "/usr/bin:/bin\n"
        assert sb.run(["sh", "-c", "echo $VIRTUAL_ENV"]).stdout == f"{sb.workspace}/.venv\n"


def test_the_async_sandbox_gets_the_venv_too(options: Dict[str, Any], tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path).read_bytes()

    async def main() -> None:
        async with airlock.AsyncSandbox(**options) as sb:
            await sb.files.upload(f"wheels/{NAME}-1.0-py3-none-any.whl", wheel)
            r = await sb.run(install_argv("wheels"))
            assert r.exit_code == 0, r.stderr
            r = await sb.run(["python3", "-c", f"import {NAME}; print({NAME}.GREETING)"])
            assert r.stdout == "hi\n", r.stderr

    asyncio.run(main())
