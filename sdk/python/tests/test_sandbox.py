"""``airlock.Sandbox`` against the real binary: policy, output, files,
state, timeouts, teardown and errors."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from conftest import Upstream, alive, eventually, listed_sessions

import airlock
from airlock._cli import socket_path


def test_an_allowed_request_gets_its_answer(options: Dict[str, Any], upstream: Upstream) -> None:
    with airlock.Sandbox(**options) as sb:
        r = sb.run(["curl", "-sS", f"{upstream.base}/allowed/data"], label="call_1")
        assert (r.exit_code, r.stdout, r.stderr) == (0, "hello from /allowed/data", "")
        assert r.denials == []
        assert not r.timed_out and r.duration > 0


def test_a_refused_request_is_reported_with_the_rule_to_add(
    options: Dict[str, Any], upstream: Upstream
) -> None:
    with airlock.Sandbox(**options) as sb:
        r = sb.run(["curl", "-sS", "-w", "\n%{http_code}", f"{upstream.base}/admin/keys"])
        assert r.stdout.endswith("\n403"), r
        assert "/admin/keys" not in upstream.paths, "the refused request never left"
        [denial] = r.denials
        assert denial.kind == "request"
        assert denial.method == "GET"
        assert denial.host == "api.test"
        assert denial.url is not None and denial.url.endswith("/admin/keys")
        assert denial.reason and denial.decided_by
        assert denial.rule is not None and "[[allow]]" in denial.rule and "api.test" in denial.rule
        assert denial.step == r.step
        # A later allowed step has none of its own; the session keeps them all.
        assert sb.run(["curl", "-sS", f"{upstream.base}/allowed"]).denials == []
        everything = sb.denials()
        assert (everything, everything.dropped) == ([denial], 0)


def test_run_code_runs_python_node_and_bash(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        assert sb.run_code("print(1 + 1)").stdout == "2\n"
        assert sb.run_code("console.log([1, 2].map(x => x * 3).join(','))", language="node").stdout == "3,6\n"
        r = sb.run_code("x=4\necho $((x * x))\nexit 5\n", language="bash")
        assert (r.exit_code, r.stdout) == (5, "16\n")
        with pytest.raises(airlock.AirlockError, match="unknown language"):
            sb.run_code("1", language="cobol")


def test_run_takes_stdin_env_cwd_and_reports_failure(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        sb.run(["mkdir", "sub"])
        r = sb.run(
            ["sh", "-c", 'echo "$GREETING"; pwd; tr a-z A-Z; echo oops >&2; exit 3'],
            stdin="shout\n",
            env={"GREETING": "hi"},
            cwd="sub",
        )
        assert r.exit_code == 3
        assert r.stdout == f"hi\n{os.path.realpath(options['workspace'])}/sub\nSHOUT\n"
        assert r.stderr == "oops\n"
        # stdin larger than one frame arrives whole.
        big = os.urandom(3 << 20)
        r = sb.run(["sha256sum"], stdin=big)
        assert r.stdout.split()[0] == hashlib.sha256(big).hexdigest()
        # What airlock refuses to run is an error, with the session's reason.
        with pytest.raises(airlock.StepError, match="invalid --env"):
            sb.run(["true"], env={"A=B": "1"})


def test_output_is_capped_and_flagged(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        r = sb.run(["sh", "-c", "head -c 5000 /dev/zero; head -c 10 /dev/zero >&2"], max_output=1000)
        assert r.exit_code == 0
        assert (len(r.stdout_bytes), r.stdout_truncated) == (1000, True)
        assert (len(r.stderr_bytes), r.stderr_truncated) == (10, False)


def test_files_are_written_and_read_through_the_sandbox(options: Dict[str, Any]) -> None:
    data = bytes(range(256)) * 5000
    with airlock.Sandbox(**options) as sb:
        sb.write_file("sub/dir/data.bin", data)
        assert sb.read_file("sub/dir/data.bin") == data
        assert sb.run(["wc", "-c", "sub/dir/data.bin"]).stdout.split()[0] == str(len(data))
        sb.write_file("notes.txt", "text too\n")
        assert sb.read_file("./notes.txt") == b"text too\n"
        assert (Path(options["workspace"]) / "notes.txt").read_text() == "text too\n"
        # Names a command would misread: `-` (stdin to cat), a leading dash,
        # a directory whose name ends in a newline (dropped by `dirname`).
        for name in ["-", "-n", "nl\n/inner.txt"]:
            sb.write_file(name, name.encode())
            assert sb.read_file(name) == name.encode(), name
        assert (Path(options["workspace"]) / "nl\n" / "inner.txt").exists()
        with pytest.raises(airlock.AirlockError, match="missing.txt"):
            sb.read_file("missing.txt")
        with pytest.raises(airlock.OutputLimitError):
            sb.read_file("sub/dir/data.bin", max_size=1000)
        for outside in ["/etc/passwd", "../x", "sub/../../x", ""]:
            with pytest.raises(airlock.AirlockError):
                sb.read_file(outside)
            with pytest.raises(airlock.AirlockError):
                sb.write_file(outside, b"x")


def test_a_symlink_planted_in_the_workspace_does_not_reach_the_host(
    options: Dict[str, Any], tmp_path: Path
) -> None:
    secrets = tmp_path / "host-secrets"
    secrets.mkdir()
    secret = secrets / "token"
    secret.write_text("host secret\n")
    # What a hostile program in the sandbox could leave behind: workspace
    # files that point at a host file outside the sandbox's view.
    workspace = Path(options["workspace"])
    (workspace / "out.txt").symlink_to(secret)
    (workspace / "in.txt").symlink_to(secret)
    with airlock.Sandbox(hide=[secrets], **options) as sb:
        with pytest.raises(airlock.AirlockError, match="out.txt"):
            sb.read_file("out.txt")
        try:
            sb.write_file("in.txt", b"overwritten\n")
        except airlock.AirlockError:
            pass  # refused is as good as written elsewhere
    assert secret.read_text() == "host secret\n"


def test_state_is_kept_across_calls(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        sb.run(["sh", "-c", "echo kept > /tmp/state"])
        assert sb.run(["cat", "/tmp/state"]).stdout == "kept\n"
        r = sb.run(
            [
                "sh",
                "-c",
                "python3 -m http.server 18080 --bind 127.0.0.1 >/tmp/server.log 2>&1 & "
                "for i in $(seq 100); do "
                "curl -s -o /dev/null http://127.0.0.1:18080/ && break; sleep 0.05; done; "
                "echo started",
            ]
        )
        assert r.stdout == "started\n", r
        r = sb.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:18080/"])
        assert r.stdout == "200", r
        info = sb.info()
        # 4 steps of this test's, and the one that made the sandbox's venv.
        assert info["id"] == sb.session_id and info["commands"] == 5


def test_a_step_timeout_kills_it_and_the_session_lives_on(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(**options) as sb:
        r = sb.run(["sh", "-c", "sleep 300 & echo $! > /tmp/bg; sleep 300"], timeout="1s")
        assert (r.timed_out, r.exit_code) == (True, 124)
        assert 1 <= r.duration < 10
        r = sb.run(["sh", "-c", "kill -0 $(cat /tmp/bg) 2>/dev/null && echo alive || echo gone"], timeout=10)
        assert (r.timed_out, r.stdout) == (False, "gone\n")


def test_an_exception_in_the_block_still_stops_the_session(options: Dict[str, Any], airlock_bin: str) -> None:
    with pytest.raises(RuntimeError, match="agent crashed"):
        with airlock.Sandbox(**options) as sb:
            sb.run(["sh", "-c", "sleep 1000 &"])
            session_id = sb.session_id
            server = sb.info()["pids"]["server"]
            socket = Path(socket_path(session_id))
            assert socket.exists()
            raise RuntimeError("agent crashed")
    assert not socket.exists()
    assert session_id not in [s["id"] for s in listed_sessions(airlock_bin)]
    eventually("the session's server ends", lambda: not alive(server))
    with pytest.raises(airlock.AirlockError, match="stopped"):
        sb.run(["true"])


def test_a_program_killed_in_the_block_takes_its_session_with_it(
    options: Dict[str, Any], airlock_bin: str, tmp_path: Path
) -> None:
    """SIGKILL leaves no `with` block to stop the session: the session
    watches the process that started it."""
    started = tmp_path / "started.json"
    program = (
        "import json, os, signal, sys, airlock\n"
        "options = json.loads(sys.argv[1])\n"
        "with airlock.Sandbox(**options) as sb:\n"
        "    sb.run(['sh', '-c', 'sleep 1000 &'])\n"
        "    info = {'id': sb.session_id, 'server': sb.info()['pids']['server']}\n"
        "    open(sys.argv[2], 'w').write(json.dumps(info))\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", program, json.dumps(options, default=str), str(started)], timeout=60
    )
    assert child.returncode == -signal.SIGKILL
    info = json.loads(started.read_text())
    eventually(
        "the session stops",
        lambda: info["id"] not in [s["id"] for s in listed_sessions(airlock_bin)],
    )
    eventually("the session's server ends", lambda: not alive(info["server"]))


def test_a_session_that_ended_by_itself_is_gone(options: Dict[str, Any]) -> None:
    with airlock.Sandbox(timeout="2s", **options) as sb:
        eventually("the session's lifetime ends", lambda: not Path(socket_path(sb.session_id)).exists())
        with pytest.raises(airlock.SessionGoneError, match="no longer running"):
            sb.run(["true"])


def test_a_bad_option_is_refused_with_the_cli_reason(options: Dict[str, Any]) -> None:
    with pytest.raises(airlock.SessionStartError) as refused:
        airlock.Sandbox(memory="lots", **options).start()
    assert "lots" in refused.value.reason and "\n" not in refused.value.reason
    with pytest.raises(airlock.SessionStartError, match="--no-such-option"):
        airlock.Sandbox(no_such_option=True, **options).start()
    with pytest.raises(airlock.SessionStartError, match="not found"):
        airlock.Sandbox(**{**options, "airlock_bin": "/nonexistent/airlock"})


HELPERS = "$(grep -l '^airlock:' /proc/[0-9]*/comm | cut -d/ -f3)"


def test_a_timeout_holds_after_every_attack_on_the_helpers(options: Dict[str, Any]) -> None:
    """A step that stops or kills airlock's helpers in the sandbox, or leaves
    a process that keeps stopping them, cannot hold a later step: a 3 s
    timeout is 124 within 4 s."""
    attacks = [
        f"for p in {HELPERS}; do kill -STOP $p; done",
        f"for p in {HELPERS}; do kill -KILL $p; done",
        f"(while :; do for p in {HELPERS}; do kill -STOP $p; done; sleep 0.01; done) >/dev/null 2>&1 &",
    ]
    with airlock.Sandbox(**options) as sb:
        for attack in attacks:
            try:
                sb.run(["sh", "-c", attack], timeout=10)
            except airlock.StepError:
                pass  # it killed its own holder: answered, not held
            began = time.monotonic()
            r = sb.run(["sleep", "10"], timeout=3)
            took = time.monotonic() - began
            assert took < 4, f"{attack}: took {took:.1f}s"
            assert r.exit_code == 124 and r.timed_out, f"{attack}: {r}"


def test_a_session_that_stops_answering_raises_instead_of_hanging(options: Dict[str, Any]) -> None:
    """A session whose server stops answering costs a step its timeout and a
    grace, then raises SessionNotAnsweringError naming `airlock session stop`."""
    with airlock.Sandbox(**options) as sb:
        server = sb.info()["pids"]["server"]
        os.kill(server, signal.SIGSTOP)
        try:
            began = time.monotonic()
            with pytest.raises(airlock.SessionNotAnsweringError) as raised:
                sb.run(["true"], timeout=1)
            took = time.monotonic() - began
        finally:
            os.kill(server, signal.SIGCONT)
        assert took < 6, f"took {took:.1f}s"
        assert f"airlock session stop {sb.session_id}" in raised.value.reason


def test_the_async_sandbox_does_not_hang_on_a_session_that_stops_answering(options: Dict[str, Any]) -> None:
    async def main() -> float:
        async with airlock.AsyncSandbox(**options) as sb:
            server = (await sb.info())["pids"]["server"]
            os.kill(server, signal.SIGSTOP)
            try:
                began = time.monotonic()
                with pytest.raises(airlock.SessionNotAnsweringError):
                    await sb.run(["true"], timeout=1)
                return time.monotonic() - began
            finally:
                os.kill(server, signal.SIGCONT)

    took = asyncio.run(main())
    assert took < 6, f"took {took:.1f}s"


def test_a_request_held_for_approval_comes_back_in_the_result_with_its_outcome_and_wait(
    options: Dict[str, Any], upstream: Upstream, airlock_bin: str
) -> None:
    """An `[[ask]]` rule holds a request of a step: the step's result names
    it (approval id, method, URL, rule), how it ended and how long it
    waited, whether a person approved or denied it; a step running beside
    it, and a later one, hold nothing."""
    policy = Path(options["policy"])
    policy.write_text(
        policy.read_text() + f'\n[[ask]]\nhost = "api.test"\nport = {upstream.port}\nmethods = ["GET"]\n'
        'paths = ["/held/**"]\nreason = "a person looks first"\n'
    )

    with airlock.Sandbox(**options) as sb, concurrent.futures.ThreadPoolExecutor(3) as pool:
        marker = f"held/ok-{os.getpid()}"
        step = pool.submit(sb.run, ["curl", "-sS", f"{upstream.base}/{marker}?token=x"], label="call_7")
        beside = pool.submit(sb.run, ["sleep", "1.5"])
        approval = decide_when_held(airlock_bin, marker, ["approve", "--note", "looks fine"])
        r = step.result(timeout=30)
        assert (r.exit_code, r.stdout) == (0, f"hello from /{marker}?token=x"), r
        [held] = r.held
        assert held == airlock.Held(
            approval=approval,
            method="GET",
            url=f"{upstream.base}/{marker}",
            outcome="approved",
            waited=held.waited,
            rule=held.rule,
            scope="once",
            by=held.by,
            note="looks fine",
            step=r.step,
        )
        assert held.waited >= 0.5, held
        assert held.rule and str(policy) in held.rule, held
        assert held.by, "who approved it"
        assert beside.result(timeout=30).held == [], "a step running beside it held nothing"

        marker = f"held/no-{os.getpid()}"
        curl = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", f"{upstream.base}/{marker}"]
        step = pool.submit(sb.run, curl)
        approval = decide_when_held(airlock_bin, marker, ["deny", "--note", "not today"])
        r = step.result(timeout=30)
        assert r.stdout == "403", r
        [held] = r.held
        assert (held.approval, held.outcome, held.note) == (approval, "denied", "not today"), held
        assert held.step == r.step, held
        assert f"/{marker}" not in upstream.paths, "the denied request never left"

        assert sb.run(["true"]).held == [], "a later step holds nothing of the earlier ones"


def test_the_async_sandbox_reports_a_held_request_too(
    options: Dict[str, Any], upstream: Upstream, airlock_bin: str
) -> None:
    policy = Path(options["policy"])
    policy.write_text(
        policy.read_text()
        + f'\n[[ask]]\nhost = "api.test"\nport = {upstream.port}\nmethods = ["GET"]\npaths = ["/held/**"]\n'
    )
    marker = f"held/async-{os.getpid()}"

    async def main() -> Tuple[str, airlock.RunResult]:
        async with airlock.AsyncSandbox(**options) as sb:
            step = asyncio.ensure_future(sb.run(["curl", "-sS", f"{upstream.base}/{marker}"]))
            approval = await asyncio.to_thread(decide_when_held, airlock_bin, marker, ["approve"])
            return approval, await asyncio.wait_for(step, 30)

    approval, r = asyncio.run(main())
    assert r.stdout == f"hello from /{marker}", r
    assert [(h.approval, h.outcome, h.step) for h in r.held] == [(approval, "approved", r.step)]


def decide_when_held(airlock_bin: str, marker: str, verb: List[str]) -> str:
    """Once a request to a URL holding ``marker`` is held, decide it with
    ``airlock VERB... ID`` after half a second (a person reads it first):
    its approval id."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = subprocess.run([airlock_bin, "approvals", "--json"], capture_output=True, text=True)
        assert out.returncode == 0, out
        held = [p for p in json.loads(out.stdout) if marker in p["url"]]
        if held:
            time.sleep(0.5)
            subprocess.run([airlock_bin, *verb, held[0]["id"]], check=True, capture_output=True)
            return str(held[0]["id"])
        time.sleep(0.1)
    raise AssertionError(f"the request to {marker} was never held")


