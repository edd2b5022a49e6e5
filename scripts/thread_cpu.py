#!/usr/bin/env python3
"""Where a process's CPU goes, per thread, at nanosecond resolution.

Reads /proc/PID/task/*/schedstat (time on CPU in ns, and how many times the
thread ran) and the voluntary context switches at the start and end of a
window, and prints one line per thread name plus a total. Clock ticks from
/proc/PID/stat are 10 ms; a daemon that costs 1 ms a second needs better.

Usage: thread_cpu.py PID SECONDS [--json FILE]
"""
import json
import os
import sys
import time


def sample(pid):
    out = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"{base}/{tid}/schedstat") as f:
                ns, _wait, runs = (int(x) for x in f.read().split())
            vol = 0
            with open(f"{base}/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol = int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue  # a thread that ended between listdir and read
        out[tid] = (comm, ns, runs, vol)
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: thread_cpu.py PID SECONDS [--json FILE]")
    pid, secs = int(sys.argv[1]), float(sys.argv[2])
    a = sample(pid)
    t0 = time.monotonic()
    time.sleep(secs)
    b = sample(pid)
    wall = time.monotonic() - t0
    per = {}
    for tid, (comm, ns, runs, vol) in b.items():
        ns0, runs0, vol0 = a.get(tid, (comm, 0, 0, 0))[1:]
        p = per.setdefault(comm, {"threads": 0, "cpu_ns": 0, "runs": 0, "voluntary_switches": 0})
        p["threads"] += 1
        p["cpu_ns"] += ns - ns0
        p["runs"] += runs - runs0
        p["voluntary_switches"] += vol - vol0
    # Threads that ended inside the window are lost to schedstat; count them.
    gone = [t for t in a if t not in b]
    total = sum(p["cpu_ns"] for p in per.values())
    for comm, p in sorted(per.items(), key=lambda kv: -kv[1]["cpu_ns"]):
        print(f"thread {comm:<24} n={p['threads']:<2} cpu_us_per_s={p['cpu_ns'] / 1e3 / wall:9.1f} "
              f"runs_per_s={p['runs'] / wall:7.2f} vol_switches_per_s={p['voluntary_switches'] / wall:7.2f}")
    print(f"total cpu_percent={100 * total / 1e9 / wall:.4f} cpu_us_per_s={total / 1e3 / wall:.1f} "
          f"wall_s={wall:.1f} threads_ended_in_window={len(gone)}")
    if len(sys.argv) > 4 and sys.argv[3] == "--json":
        with open(sys.argv[4], "w") as f:
            json.dump({"wall_s": wall, "threads": per, "ended": len(gone)}, f, indent=1)


if __name__ == "__main__":
    main()
