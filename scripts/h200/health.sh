#!/usr/bin/env bash
# Memory health on a real GPU, in one run (about 2-3 minutes, every step
# under its own timeout), judged by scripts/h200/health_check.py:
#  - every NVML health call's real answer and cost on GPU 0 (1000 calls each,
#    Python ctypes: nvml_health_calls.py), beside nvidia-smi's view of the
#    same counters;
#  - the health families gpumemd exports in /metrics (present where the call
#    answered, absent where it said NOT_SUPPORTED), their values against
#    nvidia-smi, no health errors in the snapshot, Xid events registered;
#  - the poll's cost with [health] on vs off: gpumem_poll_source_duration_seconds
#    and gpumem_poll_duration_seconds of every poll at 250 ms, two rounds of
#    each, alternated.
# Writes OUT_DIR/summary.txt (PASS / FAIL / INFO lines with the numbers),
# OUT_DIR/benchmarks.md (the table for BENCHMARKS.md), OUT_DIR/health-lines.prom
# (the raw health samples of /metrics with health on, to keep as evidence),
# OUT_DIR/events-on.json (GET /api/v1/events) and the raw logs.
# Usage: scripts/h200/health.sh GPUMEMD OUT_DIR
# Dry run without a GPU (what .ci/run does, shorter with SECS=4 ROUNDS=100):
#   NVML_LIB=target/debug/deps/libfake_nvml.so \
#   FAKE_NVML_SCENARIO=tests/fake-nvml/scenarios/health-h200.toml \
#   scripts/h200/health.sh target/debug/gpumemd /tmp/h
set -uo pipefail
gm=${1:?usage: health.sh GPUMEMD OUT_DIR}; out=${2:?usage: health.sh GPUMEMD OUT_DIR}
gm=$(realpath "$gm")
here=$(cd "$(dirname "$0")" && pwd)
lib=${NVML_LIB:-libnvidia-ml.so.1}
mkdir -p "$out"
work=$(mktemp -d)
port=${PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
secs=${SECS:-20}      # seconds of polls per daemon run
rounds=${ROUNDS:-1000}
gpid=
cleanup() {
  if [ -n "$gpid" ]; then kill "$gpid" 2>/dev/null; wait "$gpid" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== nvidia-smi"
if command -v nvidia-smi >/dev/null; then
  timeout 30 nvidia-smi -q -i 0 -d ECC,ROW_REMAPPER,PAGE_RETIREMENT,TEMPERATURE >"$out/nvidia-smi-q.txt" 2>&1
  # One field per call: an unknown field fails the whole query.
  for f in uuid ecc.mode.current ecc.errors.corrected.volatile.total ecc.errors.uncorrected.volatile.total \
           ecc.errors.corrected.aggregate.total ecc.errors.uncorrected.aggregate.total temperature.memory \
           retired_pages.pending remapped_rows.correctable remapped_rows.uncorrectable remapped_rows.pending \
           remapped_rows.failure; do
    v=$(timeout 10 nvidia-smi -i 0 --query-gpu="$f" --format=csv,noheader,nounits 2>&1 | head -1)
    printf '%s\t%s\n' "$f" "$v"
  done >"$out/nvidia-smi-fields.tsv"
else
  echo "nvidia-smi not found" >"$out/nvidia-smi-q.txt"; : >"$out/nvidia-smi-fields.tsv"
fi

echo "== NVML health calls ($rounds each)"
timeout 120 python3 "$here/nvml_health_calls.py" "$lib" "$rounds" >"$out/calls.jsonl" 2>"$out/calls.err"
echo "calls exit $?" >>"$out/calls.err"

# run_daemon NAME HEALTH_TOML: gpumemd at 250 ms polls for $secs s; every poll's
# durations to OUT/poll-NAME.jsonl, the last /metrics and snapshot kept.
run_daemon() {
  local name=$1 health=$2
  cat >"$work/$name.toml" <<TOML
[poll]
interval = "250ms"
[state]
dir = "$work/state"
$health
TOML
  local args=(--config "$work/$name.toml" --web.listen-address "127.0.0.1:$port")
  [ -n "${NVML_LIB:-}" ] && args+=(--nvml-lib "$NVML_LIB")
  "$gm" "${args[@]}" >"$out/gpumemd-$name.log" 2>&1 &
  gpid=$!
  local ready=
  for _ in $(seq 150); do
    if curl -sf -m 2 "http://127.0.0.1:$port/-/ready" >/dev/null; then ready=1; break; fi
    kill -0 "$gpid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$ready" ]; then
    echo "gpumemd ($name) never became ready" >>"$out/daemon-errors.txt"
  else
    timeout $((secs + 20)) python3 - "$port" "$secs" "$out/poll-$name.jsonl" <<'PY'
import json, sys, time, urllib.request
port, secs, path = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
end, seen = time.time() + secs, set()
with open(path, "a") as f:
    while time.time() < end:
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
        except Exception as e:
            f.write(json.dumps({"error": str(e)}) + "\n"); time.sleep(0.1); continue
        v = {}
        for line in body.splitlines():
            for k in ("gpumem_polls_total", "gpumem_poll_duration_seconds", "gpumem_poll_source_duration_seconds"):
                if line.startswith(k + " "):
                    v[k] = float(line.split()[-1])
        n = v.get("gpumem_polls_total")
        if n is not None and n not in seen and n > 2:  # the first polls warm caches up
            seen.add(n)
            f.write(json.dumps(v) + "\n")
        time.sleep(0.1)
PY
    curl -s -m 5 "http://127.0.0.1:$port/metrics" >"$out/metrics-$name.prom"
    # The memory temperature drifts (a GPU cools after a workload): read
    # nvidia-smi's beside the scrape the checker compares it with.
    command -v nvidia-smi >/dev/null &&
      timeout 10 nvidia-smi -i 0 --query-gpu=temperature.memory --format=csv,noheader,nounits \
        >"$out/nvidia-smi-temp-$name.txt" 2>&1
    curl -s -m 5 "http://127.0.0.1:$port/api/v1/snapshot" >"$out/snapshot-$name.json"
    curl -s -m 5 "http://127.0.0.1:$port/api/v1/events" >"$out/events-$name.json"
  fi
  kill "$gpid" 2>/dev/null; wait "$gpid" 2>/dev/null; gpid=
}

: >"$out/daemon-errors.txt"
rm -f "$out"/poll-*.jsonl
for round in 1 2; do
  echo "== gpumemd with health on (round $round)"
  run_daemon on ""
  echo "== gpumemd with health off (round $round)"
  run_daemon off $'[health]\nenabled = false\nxid_events = false'
done

# The raw health samples (and their HELP/TYPE), small enough to keep in
# docs/verification beside the summary.
grep -E '^(# (HELP|TYPE) )?gpumem_(device_(ecc_|remapped_rows|row_remap_|retired_pages|memory_temperature|xid_errors)|poll_(source_)?duration_seconds)' \
  "$out/metrics-on.prom" >"$out/health-lines.prom" 2>/dev/null

timeout 60 python3 "$here/health_check.py" "$out" | tee "$out/report.txt"
