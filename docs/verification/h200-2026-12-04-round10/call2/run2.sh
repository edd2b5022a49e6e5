#!/bin/bash
# Round 10 device call 2: side by side (new binary and peers), then check.sh. Run from the repo root.
K=target/h200r13; chmod +x $K/gpumemd $K/all-smi $K/scrape 2>/dev/null
export LD_LIBRARY_PATH=$PWD/$K/lib
SBS_IDLE=35 SBS_SCRAPES=300 SBS_BUDGET=290 bash benches/h200/side-by-side.sh $K $OUT/sbs > $OUT/sbs.log 2>&1
echo "### sbs"; cat $OUT/sbs/side-by-side.md
bash scripts/h200/check.sh $K/gpumemd $OUT/check > $OUT/check.log 2>&1; echo "### check rc=$?"; grep -E "PASS|FAIL|named" $OUT/check.log | head -30
tar czf $OUT/run2.tgz -C $OUT sbs sbs.log check check.log 2>/dev/null; echo done2
