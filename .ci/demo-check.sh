#!/usr/bin/env bash
# Starts the demo daemon the way the README does (on its default port), waits
# for /-/ready, lints the live /metrics with promtool, checks every device
# metric family is there, then stops it with SIGTERM and requires exit 0.
set -euo pipefail
bin=${1:?usage: demo-check.sh path/to/gpumemd}
port=9947
log=$(mktemp)
"$bin" --demo >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT

# Wait on the condition (ready), bounded by a deadline.
deadline=$((SECONDS + 30))
until curl -fsS "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; do
  if ! kill -0 "$pid" 2>/dev/null; then echo "daemon exited early:"; cat "$log"; exit 1; fi
  if ((SECONDS > deadline)); then echo "not ready within 30 s:"; cat "$log"; exit 1; fi
  sleep 0.2
done

body=$(curl -fsS "http://127.0.0.1:$port/metrics")
printf '%s\n' "$body" | promtool check metrics
for fam in gpumem_device_info gpumem_device_up gpumem_device_memory_total_bytes gpumem_device_memory_used_bytes \
           gpumem_device_memory_free_bytes gpumem_device_memory_reserved_bytes gpumem_device_memory_held_bytes \
           gpumem_device_processes gpumem_process_memory_used_bytes gpumem_nvml_up gpumem_driver_info \
           gpumem_poll_duration_seconds gpumem_polls_total gpumem_build_info; do
  grep -q "^$fam[{ ]" <<<"$body" || { echo "missing metric family $fam"; exit 1; }
done
# Read the page whole first: `curl | grep -q` fails under pipefail when grep
# exits at its first match and curl's next write hits a closed pipe.
page=$(curl -fsS "http://127.0.0.1:$port/")
grep -q '/api/v1/snapshot' <<<"$page" || { echo "the status page does not load /api/v1/snapshot"; exit 1; }
grep -q 'DEMO MODE' "$log" || { echo "the demo must say it is a demo in its log"; cat "$log"; exit 1; }

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
trap - EXIT
rm -f "$log"
[ "$rc" -eq 0 ] || { echo "SIGTERM exit code $rc, want 0"; exit 1; }
echo "demo check passed: ready, promtool clean, all device families present, SIGTERM exit 0"
