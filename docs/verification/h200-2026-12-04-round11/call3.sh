#!/bin/bash
# Round 11 device call 3: 8 x 64 scrape p50, plain and gzip, base and new alternated
# four times on a quiet machine. Run from the repo root.
K=target/h200r14; chmod +x $K/gpumemd $K/gpumemd-base $K/scrape; date -u
for r in 1 2 3 4; do for b in gpumemd-base gpumemd; do
  $K/$b --demo $K/8x64.toml --web.listen-address 127.0.0.1:9950 > /dev/null 2>&1 & p=$!
  for i in $(seq 50); do curl -sf 127.0.0.1:9950/metrics > /dev/null && break; sleep 0.2; done; sleep 3
  echo "$r $b plain $($K/scrape 127.0.0.1:9950 /metrics 300 | tail -1)"
  echo "$r $b gzip $($K/scrape 127.0.0.1:9950 /metrics 300 --gzip | tail -1)"
  kill $p; wait $p 2>/dev/null
done; done
