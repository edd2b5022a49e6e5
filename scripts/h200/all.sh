#!/usr/bin/env bash
# Runs the GPU checks of the ledger, the forecast and the job-end report in
# sequence, each bounded by `timeout` into its own folder, never stopping at
# a failure, then prints one PASS/FAIL line per check (about 9 minutes at
# most). Usage: scripts/h200/all.sh GPUMEMD OUT_DIR
set -uo pipefail
gm=${1:?gpumemd binary}; out=${2:?out dir}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
gm=$(cd "$(dirname "$gm")" && pwd)/$(basename "$gm")
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$repo" || exit 2

run() {  # name seconds command...
  local name=$1 secs=$2; shift 2
  mkdir -p "$out/$name"
  local t0=$SECONDS
  timeout -k 10 "$secs" "$@" "$gm" "$out/$name" >"$out/$name/console.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$out/rc.txt"
}
: >"$out/rc.txt"
# Budgets: ledger bounds itself (LEDGER_BUDGET_S) inside its timeout; the
# forecast job starts 8 GiB short of full (about 65 s of growth).
run ledger 260 env LEDGER_BUDGET_S=235 python3 benches/h200/ledger.py
run forecast 150 env HEADROOM_GIB=8 bash scripts/h200/forecast.sh
run report 130 bash scripts/h200/report.sh

{
  echo "== gpumemd GPU checks ($(date -u +%FT%TZ))"
  cat "$out/rc.txt"
  for name in ledger forecast report; do
    f="$out/$name/summary.txt"
    if [ -s "$f" ]; then
      grep -E '^(PASS|FAIL)' "$f" | sed "s/^/$name: /" | cut -c1-220
    else
      echo "$name: FAIL no summary.txt (see $out/$name/console.txt)"
    fi
  done
} | tee "$out/summary.txt"
! grep -q ': FAIL' "$out/summary.txt"
