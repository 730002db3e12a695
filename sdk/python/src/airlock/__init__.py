"""Airlock's Python SDK: run AI-agent code in a live Airlock session — a
sandbox whose only network way out is a policy-enforcing proxy, recorded in
a signed audit log. It drives the ``airlock`` binary and its session control
protocol (docs/sessions.md); the sandboxing is airlock's.

    with airlock.Sandbox(policy="policy.toml", workspace=".") as sb:
        result = sb.run(["python3", "-c", "print(1 + 1)"])
"""

from ._aio_processes import AsyncCommandHandle, AsyncStream
from ._approvals import Approval, approvals, approve, deny
from ._files import AsyncFiles, EntryInfo, Files
from ._kernel import CellError, Execution
from ._output import OutputChunk
from ._processes import CommandHandle
from ._procfs import Process
from .aio import AsyncSandbox
from .errors import (
    AirlockError,
    OutputLimitError,
    SessionGoneError,
    SessionNotAnsweringError,
    SessionStartError,
    StepError,
)
from .result import Denial, Held, RunResult, SessionDenials
from .sandbox import Sandbox

__all__ = [
    "AirlockError",
    "Approval",
    "AsyncCommandHandle",
    "AsyncFiles",
    "AsyncSandbox",
    "AsyncStream",
    "CellError",
    "CommandHandle",
    "EntryInfo",
    "Files",
    "OutputChunk",
    "Process",
    "approvals",
    "approve",
    "deny",
    "Denial",
    "Execution",
    "Held",
    "OutputLimitError",
    "RunResult",
    "Sandbox",
    "SessionDenials",
    "SessionGoneError",
    "SessionNotAnsweringError",
    "SessionStartError",
    "StepError",
]
