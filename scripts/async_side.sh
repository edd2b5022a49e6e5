#!/usr/bin/env bash
# The async side's cost per snapshot (issue 21, round 6): per-thread CPU
# (us/s) and runs per second of a release gpumemd on the NVML stand-in at
# 8 GPUs x 1 process and 1 GPU x 8 processes (real `sleep` processes, so
# attribution sees them live), 1 s interval, default config otherwise; then
# `--demo large` (64 x 1000, demo rules: ~12,800 firing idle holders) and
# the share of the daemon's CPU its async workers (gpumemd-http) take.
# Usage: scripts/async_side.sh GPUMEMD LIBFAKE_NVML OUT_DIR [SECONDS]
# Writes OUT_DIR/summary.txt (one block per shape) and the raw outputs.
set -uo pipefail
gm=${1:?gpumemd binary}; lib=${2:?libfake_nvml.so}; out=${3:?out dir}; secs=${4:-30}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
work=$(mktemp -d)
port=${PORT:-19951}
pids=()
gpid=
cleanup() {
  [ -n "$gpid" ] && kill "$gpid" 2>/dev/null
  [ "${#pids[@]}" -gt 0 ] && kill "${pids[@]}" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 8); do
  sleep 3600 &
  pids+=($!)
done

# One device per line of pids given: "uuid-index pid pid ...".
scenario() { # NAME GPUS PER_GPU
  local f="$work/$1.toml" g p i=0
  : >"$f"
  for g in $(seq 0 $(($2 - 1))); do
    printf '[[device]]\nuuid = "GPU-00000000-0000-0000-0000-%012d"\nname = "NVIDIA H200"\ntotal = "143771MiB"\nreserved = "535MiB"\n' "$g" >>"$f"
    for p in $(seq 1 "$3"); do
      printf '[[device.process]]\npid = %s\nused = "1GiB"\n' "${pids[$i]}" >>"$f"
      i=$((i + 1))
    done
  done
  echo "$f"
}

wait_ready() {
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && return 0; sleep 0.1; done
  return 1
}

# SHAPE: start gpumemd with "$@" after the shape name, warm up, measure.
measure() { # SHAPE WARMUP ARGS...
  local shape=$1 warm=$2
  shift 2
  printf '[poll]\ninterval = "1s"\n[state]\ndir = "%s/state"\n' "$work" >"$work/gpumemd.toml"
  "$gm" --config "$work/gpumemd.toml" --web.listen-address "127.0.0.1:$port" "$@" >"$out/$shape-gpumemd.log" 2>&1 &
  gpid=$!
  if ! wait_ready; then
    echo "FAIL $shape: not ready" | tee -a "$out/summary.txt"
    kill "$gpid" 2>/dev/null; gpid=
    return
  fi
  sleep "$warm"
  { echo "== $shape ($*)"; python3 "$here/thread_cpu.py" "$gpid" "$secs" --json "$out/$shape-threads.json"; } \
    | tee -a "$out/summary.txt"
  kill "$gpid" 2>/dev/null; wait "$gpid" 2>/dev/null; gpid=
}

: >"$out/summary.txt"
FAKE_NVML_SCENARIO=$(scenario 8x1 8 1) measure 8x1 5 --nvml-lib "$lib"
FAKE_NVML_SCENARIO=$(scenario 1x8 1 8) measure 1x8 5 --nvml-lib "$lib"
# The demo's idle holders fire 20 s after they go idle; 45 s covers it.
[ "${SKIP_LARGE:-0}" = 1 ] || measure large 45 --demo large
python3 - "$out/summary.txt" <<'PY' | tee -a "$out/summary.txt"
import re, sys
shape = None
for line in open(sys.argv[1]):
    if line.startswith("== "):
        shape = line.split()[1]
    m = re.match(r"thread (gpumemd-http)\s+n=\d+\s+cpu_us_per_s=\s*([\d.]+)", line)
    if m:
        http = float(m.group(2))
    m = re.match(r"total cpu_percent=([\d.]+) cpu_us_per_s=([\d.]+)", line)
    if m and shape:
        total = float(m.group(2))
        print(f"{shape}: async workers {http:.1f} us/s of {total:.1f} us/s = {100 * http / total:.1f} %")
PY
