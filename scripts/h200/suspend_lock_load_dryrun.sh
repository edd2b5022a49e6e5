#!/usr/bin/env bash
# Dry run of scripts/h200/suspend_lock_load.sh without a GPU: the NVML
# stand-in as --nvml-lib and --cuda-lib, two `sleep` processes playing busy
# and idle (dryrun/workload.py), setpriv/capsh as on the GPU. The lock times
# are the stand-in's and it checks no capability (that line is SKIP).
# Usage: scripts/h200/suspend_lock_load_dryrun.sh GPUMEMD LIBFAKE_NVML OUT_DIR
set -uo pipefail
gm=${1:?gpumemd binary}; lib=$(realpath "${2:?libfake_nvml.so}"); out=${3:?out dir}
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
used = "2GiB"
sm_util = 0
[[device.process]]
pid = $busy
used = "4GiB"
sm_util = 90
TOML
export FAKE_NVML_SCENARIO="$work/scenario.toml" DRYRUN_PIDS="$work/pids" DRYRUN=1
export GPUMEMD_EXTRA_ARGS="--nvml-lib $lib --cuda-lib $lib" SUSPEND_WORKLOAD="$here/dryrun/workload.py"
bash "$here/suspend_lock_load.sh" "$gm" "$out"
