#!/usr/bin/env bash
# Dry run of scripts/h200/suspend.sh without a GPU (CI): the NVML stand-in
# is loaded as both --nvml-lib and --cuda-lib, two `sleep` processes play
# idle (8 GiB, SM 0 %) and busy (6 GiB, SM 60 %), a stand-in nvidia-smi
# answers from gpumemd's snapshot. Exercises the script, its config and
# suspend_run.py's judging end to end; the checkpoint times are the fake's.
# Usage: scripts/h200/suspend_dryrun.sh GPUMEMD LIBFAKE_NVML OUT_DIR
set -uo pipefail
gm=${1:?gpumemd binary}; lib=${2:?libfake_nvml.so}; out=${3:?out dir}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
sleep 300 & idle=$!
sleep 300 & busy=$!
trap 'kill $idle $busy 2>/dev/null; rm -rf "$work"' EXIT
echo "$idle $busy" >"$work/pids"
cat >"$work/scenario.toml" <<TOML
[[device]]
uuid = "GPU-dddddddd-2222-3333-4444-555555555555"
total = "143771MiB"
reserved = "0"
[[device.process]]
pid = $idle
used = "8GiB"
sm_util = 0
[[device.process]]
pid = $busy
used = "6GiB"
sm_util = 60
TOML
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export PORT PATH="$here/dryrun:$PATH" FAKE_NVML_SCENARIO="$work/scenario.toml" DRYRUN_PIDS="$work/pids"
export GPUMEMD_EXTRA_ARGS="--nvml-lib $lib --cuda-lib $lib" SUSPEND_WORKLOAD="$here/dryrun/workload.py"
bash "$here/suspend.sh" "$gm" "$out"
