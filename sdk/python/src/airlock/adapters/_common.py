"""What every adapter says to the model: the tool's name and description,
and a step's result as text."""

from __future__ import annotations

from typing import List, Optional

from ..result import RunResult

NAME = "airlock_run"
DESCRIPTION = (
    "Run a shell command in an isolated Linux sandbox (Airlock) and get its exit code and output. "
    "Files and installed packages persist between calls; the working directory is the workspace. "
    "Network access goes through a policy: a refused request is reported with the rule that would allow it."
)
# Output kept per stream for the model: the rest is cut (the record keeps all).
MAX_TEXT = 16_000


def command_argv(command: str) -> List[str]:
    return ["sh", "-c", command]


def describe(result: RunResult, max_text: int = MAX_TEXT) -> str:
    """A step's result as the model reads it."""
    lines = [f"exit code: {result.exit_code}"]
    if result.reason:
        lines.append(f"airlock: {result.reason}")
    for name, text, cut in (
        ("stdout", result.stdout, result.stdout_truncated),
        ("stderr", result.stderr, result.stderr_truncated),
    ):
        if text:
            shown = text if len(text) <= max_text else text[:max_text]
            more = " (cut)" if cut or len(text) > max_text else ""
            lines.append(f"{name}{more}:\n{shown.rstrip()}")
    for denial in result.denials:
        what = f"{denial.method} {denial.url}" if denial.method else denial.host
        lines.append(f"refused by the policy: {what}: {denial.reason}")
        if denial.rule:
            lines.append(f"to allow it, add to the policy:\n{denial.rule.rstrip()}")
    for held in result.held:
        lines.append(f"held for approval: {held.method} {held.url}: {held.outcome} after {held.waited:.1f}s")
    return "\n".join(lines)


def label_of(call_id: Optional[str], framework: str) -> str:
    """The step's label: the tool call's id when the framework gives one."""
    return call_id or f"{framework}:{NAME}"
