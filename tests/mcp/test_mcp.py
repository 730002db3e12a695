"""`airlock mcp`, driven as an agent's host drives it: the official MCP
Python client over stdio, a real TLS upstream, real sessions.

AIRLOCK_BIN names the binary under test (the test script sets it to
target/debug/airlock). Run as root, as CI does.
"""

import asyncio
import contextlib
import http.server
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

AIRLOCK = os.environ.get("AIRLOCK_BIN", "")
TOOLS = {"run_command", "run_code", "read_file", "write_file", "list_denials"}


def airlock_bin() -> str:
    # A missing binary fails the run: it never passes by skipping.
    assert AIRLOCK and os.access(AIRLOCK, os.X_OK), (
        f"AIRLOCK_BIN={AIRLOCK!r} is not an executable: build airlock and set it"
    )
    return AIRLOCK


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(dir: Path) -> None:
    """A CA and a certificate for api.test signed by it (ca.pem, api.pem, api.key)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=airlock mcp test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=dir,
    )
    openssl("req", *ec, "-keyout", "api.key", "-out", "api.csr", "-subj", "/CN=api.test", cwd=dir)
    (dir / "api.ext").write_text(
        "subjectAltName=DNS:api.test\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    openssl(
        "x509", "-req", "-in", "api.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "api.pem", "-days", "2", "-extfile", "api.ext",
        cwd=dir,
    )


class Upstream:
    """A threaded HTTPS server for api.test on 127.0.0.1 that answers every
    GET with its path, and counts what reached it."""

    def __init__(self, dir: Path):
        self.paths: list[str] = []
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                upstream.paths.append(self.path)
                body = f"hello from upstream: {self.path}\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(dir / "api.pem", dir / "api.key")
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # The handshake happens in each request's thread, not in accept().
        self.server.socket = context.wrap_socket(
            self.server.socket, server_side=True, do_handshake_on_connect=False
        )
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Env:
    """A policy that allows GET /echo/** on the upstream, a workspace, an
    audit store: what one `airlock mcp` needs."""

    def __init__(self, dir: Path):
        self.dir = dir
        make_pki(dir)
        self.upstream = Upstream(dir)
        self.base = f"https://api.test:{self.upstream.port}"
        (dir / "policy.toml").write_text(
            "version = 1\n[[allow]]\nhost = \"api.test\"\n"
            f"port = {self.upstream.port}\nmethods = [\"GET\"]\n"
            "paths = [\"/echo\", \"/echo/**\"]\n"
        )
        self.workspace = dir / "ws"
        self.workspace.mkdir()
        (dir / "audit").mkdir()

    def args(self) -> list[str]:
        d = self.dir
        return [
            "mcp",
            "--policy", str(d / "policy.toml"),
            "--upstream-ca", str(d / "ca.pem"),
            "--resolve", "api.test:127.0.0.1",
            "--workspace", str(self.workspace),
            "--audit-db", str(d / "audit" / "audit.db"),
            "--audit-key", str(d / "audit" / "audit.key"),
        ]


@pytest.fixture
def env():
    # Under /tmp: the sandbox has a /tmp of its own, so what the host keeps
    # here outside the workspace is out of the sandbox's sight.
    dir = Path(tempfile.mkdtemp(prefix="airlock-mcp-", dir="/tmp"))
    env = Env(dir)
    yield env
    env.upstream.close()
    shutil.rmtree(dir, ignore_errors=True)


def run(env: Env, scenario, extra_args: tuple[str, ...] = ()):
    """Start `airlock mcp`, initialize, run `scenario(client)`; the client
    closes the connection at the end."""

    async def main():
        params = StdioServerParameters(command=airlock_bin(), args=env.args() + list(extra_args))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await asyncio.wait_for(client.initialize(), 60)
                return await scenario(client)

    return asyncio.run(main())


def text(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def alive(pid: int) -> bool:
    """Running, not a zombie (reaping a detached server is PID 1's job)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(") ", 1)[1].split()[0] != "Z"


def sessions() -> list[dict]:
    out = subprocess.run(
        [airlock_bin(), "session", "ls", "--json"], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_initialize_lists_the_five_tools_with_their_schemas(env):
    async def scenario(client):
        return (await client.list_tools()).tools

    tools = {t.name: t for t in run(env, scenario)}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.input_schema["type"] == "object", tool.name
        assert tool.input_schema.get("additionalProperties") is False or tool.name == "list_denials"

    def required(name):
        return set(tools[name].input_schema.get("required", []))

    assert required("run_command") == set()  # `command` or `argv`, checked by the server
    assert {"command", "argv", "timeout"} <= set(tools["run_command"].input_schema["properties"])
    assert required("run_code") == {"language", "code"}
    assert required("read_file") == {"path"}
    assert required("write_file") == {"path", "content"}
    language = json.dumps(tools["run_code"].input_schema)
    for name in ("python", "node", "bash"):
        assert f'"{name}"' in language


def test_the_server_names_itself_airlock_with_its_version(env):
    async def main():
        params = StdioServerParameters(command=airlock_bin(), args=env.args())
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                return await asyncio.wait_for(client.initialize(), 60)

    info = asyncio.run(main()).server_info
    version = subprocess.run(
        [airlock_bin(), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    assert (info.name, info.version) == ("airlock", version)


def test_run_command_reaches_what_the_policy_allows_and_reports_what_it_refuses(env):
    async def scenario(client):
        allowed = await client.call_tool(
            "run_command", {"command": f"curl -sS {env.base}/echo/hi"}
        )
        denied = await client.call_tool(
            "run_command", {"argv": ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", f"{env.base}/admin"]}
        )
        listed = await client.call_tool("list_denials", {})
        return allowed, denied, listed

    allowed, denied, listed = run(env, scenario)
    assert not allowed.is_error, text(allowed)
    assert allowed.structured_content["exit_code"] == 0
    assert "hello from upstream: /echo/hi" in allowed.structured_content["stdout"]
    assert "hello from upstream: /echo/hi" in text(allowed)
    assert not allowed.structured_content["denials"]

    assert not denied.is_error, text(denied)
    assert denied.structured_content["stdout"] == "403"
    [denial] = denied.structured_content["denials"]
    assert denial["kind"] == "request" and denial["method"] == "GET"
    assert "/admin" in denial["url"]
    assert "[[allow]]" in denial["rule"] and "api.test" in denial["rule"]
    assert "[[allow]]" in text(denied), "the model is shown the rule to add"

    assert not listed.is_error, text(listed)
    [listed_denial] = listed.structured_content["denials"]
    assert listed_denial["url"] == denial["url"]
    assert "[[allow]]" in text(listed)
    assert env.upstream.paths == ["/echo/hi"], "only the allowed request left"


def test_files_are_written_and_read_through_the_sandbox(env):
    outside = Path(tempfile.mkdtemp(prefix="airlock-mcp-host-", dir="/tmp"))
    secret = outside / "secret.txt"
    secret.write_text("TOP-SECRET host file\n")
    target = outside / "target.txt"
    target.write_text("original\n")
    # What a sandboxed program could leave behind: links to host files.
    (env.workspace / "leak.txt").symlink_to(secret)
    (env.workspace / "out.txt").symlink_to(target)
    content = "héllo\nwörld: ünïcode and a \"quote\"\n"

    async def scenario(client):
        wrote = await client.call_tool("write_file", {"path": "notes/deep/hello.txt", "content": content})
        read = await client.call_tool("read_file", {"path": "./notes/deep/../deep/hello.txt"})
        leak = await client.call_tool("read_file", {"path": "leak.txt"})
        clobber = await client.call_tool("write_file", {"path": "out.txt", "content": "clobbered\n"})
        absolute = await client.call_tool("read_file", {"path": str(secret)})
        climbing = await client.call_tool("read_file", {"path": "../" + secret.name})
        return wrote, read, leak, clobber, absolute, climbing

    try:
        wrote, read, leak, clobber, absolute, climbing = run(env, scenario)
        assert target.read_text() == "original\n", "the host file behind the link is untouched"
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    assert not wrote.is_error, text(wrote)
    assert (env.workspace / "notes/deep/hello.txt").read_text() == content
    assert not read.is_error, text(read)
    assert text(read) == content
    # The sandbox cannot see the host's /tmp: the link leads nowhere.
    assert leak.is_error, text(leak)
    assert "TOP-SECRET" not in text(leak)
    assert clobber.is_error, text(clobber)
    assert absolute.is_error and "absolute" in text(absolute), text(absolute)
    assert climbing.is_error and "climbs out" in text(climbing), text(climbing)


def test_run_code_feeds_the_source_to_python_node_and_bash(env):
    programs = {
        "python": "import sys\nprint(sum(range(10)), sys.version_info[0])\n",
        "node": "console.log(6 * 7)\n",
        "bash": "x=2; echo $((x + 3)) \"$0\"\n",
    }

    async def scenario(client):
        return {
            language: await client.call_tool("run_code", {"language": language, "code": code})
            for language, code in programs.items()
        }

    results = run(env, scenario)
    for language, result in results.items():
        assert not result.is_error, (language, text(result))
        assert result.structured_content["exit_code"] == 0, (language, text(result))
    assert results["python"].structured_content["stdout"] == "45 3\n"
    assert results["node"].structured_content["stdout"] == "42\n"
    assert results["bash"].structured_content["stdout"].startswith("5 ")


def test_a_timeout_kills_the_command_quickly_and_the_session_lives_on(env):
    async def scenario(client):
        began = time.monotonic()
        slow = await client.call_tool("run_command", {"command": "sleep 30", "timeout": 1})
        took = time.monotonic() - began
        after = await client.call_tool("run_command", {"command": "echo alive"})
        return slow, took, after

    slow, took, after = run(env, scenario)
    assert took < 10, f"the timeout took {took:.1f}s"
    assert slow.structured_content["timed_out"] is True, text(slow)
    assert slow.structured_content["exit_code"] == 124
    assert "timed out" in text(slow)
    assert after.structured_content["stdout"] == "alive\n", text(after)


def test_malformed_calls_are_tool_errors_and_the_server_still_answers(env):
    bad_calls = [
        ("run_command", {}),
        ("run_command", {"cmd": "ls"}),
        ("run_command", {"command": 5}),
        ("run_command", {"command": "ls", "argv": ["ls"]}),
        ("run_command", {"argv": []}),
        ("run_command", {"command": "true", "timeout": -1}),
        ("run_code", {"language": "cobol", "code": "DISPLAY 'HI'."}),
        ("read_file", {}),
        ("write_file", {"path": "x.txt"}),
        ("write_file", {"path": "", "content": "x"}),
    ]

    async def scenario(client):
        answers = [(name, args, await client.call_tool(name, args)) for name, args in bad_calls]
        still = await client.call_tool("run_command", {"argv": ["echo", "still here"]})
        return answers, still

    answers, still = run(env, scenario)
    for name, args, result in answers:
        assert result.is_error, (name, args, text(result))
        assert text(result).strip(), (name, args)
    assert not still.is_error and still.structured_content["stdout"] == "still here\n", text(still)


def test_the_session_ends_when_the_client_goes_away_even_with_a_step_running(env):
    async def scenario(client):
        result = await client.call_tool("run_command", {"command": "echo up"})
        assert result.structured_content["stdout"] == "up\n"
        mine = [s for s in sessions() if s["policy"] == str(env.dir / "policy.toml")]
        assert len(mine) == 1, mine
        # Still running when the client leaves.
        running = asyncio.create_task(client.call_tool("run_command", {"command": "sleep 60"}))
        await asyncio.sleep(0.5)
        running.add_done_callback(lambda task: task.cancelled() or task.exception())
        return mine[0]

    session = run(env, scenario)
    socket = Path("/run/airlock") / f"{session['id']}.sock"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        gone = not socket.exists() and all(s["id"] != session["id"] for s in sessions())
        if gone:
            break
        time.sleep(0.1)
    assert not socket.exists(), f"{socket} is removed"
    assert all(s["id"] != session["id"] for s in sessions()), "`session ls` no longer lists it"
    # The record was closed, not cut off.
    out = subprocess.run(
        [
            airlock_bin(), "audit", "verify", session["audit_session"],
            "--audit-db", str(env.dir / "audit" / "audit.db"),
            "--audit-key", str(env.dir / "audit" / "audit.key"),
        ],
        capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_session_that_cannot_start_fails_with_the_clis_one_line(env):
    out = subprocess.run(
        [airlock_bin(), "mcp", "--policy", str(env.dir / "no-such-policy.toml")],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode != 0
    assert out.stdout == "", "nothing that an MCP client would read"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("airlock: "), out.stderr
    assert "no-such-policy.toml" in lines[0]


@contextlib.contextmanager
def server_without_client(env: Env):
    """`airlock mcp` with no client talking to it yet, and its session's
    `ls --json` entry once the session is up."""
    proc = subprocess.Popen(
        [airlock_bin(), *env.args()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        mine = []
        while not mine and time.monotonic() < deadline:
            mine = [s for s in sessions() if s["policy"] == str(env.dir / "policy.toml")]
            time.sleep(0.1)
        assert len(mine) == 1, "the session is up"
        yield proc, mine[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


def listed(session: dict) -> bool:
    return any(s["id"] == session["id"] for s in sessions())


def stops_by_itself(session: dict) -> None:
    deadline = time.monotonic() + 20
    while listed(session):
        assert time.monotonic() < deadline, "the session stops"
        time.sleep(0.1)


def test_sigterm_stops_the_session(env):
    with server_without_client(env) as (proc, session):
        proc.terminate()
        proc.wait(timeout=20)
        stops_by_itself(session)


def test_sigterm_ends_the_server_within_a_second_even_if_its_session_does_not_answer(env):
    """Told to end, `airlock mcp` ends within a second: it asks its session
    to stop but does not wait on one that does not answer, which then stops
    by itself as it watches this server's pid."""
    with server_without_client(env) as (proc, session):
        server = session["pids"]["server"]
        os.kill(server, signal.SIGSTOP)
        try:
            began = time.monotonic()
            proc.terminate()
            proc.wait(timeout=20)
            took = time.monotonic() - began
        finally:
            os.kill(server, signal.SIGCONT)
        assert took < 1, f"took {took:.2f}s"
        stops_by_itself(session)


def test_a_killed_server_takes_its_session_with_it(env):
    """SIGKILL cannot be caught, so `airlock mcp` cannot stop its session
    itself: the session watches the process it was started for."""
    with server_without_client(env) as (proc, session):
        proc.kill()
        proc.wait(timeout=20)
        deadline = time.monotonic() + 20
        while listed(session) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not listed(session), "stopped when airlock mcp died"
        server = session["pids"]["server"]
        while alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(server), "its server is gone"


# A step's line that stops or kills every helper airlock runs in the sandbox
# (init and the holders), found by name as a hostile step would find them,
# and a process left behind that keeps doing it.
HELPERS = "$(grep -l '^airlock:' /proc/[0-9]*/comm | cut -d/ -f3)"


