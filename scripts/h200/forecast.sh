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

HEADROOM_GIB=$headroom STEP_MIB=$step python3 - >"$out/job.txt" 2>&1 <<'PY'
import os, time, torch
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
print(open(os.path.join(out, "report.txt")).read().strip()[:600])
PY
