#!/usr/bin/env bash
# Diagnosis truth on a real GPU, in one run (about 4 minutes): gpumemd with a
# 40 s leak window watches real PyTorch processes and the record is judged by
# scripts/h200/diagnosis_check.py:
#  - leak2: one 2 MiB tensor kept per second (a quantised leak): flagged
#    within 1.5 windows and flagged from then on;
#  - leakstop: the same for 80 s, then it holds: flagged, then cleared within
#    one window after it stops;
#  - warmup (training to a plateau), frag (a fragmenting cache), clones
#    (periodic 1 GiB copies): never flagged;
#  - busy (back-to-back kernels, in the driver much of the time): never a
#    zombie holder;
#  - spike: 4 GiB for 2 s between two 15 s scrapes: seen in the _max series.
# Usage: scripts/h200/diagnosis.sh GPUMEMD OUT_DIR
set -uo pipefail
gm=${1:?gpumemd binary}; out=${2:?out dir}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
work=$(mktemp -d)
port=19947
cat >"$work/gpumemd.toml" <<TOML
[poll]
interval = "1s"
[processes]
leak_window = "40s"
utilization_interval = "2s"
[state]
dir = "$work/state"
TOML
"$gm" --config "$work/gpumemd.toml" --web.listen-address "127.0.0.1:$port" >"$out/gpumemd.log" 2>&1 &
gpid=$!
trap 'kill $gpid 2>/dev/null; pkill -f "workloads.py" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && break; sleep 0.1; done

rm -f /tmp/gpumemd-ready-* /tmp/gpumemd-spike-at
secs=230
start=$(date +%s.%N)
echo "$start" >"$out/start"
for k in leak2 leakstop warmup frag clones busy spike; do
  SPIKE_AT_S=97 LEAKSTOP_LEAK_S=80 python3 "$here/workloads.py" "$k" "$secs" >"$work/$k.log" 2>&1 &
done
# One snapshot a second and one scrape every 15 s, each stamped with the time.
python3 - "$port" "$secs" "$out" <<'PY'
import json, sys, time, urllib.request
port, secs, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
base = f"http://127.0.0.1:{port}"
end = time.time() + secs - 5
next_scrape = time.time() + 15
with open(f"{out}/snapshots.jsonl", "w") as snaps, open(f"{out}/scrapes.jsonl", "w") as scrapes:
    while time.time() < end:
        t = time.time()
        try:
            s = json.load(urllib.request.urlopen(base + "/api/v1/snapshot", timeout=5))
            procs = [{k: p.get(k) for k in ("pid", "holder", "state", "leak_suspected",
                      "growth_bytes_per_second", "used_bytes")}
                     for d in s["devices"] for p in d["processes"]]
            snaps.write(json.dumps({"t": t, "seq": s["seq"], "processes": procs}) + "\n")
        except Exception as e:
            snaps.write(json.dumps({"t": t, "error": str(e)}) + "\n")
        if t >= next_scrape:
            body = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
            keep = [l for l in body.splitlines() if l.startswith(("gpumem_device_memory_used", "gpumem_process_memory_used"))]
            scrapes.write(json.dumps({"t": t, "lines": keep}) + "\n")
            next_scrape += 15
        time.sleep(max(0.0, 1.0 - (time.time() - t)))
PY
for k in leak2 leakstop warmup frag clones busy spike; do
  printf '%s %s\n' "$k" "$(cat /tmp/gpumemd-ready-$k 2>/dev/null)"
done >"$out/pids"
cp /tmp/gpumemd-spike-at "$out/spike-at" 2>/dev/null
curl -s "http://127.0.0.1:$port/api/v1/history" >"$out/history.json"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >"$out/nvidia-smi.csv" 2>&1
python3 "$here/diagnosis_check.py" "$out" | tee "$out/report.txt"