def test_a_timeout_holds_after_every_attack_on_the_helpers(env):
    """After a step stops, kills or keeps stopping airlock's helpers in the
    sandbox, a `run_command` with a 3 s timeout is still a result (124) within
    4 s, never an agent held by the code it sandboxes."""
    attacks = [
        f"for p in {HELPERS}; do kill -STOP $p; done",
        f"for p in {HELPERS}; do kill -TSTP $p; done",
        f"for p in {HELPERS}; do kill -KILL $p; done",
        f"(while :; do for p in {HELPERS}; do kill -STOP $p; done; sleep 0.01; done) >/dev/null 2>&1 &",
    ]

    async def scenario(client):
        outcomes = []
        for attack in attacks:
            await client.call_tool("run_command", {"command": attack})
            began = time.monotonic()
            held = await client.call_tool("run_command", {"command": "sleep 10", "timeout": 3})
            outcomes.append((attack, held, time.monotonic() - began))
        return outcomes

    for attack, held, took in run(env, scenario):
        assert took < 4, f"{attack}: took {took:.1f}s"
        assert held.structured_content["exit_code"] == 124, f"{attack}: {text(held)}"
        assert held.structured_content["timed_out"] is True, f"{attack}: {text(held)}"


def test_a_session_that_stops_answering_is_a_result_not_a_hang(env):
    """A session whose server stops answering (stopped on the host) costs a
    `run_command` its timeout and a grace, then says so with the command that
    stops it."""

    async def scenario(client):
        await client.call_tool("run_command", {"command": "true"})
        session = max(sessions(), key=lambda s: s["started"])
        server = session["pids"]["server"]
        os.kill(server, signal.SIGSTOP)
        try:
            began = time.monotonic()
            result = await client.call_tool("run_command", {"command": "true", "timeout": 1})
            took = time.monotonic() - began
        finally:
            os.kill(server, signal.SIGCONT)
        return session, result, took

    session, result, took = run(env, scenario)
    assert took < 6, f"took {took:.1f}s"
    assert result.is_error, text(result)
    assert "is not answering" in text(result), text(result)
    assert f"airlock session stop {session['id']}" in text(result), text(result)


