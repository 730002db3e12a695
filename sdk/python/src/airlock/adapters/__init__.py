"""Airlock as a tool of the frameworks agents are built with. Each adapter
is its own module and imports its framework only when imported itself, so
the SDK depends on none of them:

- :mod:`airlock.adapters.langchain`: a LangChain tool (``langchain-core``);
- :mod:`airlock.adapters.openai_agents`: an OpenAI Agents SDK function tool
  (``openai-agents``);
- :mod:`airlock.adapters.smolagents`: a smolagents tool (``smolagents``).

Each tool runs a shell command in the sandbox as one step and answers the
model with its exit code, output and, when the policy refused something,
what and the rule that would allow it (:func:`describe`).
"""

from ._common import DESCRIPTION, NAME, describe

__all__ = ["DESCRIPTION", "NAME", "describe"]
