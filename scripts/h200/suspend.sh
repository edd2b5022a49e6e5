#!/usr/bin/env bash
# Suspend and resume on a real GPU (issue 16), in one run of about 2 minutes:
#  - gpumemd with a process_idle_holder rule whose action is "suspend"
#    (reclaim enabled, dry run off, short windows) watches two PyTorch
#    processes: "idle" holds 8 GiB of seeded random numbers and computed
#    their checksum; "busy" holds 6 GiB and runs matmuls;
#  - the rule suspends idle (CUDA checkpoint): device used drops by its
#    bytes (gpumemd and nvidia-smi agree), it leaves nvidia-smi's list, it is
#    still alive; busy is left alone and keeps computing;
#  - `gpumemd resume PID` brings it back; it recomputes the same checksum;
#  - checkpoint and restore seconds per GiB come from gpumemd's log.
# Writes OUT_DIR/summary.txt (PASS/FAIL lines and numbers) and logs.
# Usage: scripts/h200/suspend.sh GPUMEMD OUT_DIR   (run as root)
# (GPUMEMD_EXTRA_ARGS and SUSPEND_WORKLOAD let a dry run point it at the
# NVML/CUDA stand-in and stand-in workloads; leave them unset on the GPU.)
set -uo pipefail
gm=${1:?gpumemd binary}; out=${2:?out dir}
gm=$(cd "$(dirname "$gm")" && pwd)/$(basename "$gm")
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
port=${PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
cat >"$work/gpumemd.toml" <<TOML
[server]
enable_lifecycle = true
[poll]
interval = "1s"
[processes]
utilization_interval = "1s"
idle_after = "10s"
[state]
dir = "$work/state"

[[rule]]
name = "IdleSuspend"
kind = "process_idle_holder"
for = "15s"
action = "suspend"

[reclaim]
enabled = true
dry_run = false
allow_all_users = true
deny_users = []

[reclaim.suspend]
lock_timeout = "30s"
call_timeout = "2m"
host_memory_margin = "4GiB"
resume = "manual"
TOML
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 1
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
timeout 250 "$gm" --config "$work/gpumemd.toml" --web.listen-address "127.0.0.1:$port" \
  --log-format json ${GPUMEMD_EXTRA_ARGS:-} >"$out/gpumemd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && break; sleep 0.1; done
cp "$work/gpumemd.toml" "$out/gpumemd.toml"
timeout 230 python3 "${SUSPEND_WORKLOAD:-$here/suspend_workload.py}" idle 8 220 "$work" >"$out/idle.log" 2>&1 &
pids+=($!)
timeout 230 python3 "${SUSPEND_WORKLOAD:-$here/suspend_workload.py}" busy 6 220 "$work" >"$out/busy.log" 2>&1 &
pids+=($!)
timeout 200 python3 "$here/suspend_run.py" --gpumemd "$gm" --port "$port" --work "$work" --out "$out"
rc=$?
# Stop gpumemd first: nothing is suspended again while the workloads end.
kill "${pids[0]}" 2>/dev/null
echo "== $out/summary.txt =="
cat "$out/summary.txt" 2>/dev/null
exit $rc
