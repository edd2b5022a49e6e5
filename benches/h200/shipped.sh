#!/usr/bin/env bash
# 5035943 against this code as each ships, on the GPU machine, in one bounded
# call; most wanted first, each step writing its own JSON under OUT:
#   8x64   the 8 x 64 simulated scrape, 1,000 scrapes a run, four builds
#          A B C D D C B A (both release builds and both LTO builds);
#   real   8 PyTorch processes: idle CPU, RSS, scrape p50, A B B A;
#   large  the 64 x 1000 fleet: poll time and VmHWM, A B B A.
# `real` and `large` compare the LTO builds: 5035943's release (its profile
# had fat LTO) against this code's `--profile dist`.
#
# Usage: STEPS="8x64 real large" benches/h200/shipped.sh OUT BASE_LTO NEW_DIST BASE NEW
# (the `scrape` client from `cargo build --release --example scrape` beside
# BASE_LTO; BENCHMARKS.md says how each build is made).
set -u
OUT=$1 BL=$2 ND=$3 BR=$4 NR=$5
mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
HERE=$(dirname "$0")
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'; } > "$OUT/machine.txt" 2>&1
want() { case " ${STEPS:-8x64 real large} " in *" $1 "*) return 0;; esac; return 1; }
step() { # NAME SECONDS VAR=VALUE... ; the builds in $B
  local n=$1 t=$2; shift 2; local R=/tmp/shipped-$n; mkdir -p $R
  # shellcheck disable=SC2086 # B is a list of NAME=BIN words
  env "$@" timeout -s INT "$t" python3 "$HERE/before_after.py" $R $B > "$OUT/ba-$n.log" 2>&1
  echo "rc=$? $(date -u +%T)" >> "$OUT/ba-$n.log"
  cp $R/before-after.json "$OUT/before-after-$n.json"
  grep -h '^{' "$OUT/ba-$n.log"
}
B="base-lto=$BL new-dist=$ND base=$BR new=$NR"
want 8x64 && step 8x64 110 BA_SKIP_REAL=1 BA_SKIP_LARGE=1 SBS_SCRAPES=1000
B="base=$BL new=$ND"
want real && step real 190 BA_SKIP_8X64=1 BA_SKIP_LARGE=1 SBS_IDLE=20 SBS_SCRAPES=300
want large && step large 150 BA_SKIP_REAL=1 BA_SKIP_8X64=1 BA_LARGE_SETTLE=15
exit 0
