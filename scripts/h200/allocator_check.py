"""Judges a run of scripts/h200/allocator.sh: prints PASS/FAIL lines with
the measured numbers (allocator.sh saves them as summary.txt).
Usage: python3 allocator_check.py OUT_DIR"""
import json, os, re, sys

out = sys.argv[1]
MiB = 1 << 20
results = []


def say(ok, name, detail):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")


def info(name, detail):
    print(f"INFO {name}: {detail}")


def lines(name):
    try:
        with open(os.path.join(out, name)) as f:
            return [json.loads(l) for l in f if l.strip().startswith("{")]
    except OSError:
        return []


start = float(open(os.path.join(out, "start")).read())
logs = {k: lines(f"{k}.log") for k in ("leak", "cache", "oom", "oomstart", "bench")}
pids = {k: next((l["ready"] for l in v if "ready" in l), None) for k, v in logs.items()}
info("pids", pids)
for k, v in logs.items():
    for l in v:
        if "error" in l and "oom" not in l:
            info(f"{k} error", l["error"])
for k in logs:
    try:
        err = open(os.path.join(out, f"{k}.err")).read().strip().splitlines()
    except OSError:
        err = []
    if err:
        info(f"{k} stderr", err[-1][:300])
snaps = [s for s in lines("snapshots.jsonl") if "processes" in s]
info("snapshots", len(snaps))


def rows(pid):
    for s in snaps:
        for p in s["processes"]:
            if p["pid"] == pid:
                yield s, p


# 1. The receiver took reports.
metrics = open(os.path.join(out, "metrics.txt")).read() if os.path.exists(os.path.join(out, "metrics.txt")) else ""
counts = dict(re.findall(r'gpumem_allocator_messages_total\{result="(\w+)"\} (\d+)', metrics))
say(int(counts.get("accepted", 0)) > 0, "reports accepted", counts)
scraped = [l for s in lines("scrapes.jsonl") for l in s.get("lines", [])]
fams = sorted({l.split("{")[0] for l in scraped if f'pid="{pids["leak"]}"' in l})
say(
    bool(pids["leak"]) and "gpumem_process_allocator_bytes" in fams,
    "metrics",
    f"families with the leak process (pid {pids['leak']}) in scrapes during the run: {fams}",
)

# 2. The leak is flagged as a tensor leak.
flag = [(s["t"] - start, p) for s, p in rows(pids["leak"]) if p.get("leak_suspected")]
kinds = {(p.get("allocator") or {}).get("growth") for _, p in flag}
say(bool(flag) and kinds == {"tensors"}, "leak flagged as tensors",
    f"first at {flag[0][0]:.0f}s after start, growth={sorted(map(str, kinds))}" if flag else "never flagged")

# 3. The growing cache is never flagged; say whether NVML's trend alone would have.
cache_rows = list(rows(pids["cache"]))
cache_flag = [s["t"] - start for s, p in cache_rows if p.get("leak_suspected")]
cache_said = sorted({str((p.get("allocator") or {}).get("growth")) for _, p in cache_rows})
say(bool(cache_rows) and not cache_flag, "cache not flagged",
    f"{len(cache_rows)} snapshots, flagged in {len(cache_flag)}; growth labels seen {cache_said}")
if cache_rows:
    last = cache_rows[-1][1]
    a = last.get("allocator") or {}
    info("cache at the end", f"NVML {last['used_bytes'] / MiB:.0f} MiB, reserved {a.get('reserved', {}).get('current', 0) / MiB:.0f} MiB, "
         f"allocated {a.get('allocated', {}).get('current', 0) / MiB:.0f} MiB, NVML growth {last.get('growth_bytes_per_second') or 0:.0f} B/s")

