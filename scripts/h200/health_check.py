#!/usr/bin/env python3
"""Judges a scripts/h200/health.sh run: reads OUT_DIR's calls.jsonl,
nvidia-smi-fields.tsv, metrics-{on,off}.prom, health-lines.prom,
snapshot-on.json, events-{on,off}.json and poll-{on,off}.jsonl; writes OUT_DIR/summary.txt (PASS / FAIL / INFO / SKIP
lines) and OUT_DIR/benchmarks.md (the table for BENCHMARKS.md), and prints
the summary. Exit 1 when any line is FAIL.

Usage: health_check.py OUT_DIR
"""
import json
import os
import re
import statistics
import sys

# Calls gpumemd makes, and the most one may cost (far above the ~3 us an
# H200 answers in): more means a driver path to look at, not a typo.
# Calls gpumemd caches because they are slow (src/collect/source/nvml/health.rs).
READ_RARELY = {"nvmlDeviceGetEccMode": "5 minutes (ECC_MODE_EVERY)"}
DAEMON_CALLS = ("nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows",
                "nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus",
                "nvmlDeviceGetFieldValues", "nvmlEventSetWait_v2")
MAX_US = 50.0
# health family -> the call whose answer decides whether it must be present.
FAMILIES = {
    "gpumem_device_ecc_enabled": "nvmlDeviceGetEccMode",
    "gpumem_device_ecc_errors_total": "nvmlDeviceGetTotalEccErrors(corrected,volatile)",
    "gpumem_device_remapped_rows": "nvmlDeviceGetRemappedRows",
    "gpumem_device_row_remap_pending": "nvmlDeviceGetRemappedRows",
    "gpumem_device_row_remap_failed": "nvmlDeviceGetRemappedRows",
    "gpumem_device_retired_pages": "nvmlDeviceGetRetiredPages(multiple single-bit)",
    "gpumem_device_retired_pages_pending": "nvmlDeviceGetRetiredPagesPendingStatus",
    "gpumem_device_memory_temperature_celsius": "nvmlDeviceGetFieldValues(MEMORY_TEMP)",
    # gpumemd registers critical Xids only (no ECC event types, docs/design.md).
    "gpumem_device_xid_errors_total": "nvmlDeviceRegisterEvents(Xid critical)",
}
# Per-GPU poll cost of the health reads above which something is wrong.
MAX_POLL_DELTA_US = 500.0

lines = []


