#!/usr/bin/env bash
# bench/mcp_cost.sh: what deciding an MCP tool call costs (issue 32).
#
# The same POST of one JSON-RPC `tools/call` message (transfer, amount 5,
# USD), answered by nginx with a fixed JSON-RPC result, measured through two
# airlock proxies that differ only in the rule that allows it:
#
#   airlock-plain  [[allow]] POST /mcp: the body is forwarded undecided
#   airlock-mcp    the same rule with mcp = { ... }: the body is read as
#                  JSON-RPC, the tool and its arguments checked against the
#                  tool's constraints (amount <= 1000, currency USD or EUR),
#                  an mcp_call recorded when decided and again when answered
#
# and direct for reference, interleaved run by run (so a loaded machine
# loads both alike):
#
#   latency   one keep-alive connection, sequential calls: p50 and p99 µs
#             (airlock-bench load --case latency-keepalive)
#   burst     16 keep-alive connections calling at once: calls/s
#             (airlock-bench load --case keepalive)
#
# The figure of the issue is p50(airlock-mcp) - p50(airlock-plain): what a
# tool call adds over the same POST through a plain allow rule (target
# < 200 µs). Prints a Markdown table; BENCHMARKS.md has the figures.
#
#   bench/mcp_cost.sh [--runs N] [--duration S] [--debug]
#
# Release binaries from $CARGO_TARGET_DIR (default target/) unless --debug;
# build them first (cargo build --release --bin airlock -p airlock-bench).
# Everything listens on loopback and is stopped on exit.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=5
DURATION=2
PROFILE=release
while [[ $# -gt 0 ]]; do
    case $1 in
        --runs) RUNS=$2; shift 2 ;;
        --duration) DURATION=$2; shift 2 ;;
        --debug) PROFILE=debug; shift ;;
        -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
        *) echo "bench/mcp_cost.sh: unknown option $1; see --help" >&2; exit 2 ;;
    esac
done
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
AIRLOCK=$TARGET/$PROFILE/airlock
BENCH=$TARGET/$PROFILE/airlock-bench
for bin in "$AIRLOCK" "$BENCH"; do
    [[ -x $bin ]] || { echo "bench/mcp_cost.sh: $bin is missing; build it: cargo build --$PROFILE --bin airlock -p airlock-bench" >&2; exit 2; }
done
NGINX=$(command -v nginx || true)
[[ -n $NGINX ]] || { echo "bench/mcp_cost.sh: nginx is not installed; apt-get install nginx" >&2; exit 2; }

TMP=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

"$BENCH" pki "$TMP/pki" --name bench.test >/dev/null
PORT=$("$BENCH" free-port)
mkdir -p "$TMP/nginx-tmp" "$TMP/www"
# The answer a FastMCP server gives a tools/call in JSON (not SSE) mode.
ANSWER='{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"transferred 5 USD"}],"isError":false}}'
cat > "$TMP/nginx.conf" <<NGINX_CONF
worker_processes 1;
pid $TMP/nginx.pid;
error_log $TMP/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 10000000;
    client_body_temp_path $TMP/nginx-tmp;
    server {
        listen 127.0.0.1:$PORT ssl;
        server_name bench.test;
        ssl_certificate $TMP/pki/server.pem;
        ssl_certificate_key $TMP/pki/server-key.pem;
        root $TMP/www;
        location = /mcp { default_type application/json; return 200 '$ANSWER'; }
    }
}
NGINX_CONF
"$NGINX" -e "$TMP/nginx-error.log" -p "$TMP/" -c "$TMP/nginx.conf" -g 'daemon off;' &
PIDS+=($!)

cat > "$TMP/plain.toml" <<POLICY
version = 1
[[allow]]
host = "bench.test"
port = $PORT
methods = ["POST"]
paths = ["/mcp"]
POLICY
cat > "$TMP/mcp.toml" <<POLICY
version = 1
[[allow]]
host = "bench.test"
port = $PORT
methods = ["POST"]
paths = ["/mcp"]

[allow.mcp]
tools = ["list_invoices"]

[[allow.mcp.tool]]
name = "transfer"
arguments = { amount = { max = 1000 }, currency = { one_of = ["USD", "EUR"] } }
POLICY

