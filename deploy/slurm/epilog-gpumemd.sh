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
status=0
case $rc in
  0) ;;
  1)
    if ! why=$(scontrol update nodename="$node" state=drain reason="gpumemd: $out" 2>&1); then
      msg="job $SLURM_JOB_ID left GPU memory on $node and the drain failed: ${why:-scontrol exited non-zero} ($out)"
      echo "gpumemd-epilog: ERROR: $msg" >&2
      logger -p daemon.err -t gpumemd-epilog "ERROR: $msg"
      status=1
    fi ;;
  *) ;;  # cannot tell: do not drain on a monitoring outage
esac

# The job's GPU memory report (peak, p95, idle, left behind, a suggested
# request), logged and appended to the job's output file where Slurm names
# one. Written as the job's user (runuser), never as root: the path is the
# user's to choose. Best effort: nothing here fails the epilog.
gpumemd_report() {
  rep=$(gpumemd report --url "$url" --job "$SLURM_JOB_ID" --wait 10s --timeout 5s 2>/dev/null) || return 0
  logger -t gpumemd-epilog "job $SLURM_JOB_ID report: $(printf '%s\n' "$rep" | head -n 1)"
  dest=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n 's/^StdOut=//p' | head -n 1)
  [ -n "$dest" ] && [ -f "$dest" ] && [ -n "$SLURM_JOB_USER" ] || return 0
  command -v runuser >/dev/null 2>&1 || return 0
  # shellcheck disable=SC2016 # $1 is expanded by the inner sh, on purpose
  printf '\n%s\n' "$rep" | runuser -u "$SLURM_JOB_USER" -- sh -c 'cat >> "$1"' sh "$dest" 2>/dev/null
  return 0
}
gpumemd_report
exit "$status"
