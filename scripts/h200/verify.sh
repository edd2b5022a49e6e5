#!/usr/bin/env bash
# Checks gpumemd against the real driver on a GPU machine, in one run:
#  1. NVML memory and process values against nvidia-smi (to 1 MiB);
#  2. attribution and diagnosis of real PyTorch processes: allocate/free
#     loop, a leak, a job whose forked child keeps its memory, a SIGSTOPped
#     holder; the holder split against nvidia-smi's used memory;
#  3. the same NvmlSource against the NVML stand-in (one GPU, one process)
#     for a side-by-side of the output shape;
#  4. gpumemd's own footprint (CPU, RSS, scrape latency) while it runs;
#  5. a per-process rule firing into /api/v1/alerts and a real Alertmanager
#     (when BIN_DIR has an `alertmanager` binary), and reclaim in dry run.
# Usage: scripts/h200/verify.sh BIN_DIR OUT_DIR
#   (BIN_DIR has gpumemd, libfake_nvml.so and optionally alertmanager)
set -uo pipefail
bin=${1:?bin dir}; out=${2:?out dir}
here=$(cd "$(dirname "$0")" && pwd)
gm="$bin/gpumemd"
rep="$out/report.txt"
say() { printf '\n## %s\n' "$*" | tee -a "$rep"; }
run() { printf '$ %s\n' "$*" >>"$rep"; "$@" >>"$rep" 2>&1; echo "(exit $?)" >>"$rep"; }

say "machine"
run nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv
run python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
run "$gm" --version

cat >/tmp/gpumemd-verify.toml <<'TOML'
[poll]
interval = "1s"
[processes]
group_by = ["user", "unit"]
leak_window = "40s"
late_release_after = "5s"
utilization_interval = "2s"
idle_after = "20s"
cmdline = true

[state]
dir = "/tmp/gpumemd-state"

[notify.alertmanager]
urls = ["http://127.0.0.1:9093"]
resend = "5s"

[[rule]]
name = "GpuProcessOver3GiB"
kind = "process_used_bytes"
above = "3GiB"
severity = "warning"
annotations = { summary = "pid {{ pid }} ({{ comm }}) holds {{ value_human }} on GPU {{ gpu }}" }

# The built-in leak rule, with a shorter `for` to fit this run.
[[rule]]
name = "GpuMemoryLeakSuspected"
kind = "process_leak_suspected"
for = "5s"
severity = "warning"
annotations = { summary = "pid {{ pid }} ({{ comm }}, {{ user }}) memory keeps growing on GPU {{ gpu }}" }

[[rule]]
name = "GpuStoppedHolder"
kind = "process_idle_holder"
for = "15s"
severity = "info"
action = "terminate"

[reclaim]
enabled = true
dry_run = true
allow_all_users = true
deny_users = []
TOML
if [ -x "$bin/alertmanager" ]; then
  mkdir -p /tmp/am
  # Debian's Alertmanager reads its notification templates from here.
  mkdir -p /usr/share/prometheus/alertmanager
  for t in default.tmpl email.tmpl; do
    [ -f "$bin/$t" ] && [ ! -f "/usr/share/prometheus/alertmanager/$t" ] && cp "$bin/$t" /usr/share/prometheus/alertmanager/
  done
  printf 'route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n' >/tmp/am/am.yml
  "$bin/alertmanager" --config.file=/tmp/am/am.yml --storage.path=/tmp/am/data \
    --web.listen-address=127.0.0.1:9093 --cluster.listen-address= >/tmp/am/am.log 2>&1 &
  for i in $(seq 1 100); do curl -fsS localhost:9093/-/ready >/dev/null 2>&1 && break; sleep 0.2; done
fi

say "start PyTorch workloads"
rm -rf /tmp/gpumemd-ready-* /tmp/gpumemd-state
for w in hold sawtooth leak orphan stopped; do
  python3 "$here/workloads.py" "$w" 150 >"/tmp/wl-$w.log" 2>&1 &
done
# Wait (bounded) until every workload reports it holds its memory.
for i in $(seq 1 120); do
  n=$(ls /tmp/gpumemd-ready-* 2>/dev/null | wc -l)
  [ "$n" -ge 5 ] && break
  sleep 0.5
done
ls /tmp/gpumemd-ready-* >>"$rep" 2>&1
stopped=$(cat /tmp/gpumemd-ready-stopped 2>/dev/null)
[ -n "$stopped" ] && kill -STOP "$stopped" && echo "SIGSTOPped pid $stopped" >>"$rep"

say "gpumemd daemon on the real driver"
"$gm" --config /tmp/gpumemd-verify.toml --web.listen-address 127.0.0.1:9947 --log-format json >"$out/daemon.log" 2>&1 &
gpid=$!
for i in $(seq 1 100); do curl -fsS localhost:9947/-/ready >/dev/null 2>&1 && break; sleep 0.2; done
run curl -sS localhost:9947/-/ready
cpu0=$(awk '{print $14+$15}' /proc/$gpid/stat)
t0=$(date +%s.%N)

# Let the leak window fill (40 s) and the orphan's parent exit (8 s).
for i in 1 2 3 4 5 6 7 8 9; do
  sleep 6
  curl -sS localhost:9947/api/v1/snapshot | python3 -c '
