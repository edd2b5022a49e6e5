#!/bin/sh
# gpumemd: did this job leave GPU memory behind? Slurm epilog: install as
# /etc/slurm/epilog.d/50-gpumemd.sh (Epilog=/etc/slurm/epilog.d/* in
# slurm.conf). Exit 1 from `gpumemd check` (memory left) drains the node;
# exit 2 (cannot tell: no daemon, NVML down) is only logged, so a daemon
# restart never drains a node. A drain that was wanted and failed is logged
# as an error and the epilog exits 1, so Slurm drains the node itself.
# See docs/slurm.md; tested by tests/cli/slurm.rs and .ci/slurm-check.sh.

# slurmd runs epilogs with no PATH at all. The settings file may add to it
# (a Slurm under /opt) and set GPUMEMD_URL.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
settings=${GPUMEMD_SLURM_SETTINGS:-/etc/default/gpumemd-slurm}
# shellcheck disable=SC1090
[ -r "$settings" ] && . "$settings"
export PATH
url=${GPUMEMD_URL:-http://127.0.0.1:9947}
node=${SLURMD_NODENAME:-$(hostname -s)}

out=$(gpumemd check --url "$url" --job "$SLURM_JOB_ID" --timeout 5s)
rc=$?
logger -t gpumemd-epilog "job $SLURM_JOB_ID: ${out:-no answer from gpumemd check (exit $rc)}"
case $rc in
  0) exit 0 ;;
  1)
    if why=$(scontrol update nodename="$node" state=drain reason="gpumemd: $out" 2>&1); then
      exit 0
    fi
    msg="job $SLURM_JOB_ID left GPU memory on $node and the drain failed: ${why:-scontrol exited non-zero} ($out)"
    echo "gpumemd-epilog: ERROR: $msg" >&2
    logger -p daemon.err -t gpumemd-epilog "ERROR: $msg"
    exit 1 ;;
  *) exit 0 ;;  # cannot tell: do not drain on a monitoring outage
esac
