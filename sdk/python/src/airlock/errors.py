"""The errors the SDK raises. Each carries the one-line reason airlock gave."""

from __future__ import annotations


class AirlockError(Exception):
    """Airlock refused or failed something; ``reason`` is its one-line why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SessionStartError(AirlockError):
    """``airlock session start`` did not bring a session up (a bad option, a
    policy that does not parse, a missing binary...)."""


class SessionGoneError(AirlockError):
    """The session is no longer there to talk to: it was stopped, its
    lifetime or idle timeout ended it, or its server was killed."""


class StepError(AirlockError):
    """Airlock could not run a step, or failed it while it ran (distinct from
    the command itself failing, which is a non-zero ``exit_code``)."""


class OutputLimitError(AirlockError):
    """Output went over a limit the caller asked to be strict about (e.g.
    ``read_file``'s ``max_size``); the step was ended."""


class SessionNotAnsweringError(SessionGoneError):
    """The session took a step but did not answer within the step's timeout
    and a grace (``ANSWER_GRACE`` seconds): its server is stopped or stuck.
    The step was hung up on; ``airlock session stop ID`` ends the session."""