def test_hostile_paths_names_and_outputs_stay_what_they_are(env):
    """What a model passes as a path, or what an earlier step planted, cannot
    reach past the sandbox's view or run as shell: links planted by a step
    to the sandbox's root and to a hidden file, names that would be command
    substitutions, separators or options to a shell, and an output of 50 MB
    bounded to the documented 64 KiB."""
    names = ["$(touch pwned1)", "`touch pwned2`", "; touch pwned3 #", "-rf", "a\nb", "x'y\"z", "*"]

    async def scenario(client):
        planted = await client.call_tool(
            "run_command", {"command": "ln -s / root && ln -s /etc/shadow shadow && echo planted"}
        )
        shadow = await client.call_tool("read_file", {"path": "shadow"})
        via_root = await client.call_tool("read_file", {"path": "root/etc/shadow"})
        outside = await client.call_tool("write_file", {"path": "root/tmp/escaped", "content": "x"})
        written = [await client.call_tool("write_file", {"path": n, "content": n}) for n in names]
        read = [await client.call_tool("read_file", {"path": n}) for n in names]
        listing = await client.call_tool("run_command", {"command": "ls -A"})
        began = time.monotonic()
        flood = await client.call_tool("run_command", {"command": "head -c 50000000 /dev/zero | tr '\\0' y"})
        took = time.monotonic() - began
        return planted, shadow, via_root, outside, written, read, listing, flood, took

    planted, shadow, via_root, outside, written, read, listing, flood, took = run(env, scenario)
    assert "planted" in text(planted), text(planted)
    # The sandbox sees /etc/shadow covered: nothing of the host's hashes.
    for result in (shadow, via_root):
        assert "root:" not in text(result), text(result)
    # The link leads into the sandbox's own /tmp, never the host's.
    assert not Path("/tmp/escaped").exists()
    for name, w, r in zip(names, written, read):
        assert not w.is_error, f"{name!r}: {text(w)}"
        assert text(r) == name, f"{name!r}: {text(r)}"
        assert (env.workspace / name).read_text() == name
    listed = listing.structured_content["stdout"].splitlines()
    for n in ("pwned1", "pwned2", "pwned3"):
        assert not (env.workspace / n).exists(), f"{n}: a name ran as shell"
        assert n not in listed, text(listing)
    stdout = flood.structured_content["stdout"]
    assert flood.structured_content["exit_code"] == 0, text(flood)
    assert len(stdout) < 70_000, len(stdout)
    assert "bytes" in stdout and "cut" in stdout, stdout[32_000:33_000]
    assert took < 60, f"took {took:.1f}s"


