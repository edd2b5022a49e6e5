#!/bin/bash
# Round 11 device call 2: both binaries' --demo large side by side for ~570 s,
# a gzip scrape of each every 15 s (as Prometheus), VmRSS/VmHWM every 10 s; then
# the poll thread's CPU and poll duration. Run from the repo root.
START=$(date +%s); K=target/h200r14; chmod +x $K/gpumemd $K/gpumemd-base $K/scrape
date -u; L=$OUT/long; mkdir -p $L; rm -f /tmp/cpu300-*
sched() { local t=0 n; for d in /proc/$1/task/*; do n=$(cat $d/comm); [[ $n == $2* ]] && t=$((t + $(cut -d' ' -f1 $d/schedstat))); done; echo $t; }
for b in base new; do
  bin=$K/gpumemd; port=19981; [ $b = base ] && { bin=$K/gpumemd-base; port=19980; }
  $bin --demo large --web.listen-address 127.0.0.1:$port > /tmp/large-$b.log 2>&1 & echo $! > /tmp/pid-$b
done
t0=$(date +%s)
while [ $(( $(date +%s) - START )) -lt 570 ]; do
  sleep 5; t=$(( $(date +%s) - t0 ))
  for b in base new; do port=19981; [ $b = base ] && port=19980; p=$(cat /tmp/pid-$b)
    [ $(( t / 5 % 3 )) -eq 0 ] && curl -s --compressed 127.0.0.1:$port/metrics > /dev/null
    [ $t -ge 300 ] && [ ! -f /tmp/cpu300-$b ] && echo "$t $(sched $p gpumemd-poll)" > /tmp/cpu300-$b
    [ $(( t / 5 % 2 )) -eq 0 ] && echo "$t $b $(awk '/VmRSS|VmHWM/{printf "%s%s ", $1, $2}' /proc/$p/status)" >> $L/rss.txt
  done
done
for b in base new; do port=19981; [ $b = base ] && port=19980; p=$(cat /tmp/pid-$b)
  m=$(curl -s --compressed 127.0.0.1:$port/metrics)
  echo "$b end t=$(( $(date +%s) - t0 )) $(awk '/VmRSS|VmHWM/{printf "%s%s ", $1, $2}' /proc/$p/status) poll_thread_ns=$(sched $p gpumemd-poll) at300=$(cat /tmp/cpu300-$b 2>/dev/null) poll=$(echo "$m" | awk '/^gpumem_poll_duration_seconds /{print $2}') polls=$(echo "$m" | awk '/^gpumem_polls_total /{print $2}')"
  kill $p
done | tee $L/end.txt
awk '{print $2, $1, $3, $4}' $L/rss.txt | sort -k1,1 -k2,2n | awk '$2 % 30 < 10'
date -u; echo done
