#!/usr/bin/env bash
# The Slurm recipes (deploy/slurm) against a real single-node Slurm from
# Debian's slurm-wlm: munged, slurmctld and slurmd on this machine with a
# minimal slurm.conf whose Epilog is deploy/slurm/epilog-gpumemd.sh itself,
# so slurmd runs it as in production (no PATH). `gpumemd check` (BIN) asks
# a fixture daemon (a static file server) whose one holder belongs to the
# job the test names.
#  1. NHC with a job running: its holder is allowed (exit 0); a holder of
#     a job not running here is a leftover (exit 1).
#  2. slurmctld stopped: NHC still answers from the node alone (exit 0),
#     and a wanted drain fails loudly (epilog exit 1, ERROR on stderr).
#  3. slurmctld back, the job cancelled: slurmd's epilog finds its holder
#     and the node drains with the reason "gpumemd: LEFT ...".
# Writes /etc/default/gpumemd-slurm (the recipes' settings file; an
# existing one is put back on exit). Root only.
# Usage: .ci/slurm-check.sh BIN
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "$1")
repo=$(pwd)

if ! command -v slurmd >/dev/null || ! command -v slurmctld >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm >/dev/null
fi

work=$(mktemp -d /tmp/gpumemd-slurm.XXXXXX)
chmod 755 "$work"
settings=/etc/default/gpumemd-slurm
pids=()
munged_pid=
cleanup() {
  local f p
  for f in "$work"/slurmd.pid "$work"/slurmctld.pid; do
    p=$(cat "$f" 2>/dev/null) || continue
    kill "$p" 2>/dev/null || continue
    # Let it write its state before the directory goes.
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -n "$munged_pid" ]; then kill "$munged_pid" 2>/dev/null || true; fi
  rm -f "$settings"
  [ -e "$work/settings.orig" ] && mv "$work/settings.orig" "$settings"
  rm -rf "$work"
}
trap cleanup EXIT
[ -e "$settings" ] && cp -p "$settings" "$work/settings.orig"

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then echo "slurm check: timed out waiting for: $*" >&2; return 1; fi
    sleep 0.2
  done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# munge: Debian's package made the key; start the daemon unless running.
if ! munge -n >/dev/null 2>&1; then
  mkdir -p /run/munge
  chown munge:munge /run/munge 2>/dev/null || true
  munged --force 2>/dev/null || munged --force
  munged_pid=$(cat /run/munge/munged.pid)
fi
wait_for 10 munge -n

node=$(hostname -s)
mkdir -p "$work/state" "$work/spool"
cat > "$work/slurm.conf" <<EOF
ClusterName=gpumemd-ci
SlurmctldHost=$node
NodeName=$node CPUs=1 State=UNKNOWN
PartitionName=ci Nodes=$node Default=YES State=UP
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SelectType=select/cons_tres
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
Epilog=$repo/deploy/slurm/epilog-gpumemd.sh
EOF
export SLURM_CONF=$work/slurm.conf

# The fixture daemon: GET /api/v1/snapshot is a file, rewritten per step.
mkdir -p "$work/www/api/v1" "$work/bin"
port=$(free_port)
python3 -m http.server --bind 127.0.0.1 --directory "$work/www" "$port" >/dev/null 2>&1 &
pids+=($!)
holder() {  # the fixture's first holder, of job $1, alone
  python3 - "$1" "$work/www/api/v1/snapshot" <<'PY'
import json, sys
d = json.load(open("tests/fixtures/check/job-left.json"))
p = d["devices"][0]["processes"][0]
p["job"] = sys.argv[1]
d["devices"][0]["processes"] = [p]
d["devices"][0]["memory"]["used_bytes"] = d["devices"][0]["holders"]["live"] = p["used_bytes"]
json.dump(d, open(sys.argv[2], "w"))
PY
}
holder 0
ln -s "$bin" "$work/bin/gpumemd"
# What an operator writes: where gpumemd is and where it listens.
# shellcheck disable=SC2016  # $PATH is for the recipe to expand
printf 'PATH=%s:$PATH\nGPUMEMD_URL=http://127.0.0.1:%s\n' "$work/bin" "$port" > "$settings"
wait_for 10 curl -sf "http://127.0.0.1:$port/api/v1/snapshot"

slurmctld -f "$SLURM_CONF" -L "$work/slurmctld.log"
slurmd -f "$SLURM_CONF" -L "$work/slurmd.log"
node_state() { scontrol show node "$node" | grep -oE 'State=[^ ]+|Reason=.*' | tr '\n' ' '; }
wait_for 60 sh -c "sinfo -h -n '$node' -o %t | grep -qx idle"
job=$(sbatch --parsable -o /dev/null --wrap 'sleep 600')
wait_for 60 sh -c "scontrol listpids $job | grep -q \" $job \""
echo "slurm check: $(slurmd -V) on $node, job $job running"

nhc() { env -i SLURM_CONF="$SLURM_CONF" /bin/sh deploy/slurm/gpumemd-nhc; }
holder "$job"
out=$(nhc) || { echo "slurm check: NHC failed with job $job running: $out" >&2; exit 1; }
echo "NHC, job $job's holder while it runs: $out"
holder $((job + 1000))
if out=$(nhc); then echo "slurm check: NHC passed a leftover: $out" >&2; exit 1; fi
echo "NHC, a holder of a job not running here: $out"

kill "$(cat "$work/slurmctld.pid")"
wait_for 30 sh -c "! scontrol ping | grep -q UP"
holder "$job"
out=$(nhc) || { echo "slurm check: NHC needed slurmctld: $out" >&2; exit 1; }
echo "NHC, slurmctld down: $out"
if env -i SLURM_CONF="$SLURM_CONF" SLURM_JOB_ID="$job" SLURMD_NODENAME="$node" /bin/sh deploy/slurm/epilog-gpumemd.sh 2>"$work/err"; then
  echo "slurm check: the epilog passed although its drain failed" >&2; exit 1
fi
grep -q "gpumemd-epilog: ERROR: job $job left GPU memory on $node and the drain failed" "$work/err" \
  || { echo "slurm check: no loud error for the failed drain:" >&2; cat "$work/err" >&2; exit 1; }
echo "epilog, slurmctld down: $(head -c 200 "$work/err")"

slurmctld -f "$SLURM_CONF" -L "$work/slurmctld.log"
wait_for 60 sh -c "scontrol ping | grep -q UP"
scancel "$job"
# slurmd runs the epilog with its own environment: no PATH, SLURMD_NODENAME.
if ! wait_for 60 sh -c "scontrol show node '$node' | grep -q 'Reason=gpumemd: LEFT'"; then
  echo "slurm check: the node did not drain: $(node_state)" >&2
  tail -20 "$work/slurmd.log" >&2
  exit 1
fi
echo "epilog run by slurmd after job $job: $(node_state)"
echo "slurm check passed: NHC from the node's own slurmstepd, loud failed drain, slurmd's epilog drains on a leftover"