def test_a_client_that_stops_reading_is_the_end_of_the_connection_not_an_error(env):
    """A client that goes away without closing stdin first (its end of our
    stdout closed, a tool call still running): `airlock mcp` ends as for
    the end of stdin, stops the session, and prints no error."""
    with server_without_client(env) as (proc, session):
        def send(message):
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()

        send({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "leaving", "version": "1"},
            },
        })
        assert b'"id":1' in proc.stdout.readline()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "run_command", "arguments": {"command": "sleep 1; echo done"}},
        })
        proc.stdout.close()
        # stdin stays open: only the broken pipe says the client is gone.
        assert proc.wait(timeout=20) == 0
        stops_by_itself(session)
        stderr = proc.stderr.read().decode()
        assert stderr == "", stderr


def test_a_request_held_for_approval_is_named_in_the_result_with_how_to_decide_it(env):
    """An `[[ask]]` rule holds a request of a tool call: once decided, the
    result carries the line `airlock run` prints, with the commands that
    decide it, as text and as structured content."""
    policy = env.dir / "ask.toml"
    policy.write_text(
        (env.dir / "policy.toml").read_text()
        + "\n[[ask]]\nhost = \"api.test\"\n"
        f"port = {env.upstream.port}\nmethods = [\"POST\"]\npaths = [\"/echo/pay/**\"]\n"
        "reason = \"payments need a person\"\n"
    )
    args = [str(policy) if a == str(env.dir / "policy.toml") else a for a in env.args()]
    marker = f"mcp-held-{os.getpid()}-{time.monotonic_ns()}"
    url = f"{env.base}/echo/pay/{marker}"

    def approve_when_held() -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = subprocess.run(
                [airlock_bin(), "approvals", "--json"], capture_output=True, text=True, check=True
            )
            held = [p for p in json.loads(out.stdout) if marker in p["url"]]
            if held:
                # A person reads it first: the server looks every 0.3 s.
                time.sleep(1)
                subprocess.run([airlock_bin(), "approve", held[0]["id"]], check=True, capture_output=True)
                return held[0]["id"]
            time.sleep(0.2)
        raise AssertionError("the request was never held")

    async def main():
        params = StdioServerParameters(command=airlock_bin(), args=args)
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await asyncio.wait_for(client.initialize(), 60)
                call = asyncio.create_task(client.call_tool(
                    "run_command",
                    {"argv": ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-d", "{}", url]},
                ))
                approval = await asyncio.to_thread(approve_when_held)
                return approval, await asyncio.wait_for(call, 60)

    approval, result = asyncio.run(main())
    assert not result.is_error, text(result)
    line = (
        f"airlock: holding POST {url} for a person's approval (rule {policy}:"
    )
    [held] = result.structured_content["held"]
    assert held.startswith(line), held
    assert f"decide with `airlock approve {approval}` or `airlock deny {approval}` within " in held
    assert "--- held for a person's approval ---\n" + held in text(result)
    # The upstream answered the approved request (it serves GET only).
    assert result.structured_content["stdout"] == "501", text(result)


def test_a_gvisor_session_serves_a_tool_call_under_gvisors_kernel(env):
    async def scenario(client):
        kernel = await client.call_tool("run_command", {"command": "uname -r; dmesg | head -1"})
        allowed = await client.call_tool("run_command", {"command": f"curl -sS {env.base}/echo/gv"})
        denied = await client.call_tool(
            "run_command", {"argv": ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", f"{env.base}/admin"]}
        )
        return kernel, allowed, denied

    kernel, allowed, denied = run(env, scenario, ("--isolation", "gvisor"))
    assert not kernel.is_error, text(kernel)
    assert kernel.structured_content["exit_code"] == 0
    assert os.uname().release not in kernel.structured_content["stdout"], text(kernel)
    assert "gVisor" in kernel.structured_content["stdout"], text(kernel)
    assert "hello from upstream: /echo/gv" in allowed.structured_content["stdout"], text(allowed)
    assert denied.structured_content["stdout"] == "403", text(denied)
    # The sentry's sockets name no step: a refusal while the step ran is its.
    [denial] = denied.structured_content["denials"]
    assert "/admin" in denial["url"] and "[[allow]]" in denial["rule"], text(denied)
    assert env.upstream.paths == ["/echo/gv"], "only the allowed request left"
    assert not [s for s in sessions() if s.get("policy", "").endswith("policy.toml")
                and str(env.workspace) == s.get("workspace")], "the session ended with the connection"
