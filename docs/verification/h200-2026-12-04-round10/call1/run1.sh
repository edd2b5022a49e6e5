#!/bin/bash
# Round 10 device call 1: idle A/B (base then new), --demo large A/B. Run from the repo root.
K=target/h200r13; chmod +x $K/gpumemd $K/gpumemd-base $K/all-smi $K/scrape 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt; uname -r; nproc
for b in base new; do
  bin=$K/gpumemd; [ $b = base ] && bin=$K/gpumemd-base
  IDLE_WARMUP=30 bash scripts/h200/idle-profile.sh $bin $K/libnvml_timer.so $OUT/idle-$b 45 > $OUT/idle-$b.log 2>&1
  echo "### idle $b"; grep -v "^   nvml nvmlDevice\(GetCount\|GetHandle\|GetUUID\)" $OUT/idle-$b/summary.txt
done
sched() { local t=0 n; for d in /proc/$1/task/*; do n=$(cat $d/comm); [[ $n == $2* ]] && t=$((t + $(cut -d' ' -f1 $d/schedstat))); done; echo $t; }
large() { local name=$1 bin=$2 secs=$3; shift 3
  $bin --demo large "$@" --web.listen-address 127.0.0.1:19971 > $OUT/large-$name.log 2>&1 & local p=$! prev=0
  for t in 10 30 60; do [ $t -gt $secs ] && break; sleep $((t - prev)); prev=$t
    local m; m=$(curl -s --compressed 127.0.0.1:19971/metrics)
    echo "large $name t=$t $(grep VmRSS /proc/$p/status | tr -s ' ') $(grep VmHWM /proc/$p/status | tr -s ' ') poll=$(echo "$m" | awk '/^gpumem_poll_duration_seconds /{print $2}') polls=$(echo "$m" | awk '/^gpumem_polls_total /{print $2}') poll_thread_cpu_ns=$(sched $p gpumemd-poll) http_cpu_ns=$(sched $p gpumemd-http)"
  done; kill $p; wait $p 2>/dev/null; }
large base $K/gpumemd-base 60; large new $K/gpumemd 60
large base-prodleak $K/gpumemd-base 30 --config $K/prodleak.toml; large new-prodleak $K/gpumemd 30 --config $K/prodleak.toml
tar czf $OUT/run1.tgz -C $OUT gpu.txt idle-base idle-new idle-base.log idle-new.log 2>/dev/null; echo done1
