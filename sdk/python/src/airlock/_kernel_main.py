"""The interpreter behind ``run_code``: a program the SDK runs *inside* the
sandbox (``python3 -c <this file> DIR``); the SDK never imports it.

It keeps one Python namespace across cells, as a Jupyter kernel does. It is
reached through FIFOs in DIR (the sandbox's private /tmp): AF_UNIX sockets
are refused by the sandbox's seccomp filter, and each cell must be a step
of its own (``sh`` writing the cell to ``in``, then ``cat`` of ``out``), so
that the session records every cell with its code and its answer.

- ``in``: cells, each a JSON header line (``size``, ``timeout``,
  ``max_output``) then ``size`` bytes of code. Held open read-write by the
  supervisor, so a client's open never blocks while it lives and fails
  (``/proc/PID/fd/N`` is gone) once it is dead.
- ``out``: a newline once a cell's answer is written: the JSON answer goes
  straight to the client's own stdout (``/proc/PID/fd/4``, a copy of the
  step's pipe), which saves the client a ``cat``.
- ``client``: the pid of the client whose cell is running, for the
  supervisor to answer should the worker die.
- ``tok``: one newline, the lock: a client takes it before writing a cell,
  and the interpreter puts it back once it has answered.
- ``pid``: ``PID FD``, the supervisor and its descriptor of ``in``.

The supervisor forks the worker that runs cells, so a worker that dies (a
memory kill, ``os._exit``) is answered for and replaced at once.
"""

import ast
import builtins
import errno
import json
import linecache
import os
import select
import signal
import sys
import time
import traceback
from typing import Any, Dict, List

# How long an answer waits for its client to open `out` (it opens it right
# after writing the cell; one that never does was killed).
ANSWER_WAIT = 2.0


def main() -> None:
    directory = sys.argv[1]
    os.makedirs(directory, mode=0o700, exist_ok=True)
    paths = {name: os.path.join(directory, name) for name in ("in", "out", "tok", "pid", "client")}
    for name in ("in", "out", "tok", "pid", "client"):
        try:
            os.unlink(paths[name])
        except FileNotFoundError:
            pass
    for name in ("in", "out", "tok"):
        os.mkfifo(paths[name], 0o600)
    ready_r, ready_w = os.pipe()
    if os.fork():
        # The starting step: it ends once the interpreter is ready, and
        # prints its pid.
        os.close(ready_w)
        said = os.read(ready_r, 64).decode()
        print(said)
        sys.exit(0 if said else 1)
    os.close(ready_r)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    # A client that goes away mid-answer is its own business.
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    cells = os.open(paths["in"], os.O_RDWR)
    token = os.open(paths["tok"], os.O_RDWR)
    os.write(token, b"\n")
    partial = paths["pid"] + ".new"
    with open(partial, "w") as f:
        f.write(f"{os.getpid()} {cells}\n")
    os.rename(partial, paths["pid"])
    os.write(ready_w, f"{os.getpid()}".encode())
    os.close(ready_w)
    supervise(cells, token, paths["out"], paths["client"])


def supervise(cells: int, token: int, out: str, client_file: str) -> None:
    count = 0
    while True:
        worker = os.fork()
        if worker == 0:
            serve(cells, token, out, client_file, count)
            os._exit(0)
        _, status = os.waitpid(worker, 0)
        # A cell was running when the token is out (its client holds it).
        held, _, _ = select.select([token], [], [], 0)
        if held:
            continue
        drain(cells)
        if os.WIFSIGNALED(status):
            how = f"was killed by signal {os.WTERMSIG(status)} ({signal.Signals(os.WTERMSIG(status)).name})"
        else:
            how = f"exited with status {os.WEXITSTATUS(status)}"
        try:
            with open(client_file) as f:
                client = int(f.read().strip() or 0)
        except (OSError, ValueError):
            client = 0
        answer(
            out,
            client,
            {
                "error": {
                    "name": "InterpreterDied",
                    "value": f"the interpreter {how} while running the cell; its state is lost "
                    "and a fresh interpreter takes the next cell",
                    "traceback": "",
                },
                "restarted": True,
            },
        )
        os.write(token, b"\n")


def drain(cells: int) -> None:
    """Drop what is left of a cell the dead worker was reading."""
    os.set_blocking(cells, False)
    try:
        while os.read(cells, 65536):
            pass
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(cells, True)


