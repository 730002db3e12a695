"""What the SDK's calls ask the session to run: exec requests, the
interpreters behind ``run_code``, and the steps behind ``write_file`` and
``read_file`` (which go through the sandbox, never the host filesystem)."""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .errors import AirlockError

Timeout = Union[float, int, str]

# Each interpreter reads its program from stdin.
CODE_COMMANDS: Dict[str, List[str]] = {
    "python": ["python3", "-"],
    "node": ["node", "-"],
    "bash": ["bash", "-s"],
}

# `$1` is the file, `$2` its directory (worked out here: a shell's
# `dirname` would drop a trailing newline of a name); the directory is
# made, then stdin is written to the file, all in the sandbox's own view.
_WRITE_SCRIPT = 'mkdir -p -- "$2" && cat > "$1"'


def exec_request(
    argv: Sequence[str],
    *,
    workspace: str,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    label: Optional[str] = None,
    timeout: Optional[Timeout] = None,
) -> Dict[str, Any]:
    """An ``exec`` request. A relative ``cwd`` is taken from the workspace,
    which the sandbox mounts at its host path."""
    if isinstance(argv, str) or not argv:
        raise AirlockError("a command is a non-empty list of arguments, e.g. ['ls', '-l']")
    request: Dict[str, Any] = {"op": "exec", "argv": [str(a) for a in argv]}
    if env:
        request["env"] = [[str(k), str(v)] for k, v in env.items()]
    if cwd is not None:
        request["cwd"] = posixpath.join(workspace, cwd)
    if label is not None:
        request["label"] = label
    if timeout is not None:
        request["timeout_ms"] = timeout_ms(timeout)
    return request


def code_command(language: str) -> List[str]:
    try:
        return list(CODE_COMMANDS[language])
    except KeyError:
        known = ", ".join(sorted(CODE_COMMANDS))
        raise AirlockError(f"unknown language {language!r}: use one of {known}") from None


def write_file_command(path: str) -> List[str]:
    inside = workspace_path(path)
    parent = posixpath.dirname(inside)
    return ["sh", "-c", _WRITE_SCRIPT, "sh", "./" + inside, "./" + parent if parent else "."]


def read_file_command(path: str) -> List[str]:
    # `./` first: a file named `-` is a file to cat, not its stdin.
    return ["cat", "--", "./" + workspace_path(path)]


def workspace_path(path: str) -> str:
    """``path`` checked to stay in the workspace, as the SDK's file calls
    promise: relative, and no ``..`` that climbs out. (Symlinks are the
    sandbox's business: it resolves them in its own view.)"""
    if not path or posixpath.isabs(path):
        raise AirlockError(f"{path!r}: give a path relative to the workspace")
    normal = posixpath.normpath(path)
    if normal == "." or normal == ".." or normal.startswith("../"):
        raise AirlockError(f"{path!r} is not a file inside the workspace")
    return normal


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def timeout_ms(value: Timeout) -> int:
    """Seconds (``1.5``) or a duration as airlock spells one (``"500ms"``,
    ``"30s"``, ``"2m"``, ``"1h30m"``, ``"1.5"``) in milliseconds."""
    if isinstance(value, str):
        text = value.strip()
        try:
            ms = float(text) * 1000
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise AirlockError(
                    f"invalid timeout {value!r}: use seconds (1.5) "
                    "or a number with a unit (500ms, 30s, 2m, 1h30m)"
                ) from None
            ms = sum(float(n) * _UNIT_MS[u] for n, u in parts)
    else:
        ms = float(value) * 1000
    # Also refuses NaN and infinity, which compare false.
    if not 1 <= ms < 2**53:
        raise AirlockError(f"invalid timeout {value!r}: it must be at least a millisecond and finite")
    return int(ms)
