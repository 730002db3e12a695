#!/usr/bin/env python3
"""bench/undo_cost.py: what keeping pre-session content costs (issue 29, item 6).

    bench/undo_cost.py BEFORE_AIRLOCK AFTER_AIRLOCK [--rounds N]

Runs two airlock binaries (release builds of the commit before and after)
interleaved, run by run, as root, and prints medians as a Markdown table:

- audited start-up: `airlock run -- /bin/true`, 10 runs per round;
- auditing overhead: 1,000 file writes + 1,000 execs (bench/run's workload
  without its HTTPS requests), audited and `--no-audit`, 1 run each per round;
- a workspace of 10,000 files of 1 KiB: `/bin/true` in it (nothing is
  scanned at start), a session that appends to 3 of them, and one that
  appends to every one of them (each file's original is then kept), with
  the audit database's growth; and `audit files --undo` of that last one.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOAD = "for i in $(seq 1000); do echo $i > f$i; /bin/true; done; rm -f f*"
FILES = 10_000


def run(airlock, ws, db, script, audited=True):
    args = [airlock, "run", "--workspace", ws, "--no-tty", "--timeout", "600s"]
    if audited:
        args += ["--audit-db", db, "--audit-key", db + ".key"]
    else:
        args += ["--no-audit"]
    args += ["--", "sh", "-c", script]
    t = time.perf_counter()
    done = subprocess.run(args, cwd=ws, stdin=subprocess.DEVNULL, capture_output=True)
    elapsed = (time.perf_counter() - t) * 1000
    if done.returncode != 0:
        sys.exit(f"undo_cost: {' '.join(args)} failed: {done.stderr.decode()}")
    return elapsed


def big_workspace(root):
    ws = os.path.join(root, "ws-10k")
    if os.path.isdir(ws):
        shutil.rmtree(ws)
    os.makedirs(ws)
    block = b"x" * 1023 + b"\n"
    for i in range(FILES):
        d = os.path.join(ws, f"d{i // 1000}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}"), "wb") as f:
            f.write(block)
    return ws


def last_session(airlock, db):
    out = subprocess.run(
        [airlock, "audit", "sessions", "--json", "--audit-db", db],
        capture_output=True, check=True,
    )
    import json
    return json.loads(out.stdout)[-1]["id"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    bins = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    root = tempfile.mkdtemp(prefix="undo-cost-")
    small = os.path.join(root, "ws")
    os.makedirs(small)
    res = {k: {} for k in bins}

    def add(who, case, ms):
        res[who].setdefault(case, []).append(ms)

    for r in range(a.rounds):
        for who, airlock in bins.items():
            db = os.path.join(root, f"{who}.db")
            for _ in range(10):
                add(who, "start-up", run(airlock, small, db, "/bin/true"))
            add(who, "workload audited", run(airlock, small, db, WORKLOAD))
            add(who, "workload no-audit", run(airlock, small, db, WORKLOAD, audited=False))
            ws = big_workspace(root)
            add(who, "10k: /bin/true", run(airlock, ws, db, "/bin/true"))
            add(who, "10k: append to 3", run(airlock, ws, db, "for f in d0/f1 d5/f5001 d9/f9999; do echo y >> $f; done"))
            before = os.path.getsize(db) + (os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0)
            add(who, "10k: append to all", run(airlock, ws, db, "for f in d*/f*; do echo y >> $f; done"))
            after = os.path.getsize(db) + (os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0)
            add(who, "10k: db growth, append to all (MiB)", (after - before) / 2**20 * 1000)
            if who == "after":
                sid = last_session(airlock, db)
                t = time.perf_counter()
                done = subprocess.run(
                    [airlock, "audit", "files", sid, "--undo", "--audit-db", db,
                     "--audit-key", db + ".key"], capture_output=True)
                add(who, "10k: undo of append to all", (time.perf_counter() - t) * 1000)
                if done.returncode != 0:
                    sys.exit(f"undo failed: {done.stderr.decode()}")
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)

    def med(who, case):
        v = res[who].get(case)
        return statistics.median(v) if v else None

    print(f"| figure (medians, {a.rounds} rounds, interleaved) | before | after |")
    print("|---|---:|---:|")
    for case in res["after"]:
        b, af = med("before", case), med("after", case)
        unit = "MiB" if "MiB" in case else "ms"
        scale = 1000 if unit == "MiB" else 1
        fmt = lambda x: "—" if x is None else f"{x / scale:.1f} {unit}" if unit == "ms" else f"{x / scale:.2f} {unit}"
        print(f"| {case.replace(' (MiB)', '')} | {fmt(b)} | {fmt(af)} |")
    for who in bins:
        ratio = med(who, "workload audited") / med(who, "workload no-audit")
        print(f"| auditing overhead ({who}): audited / no-audit | {ratio:.3f}× | |" if who == "before"
              else f"| auditing overhead ({who}): audited / no-audit | | {ratio:.3f}× |")
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