# Set when a cell's timeout interrupted it.
alarmed = [False]


def on_alarm(signum: int, frame: object) -> None:
    """A cell's timeout, delivered as the KeyboardInterrupt a person's ^C is."""
    alarmed[0] = True
    raise KeyboardInterrupt("the cell ran past its timeout")


def serve(cells: int, token: int, out: str, client_file: str, count: int) -> None:
    signal.signal(signal.SIGALRM, on_alarm)
    reader = os.fdopen(cells, "rb", closefd=False)
    namespace: Dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    captured = [capture_file("stdout"), capture_file("stderr")]
    while True:
        header = json.loads(reader.readline())
        code = reader.read(int(header["size"])).decode("utf-8", errors="replace")
        count += 1
        client = int(header.get("client") or 0)
        with open(client_file, "w") as f:
            f.write(str(client))
        reply = run_cell(namespace, code, count, header, captured)
        answer(out, client, reply)
        os.write(token, b"\n")


def capture_file(name: str) -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create(name)
    return os.open(os.path.dirname(sys.argv[1]), os.O_TMPFILE | os.O_RDWR, 0o600)


def run_cell(
    namespace: Dict[str, Any], code: str, count: int, header: Dict[str, Any], captured: List[int]
) -> Dict[str, Any]:
    limit = int(header.get("max_output") or 1 << 20)
    for fd, capture in zip((1, 2), captured):
        os.ftruncate(capture, 0)
        os.lseek(capture, 0, os.SEEK_SET)
        os.dup2(capture, fd)
    filename = f"<cell {count}>"
    # So that tracebacks show the cell's lines.
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    value = None
    error = None
    alarmed[0] = False
    timeout = header.get("timeout")
    try:
        try:
            if timeout:
                signal.setitimer(signal.ITIMER_REAL, float(timeout))
            tree = ast.parse(code, filename, "exec")
            last = None
            final = tree.body[-1] if tree.body else None
            if isinstance(final, ast.Expr):
                tree.body.pop()
                last = ast.Expression(final.value)
            exec(compile(tree, filename, "exec"), namespace)
            if last is not None:
                result = eval(compile(last, filename, "eval"), namespace)
                if result is not None:
                    namespace["_"] = result
                    value = repr(result)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException as e:  # noqa: B036 - the cell's SystemExit and ^C are its errors too
        error = {
            "name": type(e).__name__,
            "value": str(e),
            "traceback": cell_traceback(e),
        }
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    reply = {"execution_count": count, "value": clip(value, limit), "error": error, "timed_out": alarmed[0]}
    for name, capture in zip(("stdout", "stderr"), captured):
        size = os.lseek(capture, 0, os.SEEK_END)
        data = os.pread(capture, limit, 0)
        reply[name] = data.decode("utf-8", errors="replace")
        reply[name + "_truncated"] = size > limit
    return reply


def clip(text: object, limit: int) -> object:
    return text[:limit] if isinstance(text, str) else text


def cell_traceback(e: BaseException) -> str:
    """The traceback from the cell's own frames on: the interpreter's are
    not the user's business."""
    frames = traceback.extract_tb(e.__traceback__)
    keep = [f for f in frames if f.filename != "<string>"]
    lines = ["Traceback (most recent call last):\n"] if keep else []
    lines += traceback.format_list(keep)
    lines += traceback.format_exception_only(type(e), e)
    return "".join(lines)


def answer(out: str, client: int, reply: Dict[str, Any]) -> None:
    """Write the answer to the client's stdout, then tell it so on ``out``."""
    data = json.dumps(reply).encode()
    try:
        # Its fd 4, a copy of its stdout made first: fd 1 itself is the
        # cell's pipe for a moment while the client writes the cell.
        fd = os.open(f"/proc/{client}/fd/4", os.O_WRONLY)
    except OSError:
        # The client is gone (killed): nobody to answer.
        return
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass
    finally:
        os.close(fd)
    deadline = time.monotonic() + ANSWER_WAIT
    while True:
        try:
            done = os.open(out, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as e:
            if e.errno != errno.ENXIO or time.monotonic() > deadline:
                return
            time.sleep(0.0005)
    try:
        os.write(done, b"\n")
    except OSError:
        pass
    finally:
        os.close(done)


main()
