"""Judges a scripts/h200/diagnosis.sh record: prints one PASS/FAIL line per
check, with the numbers behind it, and exits 1 if any check failed.
Usage: python3 diagnosis_check.py OUT_DIR"""
import json, re, sys

out = sys.argv[1]
WINDOW = 40.0
start = float(open(f"{out}/start").read())
pids = {}
for line in open(f"{out}/pids"):
    parts = line.split()
    if len(parts) == 2:
        pids[parts[0]] = int(parts[1])
snaps = [json.loads(l) for l in open(f"{out}/snapshots.jsonl")]
snaps = [s for s in snaps if "processes" in s]
failed = []


def fmt(x, scale=1.0):
    return "n/a" if x is None else f"{x / scale:.2f}"


def check(name, ok, detail):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    if not ok:
        failed.append(name)


def series(role):
    pid = pids.get(role)
    rows = []
    for s in snaps:
        p = next((p for p in s["processes"] if p["pid"] == pid), None)
        if p is not None:
            rows.append((s["t"] - start, p))
    return rows


def flag_times(role):
    return [t for t, p in series(role) if p["leak_suspected"]]


def transitions(role):
    flags = [p["leak_suspected"] for _, p in series(role)]
    return sum(1 for a, b in zip(flags, flags[1:]) if a != b)


# leak2: flagged within 1.5 windows of its start, and from then on.
rows = series("leak2")
first = next((t for t, p in rows if p["leak_suspected"]), None)
after = [p["leak_suspected"] for t, p in rows if first is not None and t >= first]
growth = [p["growth_bytes_per_second"] for _, p in rows if p["growth_bytes_per_second"]]
seen = rows[0][0] if rows else None
check("leak2 flagged within 1.5 windows", first is not None and first - seen <= 1.5 * WINDOW,
      f"first in NVML's list at {fmt(seen)} s, first flagged at {fmt(first)} s; growth estimate "
      f"{round(growth[-1] / 2**20, 2) if growth else None} MiB/s")
check("leak2 stays flagged", bool(after) and all(after),
      f"{sum(after)}/{len(after)} polls flagged after the first")

# leakstop: flagged while leaking, cleared within one window after 80 s.
rows = series("leakstop")
flagged = [t for t, p in rows if p["leak_suspected"]]
cleared_at = next((t for t, p in rows if t > 80 and not p["leak_suspected"]), None)
late = [t for t, p in rows if t > 80 + WINDOW + 5 and p["leak_suspected"]]
check("leakstop flagged while leaking", bool(flagged) and min(flagged) < 80 + 5,
      f"first flagged at {round(min(flagged), 1) if flagged else None} s")
check("leakstop cleared within a window of stopping", cleared_at is not None and not late,
      f"cleared at {None if cleared_at is None else round(cleared_at, 1)} s (stop at 80 s); "
      f"{len(late)} flagged polls after {80 + WINDOW + 5:.0f} s")

for role in ("warmup", "frag", "clones"):
    n = len(flag_times(role))
    check(f"{role} never flagged", n == 0 and series(role), f"{n} flagged polls of {len(series(role))}")

rows = series("busy")
zombie = [t for t, p in rows if p["holder"] == "zombie"]
states = sorted({p["state"] for _, p in rows})
check("busy never a zombie holder", not zombie and rows,
      f"{len(zombie)} zombie polls of {len(rows)}; states seen {states}")

# spike: the first scrape after the spike shows it in the _max series only.
try:
    spike_at = float(open(f"{out}/spike-at").read()) - start
except OSError:
    spike_at = None
scrapes = [json.loads(l) for l in open(f"{out}/scrapes.jsonl")]


def metric(lines, name, pid=None):
    for l in lines:
        if l.startswith(name + "{") and (pid is None or f'pid="{pid}"' in l):
            return float(l.rsplit(" ", 1)[1])
    return None


if spike_at is None:
    check("spike seen in _max", False, "the spike workload did not record its spike")
else:
    before = [s for s in scrapes if s["t"] - start < spike_at]
    nxt = next((s for s in scrapes if s["t"] - start > spike_at + 2.5), None)
    used_before = metric(before[-1]["lines"], "gpumem_device_memory_used_bytes") if before else None
    used = metric(nxt["lines"], "gpumem_device_memory_used_bytes") if nxt else None
    dmax = metric(nxt["lines"], "gpumem_device_memory_used_max_bytes") if nxt else None
    pmax = metric(nxt["lines"], "gpumem_process_memory_used_max_bytes", pids.get("spike")) if nxt else None
    gib = 2**30
    ok = None not in (used_before, used, dmax, pmax) and dmax >= used_before + 3.5 * gib \
        and used < dmax - 3 * gib and pmax >= 5 * gib
    check("spike seen in _max between scrapes", ok,
          f"spike at {spike_at:.1f} s; scrape before: used {fmt(used_before, gib)} GiB; "
          f"scrape at {fmt(nxt and nxt['t'] - start)} s: used {fmt(used, gib)} GiB, "
          f"device max {fmt(dmax, gib)} GiB, spike process max {fmt(pmax, gib)} GiB")

for role in pids:
    print(f"  {role}: pid {pids[role]}, {transitions(role)} flag transitions, "
          f"{len(series(role))} polls seen")
print("all checks passed" if not failed else f"FAILED: {', '.join(failed)}")
sys.exit(1 if failed else 0)
