"""Fixtures for the SDK's tests: the real airlock binary, a real TLS
upstream (``api.test``, served by this process, signed by a CA made here
with the openssl CLI) and, per test, a workspace and an audit store of its
own. Nothing is mocked."""

from __future__ import annotations

import http.server
import json
import os
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import pytest

HOST = "api.test"


@pytest.fixture(scope="session")
def airlock_bin() -> str:
    """The binary under test, from $AIRLOCK_BIN (the SDK's default too)."""
    path = os.environ.get("AIRLOCK_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"set AIRLOCK_BIN to the airlock binary to test (got {path!r})")
    return path


class Upstream:
    """An HTTPS server for ``api.test`` on 127.0.0.1 that answers every GET
    with ``hello from <path>`` and counts the requests that reached it."""

    def __init__(self, directory: Path) -> None:
        self.ca = _make_pki(directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(directory / "server.pem", directory / "server.key")
        self.paths: List[str] = []
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                upstream.paths.append(self.path)
                body = f"hello from {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"https://{HOST}:{self.port}"


def _make_pki(directory: Path) -> Path:
    """A CA and a server certificate for api.test it signs; the CA's path."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=airlock sdk test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={HOST}")
    (directory / "server.ext").write_text(
        f"subjectAltName=DNS:{HOST}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    )
    return directory / "ca.pem"


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    server = Upstream(tmp_path_factory.mktemp("pki"))
    yield server
    server.server.shutdown()


@pytest.fixture
def options(tmp_path: Path, upstream: Upstream, airlock_bin: str) -> Dict[str, Any]:
    """``Sandbox`` keyword arguments for this test: a policy allowing GET
    /allowed/** on api.test, its own workspace and audit store, and the
    upstream pinned and trusted."""
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'version = 1\n[[allow]]\nhost = "{HOST}"\nport = {upstream.port}\n'
        'methods = ["GET"]\npaths = ["/allowed", "/allowed/**"]\n'
    )
    (tmp_path / "ws").mkdir()
    (tmp_path / "audit").mkdir()
    return {
        "airlock_bin": airlock_bin,
        "policy": policy,
        "workspace": tmp_path / "ws",
        "upstream_ca": [upstream.ca],
        "resolve": [f"{HOST}:127.0.0.1"],
        "audit_db": tmp_path / "audit" / "audit.db",
        "audit_key": tmp_path / "audit" / "audit.key",
    }


def listed_sessions(airlock_bin: str) -> List[Dict[str, Any]]:
    """``airlock session ls --json``."""
    out = subprocess.run([airlock_bin, "session", "ls", "--json"], check=True, capture_output=True)
    sessions: List[Dict[str, Any]] = json.loads(out.stdout)
    return sessions


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return ") Z " not in stat


def eventually(what: str, check: Callable[[], bool], limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"{what} within {limit}s"
        time.sleep(0.02)
