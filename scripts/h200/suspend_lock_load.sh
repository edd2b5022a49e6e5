#!/usr/bin/env bash
# Suspend under load and the capability it needs (issue 16), about 2 minutes:
#  - a PyTorch process running back-to-back matmuls (busy, 4 GiB) is
#    suspended with lock_timeout 1s and 30s: how long the lock (and the
#    checkpoint) took, or TIMEOUT; it must keep computing afterwards;
#  - an idle PyTorch process (2 GiB) is suspended and resumed by gpumemd
#    running as root with only CAP_SYS_PTRACE (setpriv, else capsh), then
#    asked again of gpumemd as root with no capability: a clear `failed`
#    with CUDA error 304, the process left running; its checksum at the end
#    equals the one before.
# Writes OUT_DIR/summary.txt (PASS/FAIL/SKIP lines and numbers), the
# daemons' logs and observations.json. Needs root (for setpriv's bounding set).
# Usage: scripts/h200/suspend_lock_load.sh GPUMEMD OUT_DIR
# (GPUMEMD_EXTRA_ARGS, SUSPEND_WORKLOAD and DRYRUN=1 point it at the NVML/CUDA
# stand-in for a dry run, see suspend_lock_load_dryrun.sh; unset on the GPU.)
set -uo pipefail
gm=${1:?gpumemd binary}; out=${2:?out dir}
gm=$(cd "$(dirname "$gm")" && pwd)/$(basename "$gm")
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 1
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
wl=${SUSPEND_WORKLOAD:-$here/suspend_workload.py}
timeout 170 python3 "$wl" busy 4 160 "$work" >"$out/busy.log" 2>&1 &
pids+=($!)
timeout 170 python3 "$wl" idle 2 160 "$work" >"$out/idle.log" 2>&1 &
pids+=($!)
timeout 160 python3 "$here/suspend_lock_load.py" --gpumemd "$gm" --work "$work" --out "$out"
rc=$?
[ "$rc" -eq 124 ] && echo "FAIL suspend_lock_load.py: ran past 160 s" >>"$out/summary.txt"
echo "== $out/summary.txt =="
cat "$out/summary.txt" 2>/dev/null
exit $rc
