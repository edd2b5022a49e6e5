"""Two (or more) gpumemd builds side by side on one GPU machine, in one run.

Usage: python3 benches/h200/before_after.py OUT NAME=BIN [NAME=BIN ...]

Reuses side_by_side.py's workload and measurement: N PyTorch processes hold
GPU memory while each build in turn (alternated A B B A ... so drift shows)
is measured for idle CPU, RSS and scrape latency; then each build serves a
simulated 8 GPU x 64 process fleet (scrape p50), and the 64 x 1000 `large`
fleet (poll time and RSS after BA_LARGE_SETTLE seconds), also A B B A. Writes
OUT/before-after.json (after each measurement, so a run cut short keeps
what it measured) and prints each figure per build.
Environment: SBS_IDLE, SBS_SCRAPES, SBS_PROCS, SBS_SCRAPE_CLIENT as
side_by_side.py (the scrape client defaults to a `scrape` beside the first
build, from `cargo build --release --example scrape`); BA_LARGE_SETTLE
(default 45), BA_SKIP_REAL=1, BA_SKIP_8X64=1, BA_SKIP_LARGE=1.
"""

import json
import os
import statistics
import sys
import time

OUT = sys.argv[1]
BUILDS = [a.split("=", 1) for a in sys.argv[2:]]
sys.argv = [sys.argv[0], BUILDS[0][1], OUT]
_client = os.path.join(os.path.dirname(os.path.abspath(BUILDS[0][1])), "scrape")
if os.access(_client, os.X_OK):
    os.environ.setdefault("SBS_SCRAPE_CLIENT", _client)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_by_side as sbs  # noqa: E402  (reads sys.argv at import)


def order():
    """A B ... then ... B A: each build measured twice, mirrored."""
    return BUILDS + BUILDS[::-1]


def save(doc):
    """Writes what is measured so far: a run cut off by its time bound
    still leaves its finished parts."""
    doc["summary"] = summary(doc)
    with open(os.path.join(OUT, "before-after.json"), "w") as f:
        json.dump(doc, f, indent=2)


def real(doc):
    cfg = f"{sbs.TMP}/gpumemd.toml"
    with open(cfg, "w") as f:
        f.write('[poll]\ninterval = "1s"\n\n[state]\ndir = "/tmp/sbs/gpumemd-state"\n')
    procs, ready = sbs.start_workload()
    doc["workload"] = f"{ready} PyTorch processes holding 1-2 GiB each"
    try:
        for name, path in order():
            rec = sbs.measure(name, [path, "--config", cfg, "--web.listen-address", "127.0.0.1:9947"], 9947,
                              ready_path="/-/ready", poll_timing=5)
            doc["real"].append(rec)
            save(doc)
    finally:
        for p in procs:
            sbs.stop(p)


def simulated(doc):
    scen = f"{sbs.TMP}/8x64.toml"
    with open(scen, "w") as f:
        f.write(sbs.fleet_toml(8, 64))
    for name, path in order() if os.environ.get("BA_SKIP_8X64") != "1" else []:
        rec = sbs.measure(name, [path, "--demo", scen, "--web.listen-address", "127.0.0.1:9950"], 9950,
                          ready_path="/-/ready", idle=False, poll_timing=5)
        doc["sim_8x64"].append(rec)
        save(doc)
    if os.environ.get("BA_SKIP_LARGE") == "1":
        return
    settle = float(os.environ.get("BA_LARGE_SETTLE", "45"))
    for name, path in order():
        rec = sbs.measure(name, [path, "--demo", "large", "--web.listen-address", "127.0.0.1:9950"], 9950,
                          ready_path="/-/ready", idle=False, keep_body=False, scrapes=30, cap=20,
                          settle=settle, poll_timing=15)
        doc["large"].append(rec)
        save(doc)


def summary(doc):
    rows = []
    for part in ("real", "sim_8x64", "large"):
        by = {}
        for r in doc[part]:
            by.setdefault(r["name"], []).append(r)
        for name, recs in by.items():
            def med(get):
                vals = [v for v in (get(r) for r in recs) if v is not None]
                return round(statistics.median(vals), 4) if vals else None
            rows.append({
                "part": part, "build": name, "runs": len(recs),
                "idle_cpu_percent": med(lambda r: (r.get("idle") or {}).get("cpu_percent")),
                "idle_sched_cpu_percent": med(lambda r: (r.get("idle") or {}).get("sched_cpu_percent")),
                "rss_mib": med(lambda r: (r.get("rss_kib") or 0) / 1024 or None),
                "hwm_mib": med(lambda r: (r.get("hwm_kib") or 0) / 1024 or None),
                "scrape_p50_ms": med(lambda r: (r.get("scrapes") or {}).get("p50_ms")),
                "scrape_cpu_us": med(lambda r: ((r.get("scrapes") or {}).get("sched_per_scrape") or {}).get("cpu_us")),
                "poll_ms": med(lambda r: (r.get("poll_timing") or {}).get("poll_ms")),
            })
    return rows


def main():
    doc = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "builds": dict(BUILDS),
           "real": [], "sim_8x64": [], "large": []}
    if os.environ.get("BA_SKIP_REAL") != "1":
        real(doc)
    simulated(doc)
    save(doc)
    for row in doc["summary"]:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
