#!/usr/bin/env bash
# The allocator view on a real GPU (issue 17), in one run of about 3.5
# minutes. gpumemd with [allocator] enabled and a 40 s leak window watches
# real PyTorch processes that opt in with python/gpumemd_torch
# (PYTHONPATH=python, no pip), and scripts/h200/allocator_check.py judges:
#  - leak: a new 4 MiB tensor kept every 0.5 s: flagged, as a tensor leak;
#  - cache: allocations of growing size, each freed: reserved (and NVML's
#    figure) grows, allocated does not: never flagged;
#  - both: the allocated/reserved bytes gpumemd shows equal what each
#    process printed from torch.cuda.memory_allocated()/memory_reserved()
#    at the same moment (marks every 10 s);
#  - oom: holds 2 GiB, then asks for 1 TiB: GET /api/v1/events lists the
#    OOM with the GPU's other holders (leak, cache) and their bytes;
#  - oomstart (at 95 s): starts CUDA and 1.3 s later asks for more than is
#    free, uncaught, and dies of it: its only report is that OOM's (sent by
#    the OOM observer or at exit), with no holder table before it; the event
#    must still list the other holders (leak, cache) with their bytes;
#  - bench: a training-like step with and without the reporter, and the
#    cost of one report (the package's overhead).
# Usage: scripts/h200/allocator.sh GPUMEMD OUT_DIR
# Writes OUT_DIR/summary.txt (PASS/FAIL lines and the numbers) and logs.
set -uo pipefail
gm=${1:?gpumemd binary}; out=${2:?out dir}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
port=19948
sock="$work/allocator.sock"
cat >"$work/gpumemd.toml" <<TOML
[poll]
interval = "1s"
[processes]
leak_window = "40s"
[state]
dir = "$work/state"
[allocator]
enabled = true
socket = "$sock"
TOML
kids=()
cleanup() {
  for p in "${kids[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "${gpid:-}" ] && kill "$gpid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
timeout 300 "$gm" --config "$work/gpumemd.toml" --web.listen-address "127.0.0.1:$port" >"$out/gpumemd.log" 2>&1 &
gpid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && break; sleep 0.1; done
if [ ! -S "$sock" ]; then
  echo "FAIL socket: gpumemd made no socket at $sock (see gpumemd.log)" | tee "$out/summary.txt"
  exit 1
fi

export PYTHONPATH="$repo/python" GPUMEMD_SOCKET="$sock" PYTHONUNBUFFERED=1
secs=140
date +%s.%N >"$out/start"
for k in leak cache oom; do
  OOM_AT_S=75 timeout $((secs + 30)) python3 "$here/allocator_workloads.py" "$k" "$secs" >"$out/$k.log" 2>"$out/$k.err" &
  kids+=($!)
done
(sleep 95; timeout 60 python3 "$here/allocator_workloads.py" oomstart 0 >"$out/oomstart.log" 2>"$out/oomstart.err"
 echo "$?" >"$out/oomstart.rc") &
kids+=($!)
(sleep 70; nvidia-smi --query-compute-apps=pid,used_memory --format=csv >"$out/nvidia-smi.csv" 2>&1) &
kids+=($!)
# One snapshot a second (each process's allocator figures and verdict).
timeout $((secs + 30)) python3 - "$port" "$secs" "$out" <<'PY'
import json, sys, time, urllib.request
port, secs, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
base = f"http://127.0.0.1:{port}"
end = time.time() + secs + 3
next_scrape = time.time() + 15
with open(f"{out}/snapshots.jsonl", "w") as snaps, open(f"{out}/scrapes.jsonl", "w") as scrapes:
    while time.time() < end:
        t = time.time()
        try:
            s = json.load(urllib.request.urlopen(base + "/api/v1/snapshot", timeout=5))
            procs = [{k: p.get(k) for k in ("pid", "used_bytes", "leak_suspected",
                      "growth_bytes_per_second", "allocator")} | {"uuid": d["uuid"]}
                     for d in s["devices"] for p in d["processes"]]
            snaps.write(json.dumps({"t": t, "ts": s["timestamp"], "processes": procs}) + "\n")
        except Exception as e:
            snaps.write(json.dumps({"t": t, "error": str(e)}) + "\n")
        if t >= next_scrape:  # the allocator families while the workloads live
            try:
                body = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
                keep = [l for l in body.splitlines() if l.startswith(("gpumem_process_allocator", "gpumem_process_ooms",
                        "gpumem_process_alloc_retries", "gpumem_allocator", "gpumem_process_leak_suspected"))]
                scrapes.write(json.dumps({"t": t, "lines": keep}) + "\n")
            except Exception as e:
                scrapes.write(json.dumps({"t": t, "error": str(e)}) + "\n")
            next_scrape += 15
        time.sleep(max(0.0, 1.0 - (time.time() - t)))
PY
wait "${kids[@]}" 2>/dev/null
curl -s "http://127.0.0.1:$port/api/v1/events" >"$out/events.json"
curl -s "http://127.0.0.1:$port/api/v1/alerts" >"$out/alerts.json"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^gpumem_(allocator|process_(allocator|ooms|alloc_retries))' >"$out/metrics.txt"
# The overhead, alone on the GPU.
timeout 150 python3 "$here/allocator_workloads.py" bench 0 >"$out/bench.log" 2>"$out/bench.err"

python3 "$here/allocator_check.py" "$out" | tee "$out/summary.txt"