def say(kind, text):
    lines.append(f"{kind} {text}")


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def jsonl(path):
    out = []
    for line in read(path).splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def samples(prom, family):
    """{labels-text: value} of one family's samples."""
    out = {}
    for line in prom.splitlines():
        m = re.match(rf"^{re.escape(family)}(\{{[^}}]*\}})? (\S+)$", line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


def call_answered(call):
    """True: answered; False: NOT_SUPPORTED (or missing); None: unknown."""
    if call is None:
        return None
    if call["rc_name"] == "SUCCESS":
        return not call["answer"].startswith("field rc=")
    return False


def check_calls(calls):
    by = {c["call"]: c for c in calls}
    overhead = by.get("ctypes overhead (nvmlErrorString)", {}).get("us")
    if not calls:
        say("FAIL", "no NVML call answered (calls.jsonl empty; see calls.err)")
        return by, overhead
    for c in calls:
        us = c.get("us")
        cost = f"{us:.2f} us/call" if us is not None else "once"
        say("INFO", f"call {c['call']}: {c['rc_name']} {c['answer']} ({cost})".replace("  ", " "))
        used = c["call"].split("(")[0] in DAEMON_CALLS
        if used and c["rc_name"] not in ("SUCCESS", "NOT_SUPPORTED", "TIMEOUT"):
            say("FAIL", f"{c['call']} answered {c['rc_name']}: gpumemd records that as an error every poll")
        if used and us is not None and us > MAX_US:
            if c["call"].split("(")[0] in READ_RARELY:
                say("INFO", f"{c['call']} costs {us:.1f} us; gpumemd reads it once per {READ_RARELY[c['call'].split('(')[0]]}")
            else:
                say("FAIL", f"{c['call']} costs {us:.1f} us, more than {MAX_US:.0f} us")
    reg = by.get("nvmlDeviceRegisterEvents(Xid critical)")
    if reg and reg["rc_name"] == "SUCCESS":
        say("PASS", "registering for critical Xid events works")
    else:
        say("FAIL", f"registering for critical Xid events: {reg['rc_name'] if reg else 'not tried'}")
    costs = [c["us"] for c in calls if c["call"].split("(")[0] in DAEMON_CALLS[:-1] and c.get("us")]
    if costs:
        say("INFO", f"health read cost: {min(costs):.2f}-{max(costs):.2f} us/call through ctypes "
                    f"(ctypes overhead {overhead} us included)")
    return by, overhead


def check_families(by, prom_on, prom_off):
    if not prom_on:
        say("FAIL", "no /metrics from gpumemd with health on (see gpumemd-on.log, daemon-errors.txt)")
        return
    for fam, call in FAMILIES.items():
        got = samples(prom_on, fam)
        want = call_answered(by.get(call))
        if want is None:
            say("SKIP", f"{fam}: {call} not measured")
        elif want and got:
            say("PASS", f"{fam} present ({len(got)} series) where {call} answers")
        elif not want and not got:
            say("PASS", f"{fam} absent (not 0) where {call} says {by[call]['rc_name']}")
        else:
            say("FAIL", f"{fam}: {len(got)} series but {call} said {by[call]['rc_name']} {by[call]['answer']}")
    if prom_off:
        left = [f for f in FAMILIES if samples(prom_off, f)]
        if left:
            say("FAIL", f"with [health] off these families still have samples: {', '.join(left)}")
        else:
            say("PASS", "with [health] enabled = false, xid_events = false: no health samples")


def check_values(prom, smi, by):
    """gpumemd's values against nvidia-smi's and the direct calls'."""
    def metric(fam, *must):
        for labels, v in samples(prom, fam).items():
            if all(m in labels for m in must):
                return v
        return None

    pairs = [
        ("ecc.errors.corrected.volatile.total", metric("gpumem_device_ecc_errors_total", 'severity="corrected"', 'counter="volatile"')),
        ("ecc.errors.uncorrected.volatile.total", metric("gpumem_device_ecc_errors_total", 'severity="uncorrected"', 'counter="volatile"')),
        ("ecc.errors.corrected.aggregate.total", metric("gpumem_device_ecc_errors_total", 'severity="corrected"', 'counter="aggregate"')),
        ("ecc.errors.uncorrected.aggregate.total", metric("gpumem_device_ecc_errors_total", 'severity="uncorrected"', 'counter="aggregate"')),
        ("remapped_rows.correctable", metric("gpumem_device_remapped_rows", 'severity="correctable"')),
        ("remapped_rows.uncorrectable", metric("gpumem_device_remapped_rows", 'severity="uncorrectable"')),
        ("remapped_rows.pending", metric("gpumem_device_row_remap_pending")),
        ("remapped_rows.failure", metric("gpumem_device_row_remap_failed")),
        ("temperature.memory", metric("gpumem_device_memory_temperature_celsius")),
    ]
    for field, ours in pairs:
        raw = smi.get(field)
        theirs = {"yes": 1.0, "no": 0.0, "enabled": 1.0, "disabled": 0.0}.get((raw or "").strip().lower())
        if theirs is None:
            try:
                theirs = float(raw)
            except (TypeError, ValueError):
                theirs = None
        if theirs is None or ours is None:
            say("SKIP", f"{field}: nvidia-smi {raw!r}, gpumemd {ours}")
            continue
        tol = 3.0 if field.startswith("temperature") else 0.0
        kind = "PASS" if abs(theirs - ours) <= tol else "FAIL"
        say(kind, f"{field}: nvidia-smi {theirs:g}, gpumemd {ours:g}")


def check_snapshot(snap):
    try:
        s = json.loads(snap)
    except ValueError:
        say("FAIL", "no JSON snapshot from gpumemd with health on")
        return 0
    gpus = [d for d in s.get("devices", []) if not d.get("parent_uuid")]
    words = ("ecc", "remapped rows", "retired pages", "memory temperature", "xid events", "health")
    errs = [e for d in gpus for e in d.get("errors", []) if e.lower().startswith(words)]
    say("FAIL" if errs else "PASS", f"health errors in the snapshot: {errs or 'none'}")
    watched = [d["uuid"] for d in gpus if (d.get("health") or {}).get("xid_watched")]
    say("PASS" if watched and len(watched) == len(gpus) else "FAIL",
        f"Xid events watched on {len(watched)} of {len(gpus)} GPUs")
    for d in gpus:
        h = d.get("health") or {}
        say("INFO", f"GPU {d.get('index')} {d['uuid']} health: ecc={h.get('ecc')} remap={h.get('remap')} "
                    f"retired={h.get('retired')} memory_temp={h.get('memory_temperature_celsius')} "
                    f"xid_counts={h.get('xid_counts')} problems={h.get('problems', [])}")
    return max(len(gpus), 1)


def check_events(out):
    """GET /api/v1/events answers a list (health on and off, allocator off)
    whose entries each have a kind; Xid entries name a GPU and a code."""
    for name in ("on", "off"):
        try:
            ev = json.loads(read(os.path.join(out, f"events-{name}.json")))["events"]
        except (ValueError, KeyError, TypeError):
            say("FAIL", f"GET /api/v1/events (health {name}): no JSON event list")
            continue
        if not isinstance(ev, list) or not all(isinstance(e, dict) for e in ev):
            say("FAIL", f"GET /api/v1/events (health {name}): not a list of objects")
            continue
        bad = [e for e in ev if not e.get("kind") or (e["kind"] == "xid" and not (e.get("uuid") and "xid" in e))]
        kinds = sorted({e.get("kind") for e in ev})
        say("FAIL" if bad else "PASS",
            f"GET /api/v1/events (health {name}): {len(ev)} events, kinds {kinds}, malformed {bad[:3]}")


def check_raw(out):
    raw = read(os.path.join(out, "health-lines.prom"))
    n = sum(1 for l in raw.splitlines() if l and not l.startswith("#"))
    say("PASS" if n else "FAIL", f"raw health samples kept in health-lines.prom: {n} lines")


def check_cost(out, gpus):
    res = {}
    for name in ("on", "off"):
        rows = [r for r in jsonl(os.path.join(out, f"poll-{name}.jsonl")) if "gpumem_poll_source_duration_seconds" in r]
        if len(rows) < 5:
            say("FAIL", f"only {len(rows)} polls measured with health {name}")
            return None
        src = [r["gpumem_poll_source_duration_seconds"] * 1e6 for r in rows]
        tot = [r["gpumem_poll_duration_seconds"] * 1e6 for r in rows]
        res[name] = (statistics.median(src), statistics.median(tot), len(rows))
        say("INFO", f"health {name}: {len(rows)} polls, median source {res[name][0]:.0f} us, "
                    f"median poll {res[name][1]:.0f} us")
    delta = res["on"][0] - res["off"][0]
    per_gpu = delta / gpus
    kind = "PASS" if per_gpu < MAX_POLL_DELTA_US else "FAIL"
    say(kind, f"poll cost of health: {delta:+.0f} us per poll ({per_gpu:+.0f} us per GPU, {gpus} GPU(s)); "
              f"source median {res['on'][0]:.0f} us on vs {res['off'][0]:.0f} us off")
    return res, delta, per_gpu


def benchmarks(out, calls, overhead, cost):
    t = ["| NVML call (GPU 0) | answer | us/call |", "|---|---|---|"]
    for c in calls:
        us = f"{c['us']:.2f}" if c.get("us") is not None else "once"
        t.append(f"| `{c['call']}` | {c['rc_name']} {c['answer']} | {us} |")
    t.append("")
    t.append(f"Costs are wall time through Python ctypes, mean of 1000 calls, including about {overhead} us "
             "of ctypes overhead (the nvmlErrorString line).")
    if cost:
        res, delta, per_gpu = cost
        t.append(f"Poll cost with [health] on vs off (250 ms polls, medians of {res['on'][2]} and "
                 f"{res['off'][2]} polls): source {res['on'][0]:.0f} vs {res['off'][0]:.0f} us, whole poll "
                 f"{res['on'][1]:.0f} vs {res['off'][1]:.0f} us: {delta:+.0f} us per poll, {per_gpu:+.0f} us per GPU.")
    with open(os.path.join(out, "benchmarks.md"), "w") as f:
        f.write("\n".join(t) + "\n")


def main():
    out = sys.argv[1]
    calls = jsonl(os.path.join(out, "calls.jsonl"))
    by, overhead = check_calls(calls)
    smi = {}
    for line in read(os.path.join(out, "nvidia-smi-fields.tsv")).splitlines():
        k, _, v = line.partition("\t")
        smi[k] = v
    # The memory temperature as nvidia-smi read it beside the last scrape
    # (it drifts between the start of the run and the scrape).
    near = read(os.path.join(out, "nvidia-smi-temp-on.txt")).strip().splitlines()
    if near:
        smi["temperature.memory"] = near[0]
    prom_on = read(os.path.join(out, "metrics-on.prom"))
    check_families(by, prom_on, read(os.path.join(out, "metrics-off.prom")))
    check_values(prom_on, smi, by)
    gpus = check_snapshot(read(os.path.join(out, "snapshot-on.json")))
    check_events(out)
    check_raw(out)
    for e in read(os.path.join(out, "daemon-errors.txt")).splitlines():
        say("FAIL", e)
    cost = check_cost(out, gpus)
    benchmarks(out, calls, overhead, cost)
    fails = sum(1 for l in lines if l.startswith("FAIL"))
    passes = sum(1 for l in lines if l.startswith("PASS"))
    say("FAIL" if fails else "PASS", f"health.sh: {fails} failures, {passes} passes")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text)
    print(text, end="")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
