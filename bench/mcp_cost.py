#!/usr/bin/env python3
"""What deciding an MCP tool call costs (issue 32).

The same POST (a JSON-RPC `tools/call` of `transfer`) goes through the real
`airlock proxy` twice per run: once under a plain HTTP allow rule for the
endpoint, once under an `mcp` rule that decides the call (the strict reader,
the tool, the argument constraints, the record of each decision and each
answer, the answer read by the MCP filter). The upstream is a minimal TLS
JSON-RPC responder (not an MCP server: its own cost would drown the
difference), the client one keep-alive connection through CONNECT.

Prints, per contender, the median of each run's p50 latency of sequential
calls, and requests/s for a burst from 16 threads; then the difference.

usage: bench/mcp_cost.py AIRLOCK_BINARY [--calls N] [--runs N]
"""

import argparse
import http.client
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BODY = json.dumps({
    "jsonrpc": "2.0", "id": 7, "method": "tools/call",
    "params": {"name": "transfer", "arguments": {"amount": 5, "currency": "USD"}},
}).encode()
ANSWER = json.dumps({
    "jsonrpc": "2.0", "id": 7,
    "result": {"content": [{"type": "text", "text": "transferred 5 USD"}], "isError": False},
}).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Head and body in separate writes would meet delayed ACKs.
    disable_nagle_algorithm = True

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args):
        pass


def pki(dir: Path):
    def run(*args):
        subprocess.run(args, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir / "ca.key",
        "-out", dir / "ca.pem", "-days", "2", "-subj", "/CN=bench-ca")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", dir / "srv.key",
        "-out", dir / "srv.csr", "-subj", "/CN=pay.test")
    (dir / "ext").write_text("subjectAltName=DNS:pay.test\n")
    run("openssl", "x509", "-req", "-in", dir / "srv.csr", "-CA", dir / "ca.pem", "-CAkey",
        dir / "ca.key", "-CAcreateserial", "-out", dir / "srv.pem", "-days", "2",
        "-extfile", dir / "ext")


def upstream(dir: Path) -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(dir / "srv.pem", dir / "srv.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def proxy(airlock: str, dir: Path, name: str, policy: str):
    (dir / f"{name}.toml").write_text(policy)
    ca = dir / f"ca-{name}"
    subprocess.run([airlock, "ca", "init", "--dir", ca], check=True, capture_output=True)
    child = subprocess.Popen(
        [airlock, "proxy", "--listen", "127.0.0.1:0", "--policy", dir / f"{name}.toml",
         "--ca-dir", ca, "--events", dir / f"{name}.jsonl", "--upstream-ca", dir / "ca.pem",
         "--resolve", "pay.test:127.0.0.1"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in child.stderr:
        if line.startswith("airlock: proxy listening on "):
            host, port = line.split()[4].rsplit(":", 1)
            threading.Thread(target=lambda: [None for _ in child.stderr], daemon=True).start()
            return child, (host, int(port)), ca / "ca.pem"
    raise SystemExit(f"{name}: the proxy did not start")


def connection(addr, ca: Path, port: int):
    context = ssl.create_default_context(cafile=str(ca))
    c = http.client.HTTPSConnection(addr[0], addr[1], context=context)
    c.set_tunnel("pay.test", port)
    return c


def call(c):
    c.request("POST", "/mcp", BODY, {"content-type": "application/json",
                                     "accept": "application/json, text/event-stream"})
    r = c.getresponse()
    body = r.read()
    assert r.status == 200 and b"transferred" in body, (r.status, body)


def p50(addr, ca, port, calls) -> float:
    c = connection(addr, ca, port)
    for _ in range(50):
        call(c)
    times = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        call(c)
        times.append(time.perf_counter_ns() - t)
    c.close()
    return statistics.median(times) / 1000


def burst(addr, ca, port, threads=16, each=200) -> float:
    conns = [connection(addr, ca, port) for _ in range(threads)]
    for c in conns:
        call(c)
    start = threading.Barrier(threads + 1)

    def work(c):
        start.wait()
        for _ in range(each):
            call(c)

    workers = [threading.Thread(target=work, args=(c,)) for c in conns]
    for w in workers:
        w.start()
    start.wait()
    t = time.perf_counter()
    for w in workers:
        w.join()
    return threads * each / (time.perf_counter() - t)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("airlock")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dir = Path(tmp)
        pki(dir)
        port = upstream(dir)
        head = f'[[allow]]\nhost = "pay.test"\nport = {port}\nmethods = ["POST"]\npaths = ["/mcp"]\n'
        # No max_calls: a quota would refuse the measurement's calls.
        tool = ('[[allow.mcp.tool]]\nname = "transfer"\n'
                'arguments = { amount = { max = 1000 }, currency = { one_of = ["USD", "EUR"] } }\n')
        contenders = {
            "plain": proxy(args.airlock, dir, "plain", head),
            "mcp": proxy(args.airlock, dir, "mcp", head + tool),
        }
        results = {name: {"p50_us": [], "rps": []} for name in contenders}
        try:
            for _ in range(args.runs):
                for name, (_, addr, ca) in contenders.items():
                    results[name]["p50_us"].append(p50(addr, ca, port, args.calls))
                    results[name]["rps"].append(burst(addr, ca, port))
        finally:
            for child, _, _ in contenders.values():
                child.terminate()
                child.wait()
    for name, r in results.items():
        print(f"{name:6} p50 {statistics.median(r['p50_us']):7.0f} µs "
              f"({min(r['p50_us']):.0f}–{max(r['p50_us']):.0f})   "
              f"burst {statistics.median(r['rps']):7.0f} calls/s "
              f"({min(r['rps']):.0f}–{max(r['rps']):.0f})")
    added = statistics.median(results["mcp"]["p50_us"]) - statistics.median(results["plain"]["p50_us"])
    ratio = statistics.median(results["mcp"]["rps"]) / statistics.median(results["plain"]["rps"])
    print(f"a tool call adds {added:.0f} µs at p50; burst calls/s mcp/plain = {ratio:.2f}")


if __name__ == "__main__":
    sys.exit(main())
