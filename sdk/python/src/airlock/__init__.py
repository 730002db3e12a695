"""Airlock's Python SDK: run AI-agent code in a live Airlock session — a
sandbox whose only network way out is a policy-enforcing proxy, recorded in
a signed audit log. It drives the ``airlock`` binary and its session control
protocol (docs/sessions.md); the sandboxing is airlock's.

    with airlock.Sandbox(policy="policy.toml", workspace=".") as sb:
        result = sb.run(["python3", "-c", "print(1 + 1)"])
"""

from ._kernel import CellError, Execution
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
    "AsyncSandbox",
    "CellError",
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
