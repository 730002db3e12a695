"""``processes()``: what runs in the sandbox, read from the sandbox's own
/proc by a step (never from the host's), and which step each process
belongs to.

Every step's command runs under a holder process that airlock names
``airlock:s<N>`` (N, the step), a child of the sandbox's init; whatever the
step starts stays below it (the holder reaps orphans). A process's step is
its nearest holder ancestor. That attribution comes from inside the
sandbox, which a hostile program can rename itself in: it is for reading,
and nothing the SDK does to a process goes by it (a handle's ``kill`` ends
its step through the session, never a pid).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

# One line per process: `P PID`, then its stat and its command line as
# od's hex lines. od is used as a byte-exact encoder: a command line holds
# NULs and newlines, and a process may name itself anything. Each is read
# up to a bound (-N), so that no process can make the listing too long.
_SCRIPT = r"""echo "S $$"
for d in /proc/[0-9]*; do
  echo "P ${d#/proc/}"
  od -N 4096 -An -v -tx1 "$d/stat" 2>/dev/null
  echo C
  od -N 4096 -An -v -tx1 "$d/cmdline" 2>/dev/null
done
# A process that ended while it was read is left out, not an error.
exit 0
"""

_HOLDER = re.compile(r"airlock:s([0-9]+)")


@dataclass(frozen=True)
class Process:
    """One process in the sandbox (pids as the sandbox numbers them)."""

    pid: int
    ppid: int
    name: str
    """Its ``comm`` (at most 15 bytes)."""
    argv: List[str]
    """Its command line (its first 4 KiB); empty for a process that has
    cleared it."""
    step: Optional[int]
    """The step it belongs to: the one that started it, or left it running."""

    @property
    def command(self) -> str:
        return " ".join(self.argv) if self.argv else f"[{self.name}]"


def command() -> List[str]:
    return ["sh", "-c", _SCRIPT]


def parse(stdout: bytes, own_step: int) -> List[Process]:
    """The processes the listing step saw, less airlock's own (init, the
    holders) and the listing itself (its step)."""
    shell, rows = _rows(stdout)
    raw: Dict[int, Tuple[int, str, List[str]]] = {}
    for pid, stat, cmdline in rows:
        parsed = _stat(stat)
        if parsed is None:
            continue  # it ended while being read
        ppid, name = parsed
        argv = [part.decode("utf-8", errors="replace") for part in cmdline.split(b"\0")]
        if argv and argv[-1] == "":
            argv.pop()
        raw[pid] = (ppid, name, argv)

    def holder_step(pid: int) -> Optional[int]:
        ppid, name, _ = raw[pid]
        found = _HOLDER.fullmatch(name)
        return int(found.group(1)) if found and ppid == 1 else None

    def step_of(pid: int) -> Optional[int]:
        seen = set()
        while pid in raw and pid not in seen:
            seen.add(pid)
            step = holder_step(pid)
            if step is not None:
                return step
            pid = raw[pid][0]
        return None

    listed = []
    for pid, (ppid, name, argv) in sorted(raw.items()):
        step = step_of(pid)
        if pid == 1 or holder_step(pid) is not None or step == own_step or pid == shell:
            continue
        listed.append(Process(pid=pid, ppid=ppid, name=name, argv=argv, step=step))
    return listed


def _rows(stdout: bytes) -> Tuple[Optional[int], List[Tuple[int, bytes, bytes]]]:
    shell: Optional[int] = None
    rows: List[Tuple[int, bytes, bytes]] = []
    pid: Optional[int] = None
    parts: Dict[str, List[str]] = {"stat": [], "cmdline": []}
    part = "stat"

    def close() -> None:
        if pid is None:
            return
        try:
            rows.append(
                (pid, bytes.fromhex("".join(parts["stat"])), bytes.fromhex("".join(parts["cmdline"])))
            )
        except ValueError:
            pass  # cut short (the listing's output cap): left out

    for line in stdout.decode("ascii", errors="replace").splitlines():
        if line.startswith("S ") and line[2:].isdigit():
            shell = int(line[2:])
        elif line.startswith("P ") and line[2:].isdigit():
            close()
            pid, parts, part = int(line[2:]), {"stat": [], "cmdline": []}, "stat"
        elif line == "C":
            part = "cmdline"
        elif pid is not None:
            parts[part].append(line.replace(" ", ""))
        # Anything else (a cut line) is left to fromhex to refuse.
    close()
    return shell, rows


def _stat(stat: bytes) -> Optional[Tuple[int, str]]:
    """The parent pid and name from /proc/PID/stat: ``pid (name) state ppid
    ...``, where the name may hold spaces and parentheses (hence the last
    ``)``)."""
    text = stat.decode("utf-8", errors="replace")
    open_at, close_at = text.find("("), text.rfind(")")
    if open_at < 0 or close_at < open_at:
        return None
    fields = text[close_at + 1 :].split()
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1]), text[open_at + 1 : close_at]


def pid_of_step(processes: List[Process], step: int) -> Optional[int]:
    """The pid of step ``step``'s command: its process whose parent is the
    step's holder (not listed), if it still runs."""
    of_step = [p for p in processes if p.step == step]
    pids = {p.pid for p in of_step}
    firsts = [p.pid for p in of_step if p.ppid not in pids]
    return min(firsts) if firsts else None


LISTING_MAX = 16 << 20
"""Most output a process listing keeps (hex of every stat and command line)."""
