#!/usr/bin/env bash
# The job-end report and the flight recorder on a real GPU, in one run of
# about a minute. gpumemd with [allocator] enabled watches two PyTorch
# processes that opt in with python/gpumemd_torch (PYTHONPATH=python):
#  - steps: grows in 512 MiB steps to 6 GiB of tensors, prints its own
#    torch.cuda.max_memory_reserved(), exits; its end report's peak must be
#    that plus its CUDA context, and the end report NVML's peak;
#  - oom: holds 1 GiB, is asked to record (`gpumemd record PID`), then asks
#    for 1 TiB: the snapshot must be in the spool, linked from the OOM event,
#    and open offline with PyTorch's memory_viz (trace_plot to HTML);
#  - NVML's own view of steps, sampled every 100 ms (pynvml if importable,
#    else nvidia-smi -lms 100, MiB): the end report's peak against it
#    (goal within 1 MiB, nvidia-smi's rounding aside);
#  - killed: a plain PyTorch job (no reporter, dumps nothing) grows to
#    3 GiB and is SIGKILLed: its end report must still exist, with its
#    peak, from gpumemd's own polls.
# Usage: scripts/h200/report.sh GPUMEMD OUT_DIR
set -uo pipefail
gm=${1:?gpumemd binary}; out=${2:?out dir}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d); port=19949; url="http://127.0.0.1:$port"
mkdir -p "$work/state"
cat >"$work/gpumemd.toml" <<TOML
[poll]
interval = "1s"
[state]
dir = "$work/state"
[server]
enable_lifecycle = true
[allocator]
enabled = true
socket = "$work/allocator.sock"
TOML
"$gm" --config "$work/gpumemd.toml" --web.listen-address "127.0.0.1:$port" >"$out/gpumemd.log" 2>&1 &
gpid=$!
trap 'kill $gpid 2>/dev/null' EXIT
for _ in $(seq 50); do curl -sf "$url/-/ready" >/dev/null && break; sleep 0.2; done
export PYTHONPATH="$repo/python" GPUMEMD_SOCKET="$work/allocator.sock" PYTHONUNBUFFERED=1

# NVML's per-process used memory every 100 ms: "t,pid,bytes" lines.
if python3 -c "import pynvml; pynvml.nvmlInit()" >/dev/null 2>&1; then
  echo pynvml >"$out/nvml-sampler.txt"
  python3 - >"$out/nvml-samples.csv" 2>>"$out/nvml-sampler.txt" <<'PY' &
import time, pynvml
pynvml.nvmlInit()
hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
while True:
    for h in hs:
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            print(f"{time.time():.3f},{p.pid},{p.usedGpuMemory or 0}", flush=True)
    time.sleep(0.1)
PY
  spl=$!
else
  echo "nvidia-smi (MiB)" >"$out/nvml-sampler.txt"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 100 2>>"$out/nvml-sampler.txt" |
    while IFS=', ' read -r p m; do [ -n "$m" ] && echo "$(date +%s.%N),$p,$((m * 1048576))"; done >"$out/nvml-samples.csv" &
  spl=$!
fi
trap 'kill $gpid 2>/dev/null; pkill -P $spl 2>/dev/null; kill $spl 2>/dev/null' EXIT
python3 - >"$out/steps.txt" 2>&1 <<'PY'
import os, time, torch, gpumemd_torch
gpumemd_torch.start(interval=0.5)
x = torch.zeros(1, device="cuda")
keep = []
for _ in range(12):
    keep.append(torch.empty(512 << 20, dtype=torch.uint8, device="cuda"))
    time.sleep(1.5)
torch.cuda.synchronize()
print("pid", os.getpid(), "max_memory_reserved", torch.cuda.max_memory_reserved(), flush=True)
time.sleep(3)
PY
spid=$(awk '/^pid/{print $2}' "$out/steps.txt")
pkill -P $spl 2>/dev/null; kill $spl 2>/dev/null
sleep 4
"$gm" report --url "$url" --pid "$spid" --wait 10s >"$out/steps-report.txt" 2>&1
"$gm" report --url "$url" --pid "$spid" --json >"$out/steps-report.json" 2>&1

python3 - >"$out/oom.txt" 2>&1 <<PY &
import os, time, torch, gpumemd_torch
gpumemd_torch.start(interval=0.5)
a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
print("pid", os.getpid(), flush=True)
while not os.path.exists("$work/go"):
    time.sleep(0.1)
b = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(4)]
try:
    torch.empty(1 << 40, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError as e:
    print("oom caught", flush=True)
time.sleep(3)
PY
jpid=$!
for _ in $(seq 100); do grep -q '^pid' "$out/oom.txt" && break; sleep 0.1; done
opid=$(awk '/^pid/{print $2}' "$out/oom.txt")
sleep 3
"$gm" record "$opid" --url "$url" >"$out/record.txt" 2>&1; echo "record rc=$?" >>"$out/record.txt"
sleep 2
touch "$work/go"
wait $jpid
sleep 2
curl -s "$url/api/v1/events" >"$out/events.json"
ls -la "$work/state/spool/"* >"$out/spool.txt" 2>&1
snap=$(ls "$work"/state/spool/*/*.pickle 2>/dev/null | head -n 1)
if [ -n "$snap" ]; then
  python3 -m torch.cuda._memory_viz trace_plot "$snap" -o "$out/snapshot.html" >"$out/viz.txt" 2>&1
  echo "viz rc=$? size=$(stat -c %s "$out/snapshot.html" 2>/dev/null)" >>"$out/viz.txt"
fi
# A plain job (no reporter) grows, then is SIGKILLed mid-run.
env -u GPUMEMD_SOCKET python3 - >"$out/killed.txt" 2>&1 <<'PY' &
import os, time, torch
keep = []
print("pid", os.getpid(), flush=True)
for _ in range(12):
    keep.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    time.sleep(0.5)
torch.cuda.synchronize()
print("grown reserved", torch.cuda.memory_reserved(), flush=True)
time.sleep(60)
PY
kjob=$!
for _ in $(seq 300); do grep -q '^grown' "$out/killed.txt" && break; sleep 0.1; done
sleep 3
kpid=$(awk '/^pid/{print $2}' "$out/killed.txt")
kill -9 "$kjob"; wait "$kjob" 2>/dev/null
for _ in $(seq 60); do
  curl -s "$url/api/v1/reports?pid=$kpid" >"$out/killed-report.json"
  grep -q '"state":"ended"' "$out/killed-report.json" && break
  sleep 0.5
done
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, sys, os
out = sys.argv[1]
steps = open(os.path.join(out, "steps.txt")).read().split()
mr = int(steps[steps.index("max_memory_reserved") + 1])
r = json.load(open(os.path.join(out, "steps-report.json")))["reports"][0]
g = r["gpus"][0]
print("steps: state", r["state"], "peak", g["peak_bytes"], "max_memory_reserved", mr,
      "context", g["peak_bytes"] - mr, "allocator reserved peak", g["allocator_reserved_peak_bytes"], "p95", g["p95_bytes"],
      "suggested", r["suggested"])
ev = [e for e in json.load(open(os.path.join(out, "events.json")))["events"] if e.get("kind") == "oom"]
print("oom events", len(ev), "snapshot", [e.get("snapshot") for e in ev])
print("PASS" if g["peak_bytes"] - mr > 0 and g["peak_bytes"] - mr < 1 << 30 else "FAIL",
      "steps: peak = max_memory_reserved + context", mr, "+", g["peak_bytes"] - mr)
pid = int(steps[steps.index("pid") + 1])
nv = [int(l.split(",")[2]) for l in open(os.path.join(out, "nvml-samples.csv")) if l.count(",") == 2
      and l.split(",")[1].strip() == str(pid)]
sampler = open(os.path.join(out, "nvml-sampler.txt")).read().split("\n")[0]
if nv:
    d = g["peak_bytes"] - max(nv)
    print("PASS" if abs(d) <= 1 << 20 else "FAIL", f"steps: end report peak {g['peak_bytes']} vs NVML peak {max(nv)}"
          f" ({sampler}, {len(nv)} samples): diff {d} bytes (goal within 1 MiB)")
else:
    print("FAIL steps: no NVML samples for pid", pid, "from", sampler)
kj = open(os.path.join(out, "killed.txt")).read().split()
try:
    kr = json.load(open(os.path.join(out, "killed-report.json")))["reports"]
except (OSError, ValueError):
    kr = []
grown = int(kj[kj.index("reserved") + 1]) if "reserved" in kj else None
if kr:
    k = kr[0]
    print("PASS" if k["state"] == "ended" and grown and k["peak_bytes"] >= grown else "FAIL",
          "killed: SIGKILLed job's end report from gpumemd's view: state", k["state"], "peak", k["peak_bytes"],
          "reserved before the kill", grown)
else:
    print("FAIL killed: no end report for the SIGKILLed job (pid", kj[1] if len(kj) > 1 else "?", ")")
print(open(os.path.join(out, "record.txt")).read().strip())
if os.path.exists(os.path.join(out, "viz.txt")):
    print(open(os.path.join(out, "viz.txt")).read().strip()[-300:])
PY
