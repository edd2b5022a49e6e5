#!/usr/bin/env bash
# Side-by-side footprint of gpumemd and its peers on one GPU machine, in one
# run of under 8 minutes: N=8 PyTorch processes hold GPU memory while each
# exporter in turn is measured for idle CPU (60 s, no scrapes), RSS, scrape
# latency p50/p99 over 1000 sequential scrapes, CPU per scrape, series count
# and body size; a `nvidia-smi --query-...` per scrape is the baseline; last,
# gpumemd --demo on a generated 8 GPU x 64 process fleet, scrapes only (the
# scrape target's size, which no lent machine has).
# Peers run only when present in BIN_DIR:
#   BIN_DIR/gpumemd                 required
#   BIN_DIR/wheels/*.whl            nvitop + nvitop-exporter wheels (pure Python;
#                                   nvidia-ml-py, psutil, prometheus-client are
#                                   already on the machine)
#   BIN_DIR/all-smi, BIN_DIR/lib/   all-smi and the libdrm it links
# Writes OUT_DIR/side-by-side.md (table, ratios vs gpumemd, targets),
# OUT_DIR/side-by-side.json (raw) and OUT_DIR/NAME.prom (each exporter's
# last scrape). side_by_side.py beside this file does the
# work; its docstring lists the SBS_* overrides for a run without a GPU.
# Usage: benches/h200/side-by-side.sh BIN_DIR OUT_DIR
set -uo pipefail
bin=$(cd "${1:?usage: side-by-side.sh BIN_DIR OUT_DIR}" && pwd)
out=${2:?usage: side-by-side.sh BIN_DIR OUT_DIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$bin/gpumemd" ] || { echo "no executable $bin/gpumemd" >&2; exit 2; }
chmod +x "$bin/gpumemd" "$bin/all-smi" 2>/dev/null
# Nothing else may hold the ports.
for p in 9947 9948 9949 9950; do
  if (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo "port $p is in use" >&2; exit 2; fi
done
PYTHONUNBUFFERED=1 exec python3 "$here/side_by_side.py" "$bin" "$out"