start_proxy() { # NAME: sets ADDR
    local name=$1
    "$AIRLOCK" ca init --dir "$TMP/$name-ca" >/dev/null
    : > "$TMP/$name.stderr"
    "$AIRLOCK" proxy --listen 127.0.0.1:0 --policy "$TMP/$name.toml" --ca-dir "$TMP/$name-ca" \
        --upstream-ca "$TMP/pki/ca.pem" --resolve bench.test:127.0.0.1 \
        --events "$TMP/$name-events.jsonl" 2>>"$TMP/$name.stderr" &
    PIDS+=($!)
    ADDR=""
    for _ in $(seq 1 100); do
        ADDR=$(sed -n 's/^airlock: proxy listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$TMP/$name.stderr" | head -n1)
        [[ -n $ADDR ]] && return 0
        sleep 0.1
    done
    echo "bench/mcp_cost.sh: airlock proxy ($name) did not start: $(cat "$TMP/$name.stderr")" >&2
    exit 1
}
start_proxy plain
PLAIN=$ADDR
start_proxy mcp
MCP=$ADDR

CALL='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"transfer","arguments":{"amount":5,"currency":"USD"}}}'
load() { # CONTENDER CASE: one JSON sample
    local contender=$1 case=$2 route
    case $contender in
        direct) route=(--connect "127.0.0.1:$PORT" --ca "$TMP/pki/ca.pem") ;;
        airlock-plain) route=(--proxy "$PLAIN" --ca "$TMP/plain-ca/ca.pem") ;;
        airlock-mcp) route=(--proxy "$MCP" --ca "$TMP/mcp-ca/ca.pem") ;;
    esac
    "$BENCH" load --case "$case" --contender "$contender" --port "$PORT" --path /mcp \
        --post-body "$CALL" --duration "$DURATION" --warmup 0.5 "${route[@]}"
}

SAMPLES=$TMP/samples.jsonl
for run in $(seq 1 "$RUNS"); do
    # Alternate who goes first, so neither always runs on a warmer machine.
    if (( run % 2 )); then order=(airlock-plain airlock-mcp direct); else order=(airlock-mcp airlock-plain direct); fi
    for contender in "${order[@]}"; do
        load "$contender" latency-keepalive >> "$SAMPLES"
        load "$contender" keepalive >> "$SAMPLES"
    done
done

# The MCP proxy decided every call (and the plain one none): else the
# figures would not be what they claim.
DECIDED=$(grep -c '"kind":"mcp_call"' "$TMP/mcp-events.jsonl" || true)
PLAIN_DECIDED=$(grep -c '"kind":"mcp_call"' "$TMP/plain-events.jsonl" || true)
(( DECIDED > 0 )) || { echo "bench/mcp_cost.sh: the MCP proxy recorded no mcp_call: its rule did not read the calls" >&2; exit 1; }
(( PLAIN_DECIDED == 0 )) || { echo "bench/mcp_cost.sh: the plain proxy decided MCP calls" >&2; exit 1; }
DENIED=$(grep '"kind":"mcp_call"' "$TMP/mcp-events.jsonl" | grep -c '"decision":"deny"' || true)
(( DENIED == 0 )) || { echo "bench/mcp_cost.sh: $DENIED calls were refused by the MCP rule" >&2; exit 1; }

python3 - "$SAMPLES" "$RUNS" "$DURATION" "$DECIDED" <<'PY'
import json, statistics, sys
samples = [json.loads(l) for l in open(sys.argv[1])]
runs, duration, decided = sys.argv[2], sys.argv[3], sys.argv[4]
def figs(contender, case, metric):
    return [s["metrics"][metric] for s in samples if s["contender"] == contender and s["case"] == case]
def cell(v, fmt="{:,.0f}"):
    return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}–{fmt.format(max(v))})"
rows = [("one call at a time, p50 µs", "latency-keepalive", "p50_us"),
        ("one call at a time, p99 µs", "latency-keepalive", "p99_us"),
        ("burst, 16 connections, calls/s", "keepalive", "req_per_s")]
print(f"{runs} runs of {duration} s each, interleaved; medians (min–max). {decided} mcp_call records written by the MCP proxy.\n")
print("| figure | direct | airlock-plain | airlock-mcp | mcp − plain |")
print("|---|---:|---:|---:|---:|")
for label, case, metric in rows:
    d, p, m = (figs(c, case, metric) for c in ("direct", "airlock-plain", "airlock-mcp"))
    diff = statistics.median(m) - statistics.median(p)
    # Paired by run: each run measured both back to back.
    paired = [b - a for a, b in zip(p, m)]
    print(f"| {label} | {cell(d)} | {cell(p)} | {cell(m)} | {diff:+,.0f} (per run {min(paired):+,.0f}…{max(paired):+,.0f}) |")
PY
