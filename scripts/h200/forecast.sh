#!/usr/bin/env bash
# The time-to-full forecast on a real GPU, in one run of about three
# minutes. gpumemd (leak window 30 s, one device_full_forecast rule firing
# below 10 minutes) watches a PyTorch job that first takes all but
# HEADROOM_GIB of the GPU, then grows by STEP_MIB every second until its
# allocation fails. Judges: the rule fires before the job's OOM (the lead
# time in seconds), gpumem_device_memory_full_in_seconds was exported, the
# JSON names the job as the grower, and the job's end report follows.
# Usage: scripts/h200/forecast.sh GPUMEMD OUT_DIR
set -uo pipefail
gm=${1:?gpumemd binary}; out=${2:?out dir}
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d); port=19952; url="http://127.0.0.1:$port"
headroom=${HEADROOM_GIB:-12}; step=${STEP_MIB:-128}
mkdir -p "$work/state"
cat >"$work/gpumemd.toml" <<TOML
[poll]
interval = "1s"
[processes]
leak_window = "30s"
[state]
dir = "$work/state"
[allocator]
enabled = true
socket = "$work/allocator.sock"
record_when_full_in = "10m"

[[rule]]
name = "FillingUpFast"
kind = "device_full_forecast"
below = "10m"
severity = "critical"
annotations = { summary = "GPU {{ gpu }} full in {{ value_human }}; growing: {{ top }}" }
TOML
"$gm" --config "$work/gpumemd.toml" --web.listen-address "127.0.0.1:$port" >"$out/gpumemd.log" 2>&1 &
gpid=$!
trap 'kill $gpid 2>/dev/null' EXIT
for _ in $(seq 100); do curl -sf "$url/-/ready" >/dev/null && break; sleep 0.2; done

# Watches alerts and the forecast once a second while the job runs.
(
  while :; do
    t=$(date +%s.%N)
    a=$(curl -s "$url/api/v1/alerts" | tr -d '\n')
    f=$(curl -s "$url/metrics" | grep '^gpumem_device_memory_full_in_seconds' | head -n 1)
    printf '%s\t%s\t%s\n' "$t" "$f" "$a" >>"$out/watch.tsv"
    sleep 1
  done
) &
wpid=$!

here=$(cd "$(dirname "$0")" && pwd)
HEADROOM_GIB=$headroom STEP_MIB=$step PYTHONPATH="$here/../../python" GPUMEMD_SOCKET="$work/allocator.sock" \
  PYTHONUNBUFFERED=1 python3 - >"$out/job.txt" 2>&1 <<'PY'
import os, time, torch, gpumemd_torch
gpumemd_torch.start(interval=0.5)
headroom = int(os.environ["HEADROOM_GIB"]) << 30
step = int(os.environ["STEP_MIB"]) << 20
free, total = torch.cuda.mem_get_info()
base = torch.empty(max(free - headroom, 1), dtype=torch.uint8, device="cuda")
print("pid", os.getpid(), "total", total, "base", base.numel(), flush=True)
keep = []
while True:
    time.sleep(1)
    try:
        keep.append(torch.empty(step, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        print("oom_at", time.time(), "held", torch.cuda.memory_reserved(), flush=True)
        break
time.sleep(3)
PY
kill $wpid 2>/dev/null
jpid=$(awk '/^pid/{print $2}' "$out/job.txt")
sleep 3
"$gm" report --url "$url" --pid "$jpid" --wait 10s >"$out/report.txt" 2>&1
curl -s "$url/api/v1/snapshot" >"$out/snapshot-after.json"
curl -s "$url/api/v1/events" >"$out/events.json"
find "$work/state/spool" -type f >"$out/spool.txt" 2>/dev/null
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, os, sys
out = sys.argv[1]
job = open(os.path.join(out, "job.txt")).read().split()
oom_at = float(job[job.index("oom_at") + 1]) if "oom_at" in job else None
first_fire, first_forecast, growers = None, None, None
for line in open(os.path.join(out, "watch.tsv")):
    t, f, a = line.rstrip("\n").split("\t", 2)
    t = float(t)
    if f and first_forecast is None:
        first_forecast = (t, f)
    try:
        alerts = json.loads(a)
    except ValueError:
        continue
    for al in alerts.get("alerts", []) if isinstance(alerts, dict) else []:
        text = json.dumps(al)
        if "FillingUpFast" in text and str(al.get("state", "")).lower() == "firing" and first_fire is None:
            first_fire = (t, text[:400])
print("oom_at", oom_at)
print("first forecast", first_forecast)
print("first firing", first_fire)
if oom_at and first_fire:
    print("PASS" if first_fire[0] < oom_at else "FAIL", "lead time", round(oom_at - first_fire[0], 1), "s")
else:
    print("FAIL no firing before the OOM" if oom_at else "FAIL the job never hit OOM")
# The recorder armed by the forecast (not on request), and the OOM's snapshot.
log = open(os.path.join(out, "gpumemd.log")).read()
armed = [l for l in log.splitlines() if "flight recorder asked by the forecast" in l]
print("PASS" if armed else "FAIL", "recorder armed by the forecast:", armed[0][:200] if armed else "no log line")
spool = [l for l in open(os.path.join(out, "spool.txt")).read().split() if l]
try:
    ev = json.load(open(os.path.join(out, "events.json")))
except ValueError:
    ev = {}
evs = ev.get("events", ev) if isinstance(ev, dict) else ev
linked = [e.get("snapshot") for e in evs if isinstance(e, dict) and e.get("snapshot")]
print("PASS" if spool and linked and linked[-1] in spool else "FAIL", "snapshot written", spool[:2], "and linked", linked[-1:] )
print(open(os.path.join(out, "report.txt")).read().strip()[:600])
PY