# 4. The figures match what each process printed at the same moment.
for k in ("leak", "cache"):
    marks = [l for l in logs[k] if "mark" in l]
    good, bad = 0, []
    for m in marks:
        seen = [p.get("allocator") for s, p in rows(pids[k]) if m["t"] + 1.2 <= s["t"] <= m["t"] + 2.9 and p.get("allocator")]
        if not seen:
            bad.append((m["mark"], "no snapshot"))
            continue
        a = seen[-1]
        got = (a["allocated"]["current"], a["reserved"]["current"])
        if got == (m["allocated"], m["reserved"]):
            good += 1
        else:
            bad.append((m["mark"], f"printed {m['allocated']}/{m['reserved']}, gpumemd {got[0]}/{got[1]}"))
    say(good >= 3 and not [b for b in bad if b[1] != "no snapshot"], f"{k} figures match",
        f"{good}/{len(marks)} marks equal to the byte; mismatches {bad[:3]}")

# 5. The OOM event lists the other holders with their bytes.
try:
    events = json.load(open(os.path.join(out, "events.json")))["events"]
except (OSError, ValueError, KeyError):
    events = []
oom = [e for e in events if e.get("pid") == pids["oom"]]
if oom:
    e = oom[0]
    others = {r["pid"]: r.get("used_bytes") for r in e["gpu"]["processes"] if r["pid"] != e["pid"]}
    ok = all((others.get(pids[k]) or 0) > 0 for k in ("leak", "cache"))
    say(ok, "OOM event", f"at {e['time'] - start:.0f}s, {e['comm']} ({e['pid']}) ooms={e['allocator']['ooms']}; other holders "
        + ", ".join(f"{p}: {b / MiB:.0f} MiB" for p, b in others.items() if b))
else:
    say(False, "OOM event", f"none for pid {pids['oom']} in {len(events)} events; oom log {logs['oom'][-1:]}")
# 5b. A job that dies of its OOM a second after CUDA starts, in its first
# report: the event still comes, and lists the other holders with bytes.
try:
    rc = open(os.path.join(out, "oomstart.rc")).read().strip()
except OSError:
    rc = "?"
ol = logs["oomstart"]
cuda_at = next((l["cuda_at"] for l in ol if "cuda_at" in l), None)
oom_at = next((l["oom_at"] for l in ol if "oom_at" in l), None)
died = rc not in ("0", "?") and not any(l.get("oom") is False for l in ol)
ev = [e for e in events if e.get("pid") == pids["oomstart"]]
if ev:
    e = ev[0]
    others = {r["pid"]: r.get("used_bytes") for r in e["gpu"]["processes"] if r["pid"] != e["pid"]}
    ok = died and all((others.get(pids[k]) or 0) > 0 for k in ("leak", "cache"))
    say(ok, "OOM at start, uncaught", f"rc {rc}, OOM {oom_at - cuda_at:.2f}s after CUDA start; event {e['time'] - oom_at:+.2f}s, "
        f"{e['comm']} ({e['pid']}) ooms={e['allocator']['ooms']}, table polled {e['gpu']['polled_at'] - e['time']:+.2f}s; "
        "other holders " + ", ".join(f"{p}: {b / MiB:.0f} MiB" for p, b in others.items() if b)
        if cuda_at and oom_at else f"rc {rc}, log {ol[-2:]}")
else:
    say(False, "OOM at start, uncaught", f"no event for pid {pids['oomstart']} (rc {rc}); log {ol[-2:]}")

try:
    alerts = json.load(open(os.path.join(out, "alerts.json")))
    names = sorted({a.get("rule") or a.get("alertname") for a in alerts.get("alerts", [])})
    info("alerts at the end", names)
except (OSError, ValueError):
    pass

# 6. Overhead.
b = next((l for l in logs["bench"] if l.get("bench")), None)
if b:
    say(b["report_share_pct"] < 1.0, "overhead",
        f"one report {b['report_s'] * 1e6:.0f} us = {b['report_share_pct']:.4f}% of the 2 s interval; "
        f"step {b['step_s_off'] * 1e3:.3f} ms without, {b['step_s_on'] * 1e3:.3f} ms with the reporter "
        f"({b['step_delta_pct']:+.2f}%, median of {b['blocks']} blocks of {b.get('steps_per_block')} steps, noise included)")
else:
    say(False, "overhead", f"no bench result: {logs['bench'][-1:]}")

print(f"{'PASS' if all(results) else 'FAIL'} overall: {sum(results)}/{len(results)} checks passed")
