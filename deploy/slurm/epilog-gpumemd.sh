#!/bin/sh
# gpumemd: did this job leave GPU memory behind? Slurm epilog: install as
# /etc/slurm/epilog.d/50-gpumemd.sh (Epilog=/etc/slurm/epilog.d/* in
# slurm.conf). Exit 1 from `gpumemd check` (memory left) drains the node;
# exit 2 (cannot tell: no daemon, NVML down) is only logged, so a daemon
# restart never drains a node. See docs/slurm.md; tested by tests/check.rs.
url=${GPUMEMD_URL:-http://127.0.0.1:9947}
out=$(gpumemd check --url "$url" --job "$SLURM_JOB_ID" --timeout 5s)
rc=$?
logger -t gpumemd-epilog "job $SLURM_JOB_ID: $out"
case $rc in
  0) exit 0 ;;
  1) scontrol update nodename="$(hostname -s)" state=drain reason="gpumemd: $out" ; exit 0 ;;
  *) exit 0 ;;  # cannot tell: do not drain on a monitoring outage
esac
