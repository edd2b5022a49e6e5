#!/usr/bin/env bash
# Where gpumemd's poll time and memory go on a real GPU machine, in one
# short device call: the cost of every NVML call a poll makes
# (examples/nvml_calls.rs), then gpumemd on the real NVML for 20 s with
# its poll split (gpumem_poll_source_duration_seconds) and its resident
# memory by kind (RssAnon/RssFile) and by mapping (the largest in smaps).
# Usage: benches/h200/footprint-probe.sh BIN_DIR OUT_FILE
#   BIN_DIR/gpumemd and BIN_DIR/nvml_calls (cargo build --release --example nvml_calls)
set -uo pipefail
bin=$(cd "${1:?usage: footprint-probe.sh BIN_DIR OUT_FILE}" && pwd)
out=${2:?usage: footprint-probe.sh BIN_DIR OUT_FILE}
chmod +x "$bin/gpumemd" "$bin/nvml_calls"
# PROBE_PROCS (default 8) PyTorch processes hold 1 GiB each meanwhile, so
# the process lists are not empty.
work=$(mktemp -d)
kids=()
for i in $(seq 1 "${PROBE_PROCS:-8}"); do
  python3 -c "import torch,time,sys; x=torch.ones(1<<28,device='cuda'); torch.cuda.synchronize(); open(sys.argv[1],'w').close(); time.sleep(600)" "$work/ready-$i" &
  kids+=($!)
done
trap 'kill "${kids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 120); do
  [ "$(ls "$work" | wc -l)" -ge "${PROBE_PROCS:-8}" ] && break
  sleep 0.5
done
{
  echo "== $(ls "$work" | wc -l) CUDA processes hold memory"
  echo "== NVML call costs (mean per call)"
  "$bin/nvml_calls" 2000
  echo
  echo "== gpumemd on the real NVML, 20 s"
  state=$(mktemp -d)
  printf '[poll]\ninterval = "1s"\n\n[state]\ndir = "%s"\n' "$state" > "$state/gpumemd.toml"
  "$bin/gpumemd" --config "$state/gpumemd.toml" --web.listen-address 127.0.0.1:9951 > "$state/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 20); do
    sleep 1
    curl -s http://127.0.0.1:9951/metrics | grep -E '^gpumem_poll_(source_)?duration_seconds ' | tr '\n' ' '
    echo
  done
  echo "== /proc/$pid/status"
  grep -E '^(VmRSS|RssAnon|RssFile|RssShmem|VmHWM|Threads)' "/proc/$pid/status"
  echo "== largest mappings by Rss (KiB)"
  awk '/^[0-9a-f]+-[0-9a-f]+ /{name=$6} /^Rss:/{rss[name]+=$2} END{for(n in rss) if(rss[n]>=256) printf "%8d %s\n", rss[n], (n==""?"[anon]":n)}' \
    "/proc/$pid/smaps" | sort -rn | head -20
  kill "$pid"; wait "$pid" 2>/dev/null
  rm -rf "$state"
} > "$out" 2>&1
cat "$out"
