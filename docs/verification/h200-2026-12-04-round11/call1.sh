#!/bin/bash
# Round 11 device call: both binaries' --demo large run the whole call (gzip scrape
# every 30 s, VmRSS/VmHWM every 10 s); meanwhile idle A/B, 8 x 64 scrape A/B
# (plain and gzip) and check.sh; at the end 50 gzip and 50 plain scrapes of each
# large daemon. Run from the repo root.
START=$(date +%s); K=target/h200r14; chmod +x $K/gpumemd $K/gpumemd-base $K/scrape
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt; uname -r; nproc; date -u
L=$OUT/long; mkdir -p $L
for b in base new; do
  bin=$K/gpumemd; port=19981; [ $b = base ] && { bin=$K/gpumemd-base; port=19980; }
  ( $bin --demo large --web.listen-address 127.0.0.1:$port > /tmp/large-$b.log 2>&1 & p=$!
    echo $p > /tmp/pid-$b; t0=$(date +%s)
    while kill -0 $p 2>/dev/null; do
      sleep 10; t=$(( $(date +%s) - t0 ))
      [ $(( t / 10 % 3 )) -eq 0 ] && curl -s --compressed 127.0.0.1:$port/metrics > /dev/null
      echo "$t $(awk '/VmRSS|VmHWM/{printf "%s=%s ", $1, $2}' /proc/$p/status)" >> $L/rss-$b.txt
    done ) &
done
for b in base new; do
  bin=$K/gpumemd; [ $b = base ] && bin=$K/gpumemd-base
  IDLE_WARMUP=30 bash scripts/h200/idle-profile.sh $bin $K/libnvml_timer.so $OUT/idle-$b 45 > $OUT/idle-$b.log 2>&1
  echo "### idle $b"; grep -v "^   nvml nvmlDevice\(GetCount\|GetHandle\|GetUUID\)" $OUT/idle-$b/summary.txt
done
cp $K/8x64.toml $OUT/8x64.toml
for r in 1 2 3; do for b in gpumemd-base gpumemd; do
  $K/$b --demo $OUT/8x64.toml --web.listen-address 127.0.0.1:9950 > /dev/null 2>&1 & p=$!
  for i in $(seq 50); do curl -sf 127.0.0.1:9950/metrics > /dev/null && break; sleep 0.2; done; sleep 3
  echo "$r $b plain $($K/scrape 127.0.0.1:9950 /metrics 300 | tail -1)"
  echo "$r $b gzip $($K/scrape 127.0.0.1:9950 /metrics 300 --gzip | tail -1)"
  kill $p; wait $p 2>/dev/null
done; done | tee $OUT/scrape-ab.txt
bash scripts/h200/check.sh $K/gpumemd $OUT/check > $OUT/check.log 2>&1; grep -E "PASS|FAIL" $OUT/check/summary.txt
while [ $(( $(date +%s) - START )) -lt 540 ]; do sleep 5; done
for b in base new; do port=19981; [ $b = base ] && port=19980
  echo "$b gzip $($K/scrape 127.0.0.1:$port /metrics 50 --gzip | tail -1)"
  echo "$b plain $($K/scrape 127.0.0.1:$port /metrics 50 | tail -1)"
  echo "$b after scrapes $(awk '/VmRSS|VmHWM/{printf "%s=%s ", $1, $2}' /proc/$(cat /tmp/pid-$b)/status)"
done | tee $OUT/large-scrapes.txt
for b in base new; do kill $(cat /tmp/pid-$b); done; sleep 1
tail -4 $L/rss-base.txt $L/rss-new.txt; date -u; echo done
