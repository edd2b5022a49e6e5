#!/usr/bin/env bash
# `gpumemd check` on real NVML (about 1 minute, at most 3): what a Slurm
# epilog sees.
#  1. a live CUDA holder (PyTorch, 2 GiB): `check --url` and a local
#     `check` (polls NVML once itself) exit 0; `check --pid HOLDER` exits 1;
#  2. `kill -9` of the holder: whether the driver releases its memory or it
#     lingers (seconds until NVML stops listing the pid), and check's verdict
#     each second (1 LEFT while listed, 0 once gone);
#  3. a zombie holder: a CUDA child whose parent never reaps it; whether NVML
#     still lists a zombie, and check's verdict (1 naming the zombie while
#     listed, 0 if the driver released it at exit).
# PASS/FAIL lines and the measured numbers go to OUT_DIR/summary.txt; raw
# outputs beside it.
# Usage: scripts/h200/check.sh GPUMEMD OUT_DIR
# Dry run without a GPU: NVML_LIB=target/debug/deps/libfake_nvml.so DRY=1
#   scripts/h200/check.sh target/debug/gpumemd OUT_DIR (the stand-in lists the
#   holders' real pids, so the kill -9 case shows the "lingers" path).
set -uo pipefail
gm=${1:?gpumemd binary}; out=${2:?out dir}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
: >"$out/summary.txt"
work=$(mktemp -d)
port=${PORT:-19948}
url="http://127.0.0.1:$port"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
say() { echo "$*" | tee -a "$out/summary.txt"; }
wait_file() { for _ in $(seq "$2"); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }
smi_has() {  # is pid $1 in NVML's process list? (the stand-in lists its scenario's pids always)
  if [ -n "${NVML_LIB:-}" ]; then return 0; fi
  timeout 10 nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -qx "$1"
}
check() {  # one check run: "rc line"
  local o rc
  o=$(timeout 20 "$gm" check "$@" --timeout 5s 2>>"$out/check.stderr"); rc=$?
  echo "$rc $o"
}

# --- the holders first (the stand-in's scenario needs their pids) ----------
python3 "$here/check_holder.py" hold "$work/hold.pid" >"$out/holder.log" 2>&1 &
pids+=($!)
python3 "$here/check_holder.py" zombie "$work/zombie.pid" "$work/zombie.exit" >"$out/zombie.log" 2>&1 &
pids+=($!)
wait_file "$work/hold.pid" 600 && wait_file "$work/zombie.pid" 600 || { say "FAIL holders: no CUDA allocation within 60 s (see holder.log, zombie.log)"; exit 1; }
hold=$(cat "$work/hold.pid"); zombie=$(cat "$work/zombie.pid"); zparent=$(cat "$work/zombie.pid.parent")
pids+=("$zombie" "$zparent")
echo "holder $hold, zombie-to-be $zombie (parent $zparent)" >"$out/pids"

args=(--config "$work/gpumemd.toml" --web.listen-address "127.0.0.1:$port")
cat >"$work/gpumemd.toml" <<TOML
[poll]
interval = "1s"
[state]
dir = "$work/state"
TOML
if [ -n "${NVML_LIB:-}" ]; then
  cat >"$work/scenario.toml" <<TOML
[[device]]
uuid = "GPU-0c4e0b53-1d7e-4c57-9a3c-9d5c4e1b2a01"
[[device.process]]
pid = $hold
used = "2GiB"
[[device.process]]
pid = $zombie
used = "1GiB"
TOML
  export FAKE_NVML_SCENARIO="$work/scenario.toml"
  args+=(--nvml-lib "$NVML_LIB")
fi
"$gm" "${args[@]}" >"$out/gpumemd.log" 2>&1 &
gpid=$!; pids+=("$gpid")
seen=""
for _ in $(seq 300); do
  curl -sf -m 2 "$url/api/v1/snapshot" -o "$work/snap.json" 2>/dev/null \
    && grep -q "\"pid\":$hold[,}]" "$work/snap.json" && { seen=1; break; }
  sleep 0.1
done
[ -n "$seen" ] || { say "FAIL daemon: pid $hold not in the snapshot within 30 s (gpumemd.log)"; exit 1; }
cp "$work/snap.json" "$out/snapshot-live.json"
{ nvidia-smi 2>&1 || true; } >"$out/nvidia-smi-live.txt"

# --- 1. live holders ----------------------------------------------------------
r=$(check --url "$url"); echo "url: $r" >>"$out/check-live.txt"
[ "${r%% *}" = 0 ] && say "PASS live: check --url exit 0 with live holders ($r)" || say "FAIL live: check --url: $r"
if [ -z "${NVML_LIB:-}" ]; then r=$(check); else r=$(check --nvml-lib "$NVML_LIB"); fi
echo "local: $r" >>"$out/check-live.txt"
[ "${r%% *}" = 0 ] && say "PASS live: local check (one NVML poll) exit 0 ($r)" || say "FAIL live: local check: $r"
r=$(check --url "$url" --pid "$hold"); echo "pid: $r" >>"$out/check-live.txt"
[ "${r%% *}" = 1 ] && say "PASS scoped: check --pid $hold exit 1 while it holds memory" || say "FAIL scoped: check --pid $hold: $r"

