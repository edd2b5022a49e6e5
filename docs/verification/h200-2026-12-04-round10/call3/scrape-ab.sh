#!/bin/bash
# Round 10: 8 x 64 demo scrape p50, round 9's binary and this one alternated. Run from the repo root.
K=target/h200r13; chmod +x $K/gpumemd $K/gpumemd-base $K/scrape
cp $K/8x64.toml $OUT/8x64.toml
for r in 1 2 3; do for b in gpumemd-base gpumemd; do
  $K/$b --demo $OUT/8x64.toml --web.listen-address 127.0.0.1:9950 > /dev/null 2>&1 & p=$!
  for i in $(seq 50); do curl -sf 127.0.0.1:9950/metrics > /dev/null && break; sleep 0.2; done; sleep 3
  echo "$r $b $($K/scrape 127.0.0.1:9950 /metrics 300 | tail -1)"
  kill $p; wait $p 2>/dev/null
done; done
