# Sourced by the H200 idle scripts (idle.sh, idle-profile.sh): the workload
# they measure against. start_workers N DIR SECONDS starts N PyTorch
# processes that each hold 1 GiB on the GPU and sleep, at most SECONDS,
# appends their PIDs to the caller's `pids` array, and returns once all N
# say they are ready (or after 60 s; the caller counts DIR/ready.*).
start_workers() {
  local n=$1 dir=$2 secs=$3 i
  for i in $(seq "$n"); do
    timeout "$secs" python3 -c '
import torch, time, sys
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
open(sys.argv[1], "w").close()
time.sleep(3600)' "$dir/ready.$i" >"$dir/w$i.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 600); do [ "$(ls "$dir"/ready.* 2>/dev/null | wc -l)" -ge "$n" ] && break; sleep 0.1; done
}
