#!/usr/bin/env bash
# Where gpumemd's idle CPU goes on a real GPU (issue 21): 8 PyTorch
# processes hold 1 GiB each; gpumemd polls every second through
# benches/h200/nvml_timer.c (a forwarding libnvidia-ml that counts each
# NVML function's calls, wall and thread-CPU time), once per variant config.
# For each variant: per-thread CPU (scripts/thread_cpu.py) and per-NVML-call
# cost over the same window, both per second of wall time.
# Usage: scripts/h200/idle-profile.sh GPUMEMD LIBNVML_TIMER OUT_DIR [SECONDS]
# (IDLE_WORKERS=0 and NVML_TIMER_REAL=libfake_nvml.so dry-run it without a GPU.)
# Variants: "default", then each extra TOML in IDLE_VARIANTS (name=toml;...
# with \n for newlines), e.g. 'health30=[health]\ninterval = "30s"'.
set -uo pipefail
gm=${1:?gpumemd binary}; shim=${2:?libnvml_timer.so}; out=${3:?out dir}; secs=${4:-40}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
work=$(mktemp -d)
port=${PORT:-19959}
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null; [ -n "${gpid:-}" ] && kill "$gpid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
# shellcheck source=workers.sh
. "$here/workers.sh"
start_workers "${IDLE_WORKERS:-8}" "$work" 900
echo "workers ready: $(ls "$work"/ready.* 2>/dev/null | wc -l)" | tee -a "$out/summary.txt"

run_variant() {
  local name=$1 extra=$2
  local dir="$work/$name"; mkdir -p "$dir/state"
  printf '[poll]\ninterval = "1s"\n[state]\ndir = "%s/state"\n%b\n' "$dir" "$extra" >"$dir/gpumemd.toml"
  # The counters live in a file mapped shared; tmpfs keeps it off the disk.
  local counters; counters=$(mktemp -p /dev/shm nvml_timer.XXXXXX 2>/dev/null || mktemp)
  NVML_TIMER_OUT="$counters" "$gm" --nvml-lib "$shim" --config "$dir/gpumemd.toml" \
    --web.listen-address "127.0.0.1:$port" >"$out/$name-gpumemd.log" 2>&1 &
  gpid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && break; sleep 0.1; done
  # Warm-up: identity cache filled, first utilisation samples taken; IDLE_WARMUP
  # longer lets the workers' start-up kernels leave the utilisation samples, so
  # the window sees the steady state of an idle node.
  sleep "${IDLE_WARMUP:-8}"
  python3 "$here/nvml_timer_read.py" "$counters" >"$out/$name-nvml-start.txt"
  # IDLE_PERF=path/to/perf also samples where the daemon's CPU goes, in the
  # same window (function symbols are enough: a flat profile per thread).
  local perfpid=
  if [ -n "${IDLE_PERF:-}" ]; then
    "$IDLE_PERF" record -F "${IDLE_PERF_HZ:-4999}" -p "$gpid" -o "$dir/perf.data" -- sleep "$secs" >"$out/$name-perf-record.log" 2>&1 &
    perfpid=$!
  fi
  python3 "$here/../thread_cpu.py" "$gpid" "$secs" --json "$out/$name-threads.json" >"$out/$name-threads.txt"
  if [ -n "$perfpid" ]; then
    wait "$perfpid"
    "$IDLE_PERF" report -i "$dir/perf.data" --no-children --sort comm,dso,sym --stdio 2>/dev/null \
      | grep -v '^#' | grep -v '^$' | head -120 >"$out/$name-perf.txt"
  fi
  python3 "$here/nvml_timer_read.py" "$counters" >"$out/$name-nvml-end.txt"
  curl -s "http://127.0.0.1:$port/metrics" | grep -E '^gpumem_poll_(source_)?duration_seconds |^gpumem_process_memory_used_bytes\{' >"$out/$name-metrics.txt"
  kill "$gpid"; wait "$gpid" 2>/dev/null; gpid=; rm -f "$counters"
  python3 - "$name" "$out" <<'PY' | tee -a "$out/summary.txt"
import sys, json
name, out = sys.argv[1:]
def load(p):
    d = {}
    for line in open(p):
        f = line.split()
        d[f[0]] = [int(x) for x in f[1:]]
    return d
a, b = load(f"{out}/{name}-nvml-start.txt"), load(f"{out}/{name}-nvml-end.txt")
wall = (b["monotonic_ns"][0] - a["monotonic_ns"][0]) / 1e9
rows = []
for k, v in b.items():
    if k == "monotonic_ns":
        continue
    c0, w0, p0 = a.get(k, [0, 0, 0])
    calls, w, p = v[0] - c0, (v[1] - w0) / 1e3, (v[2] - p0) / 1e3
    if calls:
        rows.append((p / wall, k, calls / wall, w / calls, p / calls))
rows.sort(reverse=True)
nvml_cpu = sum(r[0] for r in rows)
t = json.load(open(f"{out}/{name}-threads.json"))
print(f"== {name}: NVML thread-CPU {nvml_cpu:.1f} us/s over {wall:.1f} s")
for cpu, k, per_s, wmean, pmean in rows:
    print(f"   nvml {k:45s} {per_s:6.2f}/s  wall {wmean:8.1f} us  cpu {pmean:8.1f} us  -> {cpu:7.1f} us/s")
print(f"   threads: {json.dumps(t)[:600]}")
PY
  cat "$out/$name-threads.txt" >>"$out/summary.txt"
  cat "$out/$name-metrics.txt" | grep duration >>"$out/summary.txt"
}

run_variant default ""
IFS=';' read -ra variants <<<"${IDLE_VARIANTS:-}"
for v in "${variants[@]}"; do
  [ -n "$v" ] && run_variant "${v%%=*}" "${v#*=}"
done
# IDLE_WITH_WORKERS: a command run last, while the workers still hold memory.
if [ -n "${IDLE_WITH_WORKERS:-}" ]; then
  bash -c "$IDLE_WITH_WORKERS" >"$out/with-workers.txt" 2>&1
  cat "$out/with-workers.txt" >>"$out/summary.txt"
fi