def test_a_sandbox_without_a_workspace_gets_a_fresh_empty_one_never_the_callers_directory(
    options: Dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller's project, where the script was started from.
    project = tmp_path / "project"
    project.mkdir()
    (project / "important.txt").write_text("keep me\n")
    monkeypatch.chdir(project)
    del options["workspace"]
    with airlock.Sandbox(**options) as sb:
        made = Path(sb.workspace)
        assert made != project and project not in made.parents, made
        # Every way a program names "here" lands in the fresh directory.
        for script in [
            "echo pwned > important.txt",
            "echo pwned > ./important.txt",
            'echo pwned > "$PWD/important.txt"',
            f"echo pwned > {project}/important.txt || true",
            "ls -A",
        ]:
            r = sb.run(["sh", "-c", script])
        # .venv: the sandbox's own Python environment (see test_venv.py).
        assert r.stdout == ".venv\nimportant.txt\n", r.stdout
    assert (project / "important.txt").read_text() == "keep me\n"
    assert not made.exists(), "the sandbox's own workspace is removed when it stops"

    with airlock.Sandbox(keep=True, **options) as sb:
        sb.write_file("result.txt", "kept\n")
        kept = Path(sb.workspace)
    assert (kept / "result.txt").read_text() == "kept\n"
    shutil.rmtree(kept)