# --- 2. kill -9 ----------------------------------------------------------------
kill -9 "$hold"; t0=$(date +%s.%N); gone=""; final=""
for i in $(seq 20); do
  sleep 1
  listed=no; smi_has "$hold" && listed=yes
  r=$(check --url "$url" --pid "$hold")
  t=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')  # no bc on minimal hosts
  echo "t=$t listed=$listed check=$r" >>"$out/kill9.txt"
  final="$listed $r"
  if [ "$listed" = no ] && [ -z "$gone" ]; then gone=$t; fi
  [ -n "$gone" ] && [ "${r%% *}" = 0 ] && break
done
if [ -n "$gone" ]; then
  say "INFO kill9: the driver released pid $hold's memory; NVML stopped listing it after ${gone}s"
  [ "$(echo "$final" | cut -d' ' -f2)" = 0 ] \
    && say "PASS kill9: check exit 0 once the memory was released (last: $final)" \
    || say "FAIL kill9: released, but check still says: $final"
else
  say "INFO kill9: pid $hold's memory lingers 20 s after kill -9 (NVML still lists it)"
  echo "$final" | grep -q "^yes 1 LEFT" \
    && say "PASS kill9: check exit 1 LEFT while it lingers ($final)" \
    || say "FAIL kill9: memory lingers but check says: $final"
fi

# --- 3. a zombie holder ------------------------------------------------------------
touch "$work/zombie.exit"
state=""
for _ in $(seq 100); do
  state=$(awk '{print $3}' "/proc/$zombie/stat" 2>/dev/null)
  [ "$state" = Z ] && break; sleep 0.1
done
[ "$state" = Z ] && say "INFO zombie: pid $zombie is a zombie (parent $zparent does not reap it)" \
  || say "FAIL zombie: pid $zombie did not become a zombie (state '$state')"
# How soon the daemon names it: it reads a watched process's stat only
# every few seconds, so its exit watch must tell it by the next poll.
holder_of() {  # holder of pid $1 in the daemon's snapshot, or "absent"
  curl -sf -m 2 "$url/api/v1/snapshot" 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin); print(" ".join(p.get("holder","?") for d in s["devices"] for p in d["processes"] if p["pid"]==int(sys.argv[1])) or "absent")' "$1" 2>/dev/null
}
zt0=$(date +%s.%N); named=""
for _ in $(seq 100); do
  h=$(holder_of "$zombie")
  if [ "$h" = zombie ]; then named=$(awk -v a="$(date +%s.%N)" -v b="$zt0" 'BEGIN { printf "%.1f", a - b }'); break; fi
  [ "$h" = absent ] && break
  sleep 0.1
done
sleep 3  # three polls
listed=no; smi_has "$zombie" && listed=yes
r=$(check --url "$url"); echo "listed=$listed check=$r" >>"$out/zombie.txt"
curl -sf -m 5 "$url/api/v1/snapshot" -o "$out/snapshot-zombie.json"
{ nvidia-smi 2>&1 || true; } >"$out/nvidia-smi-zombie.txt"
if [ "$listed" = yes ]; then
  say "INFO zombie: NVML still lists the zombie pid $zombie"
  holder=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(" ".join(p.get("holder","?") for d in s["devices"] for p in d["processes"] if p["pid"]==int(sys.argv[2])) or "absent")' "$out/snapshot-zombie.json" "$zombie" 2>/dev/null)
  say "INFO zombie: the daemon calls pid $zombie's memory: $holder"
  if [ -n "$named" ] && awk -v t="$named" 'BEGIN { exit !(t <= 2.5) }'; then
    say "PASS zombie: the daemon named it zombie ${named}s after the kernel did (within two 1 s polls)"
  else
    say "FAIL zombie: the daemon took ${named:-more than 10 }s to name it zombie (two polls allowed)"
  fi
  [ "${r%% *}" = 1 ] && echo "$r" | grep -q LEFT && [ "$holder" = zombie ] \
    && say "PASS zombie: check exit 1 LEFT, the daemon names the holder zombie ($r)" \
    || say "FAIL zombie: listed zombie, holder '$holder', check says: $r"
else
  say "INFO zombie: the driver released the zombie's memory at exit (NVML does not list pid $zombie)"
  [ "${r%% *}" = 0 ] && say "PASS zombie: check exit 0, nothing left ($r)" || say "FAIL zombie: check says: $r"
fi
kill "$gpid" 2>/dev/null
grep -c '^FAIL' "$out/summary.txt" >/dev/null && exit 1 || exit 0