import json,sys; s=json.load(sys.stdin)
for d in s["devices"]:
  print(round(s["timestamp"]), d["uuid"][:12], "used", d["memory"]["used_bytes"]>>20, "MiB", "holders", {k:v>>20 for k,v in d["holders"].items()})
  for p in d["processes"]:
    print("   pid", p["pid"], p["comm"], p["user"], p["holder"], p["state"], (p["used_bytes"] or 0)>>20, "MiB growth", None if p["growth_bytes_per_second"] is None else round(p["growth_bytes_per_second"]/2**20,1), "MiB/s leak", p["leak_suspected"], "idle", p["idle"], "start", p["start_time"])' >>"$out/timeline.txt" 2>&1
done
cpu1=$(awk '{print $14+$15}' /proc/$gpid/stat)
curl -sS localhost:9947/metrics >"$out/metrics-pre.prom"
t1=$(date +%s.%N)

say "alerts: gpumemd's own and what Alertmanager received"
curl -sS localhost:9947/api/v1/alerts >"$out/gm-alerts.json"
curl -sS localhost:9093/api/v2/alerts >"$out/am-alerts.json" 2>>"$rep"
python3 - "$out/gm-alerts.json" "$out/am-alerts.json" >>"$rep" 2>&1 <<'PY'
import json, sys
gm = json.load(open(sys.argv[1]))
for a in gm["alerts"]:
    print("gpumemd:", a["state"], a["labels"].get("alertname"), "pid", a["labels"].get("pid"), "-", a["annotations"].get("summary", ""))
try:
    am = json.load(open(sys.argv[2]))
    for a in am:
        print("alertmanager:", a["status"]["state"], a["labels"].get("alertname"), "pid", a["labels"].get("pid"), "instance", a["labels"].get("instance"), "endsAt", a["endsAt"])
except Exception as e:
    print("alertmanager: no answer:", e)
PY
run grep -E '^gpumem_(alerts|notifications_total|reclaim_actions_total)' "$out/metrics-pre.prom"
run tail -5 /tmp/am/am.log
run cat /tmp/gpumemd-state/reclaim-audit.jsonl

say "gpumemd vs nvidia-smi (same moment; the growing workloads are SIGSTOPped so both read the same memory)"
for w in leak sawtooth; do kill -STOP "$(cat /tmp/gpumemd-ready-$w)"; done
sleep 3
curl -sS localhost:9947/api/v1/snapshot >"$out/snapshot.json"
nvidia-smi --query-gpu=uuid,memory.total,memory.reserved,memory.used,memory.free --format=csv,noheader,nounits >/tmp/gpu.csv
nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits >/tmp/apps.csv
curl -sS localhost:9947/metrics >"$out/metrics.prom"
run cat /tmp/gpu.csv /tmp/apps.csv
run nvidia-smi --query-gpu=memory.total,memory.reserved,memory.used,memory.free --format=csv,noheader,nounits
run nvidia-smi --query-compute-apps=pid,used_memory --format=csv
run python3 "$here/compare.py" "$out/snapshot.json" /tmp/gpu.csv /tmp/apps.csv
run "$gm" snapshot --config /tmp/gpumemd-verify.toml
run grep -E '^gpumem_(device_memory|process_memory_used|process_leak|process_info|device_processes|nvml_up|driver_info)' "$out/metrics.prom"

say "footprint while polling every 1 s"
hz=$(getconf CLK_TCK)
python3 - "$cpu0" "$cpu1" "$t0" "$t1" "$hz" >>"$rep" <<PY
import sys; c0,c1,t0,t1,hz=map(float,sys.argv[1:])
print(f"CPU {100*(c1-c0)/hz/(t1-t0):.3f}% of a core over {t1-t0:.0f} s (includes scrapes by this script)")
PY
grep -E 'VmRSS|VmHWM' /proc/$gpid/status >>"$rep"
python3 - >>"$rep" <<'PY'
import time, urllib.request, statistics
lat = []
for _ in range(1000):
    t = time.perf_counter(); urllib.request.urlopen("http://127.0.0.1:9947/metrics").read(); lat.append(time.perf_counter() - t)
lat.sort()
print(f"scrape /metrics x1000 (python urllib client): p50 {lat[500]*1e3:.3f} ms p99 {lat[990]*1e3:.3f} ms")
PY

for w in leak sawtooth; do kill -CONT "$(cat /tmp/gpumemd-ready-$w)"; done
kill -CONT "$stopped" 2>/dev/null
kill -TERM $gpid; wait $gpid; echo "daemon exit $? after SIGTERM" >>"$rep"

say "NvmlSource: real driver with one PyTorch process vs the stand-in's one-gpu scenario"
for w in sawtooth leak orphan child stopped; do pkill -f "workloads.py $w" ; done
pkill -f "$bin/alertmanager"
for i in $(seq 1 40); do [ "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)" -le 1 ] && break; sleep 0.5; done
"$gm" snapshot --json >"$out/real-one.json" 2>>"$rep"; echo "real snapshot exit $?" >>"$rep"
run nvidia-smi --query-compute-apps=pid,used_memory --format=csv
FAKE_NVML_SCENARIO="$here/../../tests/fake-nvml/scenarios/one-gpu.toml" "$gm" snapshot --json --nvml-lib "$bin/libfake_nvml.so" >"$out/fake-one.json" 2>>"$rep"
echo "fake snapshot exit $?" >>"$rep"
pkill -f workloads.py
grep -v '"DEBUG"' "$out/daemon.log" | tail -25 >>"$rep"; rm -f "$out/daemon.log" "$out/metrics-pre.prom"
echo done >>"$rep"
