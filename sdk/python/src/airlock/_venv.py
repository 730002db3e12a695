"""The sandbox's own Python environment: a venv in the workspace that
``pip install`` and ``python3`` use.

Debian 12 (and every distribution that adopted PEP 668) marks its Python
"externally managed": ``pip install`` outside a venv is refused, and the
host's Python is read-only inside the sandbox anyway. So each sandbox
gets ``WORKSPACE/.venv``, on PATH ahead of the system's, seeing the
system's packages (``include-system-site-packages``) so that nothing
installed on the host goes missing. It is made inside the sandbox, as a
step of its own labelled ``sdk:venv``, in a few milliseconds: a
``pyvenv.cfg``, links to the system's ``python3`` and ``pip`` scripts that
run the system's pip in the venv (``python3 -m venv`` would take ten times
as long). A workspace that already has ``.venv/pyvenv.cfg`` keeps it.
``venv=False`` turns all of this off.
"""

from __future__ import annotations

import posixpath
from typing import Any, Dict, List, Mapping

DIRECTORY = ".venv"
LABEL = "sdk:venv"
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The sandbox's PATH unless told otherwise (the CLI's own default)."""

# $1: the venv's path. Nothing to do without a python3, or when the
# workspace cannot take it (read-only): the sandbox works as before.
_MAKE = r"""v=$1
[ -e "$v/pyvenv.cfg" ] && exit 0
py=$(command -v python3) || exit 0
mkdir -p "$v/bin" 2>/dev/null || exit 0
printf 'home = %s\ninclude-system-site-packages = true\n' "${py%/*}" > "$v/pyvenv.cfg" || exit 0
ln -sf "$py" "$v/bin/python"
ln -sf python "$v/bin/python3"
for pip in pip pip3; do
    cat > "$v/bin/$pip" <<PIP
#!$v/bin/python
import sys
try:
    from pip._internal.cli.main import main
except ImportError:
    sys.exit("airlock: the sandbox's python3 has no pip: install it on the host (Debian: python3-pip)")
sys.exit(main())
PIP
    chmod +x "$v/bin/$pip"
done"""


def path(workspace: str) -> str:
    """Where the venv is, inside the sandbox (and on the host)."""
    return posixpath.join(workspace, DIRECTORY)


def command(workspace: str) -> List[str]:
    """The step that makes the venv."""
    return ["sh", "-c", _MAKE, "sh", path(workspace)]


def with_session_env(options: Mapping[str, Any], workspace: str) -> Dict[str, Any]:
    """``options`` with the venv on the session's PATH. A PATH the caller
    set (``env``) or passed (``pass_env``) is theirs: it is kept."""
    env = dict(options.get("env") or {})
    passed = options.get("pass_env") or []
    passed = [passed] if isinstance(passed, str) else list(passed)
    venv = path(workspace)
    env.setdefault("VIRTUAL_ENV", venv)
    if "PATH" not in env and "PATH" not in passed:
        env["PATH"] = f"{venv}/bin:{SANDBOX_PATH}"
    return {**options, "env": env}
